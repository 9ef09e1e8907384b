"""COMPL-* checks from a checkout: `pytest suites/test_compl.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_compl.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_compl import *  # noqa: F403
