"""Multi-turn chat: conversations of N turns whose history is the server's real replies.

Each turn resends the whole conversation (its earlier user messages and the server's actual
answers) plus a new user message, so the prompt grows turn by turn and a prefix cache can serve
the history. Records carry ``conversation``, ``turn`` and ``history_tokens``; the summary shows
TTFT by turn.

    servecheck load --target local --scenario multi_turn --users 8 --duration 2m
    SERVECHECK_TURNS=6 SERVECHECK_THINK_S=2 servecheck load --target local --scenario multi_turn ...
    SERVECHECK_PREFIX_TOKENS=512 ...   # every conversation also opens with a shared system prompt
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.load.workload.conversation import MultiTurnMixin
from servecheck.load.generator.locust_user import LLMUser, scenario_shape
from servecheck.load.workload.prompts import PromptSpec
from servecheck.scenarios._options import env_prefix, env_think_s, env_turns


class MultiTurnUser(MultiTurnMixin, LLMUser):
    scenario = "multi_turn"
    turns = env_turns(4)
    think_s = env_think_s(0.0)
    prefix_tokens, prefix_groups = env_prefix(0, 4)
    mix = [
        PromptSpec(prompt_tokens=48, output_tokens=64, weight=2),
        PromptSpec(prompt_tokens=96, output_tokens=32, weight=1),
    ]


LoadShape = scenario_shape()
