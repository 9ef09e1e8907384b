"""Shared system prompts: groups of requests that open with the same long prefix.

Every request starts with one of SERVECHECK_PREFIX_GROUPS (4) system prompts of
SERVECHECK_PREFIX_TOKENS (512) tokens, then its own short user message: what a product with a
fixed instruction block sends. The summary shows the prefix-cache hit rate from
``usage.prompt_tokens_details.cached_tokens`` and from the engine's prefix-cache counters during
the run, and TTFT with and without a cached prefix.

    servecheck load --target local --scenario shared_prefix --users 8 --duration 2m
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.load.workload.conversation import SharedPrefixMixin
from servecheck.load.generator.locust_user import LLMUser, scenario_shape
from servecheck.load.workload.prompts import PromptSpec
from servecheck.scenarios._options import env_prefix


class SharedPrefixUser(SharedPrefixMixin, LLMUser):
    scenario = "shared_prefix"
    prefix_tokens, prefix_groups = env_prefix(512, 4)
    mix = [
        PromptSpec(prompt_tokens=32, output_tokens=32, weight=1),
        PromptSpec(prompt_tokens=64, output_tokens=16, weight=1),
    ]


LoadShape = scenario_shape()
