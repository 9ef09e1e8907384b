"""MODELS-* checks from a checkout: `pytest suites/test_models.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_models.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_models import *  # noqa: F403
