"""The reference server: a deterministic OpenAI-compatible engine on aiohttp.

It is the embedded default target (``servecheck check`` with no config runs against it), the
calibration source for load tests (known TTFT and inter-token delay), and the catalogue of
broken servers: every fault in :mod:`servecheck.reference.faults` switches on one defect.

It imports nothing from ``servecheck.client`` or ``servecheck.checks`` on purpose: the code
under test and the code that tests it must not share a bug.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import itertools
import json
import math
import os
import secrets
import signal
import time
from typing import Any

import jsonschema
from aiohttp import web

from servecheck.errors import UsageError
from servecheck.reference import (
    agent,
    agent_sized,
    cache_faults,
    cases,
    embeddings,
    engine_metrics,
    grid_faults,
    livelock,
    model,
    overload,
    prefix_cache,
    reasoning,
    responses,
    shapes,
    vision,
)
from servecheck.reference import completions as legacy
from servecheck.reference import drain as refdrain
from servecheck.reference import logprobs as reflogprobs
from servecheck.reference import lora as reflora
from servecheck.reference import messages as anthropic
from servecheck.reference import text as reftext
from servecheck.reference.faults import FAULTS, QUIRKS
from servecheck.reference.http import (
    STATE,
    ApiError,
    ClientGone,
    ServerConfig,
    State,
    apply_quirks,
    check_ready,
    error_body,
    error_response,
    expect,
    max_tokens_of,
    read_json,
    validate_common,
)
from servecheck.reference.model import Choice
from servecheck.reference.stream_faults import StreamHooks, stream_hooks

ROLES = {"system", "user", "assistant", "tool", "developer", "function"}
_ids = itertools.count(1)


# ---------------------------------------------------------------------------------------------
# Request validation


def _validate_messages(state: State, body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if (
        "err-wrong-type-500" in state.faults
        and messages is not None
        and not isinstance(messages, list)
    ):
        raise ApiError(500, "internal error: string indices must be integers", "server_error")
    expect(isinstance(messages, list), "'messages' is required and must be a list", "messages")
    assert isinstance(messages, list)
    if not messages and "err-empty-messages-200" not in state.faults:
        raise ApiError(400, "'messages' must contain at least one message", param="messages")
    for i, m in enumerate(messages):
        if "messages-malformed-500" in state.faults:
            _crash_on_malformed_message(m)
        expect(isinstance(m, dict), f"messages[{i}] must be an object", f"messages[{i}]")
        role = m.get("role")
        expect(
            isinstance(role, str) and role in ROLES,
            f"messages[{i}].role must be one of {sorted(ROLES)}, got {role!r}",
            f"messages[{i}].role",
        )
        content = m.get("content")
        ok = isinstance(content, str) or (
            isinstance(content, list) and all(isinstance(p, dict) for p in content)
        )
        ok = ok or (content is None and role == "assistant" and bool(m.get("tool_calls")))
        expect(
            ok,
            f"messages[{i}].content must be a string or a list of content parts",
            f"messages[{i}].content",
        )
        if role == "tool":
            if "tools-result-rejected" in state.faults:
                raise ApiError(400, "tool messages are not supported", param=f"messages[{i}]")
            expect(
                isinstance(m.get("tool_call_id"), str),
                f"messages[{i}].tool_call_id is required for tool messages",
                f"messages[{i}].tool_call_id",
            )
    return messages


def _crash_on_malformed_message(m: Any) -> None:
    """The messages-malformed-500 defect: a template renderer that indexes each message as it
    comes, so a malformed one raises (a KeyError, a TypeError) and the request dies with a 500."""
    if not isinstance(m, dict):
        raise ApiError(500, "internal error: string indices must be integers", "server_error")
    if "role" not in m:
        raise ApiError(500, "internal error: KeyError: 'role'", "server_error")
    if not isinstance(m.get("content"), str | list | None):
        raise ApiError(
            500, 'internal error: can only concatenate str (not "int") to str', "server_error"
        )


def _unchecked_tool_choice(tools: Any, choice: Any) -> bool:
    """The tool-choice-unchecked defect: a tool_choice it cannot use is served as 'auto'."""
    if isinstance(choice, dict):
        fn = choice.get("function")
        return not (isinstance(fn, dict) and isinstance(fn.get("name"), str)) or tools is None
    return choice not in (None, "none", "auto", "required") or (
        tools is None and choice is not None
    )


def _validate_tools(state: State, body: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if "tool-choice-unchecked" in state.faults and _unchecked_tool_choice(tools, choice):
        choice = "auto"
    if tools is None:
        expect(choice in (None, "none", "auto"), "tool_choice requires tools", "tool_choice")
        return [], None
    expect("tools-refused" not in state.faults, "tools are not supported", "tools")
    if "tools-malformed-500" in state.faults:
        _crash_on_malformed_tools(tools)
    expect(isinstance(tools, list), "tools must be a list", "tools")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        expect(
            isinstance(tool, dict)
            and tool.get("type") == "function"
            and isinstance(fn, dict)
            and isinstance(fn.get("name"), str),
            f"tools[{i}] must be {{type: function, function: {{name, parameters}}}}",
            f"tools[{i}]",
        )
        assert isinstance(fn, dict)
        params = fn.get("parameters", {"type": "object", "properties": {}})
        try:
            jsonschema.Draft202012Validator.check_schema(params)
        except jsonschema.SchemaError as exc:
            raise ApiError(
                400,
                f"tools[{i}].function.parameters is not a valid JSON Schema: {exc.message}",
                param=f"tools[{i}]",
            ) from None
    names = [t["function"]["name"] for t in tools]
    if isinstance(choice, dict):
        fn = choice.get("function")
        expect(
            choice.get("type") == "function"
            and isinstance(fn, dict)
            and isinstance(fn.get("name"), str),
            "tool_choice must be none, auto, required or {type: function, function: {name}}",
            "tool_choice",
        )
        assert isinstance(fn, dict)
        if fn["name"] not in names and "tools-undefined-accepted" not in state.faults:
            raise ApiError(
                400,
                f"tool_choice names function {fn['name']!r}, which is not in tools ({', '.join(names)})",
                param="tool_choice",
            )
    else:
        expect(
            choice in (None, "none", "auto", "required"),
            "tool_choice must be none, auto, required or an object",
            "tool_choice",
        )
    return tools, choice


def _crash_on_malformed_tools(tools: Any) -> None:
    """The tools-malformed-500 defect: tools read as if already valid (``t["function"]["name"]``),
    so a malformed list raises and the request dies with a 500."""
    if not isinstance(tools, list):
        raise ApiError(500, "internal error: string indices must be integers", "server_error")
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or "name" not in fn:
            raise ApiError(500, "internal error: KeyError: 'function'", "server_error")
        if tool.get("type") != "function":
            raise ApiError(
                500, f"internal error: no parser for tool type {tool.get('type')!r}", "server_error"
            )
        if not isinstance(fn.get("parameters", {}), dict):
            raise ApiError(
                500, "internal error: 'str' object has no attribute 'get'", "server_error"
            )


def _response_format_unchecked(rf: Any) -> bool:
    """The response-format-unchecked defect: a response_format it cannot read is served as text."""
    if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object", "json_schema"):
        return True
    spec = rf.get("json_schema")
    return rf["type"] == "json_schema" and not (
        isinstance(spec, dict) and isinstance(spec.get("schema", {}), dict)
    )


def _response_format(state: State, body: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    rf = body.get("response_format")
    if rf is None:
        return "text", None
    expect(
        "response-format-refused" not in state.faults,
        "response_format is not supported",
        "response_format",
    )
    if "response-format-unchecked" in state.faults and _response_format_unchecked(rf):
        return "text", None
    expect(isinstance(rf, dict), "response_format must be an object", "response_format")
    kind = rf.get("type")
    expect(
        kind in ("text", "json_object", "json_schema"),
        "response_format.type must be text, json_object or json_schema",
        "response_format",
    )
    if kind != "json_schema":
        return kind, None
    spec = rf.get("json_schema")
    expect(
        isinstance(spec, dict) and isinstance(spec.get("schema", {}), dict),
        "response_format.json_schema must be {name, schema}",
        "response_format",
    )
    assert isinstance(spec, dict)
    schema = spec.get("schema", {})
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        if "json-schema-invalid-500" in state.faults:
            raise ApiError(
                500, "internal error: grammar compilation failed", "server_error"
            ) from None
        raise ApiError(
            400,
            f"response_format.json_schema.schema is not a valid JSON Schema: {exc.message}",
            param="response_format",
        ) from None
    return "json_schema", schema


# ---------------------------------------------------------------------------------------------
# Producing output


def _prompt_key(body: dict[str, Any]) -> str:
    if "messages" in body:
        return json.dumps(body.get("messages"), sort_keys=True, ensure_ascii=False) + json.dumps(
            body.get("response_format"), sort_keys=True
        )
    return json.dumps(body.get("prompt"), ensure_ascii=False)


def _tool_choice_target(
    tools: list[dict[str, Any]], choice: Any, messages: list[dict[str, Any]], scripted: bool
) -> dict[str, Any] | None:
    if not tools or choice == "none":
        return None
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        return next(
            (t["function"] for t in tools if t["function"]["name"] == name),
            {"name": name, "parameters": {}},
        )
    if choice == "required":
        return tools[0]["function"]
    last = model.content_text(messages[-1].get("content")) if messages else ""
    if messages and messages[-1].get("role") == "tool":
        return None  # answer the tool result in text
    if agent.wants_call(scripted, messages):
        return tools[0]["function"]
    return next((t["function"] for t in tools if t["function"]["name"] in last), None)


def _misses_this_call(
    state: State, tools: list[dict[str, Any]], tool_choice: Any, messages: Any
) -> bool:
    """tools-ignored-every-fifth: whether this forced-call request is one answered with text
    (the 1st, 6th, 11th ...), so a check run once always sees the miss and K trials see K/5."""
    if "tools-ignored-every-fifth" not in state.faults:
        return False
    if _tool_choice_target(tools, tool_choice, messages or [], False) is None:
        return False
    state.forced_calls += 1
    return state.forced_calls % 5 == 1


def _make_choices(
    state: State,
    body: dict[str, Any],
    max_tokens: int,
    messages: list[dict[str, Any]] | None,
    tools: list[dict[str, Any]],
    tool_choice: Any,
    fmt: str,
    schema: dict[str, Any] | None,
) -> list[Choice]:
    faults = state.faults
    seed = body.get("seed")
    temperature = float(
        body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0
    )
    fresh = (
        (temperature > 0 and seed is None)
        or "nondeterministic" in faults
        or ("seed-ignored" in faults and seed is not None)
    )
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if "stop-ignored" in faults:
        stops = []
    if "stop-leaks" in faults:  # one sampling-params object shared across requests
        stops = stops or state.leaked_stops
        state.leaked_stops = stops
    if "seed-pinned" in faults and seed is not None:
        seed = 0  # any seed is read as one fixed seed
    n = 1 if "n-ignored" in faults else int(body.get("n") or 1)
    floor = cases.min_tokens(faults, body, max_tokens)
    blind = cases.boundary_blind(faults, body)  # stop-boundary-stream
    key = _prompt_key(body)
    out: list[Choice] = []
    missed = _misses_this_call(state, tools, tool_choice, messages)
    for index in range(n):
        target_fn = _tool_choice_target(tools, tool_choice, messages or [], state.config.agent)
        if target_fn is not None and "tools-ignored" not in faults and not missed:
            if "tools-wrong-name" in faults and isinstance(tool_choice, dict):
                target_fn = {
                    "name": target_fn["name"] + "_other",
                    "parameters": target_fn.get("parameters", {}),
                }
            rng = model.json_key_rng(key, seed)
            args = model.instance(
                target_fn.get("parameters") or {"type": "object", "properties": {}}, rng
            )
            args = shapes.tool_arguments(faults, args)
            arguments = json.dumps(args, ensure_ascii=False)
            if "tool-args-escaping-broken" in faults:
                arguments = html.escape(arguments, quote=False)  # a template's autoescape
            if "tools-args-invalid" in faults:
                arguments = arguments[:-1] if len(arguments) > 2 else "{'bad': }"
            finish = "stop" if "tools-finish-stop" in faults else "tool_calls"
            call = {
                "id": f"call_{secrets.token_hex(6)}",
                "name": target_fn["name"],
                "arguments": arguments,
            }
            choice = Choice(index, [], finish, [], call)
            _parallel_and_cut(state, body, choice, tools, messages or [], key, seed, max_tokens)
            out.append(choice)
            continue
        if fmt in ("json_object", "json_schema") and "json-mode-ignored" not in faults:
            rng = model.json_key_rng(key + str(index), seed)
            if fmt == "json_schema" and schema is not None and "json-schema-ignored" not in faults:
                value = model.instance(schema, rng)
                if "json-schema-nested-ignored" in faults and isinstance(value, dict):
                    for item in value.values():
                        if isinstance(item, list):
                            item.append({"unexpected": "item"})
            else:
                value = {
                    "answer": rng.choice(model.VOCAB[:30]),
                    "count": rng.randint(1, 9),
                    "ok": True,
                }
                if fmt == "json_schema":  # json-schema-ignored: valid JSON, wrong shape
                    value = {"unexpected": "shape"}
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            if "sdk-json-fenced" in faults and fmt == "json_schema":
                text = "```json\n" + text + "\n```"
            pieces = model.split_json(text)
            finish = "stop"
            if len(pieces) > max_tokens:
                pieces, finish = pieces[:max_tokens], "length"
            out.append(Choice(index, pieces, finish, [-0.01] * len(pieces)))
            continue
        gen = model.generate_text(
            key,
            max_tokens=max_tokens,
            seed=seed,
            temperature=temperature,
            index=index,
            stop=[] if blind else stops,
            fresh=fresh,
            ignore_eos=body.get("ignore_eos") is True,
            min_tokens=floor,
        )
        pieces, finish = gen.pieces, gen.finish_reason
        if blind:
            pieces = cases.stop_within_pieces(pieces, stops)
        if "logit-bias-ignored" not in faults:
            pieces = model.ban_tokens(pieces, model.banned_ids(body.get("logit_bias")))
        if "max-tokens-ignored" in faults and finish == "length":
            more = model.generate_text(
                key + "more", max_tokens=8, seed=seed, temperature=temperature, index=index
            )
            pieces = pieces + [" " + p.strip() for p in more.pieces]
            finish = "stop"
        if "length-as-stop" in faults and finish == "length":
            finish = "stop"
        if "chat-bad-finish-reason" in faults:
            finish = "eos"
        out.append(
            Choice(index, pieces, finish, gen.logprobs + [-0.5] * (len(pieces) - len(gen.logprobs)))
        )
    return out


def _parallel_and_cut(
    state: State,
    body: dict[str, Any],
    choice: Choice,
    tools: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    key: str,
    seed: int | None,
    max_tokens: int,
) -> None:
    """Parallel calls (tool_choice required, a prompt naming several tools, parallel_tool_calls
    not false) and the max_tokens cut of a call, which ends with 'length' as a cut text does."""
    assert choice.tool_call is not None
    last = model.content_text(messages[-1].get("content")) if messages else ""
    parallel = (
        body.get("parallel_tool_calls") is not False or "tools-parallel-ignored" in state.faults
    )
    if parallel and body.get("tool_choice") == "required":
        for tool in tools[1:]:
            fn = tool["function"]
            if fn["name"] in last and tools[0]["function"]["name"] in last:
                args = model.instance(
                    fn.get("parameters") or {}, model.json_key_rng(key + fn["name"], seed)
                )
                choice.extra_calls.append(
                    {
                        "id": f"call_{secrets.token_hex(6)}",
                        "name": fn["name"],
                        "arguments": json.dumps(args),
                    }
                )
    need = sum(len(model.tokenize(c["arguments"])) for c in choice.calls())
    if need > max_tokens:
        first = choice.tool_call["arguments"]
        keep = max(1, len(first) * max_tokens // max(need, 1))
        choice.tool_call["arguments"] = first[:keep]
        choice.extra_calls.clear()
        if "tools-length-as-tool-calls" not in state.faults:
            choice.finish_reason = "length"


def _usage(
    prompt_tokens: int,
    completion_tokens: int,
    faults: frozenset[str],
    reasoning_tokens: int | None = None,
) -> dict[str, Any]:
    total = prompt_tokens + completion_tokens + (1 if "usage-sum-wrong" in faults else 0)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": total,
    }
    if "usage-details-overcount" in faults:
        reasoning_tokens = completion_tokens + 2  # more reasoning than all the output
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return usage


def _reasoning_tokens(state: State, choices: list[Choice]) -> int | None:
    if state.reasoning is None:
        return None
    return reasoning.reasoning_tokens(choices, state.faults)


def _completion_tokens(choices: list[Choice]) -> int:
    return sum(
        len(c.pieces)
        if c.tool_call is None
        else max(1, sum(len(model.tokenize(t["arguments"])) for t in c.calls()))
        for c in choices
    ) + sum(len(c.reasoning) for c in choices)


# ---------------------------------------------------------------------------------------------
# KV-cache bookkeeping (for /metrics and the leak self-tests)


def _timings(
    state: State, slot: _Slot, first: float, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any] | None:
    """llama.cpp's per-request ``timings`` object (the ``timings`` quirk), or None when off:
    prefill from scheduling to the first token, decode from it to now. ``timings-disagree``
    reports two tokens more than usage and a prefill 10 s longer than it was."""
    wrong = "timings-disagree" in state.faults
    if "timings" not in state.config.quirks and not wrong:
        return None
    now = time.monotonic()
    cached = slot.cached or 0
    prompt_ms = max(0.0, first - slot.scheduled) * 1000 + (10_000.0 if wrong else 0.0)
    predicted_ms = max(0.0, now - first) * 1000
    predicted = completion_tokens + (2 if wrong else 0)
    return {
        "cache_n": cached,
        "prompt_n": prompt_tokens - cached,
        "prompt_ms": round(prompt_ms, 3),
        "prompt_per_second": round((prompt_tokens - cached) / prompt_ms * 1000, 3)
        if prompt_ms
        else 0.0,
        "predicted_n": predicted,
        "predicted_ms": round(predicted_ms, 3),
        "predicted_per_second": round(predicted / predicted_ms * 1000, 3) if predicted_ms else 0.0,
    }


class _Slot:
    """Holds a request's KV blocks and its running slot; released exactly once."""

    def __init__(
        self, state: State, prompt_tokens: int, seeded: bool, arrival: float | None = None
    ) -> None:
        self.state = state
        self.blocks = 0
        self.seeded = seeded
        self.prompt_tokens = prompt_tokens
        self.aborted = False
        self.released = False
        self.cached: int | None = None  # prompt tokens served by the prefix cache
        self.scheduled = time.monotonic()  # engine_metrics' phases
        self.arrival = self.scheduled if arrival is None else arrival
        state.running += 1
        if seeded:
            state.seeded_running += 1
        self.grow(prompt_tokens)

    def grow(self, tokens: int) -> None:
        cfg = self.state.config
        need = math.ceil(tokens / cfg.block_size)
        if need > self.blocks:
            extra = need - self.blocks
            self.state.kv_used_blocks += extra
            self.blocks = need

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        st = self.state
        if self.seeded:
            st.seeded_running -= 1
        if self.aborted and "abort-leak" in st.faults:
            return  # the running count never drops: the defect
        st.running -= 1
        if self.aborted and "kv-leak" in st.faults:
            st.kv_leaked_blocks += self.blocks
            return
        st.kv_used_blocks -= self.blocks


