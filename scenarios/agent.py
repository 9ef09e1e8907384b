"""The `agent` scenario from a checkout: `locust -f scenarios/agent.py` or `--scenario agent`.

The locustfile ships inside the package (servecheck/scenarios/agent.py); this file only imports it.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.scenarios.agent import *  # noqa: F403
