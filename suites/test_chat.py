"""CHAT-* checks from a checkout: `pytest suites/test_chat.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_chat.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_chat import *  # noqa: F403
