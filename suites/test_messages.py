"""MESSAGES-* checks from a checkout: `pytest suites/test_messages.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_messages.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_messages import *  # noqa: F403
