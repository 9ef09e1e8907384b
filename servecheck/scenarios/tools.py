"""Tool calling under load: TTFT stops at the first tool-call delta, like at the first content."""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.load.generator.locust_user import LLMUser, scenario_shape
from servecheck.load.workload.prompts import PromptSpec
from servecheck.scenarios._options import add_options  # noqa: F401 - plain locust -f's options

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                },
                "required": ["city"],
            },
        },
    }
]


class ToolsUser(LLMUser):
    scenario = "tools"
    mix = [PromptSpec(prompt_tokens=64, output_tokens=64, weight=1, kind="tools")]
    kinds = {"tools": {"tools": TOOLS, "tool_choice": "required"}}


LoadShape = scenario_shape()
