"""RERANK-* checks from a checkout: `pytest suites/test_rerank.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_rerank.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_rerank import *  # noqa: F403
