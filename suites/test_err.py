"""ERR-* checks from a checkout: `pytest suites/test_err.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_err.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_err import *  # noqa: F403
