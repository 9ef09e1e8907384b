"""AUTH-* checks from a checkout: `pytest suites/test_auth.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_auth.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_auth import *  # noqa: F403
