"""Long prompts, short answers: prefill-heavy load (TTFT is the number to watch).

Prompt lengths are capped by the target's context: pass SERVECHECK_LONG_TOKENS to change them.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

import os

from servecheck.load.generator.locust_user import LLMUser, scenario_shape
from servecheck.load.workload.prompts import PromptSpec
from servecheck.scenarios._options import add_options  # noqa: F401 - plain locust -f's options

_LONG = int(os.environ.get("SERVECHECK_LONG_TOKENS", "3000"))


class LongContextUser(LLMUser):
    scenario = "long_context"
    mix = [
        PromptSpec(prompt_tokens=_LONG, output_tokens=32, weight=2, kind="long"),
        PromptSpec(prompt_tokens=_LONG // 2, output_tokens=64, weight=1, kind="long"),
    ]


LoadShape = scenario_shape()
