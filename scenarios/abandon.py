"""The `abandon` scenario from a checkout: `locust -f scenarios/abandon.py` or `--scenario abandon`.

The locustfile ships inside the package (servecheck/scenarios/abandon.py); this file only imports it.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.scenarios.abandon import *  # noqa: F403
