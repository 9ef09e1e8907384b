"""The `messages` scenario from a checkout: `locust -f scenarios/messages.py` or `--scenario messages`.

The locustfile ships inside the package (servecheck/scenarios/messages.py); this file only imports it.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.scenarios.messages import *  # noqa: F403
