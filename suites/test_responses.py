"""RESPONSES-* checks from a checkout: `pytest suites/test_responses.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_responses.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_responses import *  # noqa: F403
