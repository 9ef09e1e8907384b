"""The `json_schema` scenario from a checkout: `locust -f scenarios/json_schema.py` or `--scenario json_schema`.

The locustfile ships inside the package (servecheck/scenarios/json_schema.py); this file only imports it.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.scenarios.json_schema import *  # noqa: F403
