"""Build hook for the one optional C extension; all other metadata is in pyproject.toml.

``servecheck.load._rxthread`` is the load generator's socket reader thread (see
``servecheck/load/reactor.py``). It is optional: where it cannot be built (no C compiler, not
Linux) the install still succeeds and the load generator reads with its pure-Python loop, and
says so in ``summary.json`` (``generator.reader.kind``).
"""

import sys

from setuptools import Extension, setup

ext_modules = []
if sys.platform.startswith("linux"):
    ext_modules.append(
        Extension(
            "servecheck.load._rxthread",
            ["servecheck/load/_rxthread.c"],
            extra_compile_args=["-O2", "-std=gnu11"],
            optional=True,
        )
    )

setup(ext_modules=ext_modules)