# ---------------------------------------------------------------------------------------------
# Handlers


STEP_TOKEN_BUDGET = 2048  # vLLM's default max_num_batched_tokens with chunked prefill
STEP_WINDOW_S = 0.05


async def _schedule_step_with_seed_crash(state: State, prompt_tokens: int, seeded: bool) -> None:
    """The crash-concurrent-seed defect, as vLLM 0.32's CPU build shows it.

    Requests that arrive together are prefilled in one scheduler step. When their prompts exceed
    the step's token budget, chunked prefill splits them, and a seeded request in such a step
    raises ``RuntimeError: CPU Generator does not use offset``: every request in flight gets a
    500 and the engine core exits. Short or lone requests never trigger it.
    """
    state.step_tokens += prompt_tokens
    state.step_seeded += int(seeded)
    try:
        await asyncio.sleep(STEP_WINDOW_S)  # wait for the rest of the batch
        if state.step_seeded and state.step_tokens > STEP_TOKEN_BUDGET:
            state.dead = True
    finally:
        state.step_tokens -= prompt_tokens
        state.step_seeded -= int(seeded)
    if state.dead:
        raise ApiError(500, "RuntimeError: CPU Generator does not use offset", "server_error")


def _chunk_prefix(cid: str, created: int | str, model_name: str, obj: str) -> str:
    return f'{{"id":"{cid}","object":"{obj}","created":{created},"model":{json.dumps(model_name)},"system_fingerprint":"servecheck-ref","choices":['


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


