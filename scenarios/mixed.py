"""The `mixed` scenario from a checkout: `locust -f scenarios/mixed.py` or `--scenario mixed`.

The locustfile ships inside the package (servecheck/scenarios/mixed.py); this file only imports it.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.scenarios.mixed import *  # noqa: F403
