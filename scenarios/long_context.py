"""The `long_context` scenario from a checkout: `locust -f scenarios/long_context.py` or `--scenario long_context`.

The locustfile ships inside the package (servecheck/scenarios/long_context.py); this file only imports it.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.scenarios.long_context import *  # noqa: F403
