"""Trace replay: the requests of a recorded trace, on its schedule (``servecheck load --trace``).

    servecheck load --target local --trace loadtests/traces/synthetic.jsonl
    servecheck load --target local --trace mooncake_trace.jsonl --speed 4 --duration 5m
    servecheck load --target local --trace BurstGPT_1.csv --speed 0.5 --max-requests 5000

Each request has its entry's input and output lengths; entries that share block hash ids
(Mooncake) or a session id share that prefix on the wire. Lag against the trace's send times is
recorded per request; a generator that falls behind flags the run, as in any open-loop run.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.load.generator.locust_user import LLMUser, scenario_shape
from servecheck.load.workload.trace import TraceMixin
from servecheck.scenarios._options import add_options  # noqa: F401 - plain locust -f's options


class TraceUser(TraceMixin, LLMUser):
    scenario = "trace"


LoadShape = scenario_shape()