def _fit_context(
    state: State, body: dict[str, Any], chat: bool, prompt_tokens: int
) -> tuple[int, int, int, int | None, int, int]:
    """Fit a request into the context: (prompt tokens after any cut, the limit, the prompt size
    before a cut or 0, the max_tokens asked for, the room left, the max_tokens served)."""
    cfg = state.config
    limit = cfg.max_model_len
    if "ctx-limit-lower" in state.faults:
        limit = limit * 3 // 4  # /v1/models and /tokenize still advertise max_model_len
    truncated_from = (
        0  # with context_policy "truncate": the prompt size before the cut, reported as a warning
    )
    if prompt_tokens > limit:
        if "ctx-500" in state.faults:
            raise ApiError(500, "internal error: index out of range in self", "server_error")
        if "ctx-silent-truncate" not in state.faults and cfg.context_policy != "truncate":
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your prompt contains at least {prompt_tokens} input tokens.",
                param="messages" if chat else "prompt",
                code="context_length_exceeded",
            )
        if "ctx-silent-truncate" not in state.faults:
            truncated_from = prompt_tokens
        # Cut the prompt so the answer fits, as truncating engines do (Xinference keeps the tail):
        # nothing in finish_reason then hints at the cut, only usage and the warning can.
        wanted = max_tokens_of(body) or cfg.default_max_tokens
        prompt_tokens = limit - min(wanted, limit // 2)
    requested = max_tokens_of(body)
    if requested is not None and requested > limit:
        if "ctx-max-tokens-500" in state.faults:
            raise ApiError(500, "internal error: negative dimension", "server_error")
        raise ApiError(
            400,
            f"max_tokens={requested} cannot be greater than max_model_len={limit}",
            param="max_tokens",
        )
    room = limit - prompt_tokens
    max_tokens = min(requested if requested is not None else cfg.default_max_tokens, max(room, 0))
    if "ctx-max-tokens-overrun" in state.faults and requested is not None:
        max_tokens = requested
    if max_tokens < 1:
        max_tokens = 1
    return prompt_tokens, limit, truncated_from, requested, room, max_tokens


def _refuse_streams(state: State, body: dict[str, Any]) -> None:
    """The stream-refused-503 defect: every streamed request is refused as overloaded."""
    if "stream-refused-503" in state.faults and body.get("stream") is True:
        raise ApiError(503, "server overloaded: streaming unavailable", "server_error")


def _blank_for_logprobs(
    state: State, chat: bool, body: dict[str, Any], choices: list[Choice]
) -> None:
    """The logprobs-blank-content defect: a chat request asking for logprobs gets no text."""
    if chat and body.get("logprobs") and "logprobs-blank-content" in state.faults:
        for c in choices:
            c.pieces, c.logprobs = [], []


async def _acquire(state: State) -> asyncio.Semaphore:
    """A running slot (``max_num_seqs``); counted as waiting while there is none. Returns the
    semaphore to release."""
    sem = state.sem
    assert sem is not None
    if sem.locked():
        state.degraded = state.degraded or "overload-never-recovers" in state.faults
        state.waiting += 1
        try:
            await sem.acquire()
        finally:
            state.waiting -= 1
    else:
        await sem.acquire()
    return sem


def _chat_prompt_tokens(
    state: State, body: dict[str, Any], messages: list[dict[str, Any]], tools: list[Any]
) -> int:
    """A chat's prompt tokens: its rendered messages and tools, and its images (refused by a
    text-only server, read and counted by a vision one: reference/vision.py)."""
    tokens = model.count_chat_tokens(shapes.rendered(state.faults, messages), tools)
    tokens += 1 if "prompt-tokens-double-bos" in state.faults else 0
    return tokens + vision.screen(state, body).tokens


def _shape_choices(
    state: State,
    body: dict[str, Any],
    chat: bool,
    choices: list[Choice],
    max_tokens: int,
    fmt: str,
    requested: int | None,
    room: int,
) -> None:
    """What happens to generated choices before they are sent: the text-*, LoRA, logprobs,
    reasoning, grid-finish-* and ctx-max-tokens-overrun effects, in that order."""
    reftext.garble(state.faults, choices, bool(body.get("stream")))  # text-* faults
    reflora.apply(state, body["model"], choices)  # a LoRA adapter's own answer
    _blank_for_logprobs(state, chat, body, choices)
    if chat and state.reasoning is not None:
        reasoning.apply(state.reasoning, state.faults, body, choices, max_tokens, fmt)
    grid_faults.finishes(state.faults, body, choices)  # the grid-finish-* faults
    agent_sized.blank(state.faults, body.get("tools") or [], choices)  # agent-tools-stop-empty
    if "ctx-max-tokens-overrun" in state.faults and requested is not None and requested > room:
        for c in choices:
            if c.finish_reason == "length":
                c.finish_reason = "stop"


async def _generate(request: web.Request, chat: bool) -> web.StreamResponse:
    state = request.app[STATE]
    arrival = await engine_metrics.arrive(state)  # after the gateway-first-byte-delay fault
    try:
        check_ready(state)
        await reflora.swap_effects(state)  # the lora-swap-* faults
        body = await read_json(request, state)
        _refuse_streams(state, body)
        if chat:
            body = shapes.screen(state.faults, body)  # the REQ-* faults
        else:
            body = legacy.screen(state.faults, body, state.config.models)
        validate_common(state, body)
        if chat:
            messages = _validate_messages(state, body)
            tools, tool_choice = _validate_tools(state, body)
            fmt, schema = _response_format(state, body)
            if "json-stream-unconstrained" in state.faults and body.get("stream") is True:
                fmt, schema = "text", None  # the streaming path never sees response_format
            prompt_tokens = _chat_prompt_tokens(state, body, messages, tools)
            agent_sized.screen(state.faults, messages)  # agent-system-500
        else:
            prompts = legacy.parse_prompts(state.faults, body)
            messages, tools, tool_choice, fmt, schema = None, [], None, "text", None
            prompt_tokens = max(p.tokens for p in prompts)  # each prompt must fit the context
        longest = prompt_tokens
        try:
            fit = _fit_context(state, body, chat, prompt_tokens)
        except ApiError as err:
            if body.get("stream") is True and err.status < 500 and _late_errors(state):
                return await _late_error_stream(request, state, err, chat, body["model"])
            raise
        prompt_tokens, limit, truncated_from, requested, room, max_tokens = fit
        if not chat and prompt_tokens == longest:  # not cut: usage counts every prompt
            prompt_tokens = legacy.prompt_tokens(state.faults, prompts)
        seeded = body.get("seed") is not None
        if "crash-concurrent-seed" in state.faults:
            await _schedule_step_with_seed_crash(state, prompt_tokens, seeded)
        if chat:
            choices = _make_choices(
                state, body, max_tokens, messages, tools, tool_choice, fmt, schema
            )
        else:
            choices = legacy.batch_choices(
                state.faults,
                body,
                prompts,
                lambda one: _make_choices(state, one, max_tokens, None, [], None, "text", None),
            )
        _shape_choices(state, body, chat, choices, max_tokens, fmt, requested, room)
    except ApiError as err:
        if "error-path-leak" in state.faults and 400 <= err.status < 500:
            state.kv_leaked_blocks += 1  # the defect: a refused request's block is never freed
        return error_response(state, err)

    state.request_count += 1
    sem = await _acquire(state)
    slot = _Slot(state, prompt_tokens, seeded, arrival)
    slot.cached = prefix_cache.lookup(state, messages, prompt_tokens)
    slot.cached = cache_faults.apply(state, slot.cached, prompt_tokens)
    try:
        completion_tokens = _completion_tokens(choices)
        completion_tokens = grid_faults.counted(state.faults, body, choices, completion_tokens)
        model_name = body["model"]
        if body.get("stream"):
            return await _stream(
                request,
                state,
                body,
                chat,
                choices,
                prompt_tokens,
                completion_tokens,
                model_name,
                slot,
            )
        if livelock.stuck(state):
            await livelock.hold(request)
        await _sleep_generation(state, choices, request)
        if state.dead:
            return error_response(
                state,
                ApiError(500, "RuntimeError: CPU Generator does not use offset", "server_error"),
            )
        slot.grow(prompt_tokens + completion_tokens)
        state.success += 1
        state.prompt_tokens += prompt_tokens
        state.generation_tokens += completion_tokens
        engine_metrics.finished(state, slot.arrival, slot.scheduled, None)
        full = _full_body(state, body, chat, choices, prompt_tokens, completion_tokens, model_name)
        prefix_cache.annotate(full["usage"], slot.cached)
        first = slot.scheduled + prefix_cache.ttft_s(state.config, slot.cached, prompt_tokens)
        timings = _timings(state, slot, first, prompt_tokens, completion_tokens)
        if timings is not None:
            full["timings"] = timings
        if truncated_from:
            full["warnings"] = [
                f"prompt truncated from {truncated_from} to {prompt_tokens} tokens (context {limit})"
            ]
        answer = web.json_response(full, dumps=_dumps)
        if "sdk-stale-content-encoding" in state.faults:
            answer.headers["Content-Encoding"] = (
                "gzip"  # the body is not compressed: a gateway forwarded a stale header
            )
        return answer
    except ClientGone as gone:
        slot.aborted = (
            True  # noticed at the next token write, like engines that abort on disconnect
        )
        return gone.response  # already prepared: aiohttp finishes it quietly
    except (asyncio.CancelledError, ConnectionResetError):
        slot.aborted = True
        raise
    finally:
        slot.release()
        sem.release()


NEVER_RECOVERS_S = 0.5  # overload-never-recovers: the first token's delay after an overload
DEFAULT_SLOTS = 512  # ServerConfig.max_num_seqs's default


def _running_slots(config: ServerConfig) -> int:
    """``max_num_seqs``; overload-never-recovers brings overload's limit of 4 when it is at its
    default, so that the fault shows as it is (an overload of 512 streams is not a test)."""
    if "overload-never-recovers" in config.faults and config.max_num_seqs == DEFAULT_SLOTS:
        return overload.FAULT_LIMIT
    return config.max_num_seqs


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _extra_delay(state: State) -> float:
    if "latency-spikes" in state.faults and state.request_count % 5 == 0:
        return 1.0
    return NEVER_RECOVERS_S if state.degraded else 0.0


async def _sleep_generation(state: State, choices: list[Choice], request: web.Request) -> None:
    cfg = state.config
    steps = max((len(c.pieces) for c in choices), default=1)
    total = (cfg.ttft_ms + cfg.itl_ms * max(steps - 1, 0)) / 1000 + _extra_delay(state)
    if total > 0:
        await asyncio.sleep(total)


def _full_body(
    state: State,
    body: dict[str, Any],
    chat: bool,
    choices: list[Choice],
    prompt_tokens: int,
    completion_tokens: int,
    model_name: str,
) -> dict[str, Any]:
    faults = state.faults
    created: int | float = int(time.time())
    if "chat-created-float" in faults:
        created = time.time()
    want_logprobs = (
        bool(body.get("logprobs")) or "logprobs-unasked" in faults
    ) and "logprobs-missing" not in faults
    out_choices = []
    for c in choices:
        if (
            chat
            and "completions-broken" not in faults
            or (not chat and "completions-broken" in faults)
        ):
            message: dict[str, Any] = {
                "role": grid_faults.message_role(faults, c),
                "content": "".join(c.pieces) if c.tool_call is None else None,
            }
            if c.tool_call is not None:
                message["tool_calls"] = [
                    {
                        "id": t["id"],
                        "type": "function",
                        "function": {"name": t["name"], "arguments": t["arguments"]},
                    }
                    for t in c.calls()
                ]
            if state.reasoning is not None:
                message.update(reasoning.message_fields(state.reasoning, c))
            entry: dict[str, Any] = {
                "index": c.index,
                "message": message,
                "logprobs": {
                    "content": reflogprobs.content(
                        c.pieces, c.logprobs, reflogprobs.top_count(body), faults
                    )
                }
                if want_logprobs
                else None,
                "finish_reason": c.finish_reason,
            }
        else:
            entry = legacy.choice_entry(faults, body, c)
        out_choices.append(entry)
    cid = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
    full: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model_name,
        "system_fingerprint": "servecheck-ref",
        "choices": out_choices,
        "usage": _usage(
            prompt_tokens, completion_tokens, faults, _reasoning_tokens(state, choices)
        ),
    }
    if "extra-fields" in state.config.quirks:
        full["x_servecheck_extra"] = {"note": "ignore me"}
        for entry in out_choices:
            entry["stop_reason"] = None
    return full


