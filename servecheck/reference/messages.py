"""The reference server's ``POST /v1/messages`` (the Anthropic Messages API) and its
``POST /v1/messages/count_tokens``.

Served beside chat completions by :func:`install` (called from ``server.build_app``). It speaks
what clients of the Messages API rely on: a ``message`` object with content blocks (``text``,
``tool_use``, ``thinking`` when the reference runs its reasoning mode and the request enables
thinking), ``stop_reason`` ``end_turn`` / ``max_tokens`` / ``stop_sequence`` (naming the
sequence) / ``tool_use``, usage ``input_tokens`` / ``output_tokens``, ``system`` as a string or
text blocks, tools with ``input_schema`` and ``tool_choice`` auto / any / tool / none,
``tool_result`` turns, ``image`` blocks with a base64 source in user turns (read and counted
by :mod:`servecheck.reference.vision` under ``--vision``, refused with a 400 by the text-only
default), the named event stream (``message_start`` ... ``message_stop``, with a
``ping``), errors in Anthropic's shape (``{"type": "error", "error": {...}}``), and the key in
``x-api-key`` or ``Authorization: Bearer`` (the server's auth middleware leaves these routes to
this module, so its 401 is Anthropic-shaped too). Every ``messages-*`` fault in
:mod:`servecheck.reference.faults` switches one defect on here, and only here.

Generation reuses the reference model (:mod:`servecheck.reference.model`): the same conversation
gives the same text at temperature 0, streamed or not.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from aiohttp import web

from servecheck.reference import agent, agent_sized, grid_faults, model, vision
from servecheck.reference.http import (
    STATE,
    ApiError,
    State,
    check_ready,
    error_response,
    expect,
    is_int,
    is_num,
    read_json,
    write_event,
)

# HTTP status -> Anthropic's error type (https://docs.anthropic.com/en/api/errors)
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}
PREFIX = "/v1/messages"
ROLES = ("user", "assistant", "system")  # system: Claude Code sends one inside messages
# The request fields of the Messages API: messages-extra-fields-rejected refuses any other, as a
# server whose request model forbids extra fields does (the agent clients' newer fields).
KNOWN_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "thinking",
        "metadata",
        "service_tier",
    }
)
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"  # messages-thinking-leak


def _fault(state: State, name: str) -> bool:
    return name in state.faults


def owns(path: str) -> bool:
    """Whether this module answers ``path`` (and authenticates it itself)."""
    return path == PREFIX or path.startswith(PREFIX + "/")


def error_answer(state: State, err: ApiError) -> web.Response:
    """An error in Anthropic's shape (messages-error-openai-shape: in OpenAI's)."""
    if _fault(state, "messages-error-openai-shape"):
        return error_response(state, err)
    kind = ERROR_TYPES.get(
        err.status, "api_error" if err.status >= 500 else "invalid_request_error"
    )
    body = {"type": "error", "error": {"type": kind, "message": err.message}}
    return web.json_response(body, status=err.status)


def _authenticate(request: web.Request, state: State) -> None:
    key = state.config.api_key
    if not key or _fault(state, "messages-auth-off") or "auth-none" in state.faults:
        return
    header = request.headers.get("Authorization", "")
    presented = header[7:] if header.lower().startswith("bearer ") else ""
    if not presented and not _fault(state, "messages-x-api-key-ignored"):
        presented = request.headers.get("X-Api-Key", "")
    if not secrets.compare_digest(presented.encode(), key.encode()):
        raise ApiError(
            401,
            "invalid x-api-key"
            if presented
            else "missing API key: send x-api-key (or a Bearer token)",
        )


@dataclass(slots=True)
class Turn:
    """A validated request, reduced to what generation needs."""

    messages: list[dict[str, Any]]  # chat-style (system first), for the count and the key
    tools: list[dict[str, Any]]
    choice: dict[str, Any]
    max_tokens: int
    stops: list[str]
    thinking: bool
    body: dict[str, Any] = field(default_factory=dict)
    images: list[tuple[int, str]] = field(default_factory=list)  # (prompt tokens, digest) each


def _text_blocks(value: Any, where: str) -> str:
    """The text of a string or of a non-empty list of text blocks."""
    if isinstance(value, str):
        return value
    ok = (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
            for b in value
        )
    )
    expect(ok, f"{where} must be a string or a list of text blocks", where)
    return "\n".join(b["text"] for b in value)


def _block(
    state: State, role: str, block: Any, where: str, ids: list[str]
) -> dict[str, Any] | None:
    """One content block as a chat-style message part (None: nothing for the prompt)."""
    expect(isinstance(block, dict), f"{where} must be an object", where)
    kind = block.get("type")
    if kind == "text":
        expect(isinstance(block.get("text"), str), f"{where}.text must be a string", where)
        return {"role": role, "content": block["text"]}
    if kind == "tool_use" and role == "assistant":
        ok = (
            isinstance(block.get("id"), str)
            and isinstance(block.get("name"), str)
            and isinstance(block.get("input"), dict)
        )
        expect(ok, f"{where}: a tool_use block needs id, name and an input object", where)
        ids.append(block["id"])
        return {"role": "assistant", "content": block["name"] + json.dumps(block["input"])}
    if kind == "tool_result" and role == "user":
        if _fault(state, "messages-tool-result-rejected"):
            raise ApiError(400, f"{where}: unsupported content block type 'tool_result'")
        expect(
            isinstance(block.get("tool_use_id"), str),
            f"{where}.tool_use_id must be a string",
            where,
        )
        expect(
            block["tool_use_id"] in ids,
            f"{where}.tool_use_id {block['tool_use_id']!r} answers no earlier tool_use block",
            where,
        )
        content = block.get("content", "")
        text = content if content == "" else _text_blocks(content, f"{where}.content")
        return {"role": "tool", "content": text}
    if kind in ("thinking", "redacted_thinking") and role == "assistant":
        return None  # earlier thinking is not part of the prompt
    raise ApiError(400, f"{where}.type {kind!r} is not a content block this model accepts here")


def _messages(
    state: State, body: dict[str, Any], images: list[tuple[int, str]]
) -> list[dict[str, Any]]:
    raw = body.get("messages")
    expect(
        isinstance(raw, list) and bool(raw),
        "messages: a non-empty list of {role, content} is required",
        "messages",
    )
    assert isinstance(raw, list)  # noqa: S101 - expect() raised otherwise
    out: list[dict[str, Any]] = []
    ids: list[str] = []
    for i, msg in enumerate(raw):
        where = f"messages.{i}"
        expect(isinstance(msg, dict), f"{where} must be an object", where)
        role = msg.get("role")
        if role == "system" and _fault(state, "messages-system-role-rejected"):
            raise ApiError(400, f"{where}.role must be user or assistant, got 'system'")
        expect(
            role in ROLES, f"{where}.role must be user, assistant or system, got {role!r}", where
        )
        content = msg.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        expect(
            isinstance(content, list),
            f"{where}.content must be a string or a list of blocks",
            where,
        )
        for k, block in enumerate(content):
            if isinstance(block, dict) and block.get("type") == "image" and role == "user":
                images.append(vision.messages_image(state, f"{where}.content.{k}", block))
                continue
            part = _block(state, role, block, f"{where}.content.{k}", ids)
            if part is not None:
                out.append(part)
    return out


def _system(state: State, body: dict[str, Any]) -> list[dict[str, Any]]:
    system = body.get("system")
    if system is None:
        return []
    if isinstance(system, list) and _fault(state, "messages-system-blocks-rejected"):
        raise ApiError(400, "system: Input should be a valid string")
    text = _text_blocks(system, "system")
    if _fault(state, "messages-system-dropped") or text == "":
        return []
    return [{"role": "system", "content": text}]


def _tools(body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    tools = body.get("tools") or []
    expect(isinstance(tools, list), "tools must be a list", "tools")
    for i, tool in enumerate(tools):
        expect(
            isinstance(tool, dict)
            and isinstance(tool.get("name"), str)
            and isinstance(tool.get("input_schema"), dict),
            f"tools.{i} must be {{name, input_schema}}",
            "tools",
        )
        try:
            jsonschema.Draft202012Validator.check_schema(tool["input_schema"])
        except jsonschema.SchemaError as exc:
            raise ApiError(
                400, f"tools.{i}.input_schema is not a valid JSON Schema: {exc.message}"
            ) from None
    choice = body.get("tool_choice") or {"type": "auto"}
    expect(
        isinstance(choice, dict) and choice.get("type") in ("auto", "any", "tool", "none"),
        "tool_choice must be {type: auto | any | tool | none}",
        "tool_choice",
    )
    if choice["type"] == "tool":
        names = [t["name"] for t in tools]
        expect(
            choice.get("name") in names,
            f"tool_choice names {choice.get('name')!r}, which is not in tools",
            "tool_choice",
        )
    expect(choice["type"] in ("auto", "none") or bool(tools), "tool_choice needs tools", "tools")
    return tools, choice


def _thinking(state: State, body: dict[str, Any], max_tokens: int) -> bool:
    thinking = body.get("thinking")
    if thinking is None:
        return False
    kinds: tuple[str, ...] = ("enabled", "disabled", "adaptive")
    if _fault(state, "messages-thinking-adaptive-rejected"):
        kinds = ("enabled", "disabled")
    expect(
        isinstance(thinking, dict) and thinking.get("type") in kinds,
        f"thinking must be {{type: enabled, budget_tokens}} or {{type: {' | '.join(kinds[1:])}}}",
        "thinking",
    )
    if thinking["type"] == "disabled":
        return False
    if thinking["type"] == "adaptive":  # the model picks its own budget (Claude Code's default)
        return state.reasoning is not None
    budget = thinking.get("budget_tokens")
    expect(
        is_int(budget) and 1024 <= budget < max_tokens,
        "thinking.budget_tokens must be an integer >= 1024 and less than max_tokens",
        "thinking",
    )
    return state.reasoning is not None


def _validate(state: State, body: dict[str, Any], count_only: bool = False) -> Turn:
    name = body.get("model")
    expect(isinstance(name, str) and name != "", "model: a string is required", "model")
    if name not in state.config.models:
        raise ApiError(404, f"model: {name}")
    extra = sorted(set(body) - KNOWN_FIELDS)
    if extra and _fault(state, "messages-extra-fields-rejected"):
        raise ApiError(400, f"{extra[0]}: Extra inputs are not permitted")
    max_tokens: Any = 1 if count_only else body.get("max_tokens")
    expect(
        is_int(max_tokens) and max_tokens >= 1,
        "max_tokens: an integer >= 1 is required",
        "max_tokens",
    )
    temperature = body.get("temperature")
    expect(
        temperature is None or (is_num(temperature) and 0 <= temperature <= 1),
        "temperature must be a number between 0 and 1",
        "temperature",
    )
    stops = body.get("stop_sequences") or []
    expect(
        isinstance(stops, list) and all(isinstance(s, str) and s for s in stops),
        "stop_sequences must be a list of non-empty strings",
        "stop_sequences",
    )
    stream = body.get("stream", False)
    expect(isinstance(stream, bool), "stream must be a boolean", "stream")
    images: list[tuple[int, str]] = []
    messages = _system(state, body) + _messages(state, body, images)
    tools, choice = _tools(body)
    thinking = False if count_only else _thinking(state, body, max_tokens)
    return Turn(messages, tools, choice, max_tokens, stops, thinking, body, images)


def input_tokens(turn: Turn) -> int:
    """The prompt's tokens: the chat-style messages and tools, plus each image block's."""
    chat_tools = [{"type": "function", "function": t} for t in turn.tools]
    images = sum(tokens for tokens, _ in turn.images)
    return model.count_chat_tokens(turn.messages, chat_tools) + images


@dataclass(slots=True)
class Output:
    thinking: list[str]
    pieces: list[str]
    call: dict[str, Any] | None  # {"id", "name", "input"}
    stop_reason: str
    stop_sequence: str | None
    input_tokens: int
    output_tokens: int


def _target_tool(state: State, turn: Turn) -> dict[str, Any] | None:
    kind = turn.choice["type"]
    if kind == "any" and _fault(state, "messages-tool-choice-any-ignored"):
        kind = "auto"
    if kind == "none" and _fault(state, "messages-tool-choice-none-ignored"):
        kind = "auto"
    if not turn.tools or kind == "none":
        return None
    if kind == "tool":
        if _fault(state, "messages-tool-choice-tool-as-any"):
            return turn.tools[0]
        return next(t for t in turn.tools if t["name"] == turn.choice["name"])
    if kind == "any":
        return turn.tools[0]
    last = turn.messages[-1] if turn.messages else {}
    if last.get("role") == "tool":
        return None
    if agent.wants_call(state.config.agent, turn.messages):
        return agent.first_loaded(turn.tools)
    return next((t for t in turn.tools if t["name"] in str(last.get("content", ""))), None)


def _text(turn: Turn, key: str, limit: int) -> tuple[list[str], str, str | None]:
    """The answer pieces, the stop reason and the stop sequence that ended them."""
    temperature = turn.body.get("temperature")
    temperature = 1.0 if temperature is None else float(temperature)
    gen = model.generate_text(
        key, max_tokens=10**6, seed=None, temperature=temperature, fresh=temperature > 0
    )
    pieces, reason, matched = gen.pieces, "end_turn", None
    text = gen.text
    found = [(text.find(s), s) for s in turn.stops if text.find(s) >= 0]
    if found:
        cut, matched = min(found)
        pieces, reason = model.cut_pieces(pieces, cut), "stop_sequence"
    if len(pieces) > limit:
        pieces, reason, matched = pieces[:limit], "max_tokens", None
    return pieces, reason, matched


def generate(state: State, turn: Turn) -> Output:
    cfg = state.config
    prompt = input_tokens(turn)
    if prompt > cfg.max_model_len:
        raise ApiError(
            400,
            f"prompt is too long: {prompt} tokens > {cfg.max_model_len} maximum",
        )
    agent_sized.screen(state.faults, turn.messages)  # agent-system-500
    limit = min(turn.max_tokens, max(cfg.max_model_len - prompt, 1))
    key = "messages\x00" + json.dumps(turn.messages, sort_keys=True, ensure_ascii=False)
    key += "".join("\x00" + digest for _, digest in turn.images)  # another image, another answer
    thought: list[str] = []
    if turn.thinking and state.reasoning is not None:
        thought = model.generate_text(
            key + "\x00think",
            max_tokens=state.reasoning.tokens,
            seed=None,
            temperature=0.0,
            ignore_eos=True,
        ).pieces[:limit]
        limit -= len(thought)
        if limit <= 0:
            return Output(thought, [], None, "max_tokens", None, prompt, len(thought))
    if agent_sized.empty_answer(state.faults, turn.tools):  # agent-tools-stop-empty
        return Output(thought, [], None, "end_turn", None, prompt, max(1, len(thought)))
    target = _target_tool(state, turn)
    if target is not None:
        args = agent.arguments(
            cfg.agent, target["input_schema"], model.json_key_rng(key, None), turn.messages
        )
        tokens = max(1, len(model.tokenize(json.dumps(args))))
        if tokens <= limit:
            call = {"id": "toolu_" + secrets.token_hex(12), "name": target["name"], "input": args}
            return Output(thought, [], call, "tool_use", None, prompt, len(thought) + tokens)
    pieces, reason, matched = _text(turn, key, limit)
    return Output(thought, pieces, None, reason, matched, prompt, len(thought) + len(pieces))


def _stop_fields(state: State, out: Output) -> tuple[str, str | None]:
    reason, matched = out.stop_reason, out.stop_sequence
    if reason == "stop_sequence" and _fault(state, "messages-stop-sequence-unnamed"):
        return "end_turn", None
    if reason == "max_tokens" and _fault(state, "messages-cut-as-end-turn"):
        return "end_turn", None
    if reason == "tool_use" and _fault(state, "messages-tool-stop-end-turn"):
        return "end_turn", None
    if _fault(state, "messages-stop-reason-openai"):
        openai = {"end_turn": "stop", "max_tokens": "length", "stop_sequence": "stop"}
        return openai.get(reason, "tool_calls"), matched
    return reason, matched


def _usage(state: State, out: Output) -> dict[str, int]:
    output = out.output_tokens
    if _fault(state, "messages-usage-wrong"):
        output += out.input_tokens  # the whole exchange reported as output
    return {**_input_usage(state, out.input_tokens), "output_tokens": output}


def _input_usage(state: State, count: int) -> dict[str, int]:
    """input_tokens, or (the messages-cache-read quirk) all but one of them as cache reads, as
    llama.cpp and LiteLLM report a prompt whose prefix their cache held."""
    if "messages-cache-read" in state.config.quirks and count > 1:
        return {"input_tokens": 1, "cache_read_input_tokens": count - 1}
    return {"input_tokens": count}


def _call_input(state: State, call: dict[str, Any], schema: dict[str, Any]) -> Any:
    value = dict(call["input"])
    if _fault(state, "messages-tool-input-invalid"):
        for name in schema.get("required") or []:
            value.pop(name, None)  # a required property left out
        value["servecheck_extra"] = 1
    if _fault(state, "messages-tool-input-string"):
        return json.dumps(value)  # the arguments string of OpenAI's shape, not an object
    return value


def thinking_text(out: Output) -> str:
    return "".join(out.thinking)


def _signature(out: Output) -> str:
    return "sig_" + secrets.token_hex(8) if out.thinking else ""


def content_blocks(state: State, turn: Turn, out: Output) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    text = "".join(out.pieces)
    if out.thinking and _fault(state, "messages-thinking-leak"):
        text = THINK_OPEN + thinking_text(out) + THINK_CLOSE + text  # no parser: raw output
    elif out.thinking:
        blocks.append(
            {"type": "thinking", "thinking": thinking_text(out), "signature": _signature(out)}
        )
    if out.call is not None:
        schema = next(t["input_schema"] for t in turn.tools if t["name"] == out.call["name"])
        blocks.append(
            {
                "type": "tool_use",
                "id": out.call["id"],
                "name": out.call["name"],
                "input": _call_input(state, out.call, schema),
            }
        )
    else:
        blocks.append({"type": "text", "text": text})
    return blocks


def message(
    state: State, turn: Turn, msg_id: str, content: list[dict[str, Any]], out: Output | None
) -> dict[str, Any]:
    """The message object: whole (``out`` given) or message_start's empty one."""
    reason, matched = _stop_fields(state, out) if out is not None else (None, None)
    usage = (
        _usage(state, out)
        if out is not None
        else {**_input_usage(state, input_tokens(turn)), "output_tokens": 1}
    )
    msg: dict[str, Any] = {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": turn.body["model"],
        "content": content,
        "stop_reason": reason,
        "stop_sequence": matched,
        "usage": usage,
    }
    if out is not None and _fault(state, "messages-content-string"):
        msg["content"] = "".join(b.get("text", "") for b in content)
    if "extra-fields" in state.config.quirks:
        msg["x_servecheck_extra"] = {"note": "ignore me"}
    return msg


