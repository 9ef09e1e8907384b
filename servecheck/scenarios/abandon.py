"""Streaming chat where a quarter of the clients give up mid-answer and hang up.

Clients that navigate away are normal traffic; a server must stop generating for them and free
what they held (KV blocks, a slot, a queue place) while it keeps serving everyone else. Here one
request in four closes its connection after 4 tokens of a 256-token answer; the records say which
(``abandoned``), their TTFT and ITL count, their E2E does not.

    servecheck load --target local --scenario abandon --users 16 --duration 2m
    servecheck soak --target local --abandon ...   # then whether the server drained (telemetry)

Watch the other three quarters' latency against a `chat` run, and the engine's running-requests
and KV-usage metrics after the run: they must fall back to idle.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.load.generator.locust_user import LLMUser, scenario_shape
from servecheck.load.workload.prompts import PromptSpec
from servecheck.scenarios._options import add_options  # noqa: F401 - plain locust -f's options


class AbandonUser(LLMUser):
    scenario = "abandon"
    hang_up_after_tokens = 4
    hang_up_share = 0.25
    mix = [
        PromptSpec(prompt_tokens=64, output_tokens=256, weight=1),
        PromptSpec(prompt_tokens=128, output_tokens=64, weight=1),
    ]


LoadShape = scenario_shape()
