"""The one compiled part: `Inbox.heard_run`'s inner loop (protocol/_hot_loops.c), which the
simulator runs once per gossip delivery. Optional: without a C compiler or OpenSSL's headers
the install goes on and `heard_run` runs the same loop in Python (slower, same results)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "protocol._hot_loops",
            ["protocol/_hot_loops.c"],
            libraries=["crypto"],  # OpenSSL's sha256, which hashlib uses too
            extra_compile_args=["-O2", "-Wno-deprecated-declarations"],
            optional=True,
        )
    ]
)
