"""What the reference server's modules share: its config and per-app state, the API error and
its JSON (or faulty plain-text) answer, body reading, readiness, the common request validation
and the legal SSE quirks.

``server.py`` (chat and completions), ``embeddings.py``, ``responses.py``, ``text.py`` and the
other handler modules import this module, never each other's private helpers, so the package
has no import circle. Like the rest of ``servecheck/reference/`` it imports nothing from
``client/`` or ``checks/``.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from servecheck.reference import reasoning
from servecheck.reference.model import VOCAB_SIZE


@dataclass(slots=True)
class ServerConfig:
    models: list[str] = field(default_factory=lambda: ["ref-tiny"])
    max_model_len: int = 512
    default_max_tokens: int = 16
    ttft_ms: float = 0.0
    itl_ms: float = 0.0
    api_key: str | None = None
    faults: frozenset[str] = frozenset()
    quirks: frozenset[str] = frozenset()
    loading_s: float = 0.0
    kv_blocks: int = 256
    block_size: int = 16
    max_num_seqs: int = 512
    max_inflight: int = 0  # > 0: shed generation requests above it with 429 (reference/overload.py)
    context_policy: str = (
        "reject"  # reject | truncate (over-long prompts cut to fit, with a warning field)
    )
    prefix_cache_blocks: int = 0  # > 0: a prefix cache of this many blocks (prefix_cache.py)
    prefix_cache_counted: bool = False  # idle cached blocks count as KV usage (prefix_cache.py)
    reasoning: reasoning.ReasoningMode | None = None  # a reasoning model (reference/reasoning.py)
    responses_store: int = 64  # responses kept for GET and previous_response_id (0: no store)
    vision: bool = False  # a vision model: image_url parts are read, not refused (vision.py)
    lora: bool = False  # runtime LoRA adapters, vLLM's endpoints (reference/lora.py)
    agent: bool = False  # scripted agent mode: call the first offered tool once (agent.py)
    livelock_after_s: float = (
        0.0  # the livelock fault: stuck after this long (reference/livelock.py)
    )
    livelock_after_requests: int = 0  # ... or after this many requests


class ClientGone(Exception):
    """A streaming client disconnected; carries the prepared response so the handler can end quietly."""

    def __init__(self, response: web.StreamResponse) -> None:
        super().__init__("client disconnected")
        self.response = response


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status,
            message,
            type_,
            param,
            code,
        )


@dataclass(slots=True)
class State:
    config: ServerConfig
    started: float = field(default_factory=time.monotonic)
    created_at: int = field(default_factory=lambda: int(time.time()))
    running: int = 0
    waiting: int = 0
    kv_used_blocks: int = 0
    kv_leaked_blocks: int = 0
    preemptions: int = 0
    success: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    request_count: int = 0
    seeded_running: int = 0
    step_tokens: int = (
        0  # prompt tokens waiting for the next scheduler step (crash-concurrent-seed)
    )
    step_seeded: int = 0
    leaked_stops: list[str] = field(default_factory=list)  # the stop-leaks fault's memory
    forced_calls: int = 0  # requests that forced a tool call (tools-ignored-every-fifth)
    dead: bool = False
    degraded: bool = False  # overload-never-recovers: an overload happened, TTFT stays slow
    sem: asyncio.Semaphore | None = None
    pcache: Any = None  # prefix_cache.PrefixCache, made on first use when configured
    engine_metrics: Any = None  # engine_metrics.EngineMetrics, made on first use
    stored_responses: Any = None  # response_store's bounded store, made on first use
    adapters: dict[str, str] = field(default_factory=dict)  # LoRA name -> path (lora.py)
    lingering: set[str] = field(default_factory=set)  # unloaded, still served (a lora fault)
    lora_fail_until: float = 0.0  # monotonic: requests fail until then (lora-swap-fails)
    lora_stall_until: float = 0.0  # monotonic: requests wait until then (lora-swap-stalls)
    livelocked: bool = False  # the livelock fault has struck (reference/livelock.py)
    prefix_cache_resets: int = 0  # POST /reset_prefix_cache answered (reference/prefix_cache.py)

    @property
    def faults(self) -> frozenset[str]:
        return self.config.faults

    @property
    def reasoning(self) -> reasoning.ReasoningMode | None:
        return reasoning.mode_for(self.config.reasoning, self.config.faults)


STATE = web.AppKey("state", State)


def error_body(err: ApiError) -> dict[str, Any]:
    return {
        "error": {"message": err.message, "type": err.type, "param": err.param, "code": err.code}
    }


def error_response(state: State, err: ApiError) -> web.Response:
    if (
        "err-plain-text" in state.faults
        and 400 <= err.status < 500
        and err.status not in (401, 403)
    ):
        return web.Response(status=err.status, text=err.message, content_type="text/plain")
    return web.json_response(error_body(err), status=err.status)


def expect(cond: bool, message: str, param: str | None = None) -> None:
    if not cond:
        raise ApiError(400, message, param=param)


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def max_tokens_of(body: dict[str, Any]) -> Any:
    """The output limit asked for: ``max_completion_tokens`` (the SDK's current name), else
    ``max_tokens``; a field sent as null counts as not given."""
    current = body.get("max_completion_tokens")
    return current if current is not None else body.get("max_tokens")


def validate_common(state: State, body: dict[str, Any]) -> None:
    typed_500 = "err-wrong-type-500" in state.faults
    model_name = body.get("model")
    if typed_500 and model_name is not None and not isinstance(model_name, str):
        raise ApiError(500, "internal error: 'int' object has no attribute 'lower'", "server_error")
    expect(
        isinstance(model_name, str) and model_name != "",
        "'model' is required and must be a string",
        "model",
    )
    if (
        model_name not in state.config.models
        and model_name not in state.adapters
        and model_name not in state.lingering
        and "unknown-model-accepted" not in state.faults
    ):
        raise ApiError(
            404,
            f"The model `{model_name}` does not exist. Served models: {', '.join(state.config.models)}",
            "NotFoundError",
            "model",
            "model_not_found",
        )
    mt = max_tokens_of(body)
    if mt is not None:
        if typed_500 and not is_int(mt):
            raise ApiError(500, "internal error: comparison of str and int", "server_error")
        expect(is_int(mt), "max_tokens must be an integer", "max_tokens")
        if mt < 1 and "err-negative-max-tokens-200" not in state.faults:
            raise ApiError(400, f"max_tokens must be at least 1, got {mt}", param="max_tokens")
    temp = body.get("temperature")
    if temp is not None:
        if typed_500 and not is_num(temp):
            raise ApiError(
                500,
                "internal error: float() argument must be a string or a real number",
                "server_error",
            )
        expect(is_num(temp), "temperature must be a number", "temperature")
        if not 0 <= temp <= 2:
            if "err-temperature-500" in state.faults:
                raise ApiError(
                    500, "internal error: probability tensor contains inf or nan", "server_error"
                )
            raise ApiError(
                400, f"temperature must be between 0 and 2, got {temp}", param="temperature"
            )
    top_p = body.get("top_p")
    if top_p is not None:
        expect(is_num(top_p) and 0 < top_p <= 1, "top_p must be a number in (0, 1]", "top_p")
    n = 1 if body.get("n") is None else body["n"]  # null is "not given", as SDKs send it
    expect(is_int(n) and 1 <= n <= 16, "n must be an integer between 1 and 16", "n")
    seed = body.get("seed")
    expect(seed is None or is_int(seed), "seed must be an integer", "seed")
    stream = body.get("stream", False)
    expect(isinstance(stream, bool) or stream is None, "stream must be a boolean", "stream")
    stop = body.get("stop")
    expect(
        stop is None
        or isinstance(stop, str)
        or (isinstance(stop, list) and len(stop) <= 4 and all(isinstance(s, str) for s in stop)),
        "stop must be a string or a list of at most 4 strings",
        "stop",
    )
    if "fuzz-500" in state.faults and isinstance(stop, list) and "" in stop:
        # A stop matcher that splits the output on each stop string: str.split("") raises.
        raise ApiError(500, "internal error: ValueError: empty separator", "server_error")
    opts = body.get("stream_options")
    expect(
        opts is None or isinstance(opts, dict), "stream_options must be an object", "stream_options"
    )
    for key in ("presence_penalty", "frequency_penalty"):
        v = body.get(key)
        expect(
            v is None or (is_num(v) and -2 <= v <= 2),
            f"{key} must be a number between -2 and 2",
            key,
        )
    lp = body.get("logprobs")
    if "messages" in body:
        expect(lp is None or isinstance(lp, bool), "logprobs must be a boolean", "logprobs")
    _validate_ranges(state, body)
    user = body.get("user")
    expect(user is None or isinstance(user, str), "user must be a string", "user")


INT64 = 2**63
LOGIT_BIAS_KEY = re.compile(r"[0-9]+")


def _out_of_range(state: State, message: str, param: str) -> ApiError:
    """A value outside OpenAI's bounds: 400, or the 500 of an unchecked cast (range-values-500)."""
    if "range-values-500" in state.faults:
        return ApiError(500, f"internal error: OverflowError ({param})", "server_error")
    return ApiError(400, message, param=param)


def _validate_ranges(state: State, body: dict[str, Any]) -> None:
    """OpenAI's bounds on top_logprobs (0..20), legacy logprobs (0..5), logit_bias (integer
    token ids to -100..100) and seed (int64): wrong types are 400, values out of range too."""
    tlp = body.get("top_logprobs")
    expect(tlp is None or is_int(tlp), "top_logprobs must be an integer", "top_logprobs")
    if tlp is not None and not 0 <= tlp <= 20:
        raise _out_of_range(
            state, f"top_logprobs must be between 0 and 20, got {tlp}", "top_logprobs"
        )
    lp = body.get("logprobs")
    if "prompt" in body and lp is not None:  # legacy /v1/completions: an int, not a bool
        expect(is_int(lp), "logprobs must be an integer on /v1/completions", "logprobs")
        if not 0 <= lp <= 5:
            raise _out_of_range(state, f"logprobs must be between 0 and 5, got {lp}", "logprobs")
    seed = body.get("seed")
    if seed is not None and not -INT64 <= seed < INT64:
        raise _out_of_range(state, f"seed must fit a signed 64-bit integer, got {seed}", "seed")
    bias = body.get("logit_bias")
    expect(
        bias is None or isinstance(bias, dict),
        "logit_bias must be an object mapping token ids to biases",
        "logit_bias",
    )
    for key, value in (bias or {}).items():
        if not is_num(value) and "logit-bias-unchecked-500" in state.faults:
            raise ApiError(
                500, "internal error: ValueError: could not convert string to float", "server_error"
            )
        expect(is_num(value), f"logit_bias[{key!r}] must be a number", "logit_bias")
        if not LOGIT_BIAS_KEY.fullmatch(key):
            raise _out_of_range(
                state, f"logit_bias key {key!r} is not an integer token id", "logit_bias"
            )
        if int(key) >= VOCAB_SIZE:
            if "logit-bias-unchecked-500" in state.faults:  # the bias indexes the logits row
                raise ApiError(
                    500, "internal error: IndexError: index out of bounds", "server_error"
                )
            raise ApiError(
                400,
                f"logit_bias key {key} is out of vocabulary: token ids are 0..{VOCAB_SIZE - 1}",
                param="logit_bias",
            )
        if not -100 <= value <= 100:
            raise _out_of_range(
                state,
                f"logit_bias[{key!r}] must be between -100 and 100, got {value}",
                "logit_bias",
            )


async def read_json(request: web.Request, state: State) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        if "err-malformed-500" in state.faults:
            raise ApiError(500, "internal error: Expecting value", "server_error") from None
        raise ApiError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        if "non-object-body-500" in state.faults and not isinstance(body, list):
            # a server that guards against arrays but reads fields from any other JSON value
            raise ApiError(
                500,
                f"internal error: '{type(body).__name__}' object has no attribute 'get'",
                "server_error",
            )
        if "err-wrong-type-500" in state.faults:
            raise ApiError(
                500, "internal error: 'list' object has no attribute 'get'", "server_error"
            )
        raise ApiError(400, "the request body must be a JSON object")
    return body


def check_ready(state: State) -> None:
    if state.dead:
        raise ApiError(
            500,
            "EngineDeadError: the engine core died (RuntimeError: CPU Generator does not use offset)",
            "server_error",
        )
    if (
        "health-loading-forever" in state.faults
        or time.monotonic() - state.started < state.config.loading_s
    ):
        raise ApiError(503, "Loading model", "unavailable_error")
    if "health-lies" in state.faults:
        raise ApiError(503, "no model is loaded", "unavailable_error")


def apply_quirks(quirks: frozenset[str], data: bytes) -> bytes:
    if "extra-fields" in quirks and data.startswith(b"data: {") and data.rstrip().endswith(b"}"):
        body = data.rstrip()
        data = body[:-1] + b',"x_servecheck_extra":{"note":"ignore me"}}\n\n'
    if "sse-no-space" in quirks:
        data = data.replace(b"data: ", b"data:")
    if "sse-comments" in quirks:
        data = b": keep-alive\n\n" + data
    if "sse-crlf" in quirks:
        data = data.replace(b"\n", b"\r\n")
    return data


async def write_event(response: web.StreamResponse, quirks: frozenset[str], data: bytes) -> None:
    """Write one SSE event with the legal quirks applied (``sse-split``: across three writes,
    cutting through multi-byte characters)."""
    data = apply_quirks(quirks, data)
    if "sse-split" in quirks and len(data) > 3:
        third = len(data) // 3
        for a, b in ((0, third), (third, 2 * third), (2 * third, len(data))):
            await response.write(data[a:b])
            await asyncio.sleep(0)
    else:
        await response.write(data)


__all__ = [
    "STATE",
    "ApiError",
    "ClientGone",
    "ServerConfig",
    "State",
    "apply_quirks",
    "write_event",
    "check_ready",
    "error_body",
    "error_response",
    "expect",
    "is_int",
    "is_num",
    "max_tokens_of",
    "read_json",
    "validate_common",
]
