"""Structured output under load: every request asks for a JSON object matching a schema."""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.load.generator.locust_user import LLMUser, scenario_shape
from servecheck.load.workload.prompts import PromptSpec
from servecheck.scenarios._options import add_options  # noqa: F401 - plain locust -f's options

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "population": {"type": "integer"},
        "rivers": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["city", "population"],
    "additionalProperties": False,
}


class JsonSchemaUser(LLMUser):
    scenario = "json_schema"
    mix = [PromptSpec(prompt_tokens=96, output_tokens=96, weight=1, kind="json")]
    kinds = {
        "json": {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "city", "schema": SCHEMA, "strict": True},
            }
        },
    }


LoadShape = scenario_shape()
