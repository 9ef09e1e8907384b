"""GRID-* checks from a checkout: `pytest suites/test_grid.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_grid.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_grid import *  # noqa: F403
