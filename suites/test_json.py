"""JSON-* checks from a checkout: `pytest suites/test_json.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_json.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_json import *  # noqa: F403
