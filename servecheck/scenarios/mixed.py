"""A production-like mix: plain chat, long context, JSON schema and tool calls in one run."""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.load.generator.locust_user import LLMUser, scenario_shape
from servecheck.load.workload.prompts import PromptSpec
from servecheck.scenarios._options import add_options  # noqa: F401 - plain locust -f's options

from json_schema import SCHEMA  # noqa: E402 - locust puts the locustfile's folder on sys.path
from tools import TOOLS  # noqa: E402


class MixedUser(LLMUser):
    scenario = "mixed"
    mix = [
        PromptSpec(prompt_tokens=64, output_tokens=64, weight=6, kind="chat"),
        PromptSpec(prompt_tokens=1500, output_tokens=32, weight=1, kind="long"),
        PromptSpec(prompt_tokens=96, output_tokens=96, weight=2, kind="json"),
        PromptSpec(prompt_tokens=64, output_tokens=64, weight=2, kind="tools"),
    ]
    kinds = {
        "json": {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "city", "schema": SCHEMA, "strict": True},
            }
        },
        "tools": {"tools": TOOLS, "tool_choice": "required"},
    }


LoadShape = scenario_shape()