async def handle(request: web.Request) -> web.StreamResponse:
    """POST /v1/messages."""
    state = request.app[STATE]
    try:
        _authenticate(request, state)
        check_ready(state)
        body = await read_json(request, state)
        turn = _validate(state, body)
        out = generate(state, turn)
    except ApiError as err:
        return error_answer(state, err)
    msg_id = "msg_" + secrets.token_hex(12)
    state.request_count += 1
    if body.get("stream"):
        return await _stream(request, state, turn, out, msg_id)
    cfg = state.config
    steps = len(out.thinking) + len(out.pieces)
    await asyncio.sleep((cfg.ttft_ms + cfg.itl_ms * max(steps - 1, 0)) / 1000)
    state.success += 1
    state.prompt_tokens += out.input_tokens
    state.generation_tokens += out.output_tokens
    resp = message(state, turn, msg_id, content_blocks(state, turn, out), out)
    return web.json_response(resp, dumps=lambda o: json.dumps(o, ensure_ascii=False))


async def count_tokens(request: web.Request) -> web.Response:
    """POST /v1/messages/count_tokens: the input_tokens /v1/messages would report."""
    state = request.app[STATE]
    try:
        _authenticate(request, state)
        check_ready(state)
        body = await read_json(request, state)
        turn = _validate(state, body, count_only=True)
    except ApiError as err:
        return error_answer(state, err)
    count = input_tokens(turn)
    if _fault(state, "messages-count-tokens-wrong"):
        count = model.count_chat_tokens([m for m in turn.messages if m["role"] != "system"])
    return web.json_response({"input_tokens": count})


