"""REASON-* checks from a checkout: `pytest suites/test_reasoning.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_reasoning.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_reasoning import *  # noqa: F403