def _tool_deltas(choice: Choice, faults: frozenset[str]) -> list[dict[str, Any]]:
    """The streamed tool_calls deltas of a choice, in order: per call a head, then argument pieces."""
    out: list[dict[str, Any]] = []
    calls = choice.calls()
    for k, call in enumerate(calls):
        index, call_id = k, call["id"]
        if "tools-stream-shared-index" in faults:
            index, call_id = 0, calls[0]["id"]
        head: dict[str, Any] = {
            "id": call_id,
            "type": "function",
            "function": {"name": call["name"], "arguments": ""},
        }
        frags: list[dict[str, Any]] = [
            grid_faults.tool_fragment(faults, head, {"function": {"arguments": p}})
            for p in model.split_json(call["arguments"], 8)
        ]
        for delta in [head, *frags]:
            out.append(delta if "tools-stream-no-index" in faults else {"index": index, **delta})
    return out


ERROR_IN_200 = b'data: {"error": {"message": "upstream model crashed", "type": "server_error", "code": 500}}\n\n'
DEAD_EVENT = b'data: {"error": {"message": "RuntimeError: CPU Generator does not use offset", "type": "server_error", "code": 500}}\n\n'
DONE = b"data: [DONE]\n\n"
ROLE_DELTA = '{"role":"assistant","content":""}'


