"""OVERLOAD-* checks from a checkout: `pytest suites/test_overload.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_overload.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_overload import *  # noqa: F403
