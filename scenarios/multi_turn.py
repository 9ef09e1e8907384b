"""The `multi_turn` scenario from a checkout: `locust -f scenarios/multi_turn.py` or `--scenario multi_turn`.

The locustfile ships inside the package (servecheck/scenarios/multi_turn.py); this file only imports it.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.scenarios.multi_turn import *  # noqa: F403
