"""What an engine is to servecheck: its profile (what it legitimately does differently, with
evidence) and, for the engines servecheck starts itself, the port and launcher; one
:class:`EngineSpec` per engine, declared in the engine's own module and listed once in
``engines/registry.py``.

A check that sees a deviation raises its failure with a ``deviation`` key (for example
``model-name-ignored``). When the target's engine profile lists that key, the outcome is
*non-strict* with the profile's reason instead of a failure: visible in every report, never
counted as a pass, never hidden. What is a genuine defect (silent truncation, an ignored JSON
mode, a 5xx for bad input) is not listed and stays a failure.

Default capabilities: a target that writes ``capabilities: {x: auto}`` (the default) gets the
profile's value for ``x``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from servecheck.config.model import CAPABILITIES

if TYPE_CHECKING:
    from servecheck.engines.base import Engine

# Deviation keys checks may raise. One place, so that profiles and checks agree on the words.
DEVIATIONS: dict[str, str] = {
    "error-status-422": "validation errors answered with 422 instead of 400",
    "error-shape-detail": "errors in FastAPI's {'detail': ...} shape instead of OpenAI's {'error': {...}}",
    "model-name-ignored": "requests naming an unknown model are served by the loaded model",
    "malformed-json-500": "malformed JSON answered with 500 instead of 400",
    "empty-messages-accepted": "an empty messages list is served instead of rejected",
    "health-path-differs": "readiness lives on another path than /health",
    "models-no-context-field": "/v1/models does not report the context length",
    "stream-extra-finish-chunk": "a second finish chunk before the usage chunk",
    "usage-chunk-has-choices": "the include_usage chunk repeats the finish choice",
    "usage-chunk-repeated": "usage (the same counts) is sent on the finish chunk and again on a repeat of it",
    "usage-unasked": "usage rides on a stream's finish chunk though include_usage was not asked for",
    "tool-finish-stop": "finish_reason 'stop' after a tool call",
    "responses-no-args-done": "a streamed function call has no response.function_call_arguments.done event",
    "responses-open-fields-missing": "the response object lacks fields the Open Responses schema requires and the openai SDK's types do not",
    "responses-text-done-no-logprobs": "response.output_text.done carries logprobs [] although the deltas (and content_part.done) carry them",
    "seed-not-supported": "seed is accepted but does not make sampling repeatable",
    "out-of-range-accepted": "out-of-range sampling values (negative max_tokens, temperature outside [0, 2]) are served, not rejected",
    "echo-refused": "legacy completions refuse echo with a clean 4xx error object that says so",
    "embed-empty-accepted": "an empty string is embedded (200) instead of refused",
    "logit-bias-unsupported": "logit_bias is refused (a 4xx, or 501 Not Implemented) instead of applied",
    "custom-roles": "a message role outside the OpenAI set is rendered by the chat template instead of refused",
    "image-tokens-fixed": "every image costs the same prompt tokens whatever its size (a fixed-resolution encoder: LLaVA, Gemma 3)",
    "image-count-limited": "a request with several images is refused by a per-prompt image limit (vLLM --limit-mm-per-prompt)",
}

# Capabilities no profile may assume: a target turns them on (prefix_cache needs engine flags;
# vLLM keeps no Responses store unless VLLM_ENABLE_RESPONSES_API_STORE=1: measured on 0.32,
# 2026-12-02, GET /v1/responses/{id} of a store true response is a 404). The reference server and
# OpenAI keep one.
# vision: a VLM is the exception. min_tokens is vLLM's own field: an engine without it ignores
# it, which CHAT-MIN-TOKENS would fail.
_OPT_IN = ("prefix_cache", "responses_store", "vision", "lora", "min_tokens")
# Off in a profile until the engine was measured serving it (a target may still declare it):
# /v1/messages is new in the engines' releases and absent from older builds.
_UNMEASURED = ("messages",)
_ALL_ON = {name: name not in _OPT_IN + _UNMEASURED for name in CAPABILITIES}


@dataclass(frozen=True, slots=True)
class EngineProfile:
    name: str
    capabilities: dict[str, bool]
    context_policy: str = "reject"  # reject | truncate
    deviations: dict[str, str] = field(
        default_factory=dict
    )  # deviation key -> reason with evidence
    health_path: str = "/health"
    verified_live: bool = False
    retry_after: bool = False  # its 429/503 answers carry Retry-After (OVERLOAD-BURST demands it)
    # How the engine serves reasoning models: the field it writes, the server option that turns
    # the parser on and the per-request thinking switch (REASON-* checks; docs/engines.md).
    reasoning: str = ""

    def allowance(self, deviation: str | None) -> str | None:
        if deviation is None:
            return None
        return self.deviations.get(deviation)


def caps(**overrides: bool) -> dict[str, bool]:
    """Every capability at its default (on but for the opt-in and unmeasured ones), with an
    engine's own ``overrides``."""
    return {**_ALL_ON, **overrides}


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """One engine, one registry entry (``engines/registry.py``): the name ``targets.yaml`` and
    ``engine up`` use, its profile (legal deviations, default capabilities, health path), and
    for an engine servecheck starts itself, its default port and its launcher."""

    name: str
    profile: EngineProfile
    port: int | None = None  # None: servecheck checks it but does not start it
    launcher: Callable[[], Engine] | None = None

    @property
    def health_path(self) -> str:
        return self.profile.health_path

    @property
    def local(self) -> bool:
        """True when ``servecheck engine up`` can start it."""
        return self.launcher is not None
