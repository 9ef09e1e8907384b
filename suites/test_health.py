"""HEALTH-* checks from a checkout: `pytest suites/test_health.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_health.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_health import *  # noqa: F403
