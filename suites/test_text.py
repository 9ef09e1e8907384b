"""TEXT-* checks from a checkout: `pytest suites/test_text.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_text.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_text import *  # noqa: F403
