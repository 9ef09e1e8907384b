"""Agent sessions as load: a shared system prompt and tool list, turns that resend the history
with each answer's tool call and the tool's result (after the tool's think time), and subagent
branches forked from a share of the turns (load/workload/agent.py).

    servecheck load --target local --scenario agent --users 8 --duration 2m
    servecheck load --target local --agent turns=8,tools=12,system_tokens=4000,fork=0.25x3 ...
    servecheck load --target local --agent source=sessions.jsonl,format=aiperf --duration 5m

Records carry ``session``, ``turn``, ``branch`` / ``parent``, ``context_tokens`` and
``tool_wait_s``; the summary's agent section shows TTFT by turn and by context length, the
prefix-cache hit rate per turn, tool wait vs server time, session E2E and the fan-out.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.load.generator.locust_user import LLMUser, scenario_shape
from servecheck.load.workload.agent import AgentMixin
from servecheck.scenarios._options import add_options  # noqa: F401 - plain locust -f's options


class AgentUser(AgentMixin, LLMUser):
    scenario = "agent"


LoadShape = scenario_shape()
