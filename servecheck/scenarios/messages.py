"""Streaming over Anthropic's Messages API (``POST /v1/messages``): the chat scenario's mix.

servecheck load --target local --scenario messages --users 8 --duration 1m
servecheck load --target local --scenario dataset --dataset prompts.jsonl --api messages ...
locust -f scenarios/messages.py --host http://127.0.0.1:8000/v1          # web UI

Any scenario whose requests are plain messages runs over this API with ``--api messages``
(servecheck/load/generator/apis.py); this one is ``chat`` with that option.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.load.generator.locust_user import LLMUser, scenario_shape
from servecheck.scenarios import chat  # the module, not its user class: Locust would run that too
from servecheck.scenarios._options import add_options  # noqa: F401 - plain locust -f's options


class MessagesUser(LLMUser):
    scenario = "messages"
    mix = chat.ChatUser.mix


LoadShape = scenario_shape()
