"""The `dataset` scenario from a checkout: `locust -f scenarios/dataset.py` or `--scenario dataset`.

The locustfile ships inside the package (servecheck/scenarios/dataset.py); this file only imports it.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.scenarios.dataset import *  # noqa: F403
