"""EMBED-* checks from a checkout: `pytest suites/test_embed.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_embed.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_embed import *  # noqa: F403
