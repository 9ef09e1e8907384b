"""TOOLS-* checks from a checkout: `pytest suites/test_tools.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_tools.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_tools import *  # noqa: F403
