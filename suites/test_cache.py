"""CACHE-* checks from a checkout: `pytest suites/test_cache.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_cache.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_cache import *  # noqa: F403
