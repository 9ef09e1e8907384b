"""The `shared_prefix` scenario from a checkout: `locust -f scenarios/shared_prefix.py` or `--scenario shared_prefix`.

The locustfile ships inside the package (servecheck/scenarios/shared_prefix.py); this file only imports it.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.scenarios.shared_prefix import *  # noqa: F403
