"""LORA-* checks from a checkout: `pytest suites/test_lora.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_lora.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_lora import *  # noqa: F403
