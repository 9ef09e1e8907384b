"""Build hook for the optional C extensions; all other metadata is in pyproject.toml.

``servecheck.load.generator._rxthread`` is the load generator's socket reader thread (see
``servecheck/load/generator/reactor.py``); ``servecheck.analysis._hdrfast`` does the streaming summary's
per-token loops (HDR bucket keys and counts; see ``servecheck/analysis/stats.py``);
``servecheck.records._line`` writes the records line's ITL array (``servecheck/records/record.py``). They are optional and built only when asked for with
``SERVECHECK_BUILD_NATIVE=1`` (``make venv`` does, for a checkout): a default build is a
pure-Python ``py3-none-any`` wheel that installs on every Python and platform servecheck
supports, and there the load generator reads with its pure-Python loop and says so in
``summary.json`` (``generator.reader.kind``), and the summary's loops are the Python ones they
replace (the same results, tests/load/test_hdrfast.py). Where they cannot be built (no C
compiler, not Linux) even a native build still succeeds, without them.
"""

import os
import sys

from setuptools import Extension, setup

COMMON = "servecheck/load/generator/_rxcommon.h"  # what the two native threads share
NATIVE = [  # (module, its C source, the headers it includes)
    ("servecheck.load.generator._rxthread", "servecheck/load/generator/_rxthread.c", [COMMON]),
    ("servecheck.load.generator._lane", "servecheck/load/generator/_lane.c", [COMMON]),
    ("servecheck.analysis._hdrfast", "servecheck/analysis/_hdrfast.c", []),
    ("servecheck.records._line", "servecheck/records/_line.c", []),
]
ext_modules = []
if os.environ.get("SERVECHECK_BUILD_NATIVE") == "1" and sys.platform.startswith("linux"):
    ext_modules = [
        Extension(
            name,
            [source],
            depends=depends,
            extra_compile_args=["-O2", "-std=gnu11"],
            optional=True,
        )
        for name, source, depends in NATIVE
    ]

setup(ext_modules=ext_modules)
