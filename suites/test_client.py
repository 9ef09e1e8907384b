"""CLIENT-* checks from a checkout: `pytest suites/test_client.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_client.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_client import *  # noqa: F403
