"""CTX-* checks from a checkout: `pytest suites/test_ctx.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_ctx.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_ctx import *  # noqa: F403
