"""AGENT-* checks from a checkout: `pytest suites/test_agent.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_agent.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_agent import *  # noqa: F403
