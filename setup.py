"""Build hook for the one optional C extension; all other metadata is in pyproject.toml.

``servecheck.load._rxthread`` is the load generator's socket reader thread (see
``servecheck/load/reactor.py``). It is optional and built only when asked for with
``SERVECHECK_BUILD_NATIVE=1`` (``make venv`` does, for a checkout): a default build is a
pure-Python ``py3-none-any`` wheel that installs on every Python and platform servecheck
supports, and there the load generator reads with its pure-Python loop and says so in
``summary.json`` (``generator.reader.kind``). Where it cannot be built (no C compiler, not
Linux) even a native build still succeeds, without it.
"""

import os
import sys

from setuptools import Extension, setup

ext_modules = []
if os.environ.get("SERVECHECK_BUILD_NATIVE") == "1" and sys.platform.startswith("linux"):
    ext_modules.append(
        Extension(
            "servecheck.load._rxthread",
            ["servecheck/load/_rxthread.c"],
            extra_compile_args=["-O2", "-std=gnu11"],
            optional=True,
        )
    )

setup(ext_modules=ext_modules)