class _Sse:
    """One chat / completions stream: chunk framing, delta JSON, and the writes (held, split or
    direct, as the stream's hooks and the server's quirks say)."""

    def __init__(
        self,
        response: web.StreamResponse,
        hooks: StreamHooks,
        quirks: frozenset[str],
        chat: bool,
        model_name: str,
        faults: frozenset[str] = frozenset(),
    ) -> None:
        self.response, self.hooks, self.quirks, self.chat = response, hooks, quirks, chat
        self.model_name, self.faults = model_name, faults
        self.created = int(time.time())
        self.obj = hooks.chunk_object or ("chat.completion.chunk" if chat else "text_completion")
        self.cid = self._new_id()
        self.prefix = self._prefix()
        self.held: list[bytes] = []
        self.first = 0.0  # when the first token was due (monotonic): the timings quirk's prefill

    def _new_id(self) -> str:
        return ("chatcmpl-" if self.chat else "cmpl-") + secrets.token_hex(12)

    def _prefix(self) -> str:
        created = f'"{self.created}"' if self.hooks.created_as_string else self.created
        return _chunk_prefix(self.cid, created, self.model_name, self.obj)

    def chunk(self, choice_json: str, usage: str | None = None, timings: str = "") -> bytes:
        if self.hooks.fresh_id_per_chunk or self.hooks.created_step:
            if self.hooks.fresh_id_per_chunk:
                self.cid = self._new_id()
            self.created += self.hooks.created_step
            self.prefix = self._prefix()
        # stream-usage-placeholder: the chunks without usage say "usage": [] instead of nothing
        placeholder = ',"usage":[]' if self.hooks.usage_placeholder else ""
        tail = f',"usage":{usage}' if usage else placeholder
        tail += f',"timings":{timings}' if timings else ""
        return f"data: {self.prefix}{choice_json}]{tail}}}\n\n".encode()

    def usage_only(self, usage: str) -> bytes:
        """stream-usage-no-choices: the usage chunk without a choices key."""
        head = self.prefix.removesuffix(',"choices":[')
        return f'data: {head},"usage":{usage}}}\n\n'.encode()

    def delta(
        self, index: int, delta: str, finish: str | None = None, logprobs: str = "null"
    ) -> str:
        fr = "null" if finish is None else json.dumps(finish)
        if self.chat:
            return f'{{"index":{index},"delta":{delta},"logprobs":{logprobs},"finish_reason":{fr}}}'
        return f'{{"index":{index},"text":{delta},"logprobs":{logprobs},"finish_reason":{fr}}}'

    async def send(self, data: bytes) -> None:
        if self.quirks:
            data = apply_quirks(self.quirks, data)
        if self.hooks.hold == "all":
            self.held.append(data)
        elif self.hooks.hold == "blocks":
            # a proxy that forwards in 2 KiB blocks (nginx proxy_buffers); the tail at the end
            self.held.append(data)
            if sum(map(len, self.held)) >= 2048:
                await self.response.write(b"".join(self.held))
                self.held.clear()
        elif "sse-split" in self.quirks and len(data) > 3:
            cuts = sorted({1, len(data) // 3, (2 * len(data)) // 3 + 1})
            for a, b in zip([0, *cuts], [*cuts, len(data)], strict=False):
                await self.response.write(data[a:b])
                await asyncio.sleep(0)
        else:
            try:
                await self.response.write(data)
            except ConnectionResetError as exc:  # the client went away mid-stream
                raise ClientGone(self.response) from exc

    async def close(self) -> web.StreamResponse:
        return await _finish_stream(self.response, self.held)


class _Schedule:
    """Absolute schedule from arrival: token k is due at ttft + k * itl, so a busy loop does
    not make the delays drift (the load benchmark's "truth")."""

    def __init__(self, t0: float, ttft_s: float, extra_s: float, itl_ms: float) -> None:
        self.t0, self.ttft_s, self.extra_s, self.itl_ms = t0, ttft_s, extra_s, itl_ms
        self.step = 0

    async def wait(self) -> None:
        target = self.t0 + self.ttft_s + self.extra_s + self.step * self.itl_ms / 1000
        self.step += 1
        now = time.monotonic()
        if target > now:
            await asyncio.sleep(target - now)


def _no_delay(request: web.Request) -> None:
    if request.transport is not None:
        with contextlib.suppress(OSError):
            sock = request.transport.get_extra_info("socket")
            if sock is not None:
                import socket as _socket

                sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)


async def _stream(
    request: web.Request,
    state: State,
    body: dict[str, Any],
    chat: bool,
    choices: list[Choice],
    prompt_tokens: int,
    completion_tokens: int,
    model_name: str,
    slot: _Slot,
) -> web.StreamResponse:
    hooks = stream_hooks(state.faults)  # the stream faults, looked up once
    cfg = state.config
    response = web.StreamResponse(
        status=200, headers={"Content-Type": hooks.content_type, "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    _no_delay(request)
    sse = _Sse(response, hooks, cfg.quirks, chat, model_name, state.faults)
    schedule = _Schedule(
        time.monotonic(),
        prefix_cache.ttft_s(cfg, slot.cached, prompt_tokens),
        _extra_delay(state),
        cfg.itl_ms,
    )
    if hooks.error_in_200:
        await sse.send(ERROR_IN_200)
        if hooks.done:
            await sse.send(DONE)
        return await sse.close()
    if chat and hooks.role_chunk:
        await sse.send(sse.chunk(",".join(sse.delta(c.index, ROLE_DELTA) for c in choices)))
    sse.first = schedule.t0 + schedule.ttft_s + schedule.extra_s
    await _stream_tokens(state, body, choices, prompt_tokens, slot, sse, schedule, request)
    if state.dead:
        await sse.send(DEAD_EVENT)
        return await sse.close()
    await _stream_tail(state, body, choices, prompt_tokens, completion_tokens, slot, sse)
    state.success += 1
    state.prompt_tokens += prompt_tokens
    state.generation_tokens += completion_tokens
    first = schedule.t0 + schedule.ttft_s + schedule.extra_s
    engine_metrics.finished(state, slot.arrival, slot.scheduled, first)
    return await sse.close()


LATE_ERROR_FAULTS = ("stream-error-dropped", "stream-error-bare-line", "stream-error-unmarked")


def _late_errors(state: State) -> bool:
    """Context errors of streamed requests are found after the 200 went out (the
    stream-late-error quirk, as engines that check the prompt in the scheduler), or mishandled
    there (the stream-error-* faults)."""
    return "stream-late-error" in state.config.quirks or any(
        f in state.faults for f in LATE_ERROR_FAULTS
    )


async def _late_error_stream(
    request: web.Request, state: State, err: ApiError, chat: bool, model_name: str
) -> web.StreamResponse:
    """A client error met once the stream has begun: the status is already 200, so the error
    travels in the stream as ``data: {"error": {...}}`` and the stream ends with [DONE]. The
    stream-error-dropped fault drops the connection instead, stream-error-bare-line writes the
    error as a bare ``error:`` line (llama.cpp before ggml-org/llama.cpp#16109),
    stream-error-unmarked as plain-text data that no client reads as an error."""
    response = web.StreamResponse(
        status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    sse = _Sse(response, StreamHooks(), state.config.quirks, chat, model_name)
    if chat:
        await sse.send(sse.chunk(sse.delta(0, ROLE_DELTA)))
    if "stream-error-dropped" in state.faults:
        if request.transport is not None:
            request.transport.abort()
        return response
    if "stream-error-bare-line" in state.faults:
        line = f"error: {json.dumps(error_body(err)['error'])}"
    elif "stream-error-unmarked" in state.faults:
        line = f"data: {err.message}"  # plain text: no error object, so no client raises
    else:
        line = f"data: {json.dumps(error_body(err))}"
    await sse.send(f"{line}\n\n".encode())
    await sse.send(DONE)
    return await sse.close()


async def _stall(response: web.StreamResponse, hooks: StreamHooks) -> None:
    if hooks.stall_s:
        await asyncio.sleep(hooks.stall_s)
    for _ in range(hooks.keepalive_pings):
        # stuck, but the SSE layer keeps pinging: no read timeout ever fires
        await response.write(b": ping\n\n")
        await asyncio.sleep(0.5)


async def _stream_tokens(
    state: State,
    body: dict[str, Any],
    choices: list[Choice],
    prompt_tokens: int,
    slot: _Slot,
    sse: _Sse,
    schedule: _Schedule,
    request: web.Request | None = None,
) -> None:
    """The token steps: each step one chunk per choice that still has something to send."""
    faults = state.faults
    top = reflogprobs.top_count(body) if body.get("logprobs") and sse.hooks.logprobs else None
    if not sse.chat and top is not None:
        top = body["logprobs"]  # legacy logprobs: K alternatives
    calls = grid_faults.strict_tools(faults, body)  # grid-strict-tool-id-repeated
    tool_deltas = {c.index: _tool_deltas(c, calls) for c in choices if c.tool_call is not None}
    answer_steps = [
        len(c.pieces) if c.tool_call is None else len(tool_deltas[c.index]) for c in choices
    ]
    # A reasoning choice streams its reasoning first (reference/reasoning.py decides the order).
    plans = [
        reasoning.stream_plan(c, n, faults) if c.reasoning else None
        for c, n in zip(choices, answer_steps, strict=True)
    ]
    steps = max(
        (len(p) if p is not None else n for p, n in zip(plans, answer_steps, strict=True)),
        default=0,
    )
    stall_at = max(1, steps // 2)
    streamed = 0
    for i in range(steps):
        if state.dead:
            break
        if livelock.stuck(state):
            await livelock.hold(request)  # generates nothing until the client hangs up
        if i == stall_at:
            await _stall(sse.response, sse.hooks)
        await schedule.wait()
        parts = []
        for c, plan in zip(choices, plans, strict=True):
            j = i  # this choice's answer step
            if plan is not None:
                kind, j = plan[i] if i < len(plan) else ("answer", steps)
                if kind != "answer":
                    assert state.reasoning is not None
                    parts.append(
                        sse.delta(c.index, reasoning.stream_delta(state.reasoning, c, (kind, j)))
                    )
                    continue
            if c.tool_call is not None:
                if j < len(tool_deltas[c.index]):
                    frag = {
                        **grid_faults.tool_delta(faults, j),
                        "tool_calls": [tool_deltas[c.index][j]],
                    }
                    parts.append(sse.delta(c.index, json.dumps(frag, ensure_ascii=False)))
                continue
            if j < len(c.pieces):
                parts += _piece_deltas(sse, c, j, top)
        for p in parts:
            # one choice per chunk, as engines do
            data = sse.chunk(p)
            if sse.hooks.non_json_step == i:
                # str(dict) instead of json.dumps
                data = b"data: " + repr(json.loads(data[6:])).encode() + b"\n\n"
            await sse.send(data)
        streamed += 1
        slot.grow(prompt_tokens + streamed)


def _piece_deltas(sse: _Sse, c: Choice, j: int, top: int | None) -> list[str]:
    """The delta(s) of a choice's answer piece ``j`` (one, or two halves under utf8-split);
    ``top`` is the top_logprobs count (legacy: K) when logprobs were asked for, else None."""
    chat = sse.chat
    piece = grid_faults.piece(sse.faults, c, j, sse.hooks.piece(j, c.pieces[j]))
    # stream-n-index-shared: every content delta says index 0 (role and finish keep theirs)
    index = 0 if sse.hooks.n_index_shared else c.index
    out: list[str] = []
    out_texts: list[str] = []  # the texts of this piece's earlier halves (utf8-split)
    for text in sse.hooks.split(piece):
        again = sse.hooks.role_in_deltas or grid_faults.role_again(sse.faults, c, j)
        role_extra = '"role":"assistant",' if again and chat else ""
        delta = (
            f'{{{role_extra}"content":{json.dumps(text, ensure_ascii=False)}}}'
            if chat
            else json.dumps(text, ensure_ascii=False)
        )
        lp = "null"
        # stream-logprobs-mismatch: each chunk carries the previous piece's logprobs (the
        # first an empty list, the last piece's never)
        k = j - 1 if sse.hooks.logprobs_lag else j
        if top is not None and chat and k < 0:
            lp = '{"content":[]}'
        elif top is not None and chat:
            logprob = c.logprobs[k] if k < len(c.logprobs) else -0.5
            token = sse.hooks.piece(k, c.pieces[k])  # what chunk k streams
            entry = reflogprobs.entry(token, logprob, top, sse.faults)
            lp = json.dumps({"content": [entry]}, ensure_ascii=False)
        elif top is not None:
            logprob = c.logprobs[j] if j < len(c.logprobs) else -0.5
            at = len("".join(sse.hooks.piece(i, p) for i, p in enumerate(c.pieces[:j])))
            at += len("".join(out_texts))
            entry = legacy.stream_logprobs(sse.faults, text, logprob, top, at)
            lp = json.dumps(entry, ensure_ascii=False)
        out_texts.append(text)
        out.append(sse.delta(index, delta, logprobs=lp))
    return out


async def _stream_tail(
    state: State,
    body: dict[str, Any],
    choices: list[Choice],
    prompt_tokens: int,
    completion_tokens: int,
    slot: _Slot,
    sse: _Sse,
) -> None:
    """Finish reasons, the usage chunk and [DONE]."""
    hooks, faults, chat = sse.hooks, state.faults, sse.chat
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    include_usage = include_usage or hooks.usage_always  # stream-usage-unasked
    timed = _timings(state, slot, sse.first, prompt_tokens, completion_tokens)
    timings = (
        json.dumps(timed) if timed is not None else ""
    )  # on the last finish chunk, as llama.cpp
    for c in choices:
        empty = "{}" if chat else '""'
        repeated = (
            json.dumps(
                _usage(prompt_tokens, completion_tokens, faults, _reasoning_tokens(state, choices))
            )
            if include_usage and hooks.usage_in_finish
            else None
        )
        reason = "stop" if hooks.length_as_stop and c.finish_reason == "length" else c.finish_reason
        reason = "stop" if hooks.tool_finish_stop and reason == "tool_calls" else reason
        last = "null" if hooks.null_final_delta and chat else empty
        await sse.send(
            sse.chunk(
                sse.delta(c.index, last, reason), repeated, timings if c is choices[-1] else ""
            )
        )
        if hooks.finish_twice or grid_faults.finish_twice(faults, c):
            await sse.send(sse.chunk(sse.delta(c.index, empty, c.finish_reason)))
        if hooks.content_after_finish:
            await sse.send(
                sse.chunk(sse.delta(c.index, '{"content":" extra"}' if chat else '" extra"'))
            )
    if include_usage:
        usage_tokens = completion_tokens + hooks.usage_extra_tokens
        usage = json.dumps(
            prefix_cache.annotate(
                _usage(prompt_tokens, usage_tokens, faults, _reasoning_tokens(state, choices)),
                slot.cached,
            )
        )
        if hooks.usage_in_choices:
            await sse.send(
                sse.chunk(sse.delta(0, "{}" if chat else '""', choices[0].finish_reason), usage)
            )
        elif hooks.usage_no_choices:
            await sse.send(sse.usage_only(usage))
        else:
            await sse.send(sse.chunk("", usage))
    if hooks.done:
        await sse.send(DONE)
    if hooks.after_done:
        await sse.send(hooks.after_done)


async def _finish_stream(response: web.StreamResponse, buffered: list[bytes]) -> web.StreamResponse:
    if buffered:
        await response.write(b"".join(buffered))
    await response.write_eof()
    return response


async def health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if "health-blocked-under-load" in state.faults:
        # A health route served by the loop that runs generation: it waits for a free moment.
        deadline = time.monotonic() + 60.0
        while state.running and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    if "health-down" in state.faults or state.dead:
        return web.json_response(
            {"error": {"message": "engine is dead", "type": "server_error", "code": 500}},
            status=500,
        )
    if (
        "health-loading-forever" in state.faults
        or time.monotonic() - state.started < state.config.loading_s
    ):
        return web.json_response(
            {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}},
            status=503,
        )
    return web.json_response({"status": "ok"})


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": _model_entries(request.app[STATE])})


async def model_entry(request: web.Request) -> web.Response:
    """GET /v1/models/{id}: the listed entry of one model, or a 404 error object."""
    state = request.app[STATE]
    wanted = request.match_info["model_id"]
    entry = next((e for e in _model_entries(state) if e.get("id") == wanted), None)
    if entry is None:
        return error_response(
            state,
            ApiError(
                404,
                f"The model `{wanted}` does not exist",
                "NotFoundError",
                "model",
                "model_not_found",
            ),
        )
    return web.json_response(entry)


def _model_entries(state: State) -> list[dict[str, Any]]:
    cfg = state.config
    names = list(cfg.models)
    if "models-missing" in state.faults:
        names = []
    if "models-wrong-name" in state.faults:
        names = [n + "-v2" for n in names]
    data = []
    for name in names:
        entry: dict[str, Any] = {
            "id": name,
            "object": "model",
            "created": state.created_at,
            "owned_by": "servecheck",
            "root": name,
            "parent": None,
        }
        if "models-no-context" not in state.faults:
            entry["max_model_len"] = cfg.max_model_len * (
                2 if "models-context-mismatch" in state.faults else 1
            )
        data.append(entry)
    data += embeddings.model_entries(state)  # the pooling models, typed as Xinference types them
    data += reflora.model_entries(state, state.created_at)  # runtime LoRA adapters (--lora)
    return data


async def tokenize(request: web.Request) -> web.Response:
    state = request.app[STATE]
    try:
        if "tokenize-500" in state.faults:
            raise ApiError(500, "internal error: tokenizer not loaded", "server_error")
        body = await read_json(request, state)
        if "messages" in body:
            messages = _validate_messages(state, body)
            count = model.count_chat_tokens(messages)
            ids = list(range(count))
        else:
            prompt = body.get("prompt", body.get("content"))
            expect(isinstance(prompt, str), "prompt must be a string", "prompt")
            ids = reftext.served_ids(state.faults, str(prompt), model.token_ids(str(prompt)))
            if body.get("add_special_tokens") is True or body.get("add_special") is True:
                ids = [legacy.BOS_ID, *ids]  # asked for specials: the BOS a prompt gets
            reftext.remember(request.app, str(prompt))  # for /detokenize
    except ApiError as err:
        return error_response(state, err)
    return web.json_response(
        {"count": len(ids), "max_model_len": state.config.max_model_len, "tokens": ids}
    )


async def version(request: web.Request) -> web.Response:
    from servecheck import __version__

    return web.json_response({"version": f"servecheck-reference {__version__}"})


async def metrics(request: web.Request) -> web.Response:
    st = request.app[STATE]
    cfg = st.config
    name = cfg.models[0]
    used = min(
        cfg.kv_blocks, st.kv_used_blocks + st.kv_leaked_blocks + prefix_cache.resident_blocks(st)
    )
    lines = [
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="{name}"}} {used / cfg.kv_blocks:.6f}',
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{engine="0",model_name="{name}"}} {st.running}',
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        f'vllm:num_requests_waiting{{engine="0",model_name="{name}"}} {st.waiting}',
        "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
        "# TYPE vllm:num_preemptions_total counter",
        f'vllm:num_preemptions_total{{engine="0",model_name="{name}"}} {st.preemptions}',
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{engine="0",model_name="{name}"}} {st.success}',
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter",
        f'vllm:prompt_tokens_total{{engine="0",model_name="{name}"}} {st.prompt_tokens}',
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        f'vllm:generation_tokens_total{{engine="0",model_name="{name}"}} {engine_metrics.generation_tokens(st)}',
        *prefix_cache.metric_lines(st),
        *engine_metrics.metric_lines(st),
    ]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8")


