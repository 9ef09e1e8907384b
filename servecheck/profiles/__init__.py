"""Engine profiles: what each engine legitimately does differently, with evidence.

A check that sees a deviation raises its failure with a ``deviation`` key (for example
``model-name-ignored``). When the target's engine profile lists that key, the outcome is
*non-strict* with the profile's reason instead of a failure: visible in every report, never
counted as a pass, never hidden. What is a genuine defect (silent truncation, an ignored JSON
mode, a 5xx for bad input) is not listed here and stays a failure.

Default capabilities: a target that writes ``capabilities: {x: auto}`` (the default) gets the
profile's value for ``x``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servecheck.config.model import CAPABILITIES, Target

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
_OPT_IN = ("prefix_cache", "responses_store", "vision", "lora")  # vision: a VLM is the exception
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


def _caps(**overrides: bool) -> dict[str, bool]:
    return {**_ALL_ON, **overrides}


PROFILES: dict[str, EngineProfile] = {
    "reference": EngineProfile(
        "reference",
        _caps(responses_store=True, messages=True),
        verified_live=True,
        retry_after=True,
    ),
    "generic": EngineProfile(
        "generic",
        _caps(logprobs=False, tokenize=False, metrics=False, completions=False, responses=False),
    ),
    "openai": EngineProfile(
        "openai",
        _caps(tokenize=False, metrics=False, responses_store=True),
        health_path="/v1/models",  # the API has no /health: a listed model is readiness
        deviations={
            "health-path-differs": "OpenAI's API has no /health; /v1/models answering is readiness"
        },
    ),
    "vllm": EngineProfile(
        "vllm",
        # /v1/messages and /v1/messages/count_tokens are served (measured on 0.32.0 CPU,
        # 2026-12-02: in its openapi.json, and MESSAGES-* answered; targets.yaml lists what fails).
        _caps(messages=True),
        deviations={
            # vLLM answers unknown routes through FastAPI: {"detail": "Not Found"}
            # (vllm/entrypoints/openai/api_server.py mounts the OpenAI routes on a FastAPI app).
            "error-shape-detail": "vLLM's unknown routes and wrong methods answer in FastAPI's {'detail': ...} shape",
            # On purpose: vLLM's own suite pins it (tests/entrypoints/openai/chat_completion/
            # test_chat.py, test_custom_role), so templates with their own roles keep working.
            "custom-roles": "vLLM renders any message role its chat template accepts (a custom role is a feature: test_custom_role)",
            # Measured on 0.32 CPU (2026-12, issue 25): with include message.output_text.logprobs
            # every output_text.delta carries its entries and content_part.done / output_item.done
            # / response.completed the whole list, but output_text.done has logprobs [].
            "responses-text-done-no-logprobs": "vLLM 0.32's response.output_text.done has logprobs [] (the deltas, content_part.done and response.completed carry them)",
        },
        verified_live=True,
        reasoning="--reasoning-parser NAME; 0.32 writes `reasoning` (message and delta); thinking "
        "off via chat_template_kwargs {enable_thinking: false} where the template reads it",
    ),
    "llamacpp": EngineProfile(
        # n > 1 streams and answers correctly in this build (measured 2026-11-29); an object
        # tool_choice is treated as "auto" (tools/server/README.md), so named choice is off.
        # /v1/responses is served, partially (measured 2026-12-01; targets.yaml lists what fails).
        "llamacpp",
        # /v1/messages and count_tokens are served (measured 2026-12-02; targets.yaml lists what fails).
        _caps(tool_choice_named=False, seed=True, n=True, messages=True),
        deviations={
            # tools/server/README.md: "model" is accepted for compatibility and ignored.
            "model-name-ignored": "llama.cpp serves one model and ignores the model field (tools/server/README.md)",
            # server.cpp parses the body with nlohmann::json and reports the exception as a 500.
            "malformed-json-500": "llama.cpp reports JSON parse errors as 500 server_error (tools/server/server.cpp)",
            "empty-messages-accepted": "llama.cpp renders an empty conversation instead of rejecting it",
            "models-no-context-field": "llama.cpp reports the context as meta.n_ctx and in /props, not max_model_len",
            # Measured 2026-11-29 (llama-cpp-python 0.3.36's server): temperature 3.5 and -1 answered 200
            # (tools/server/README.md: temperature <= 0 is greedy); max_tokens -5 is a 400 (-1 means no limit).
            "out-of-range-accepted": "llama.cpp accepts any temperature (<= 0 means greedy sampling; tools/server/README.md)",
            # tools/server/utils.hpp (server-common.cpp) oaicompat_completion_params_parse:
            # echo true throws "Only no echo is supported", answered 400 invalid_request_error (newer
            # upstream; the b1-0c1e570 build CI runs serves echo and ignores it: a known failure).
            "echo-refused": "llama.cpp refuses echo on /v1/completions: 400 'Only no echo is supported'",
            # Measured 2026-12-01 (docs/engines.md); tools/server/server-task.cpp's final stream
            # events send output_item.done with the call whole, and no arguments .done event.
            "responses-no-args-done": "llama.cpp's /v1/responses stream sends no function_call_arguments.done (the item's done event carries the call)",
        },
        verified_live=True,
        reasoning="--reasoning-format deepseek (default auto) writes `reasoning_content`; thinking "
        "off per request via chat_template_kwargs {enable_thinking: false}, or server-wide --reasoning off",
    ),
    "xinference": EngineProfile(
        "xinference",
        # /v1/responses is served (measured on 4.1.0, 2026-12-01; targets.yaml lists what fails).
        # /v1/messages too (measured on 4.1.0, 2026-12-02).
        _caps(tokenize=False, logprobs=False, n=False, completions=False, messages=True),
        health_path="/status",
        deviations={
            "health-path-differs": "Xinference has no /health; GET /status answers when the supervisor is up",
            "error-shape-detail": "Xinference's REST layer (FastAPI) answers errors as {'detail': ...}",
            # Measured on Xinference 4.1.0 (2026-11-29), stream with include_usage, max_tokens 16: the finish
            # chunk {"delta": {"content": ""}, "finish_reason": "length", "usage": {...}} is followed by
            # {"delta": {}, "finish_reason": "stop", "usage": <same counts>}, then [DONE]; no choices: [] chunk.
            "stream-extra-finish-chunk": "Xinference sends a second finish chunk ('stop', even after 'length') with include_usage",
            "usage-chunk-has-choices": "Xinference's usage chunk repeats the last choice",
            "usage-chunk-repeated": "Xinference puts the same usage on its finish chunk and on the repeated finish chunk",
            # Measured on Xinference 4.1.0 (2026-12-02), stream without stream_options: the finish
            # chunk carries "usage": {...} (every other chunk "usage": null); no choices: [] chunk.
            "usage-unasked": "Xinference puts usage on the finish chunk of every stream, include_usage or not",
            "models-no-context-field": "Xinference's /v1/models does not report the context length",
        },
        verified_live=True,
    ),
    "litellm": EngineProfile(
        "litellm",
        # /v1/messages is LiteLLM's own Anthropic adapter over chat (measured on 1.108.7, 2026-12-02).
        _caps(tokenize=False, metrics=False, messages=True),
        health_path="/health/liveliness",
        deviations={
            "health-path-differs": "LiteLLM's /health calls every upstream and needs the key; /health/liveliness is the probe",
            "models-no-context-field": "LiteLLM's /v1/models does not report the upstream context length",
            # Measured on LiteLLM 1.108.7 over llama.cpp (2026-11-29), include_usage: the usage chunk is
            # {"choices": [{"index": 0, "delta": {}}], "usage": {...}} (no finish_reason, no content), then [DONE].
            "usage-chunk-has-choices": "LiteLLM's include_usage chunk carries an empty-delta choice instead of choices: []",
            # Not measured: LiteLLM forwards echo to the upstream and passes its 400 on.
            "echo-refused": "LiteLLM passes an upstream's refusal of echo on (llama.cpp behind it refuses echo)",
        },
        verified_live=True,
        reasoning="passes the upstream's reasoning on as `reasoning_content` (it renames vLLM's "
        "`reasoning`, litellm#20246); chat_template_kwargs forwarded to the upstream",
    ),
    "sglang": EngineProfile(
        "sglang",
        _caps(),
        deviations={
            "error-shape-detail": "SGLang's FastAPI routes answer unknown paths as {'detail': ...} (not verified live)"
        },
    ),
    "tgi": EngineProfile(
        "tgi",
        _caps(tokenize=False, n=False, completions=True, responses=False),
        deviations={
            # TGI validates with axum/serde and answers 422 Unprocessable Entity (router/src/server.rs).
            "error-status-422": "TGI answers invalid parameters with 422 (router/src/server.rs; not verified live)",
            "models-no-context-field": "TGI reports max_total_tokens in /info, not in /v1/models",
        },
    ),
    "ollama": EngineProfile(
        "ollama",
        _caps(tokenize=False, metrics=False, logprobs=False, n=False),
        health_path="/",
        deviations={
            "health-path-differs": "Ollama answers GET / with 'Ollama is running'; there is no /health",
            "models-no-context-field": "Ollama reports num_ctx through /api/show, not /v1/models",
        },
    ),
}


def profile_for(target: Target) -> EngineProfile:
    return PROFILES[target.engine]


def resolve_capabilities(target: Target) -> dict[str, bool]:
    """Declared capability values, with ``auto`` filled from the engine profile."""
    profile = profile_for(target)
    declared = target.capabilities.model_dump()
    caps = {
        name: (profile.capabilities.get(name, False) if value == "auto" else bool(value))
        for name, value in declared.items()
    }
    if not target.metrics_url and profile.name != "reference" and declared.get("metrics") == "auto":
        caps["metrics"] = False
    return caps


def context_policy(target: Target) -> str:
    return (
        profile_for(target).context_policy
        if target.context_policy == "auto"
        else target.context_policy
    )
