"""The `chat` scenario from a checkout: `locust -f scenarios/chat.py` or `--scenario chat`.

The locustfile ships inside the package (servecheck/scenarios/chat.py); this file only imports it.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.scenarios.chat import *  # noqa: F403
