"""FUZZ-* checks from a checkout: `pytest suites/test_fuzz.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_fuzz.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_fuzz import *  # noqa: F403