Emit = Callable[..., Awaitable[None]]


async def _block_events(
    state: State,
    turn: Turn,
    out: Output,
    emit: Emit,
    tick: Callable[[], Awaitable[None]],
) -> list[tuple[int, dict[str, Any]]]:
    """The content blocks' start and delta events; returns the (index, stop event) still owed."""
    blocks = content_blocks(state, turn, out)
    owed: list[tuple[int, dict[str, Any]]] = []
    for index, block in enumerate(blocks):
        kind = block["type"]
        empty = {
            "text": {"type": "text", "text": ""},
            "thinking": {"type": "thinking", "thinking": "", "signature": ""},
            "tool_use": {**block, "input": {}},
        }[kind]
        await emit("content_block_start", index=index, content_block=empty)
        for delta in _deltas(state, out, block):
            await tick()
            await emit("content_block_delta", index=index, delta=delta)
        stop = {"index": index}
        if _fault(state, "messages-stream-order-wrong"):
            owed.append((index, stop))  # closed only after message_delta
        else:
            await emit("content_block_stop", **stop)
    return owed


def _deltas(state: State, out: Output, block: dict[str, Any]) -> list[dict[str, Any]]:
    kind = block["type"]
    if kind == "thinking":
        return [{"type": "thinking_delta", "thinking": p} for p in out.thinking] + [
            {"type": "signature_delta", "signature": block["signature"]}
        ]
    if kind == "tool_use":
        raw = block["input"]
        text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
        pieces = model.split_json(json.dumps(text) if isinstance(raw, str) else text, 6)
        if _fault(state, "messages-stream-tool-json-broken") and len(pieces) > 1:
            del pieces[1]
        return [{"type": "input_json_delta", "partial_json": p} for p in pieces]
    pieces = list(out.pieces)
    if block["text"] != "".join(pieces):  # a leak fault put more in the block: stream it whole
        pieces = [block["text"]]
    if _fault(state, "messages-stream-differs") and len(pieces) > 1:
        pieces[1] = pieces[1].upper() + "!"
    return [{"type": "text_delta", "text": p} for p in pieces]


