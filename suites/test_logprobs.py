"""LOGPROBS-* checks from a checkout: `pytest suites/test_logprobs.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_logprobs.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_logprobs import *  # noqa: F403
