"""The one compiled part, simulator/fastpath/_hot_loops.c: the simulator's fast delivery path
(`simulator.fastpath.heard_run`'s inner loop, which runs once per gossip delivery, and the
items it takes). Optional: without a C compiler or OpenSSL's headers the install goes on and
the same loops run in Python (slower, same results)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "simulator.fastpath._hot_loops",
            ["simulator/fastpath/_hot_loops.c"],
            libraries=["crypto"],  # OpenSSL's sha256, which hashlib uses too
            extra_compile_args=["-O2", "-Wno-deprecated-declarations"],
            optional=True,
        )
    ]
)
