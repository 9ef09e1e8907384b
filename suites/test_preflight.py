"""The preflight of model files from a checkout: `pytest suites/test_preflight.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_preflight.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_preflight import *  # noqa: F403
