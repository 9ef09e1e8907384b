"""CONC-* checks from a checkout: `pytest suites/test_conc.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_conc.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_conc import *  # noqa: F403
