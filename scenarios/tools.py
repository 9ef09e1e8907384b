"""The `tools` scenario from a checkout: `locust -f scenarios/tools.py` or `--scenario tools`.

The locustfile ships inside the package (servecheck/scenarios/tools.py); this file only imports it.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.scenarios.tools import *  # noqa: F403
