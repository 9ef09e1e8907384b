"""Streaming chat: a mix of short and medium prompts and answers.

locust -f scenarios/chat.py --host http://127.0.0.1:8000/v1          # web UI
servecheck load --target local --scenario chat --users 8 --duration 1m
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.load.generator.locust_user import LLMUser, scenario_shape
from servecheck.load.workload.prompts import PromptSpec
from servecheck.scenarios._options import add_options  # noqa: F401 - plain locust -f's options


class ChatUser(LLMUser):
    scenario = "chat"
    mix = [
        PromptSpec(prompt_tokens=64, output_tokens=64, weight=4),
        PromptSpec(prompt_tokens=256, output_tokens=128, weight=2),
        PromptSpec(prompt_tokens=32, output_tokens=16, weight=2),
        PromptSpec(prompt_tokens=240, output_tokens=192, weight=1),
    ]


LoadShape = scenario_shape()
