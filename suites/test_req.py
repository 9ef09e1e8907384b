"""REQ-* checks from a checkout: `pytest suites/test_req.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_req.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_req import *  # noqa: F403
