"""IMAGE-* checks from a checkout: `pytest suites/test_image.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_image.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_image import *  # noqa: F403