@web.middleware
async def auth_and_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    state = request.app[STATE]
    key = state.config.api_key
    public = request.path in ("/health", "/metrics", "/version", "/ping")
    public = public or anthropic.owns(request.path)  # it answers 401 in Anthropic's shape itself
    if key and not public and "auth-none" not in state.faults:
        header = request.headers.get("Authorization", "")
        presented = (
            header[7:]
            if header.lower().startswith("bearer ")
            else request.headers.get("X-Api-Key", "")
        )
        if not secrets.compare_digest(presented.encode(), key.encode()):
            message = (
                "Invalid API key"
                if presented
                else "Missing API key: send 'Authorization: Bearer <key>'"
            )
            if "auth-echo-key" in state.faults and presented:
                message = f"Invalid API key: {presented}"
            return web.json_response(
                {
                    "error": {
                        "message": message,
                        "type": "authentication_error",
                        "param": None,
                        "code": "invalid_api_key",
                    }
                },
                status=401,
            )
    try:
        return await handler(request)
    except web.HTTPNotFound:
        if "err-route-html" in state.faults:
            # a web UI's catch-all (or a reverse proxy's error page) answering for the API
            return web.Response(
                status=404,
                text="<html><body><h1>404 Not Found</h1></body></html>",
                content_type="text/html",
            )
        return web.json_response(
            {
                "error": {
                    "message": f"route {request.method} {request.path} not found",
                    "type": "not_found_error",
                    "param": None,
                    "code": 404,
                }
            },
            status=404,
        )
    except web.HTTPMethodNotAllowed:
        return web.json_response(
            {
                "error": {
                    "message": f"method {request.method} not allowed on {request.path}",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": 405,
                }
            },
            status=405,
        )


