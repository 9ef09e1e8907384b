"""STREAM-* checks from a checkout: `pytest suites/test_stream.py --target NAME`.

The suite ships inside the package (servecheck/suites/test_stream.py; `pytest --pyargs
servecheck.suites` runs it anywhere); this file only imports it.
"""

from servecheck.suites.test_stream import *  # noqa: F403
