"""The `trace` scenario from a checkout: `locust -f scenarios/trace.py` or `--scenario trace`.

The locustfile ships inside the package (servecheck/scenarios/trace.py); this file only imports it.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.scenarios.trace import *  # noqa: F403