def build_app(config: ServerConfig) -> web.Application:
    unknown = set(config.faults) - set(FAULTS) | set(config.quirks) - set(QUIRKS)
    if unknown:
        raise ValueError(f"unknown fault(s): {', '.join(sorted(unknown))}")
    app = web.Application(middlewares=[auth_and_errors], client_max_size=64 * 1024 * 1024)
    state = State(config)
    app[STATE] = state

    async def on_startup(app: web.Application) -> None:
        state.sem = asyncio.Semaphore(_running_slots(config))
        state.started = time.monotonic()

    app.on_startup.append(on_startup)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    if "models-retrieve-missing" not in config.faults:
        app.router.add_get("/v1/models/{model_id:.+}", model_entry)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/version", version)
    app.router.add_post("/tokenize", tokenize)
    embeddings.register(app)
    if config.lora:
        reflora.register(app)
    if config.prefix_cache_blocks > 0:
        prefix_cache.register(app)
    reftext.register(app)
    responses.install(app)
    anthropic.install(app)
    overload.install(app, config.max_inflight, config.faults, lambda: setattr(state, "dead", True))
    refdrain.install(app, frozenset(config.faults))
    return app


def serve(
    config: ServerConfig, host: str = "127.0.0.1", port: int = 8000, ready_file: str | None = None
) -> None:
    """Run until SIGTERM/SIGINT. Writes the bound port to ``ready_file`` once listening (port 0 = any)."""
    app = build_app(config)

    async def main() -> None:
        faults = frozenset(config.faults)
        runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=refdrain.shutdown_timeout(faults),
        )
        await runner.setup()
        site = web.TCPSite(runner, host, port, backlog=2048, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:  # a busy port, an address this host does not have
            await runner.cleanup()
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise UsageError(f"cannot listen on {host}:{port}: {reason}") from None
        bound = port
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            bound = server.sockets[0].getsockname()[1]
        if ready_file:
            tmp = ready_file + ".tmp"
            with open(tmp, "w") as fh:
                fh.write(str(bound))
            os.replace(tmp, ready_file)
        print(
            f"servecheck reference server on http://{host}:{bound}/v1 (models: {', '.join(config.models)};"
            f" faults: {', '.join(sorted(config.faults)) or 'none'})",
            flush=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await refdrain.drain(app, runner, faults)  # in-flight requests finish (reference/drain.py)

    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())


__all__ = ["ServerConfig", "build_app", "serve"]
