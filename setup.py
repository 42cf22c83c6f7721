"""The one compiled part, protocol/_hot_loops.c: `Inbox.heard_run`'s inner loop, which the
simulator runs once per gossip delivery, with the items it takes and the deferred store's trim.
Optional: without a C compiler or OpenSSL's headers the install goes on and the same loops run
in Python (slower, same results)."""

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