async def _stream(
    request: web.Request, state: State, turn: Turn, out: Output, msg_id: str
) -> web.StreamResponse:
    cfg = state.config
    response = web.StreamResponse(
        status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    quirks = cfg.quirks
    named = not _fault(state, "messages-stream-no-event-names")

    async def emit(kind: str, **fields: Any) -> None:
        event = {"type": kind, **fields}
        line = f"data: {json.dumps(event, ensure_ascii=False)}\n\n"
        await write_event(response, quirks, ((f"event: {kind}\n" if named else "") + line).encode())

    async def tick() -> None:
        if cfg.itl_ms:
            await asyncio.sleep(cfg.itl_ms / 1000)

    await asyncio.sleep(cfg.ttft_ms / 1000)
    start = message(state, turn, msg_id, [], None)
    start["usage"] = grid_faults.messages_input_usage(state.faults, turn.body, start["usage"])
    await emit("message_start", message=start)
    await emit("ping")
    owed = await _block_events(state, turn, out, emit, tick)
    reason, matched = _stop_fields(state, out)
    usage = _usage(state, out)
    if _fault(state, "messages-stream-usage-wrong"):
        usage = {**usage, "output_tokens": usage["output_tokens"] + 3}
    for _ in range(1 + grid_faults.messages_stop_twice(state.faults)):
        await emit(
            "message_delta",
            delta={"stop_reason": reason, "stop_sequence": matched},
            usage={"output_tokens": usage["output_tokens"]},
        )
    for _index, stop in owed:
        await emit("content_block_stop", **stop)
    if not _fault(state, "messages-stream-no-message-stop"):
        await emit("message_stop")
    state.success += 1  # counted as the non-streamed answer is: load's server-counter check
    state.prompt_tokens += out.input_tokens
    state.generation_tokens += out.output_tokens
    await response.write_eof()
    return response


def install(app: web.Application) -> None:
    """Add the Messages API routes to the reference server."""
    app.router.add_post(PREFIX, handle)
    app.router.add_post(PREFIX + "/count_tokens", count_tokens)
