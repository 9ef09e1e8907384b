"""MESSAGES-*: the Anthropic Messages API (``POST /v1/messages``) as coding agents call it.

Bodies are read as the anthropic SDK's own types describe them (``anthropic.types.Message``;
the strict schema profile validates every body and stream event against them too): content is a
list of blocks, ``stop_reason`` is ``end_turn`` / ``max_tokens`` / ``stop_sequence`` /
``tool_use``, usage counts ``input_tokens`` and ``output_tokens``, the stream is a sequence of
named events (``message_start``, ``content_block_start`` / ``_delta`` / ``_stop`` per block,
``message_delta`` with the stop reason and usage, ``message_stop``; ``ping`` anywhere) and
errors are ``{"type": "error", "error": {"type", "message"}}``.

Every request carries ``anthropic-version`` and is made at temperature 0; the key goes the way
the target declares it (MESSAGES-AUTH alone sends it in ``x-api-key``, as the SDK does).
``tool_choice: auto`` is judged on the shape of whatever comes back (a random-weight model
rarely calls a tool by itself); ``any`` and a named tool must produce the call, and are sent with
``disable_parallel_tool_use: true`` as TOOLS-* send ``parallel_tool_calls: false`` (vLLM 0.32
otherwise piles calls up until max_tokens and answers an empty text block, measured 2026-12-02).
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeGuard

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.preconditions import ANTHROPIC_VERSION
from servecheck.checks.registry import check
from servecheck.checks.surfaces.auth import AUTH_STATUSES, _real_key
from servecheck.checks.surfaces.reason import ALWAYS_MARKERS, settings
from servecheck.client.http import Exchange

ROUTE = "/messages"
NEEDS = ("messages", "route-accepts:/messages")
TOOL_NEEDS = ("messages", "tools", "route-accepts:/messages")
MAX_TOKENS = 24
CUT = 3
TOOL_MAX_TOKENS = 64
PROMPT = "Name three colours."
LONG_PROMPT = "Write a long story about a river, a stone and a garden."
STOP_PROMPT = "List some words about rivers, stones and gardens."
SYSTEM = (
    "You are a terse assistant for a paint shop. Answer in one short line, lower case, "
    "and never mention prices, brands or delivery times."
)
EXTRA = (
    "amber basil cedar dune ember fjord grove heron iris juniper kelp lotus moss nectar "
    "olive pebble quartz reed sage thyme"
)
STOP_REASONS = ("end_turn", "max_tokens", "stop_sequence", "tool_use")
ERROR_TYPES = (
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "overloaded_error",
)
WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
CLOCK: dict[str, Any] = {
    "name": "get_time",
    "description": "Current time in a zone",
    "input_schema": {
        "type": "object",
        "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
        "required": ["zone"],
        "additionalProperties": False,
    },
}
TOOLS = [WEATHER, CLOCK]
# One tool where one is enough: chat templates render each tool into the prompt (llama.cpp's, on
# the tiny model: ~240 tokens a tool), and 512-token slots leave a cut call otherwise.
ONE_TOOL = [WEATHER]
SCHEMAS: dict[str, Any] = {t["name"]: t["input_schema"] for t in TOOLS}
ONE_CALL = {"disable_parallel_tool_use": True}
TOOL_PROMPT = "Use get_weather: what is the weather in Paris?"
HINT_ROUTE = (
    "serve the Anthropic Messages API at /v1/messages (LiteLLM's proxy does; vLLM and llama.cpp "
    "server in recent releases) or declare capabilities: {messages: false}"
)


def request_body(ctx: CheckContext, prompt: Any = PROMPT, **params: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    body: dict[str, Any] = {
        "model": ctx.model,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "messages": messages,
    }
    body.update(params)
    return {k: v for k, v in body.items() if v is not None}


def send(ctx: CheckContext, body: dict[str, Any], **kw: Any) -> Exchange:
    headers = {**ANTHROPIC_VERSION, **(kw.pop("headers", None) or {})}
    return ctx.post(ROUTE, body, headers=headers, **kw)


def create(
    ctx: CheckContext, prompt: Any = PROMPT, **params: Any
) -> tuple[dict[str, Any], Exchange]:
    """A non-streamed message as a JSON object, or a failure saying what came back."""
    ex = send(ctx, request_body(ctx, prompt, **params))
    if ex.status == 404 and not ex.error:
        ctx.fail(
            "POST /v1/messages does not exist here",
            expected="HTTP 200 with a message object",
            received=ex.describe(300),
            exchange=ex,
            hint=HINT_ROUTE,
        )
    return ctx.ok_json(ex, "POST /v1/messages"), ex


def events_of(ctx: CheckContext, ex: Exchange, what: str) -> list[tuple[str, Any]]:
    """(SSE event name, parsed data) of every event of a completed 200 stream."""
    ctx.ok_stream(ex, what)
    assert ex.stream is not None  # noqa: S101 - ok_stream guarantees it
    out: list[tuple[str, Any]] = []
    for event in ex.stream.events:
        try:
            data = json.loads(event.data)
        except ValueError:
            data = event.data
        out.append((event.event, data))
    return out


def stream(
    ctx: CheckContext, prompt: Any = PROMPT, **params: Any
) -> tuple[list[tuple[str, Any]], Exchange]:
    ex = send(ctx, request_body(ctx, prompt, stream=True, **params), stream=True)
    return events_of(ctx, ex, "streamed POST /v1/messages"), ex


def blocks(data: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    content = data.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def text_of(data: dict[str, Any]) -> str:
    return "".join(str(b.get("text", "")) for b in blocks(data, "text"))


def usage_of(data: dict[str, Any]) -> dict[str, Any]:
    usage = data.get("usage")
    return usage if isinstance(usage, dict) else {}


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


CACHE_KEYS = ("cache_read_input_tokens", "cache_creation_input_tokens")


def prompt_tokens(usage: dict[str, Any]) -> Any:
    """The whole prompt's tokens: input_tokens plus the cache reads and writes, which the API
    counts apart (llama.cpp and LiteLLM report a cached prefix as cache_read_input_tokens)."""
    value = usage.get("input_tokens")
    if not _count(value):
        return value
    return value + sum(v for v in (usage.get(k) for k in CACHE_KEYS) if _count(v))


def sdk_problems(data: Any) -> list[str]:
    """Where ``data`` does not parse as the SDK's ``Message`` (empty when it does)."""
    import pydantic
    from anthropic.types import Message

    try:
        Message.model_validate(data)
    except pydantic.ValidationError as exc:
        return [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:6]]
    return []


def shape_problems(data: dict[str, Any]) -> list[str]:
    """Every way a non-streamed body departs from a Messages API message."""
    problems: list[str] = []
    if not (isinstance(data.get("id"), str) and data["id"]):
        problems.append(f"id {data.get('id')!r} is not a non-empty string")
    if data.get("type") != "message":
        problems.append(f"type {data.get('type')!r} is not 'message'")
    if data.get("role") != "assistant":
        problems.append(f"role {data.get('role')!r} is not 'assistant'")
    content = data.get("content")
    if not isinstance(content, list) or not content:
        problems.append(f"content is {type(content).__name__}, not a non-empty list of blocks")
    elif not all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in content):
        problems.append("a content block is not an object with a type")
    reason = data.get("stop_reason")
    if reason not in STOP_REASONS:
        problems.append(f"stop_reason {reason!r} is not one of {', '.join(STOP_REASONS)}")
    if reason != "stop_sequence" and data.get("stop_sequence") is not None:
        problems.append(f"stop_sequence {data.get('stop_sequence')!r} without a stop_sequence end")
    usage = usage_of(data)
    for key in ("input_tokens", "output_tokens"):
        if not _count(usage.get(key)):
            problems.append(f"usage.{key} {usage.get(key)!r} is not a non-negative integer")
    problems += [f"SDK: {p}" for p in sdk_problems(data)]
    return problems


@check(
    "MESSAGES-SHAPE",
    "a non-streamed /v1/messages answer is a Messages API message",
    "id (string), type 'message', role 'assistant', content a non-empty list of typed blocks with "
    "a text block, stop_reason from end_turn / max_tokens / stop_sequence / tool_use, stop_sequence "
    "null unless a stop sequence ended it, usage input_tokens and output_tokens integers; the body "
    "parses as anthropic.types.Message",
    requires=NEEDS,
)
def messages_shape(ctx: CheckContext) -> None:
    data, ex = create(ctx)
    problems = shape_problems(data)
    if not blocks(data, "text"):
        problems.append("no text block in content")
    ctx.expect(
        not problems,
        "the answer is not a Messages API message",
        expected="{id, type: message, role: assistant, content: [{type: text, text}], model, "
        "stop_reason, stop_sequence, usage: {input_tokens, output_tokens}}",
        received="; ".join(problems) + f" -- body {body_snippet(data, 300)}",
        exchange=ex,
        hint="the anthropic SDK and agents read content[i].type and stop_reason from this set",
    )


@check(
    "MESSAGES-STOP-MAX-TOKENS",
    "a cut by max_tokens says stop_reason max_tokens",
    f"max_tokens {CUT} on a prompt asking for a long story gives stop_reason 'max_tokens', "
    f"usage.output_tokens {CUT} and a non-empty text (or thinking) block",
    requires=NEEDS,
)
def messages_stop_max_tokens(ctx: CheckContext) -> None:
    data, ex = create(ctx, LONG_PROMPT, max_tokens=CUT)
    reason = data.get("stop_reason")
    output = usage_of(data).get("output_tokens")
    if reason == "end_turn" and _count(output) and output < CUT:
        raise CheckSkipped(f"{ctx.check_id}: the model ended after {output} tokens, before the cut")
    ctx.expect(
        reason == "max_tokens",
        "an answer cut by max_tokens does not say stop_reason 'max_tokens'",
        expected=f"stop_reason 'max_tokens' (max_tokens {CUT})",
        received=f"stop_reason {reason!r}, output_tokens {output!r}, text {text_of(data)!r}",
        exchange=ex,
        hint="clients continue a cut answer only when they see max_tokens; end_turn reads as done",
    )
    written = text_of(data) + "".join(str(b.get("thinking", "")) for b in blocks(data, "thinking"))
    ctx.expect(
        output == CUT and written != "",
        "the cut answer's output_tokens or text is wrong",
        expected=f"usage.output_tokens {CUT} and a non-empty text block (or thinking block: a "
        "reasoning model's cut may fall in its thinking)",
        received=f"output_tokens {output!r}, text {text_of(data)!r}",
        exchange=ex,
    )


@check(
    "MESSAGES-STOP-SEQUENCE",
    "stop_sequences end the answer and are named",
    "at temperature 0 a word taken from the unconstrained answer, sent as stop_sequences, ends the "
    "answer before it: stop_reason 'stop_sequence', stop_sequence naming it, and the text a prefix "
    "of the unconstrained one without the word",
    requires=NEEDS,
    model_dependent=True,
)
def messages_stop_sequence(ctx: CheckContext) -> None:
    first, ex = create(ctx, STOP_PROMPT)
    text = text_of(first)
    runs = [m for m in re.finditer(r"[A-Za-z0-9]{4,}", text) if m.start() >= 1]
    ctx.expect(
        bool(runs),
        "the unconstrained answer has no plain text to use as a stop sequence",
        expected=f"four ASCII letters or digits in a row after the first character of a "
        f"{MAX_TOKENS}-token answer",
        received=repr(text),
        exchange=ex,
    )
    word = runs[len(runs) // 2].group()[:4]
    data, ex = create(ctx, STOP_PROMPT, stop_sequences=[word])
    out = text_of(data)
    problems = []
    if data.get("stop_reason") != "stop_sequence":
        problems.append(f"stop_reason {data.get('stop_reason')!r}, not 'stop_sequence'")
    if data.get("stop_sequence") != word:
        problems.append(f"stop_sequence {data.get('stop_sequence')!r}, not {word!r}")
    if word in out:
        problems.append(f"the text contains {word!r}")
    if not text.startswith(out.rstrip()):
        problems.append("the text is not a prefix of the unconstrained answer")
    ctx.expect(
        not problems,
        f"the stop sequence {word!r} did not end the answer as the API says",
        expected=f"stop_reason 'stop_sequence', stop_sequence {word!r}, text a prefix of "
        f"{text!r} without it",
        received="; ".join(problems) + f" -- text {out!r}",
        exchange=ex,
        hint="agents read stop_sequence to know which marker ended the turn",
    )


@check(
    "MESSAGES-USAGE",
    "usage counts what was read and written",
    f"output_tokens never exceeds max_tokens; a cut at max_tokens {CUT} reports output_tokens "
    f"{CUT}; twenty more prompt words raise input_tokens by at least ten",
    requires=NEEDS,
)
def messages_usage(ctx: CheckContext) -> None:
    short, ex = create(ctx)
    usage = usage_of(short)
    ctx.expect(
        _count(usage.get("output_tokens"))
        and _count(usage.get("input_tokens"))
        and usage["output_tokens"] <= MAX_TOKENS
        and usage["input_tokens"] >= 1,
        "usage does not fit the request",
        expected=f"input_tokens >= 1 and 0 <= output_tokens <= max_tokens {MAX_TOKENS}",
        received=body_snippet(usage),
        exchange=ex,
    )
    cut, ex = create(ctx, LONG_PROMPT, max_tokens=CUT)
    cut_usage = usage_of(cut)
    ctx.expect(
        cut.get("stop_reason") != "max_tokens" or cut_usage.get("output_tokens") == CUT,
        "a cut answer's output_tokens is not max_tokens",
        expected=f"usage.output_tokens {CUT} (max_tokens {CUT}, stop_reason max_tokens)",
        received=body_snippet(cut_usage),
        exchange=ex,
    )
    longer, ex2 = create(ctx, PROMPT + " " + EXTRA)
    base, grown = prompt_tokens(usage), prompt_tokens(usage_of(longer))
    ctx.expect(
        _count(grown) and grown - base >= 10,
        "input_tokens does not grow with the prompt",
        expected=f"input_tokens (with cache reads) >= {base + 10} (twenty more words than a "
        f"prompt counted {base})",
        received=body_snippet(usage_of(longer)),
        exchange=ex2,
    )


def order_problems(events: list[tuple[str, Any]]) -> list[str]:
    """Every way an event stream departs from the Messages API's event grammar."""
    problems: list[str] = []
    for n, (name, data) in enumerate(events):
        if not isinstance(data, dict) or not isinstance(data.get("type"), str):
            problems.append(f"event {n} data is not an object with a type: {str(data)[:80]!r}")
            continue
        if name != data["type"]:
            problems.append(f"event {n} ({data['type']}) has SSE event name {name or '(none)'!r}")
        if data["type"] == "error":
            problems.append(f"event {n} is an error: {body_snippet(data, 200)}")
    typed = [d for _, d in events if isinstance(d, dict) and d.get("type") not in (None, "ping")]
    problems += _grammar(typed)
    return problems[:8]


def _grammar(typed: list[dict[str, Any]]) -> list[str]:
    if not typed or typed[0].get("type") != "message_start":
        return ["the first event is not message_start"]
    problems: list[str] = []
    start = typed[0].get("message")
    if not (isinstance(start, dict) and start.get("role") == "assistant"):
        problems.append("message_start carries no assistant message")
    open_index: int | None = None
    next_index, seen_delta, stopped = 0, False, False
    for n, event in enumerate(typed[1:], 1):
        kind, index = event.get("type"), event.get("index")
        if stopped:
            problems.append(f"{kind} after message_stop")
        elif kind == "content_block_start":
            if open_index is not None or index != next_index or seen_delta:
                problems.append(f"content_block_start index {index!r} out of order (event {n})")
            open_index, next_index = index, next_index + 1
        elif kind == "content_block_delta":
            if open_index is None or index != open_index:
                problems.append(
                    f"content_block_delta index {index!r} outside its block (event {n})"
                )
        elif kind == "content_block_stop":
            if open_index is None or index != open_index or seen_delta:
                problems.append(f"content_block_stop index {index!r} out of order (event {n})")
            open_index = None
        elif kind == "message_delta":
            if open_index is not None:
                problems.append(f"message_delta while block {open_index} is still open")
            delta, usage = event.get("delta") or {}, event.get("usage") or {}
            if delta.get("stop_reason") not in STOP_REASONS:
                problems.append(f"message_delta stop_reason {delta.get('stop_reason')!r}")
            if not _count(usage.get("output_tokens")):
                problems.append(f"message_delta usage.output_tokens {usage.get('output_tokens')!r}")
            seen_delta = True
        elif kind == "message_stop":
            stopped = True
    if next_index == 0:
        problems.append("no content block")
    if not seen_delta:
        problems.append("no message_delta")
    if not stopped:
        problems.append("no message_stop at the end")
    return problems


@check(
    "MESSAGES-STREAM-ORDER",
    "the event stream follows the Messages API's grammar",
    "named events (event: equals data.type): message_start (an assistant message), then per block "
    "content_block_start, content_block_delta..., content_block_stop with indexes 0, 1, ...; then "
    "message_delta with a stop_reason and usage.output_tokens; message_stop last; ping anywhere",
    requires=NEEDS,
)
def messages_stream_order(ctx: CheckContext) -> None:
    events, ex = stream(ctx)
    problems = order_problems(events)
    ctx.expect(
        not problems,
        "the event stream breaks the Messages API's event order",
        expected="message_start, (content_block_start, content_block_delta*, content_block_stop)+, "
        "message_delta, message_stop; each with its event: name",
        received="; ".join(problems),
        exchange=ex,
        hint="the anthropic SDK's stream dispatches on the event: name and builds the message "
        "from this order; MessageStream raises or drops text otherwise",
    )


def stream_facts(events: list[tuple[str, Any]]) -> dict[str, Any]:
    """What a stream says: its text, thinking, tool inputs, stop reason and usage."""
    facts: dict[str, Any] = {"text": "", "thinking": "", "tools": {}, "kinds": []}
    for _name, data in events:
        if not isinstance(data, dict):
            continue
        kind = data.get("type")
        if kind == "message_start" and isinstance(data.get("message"), dict):
            facts["input_tokens"] = prompt_tokens(usage_of(data["message"]))
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            block = data["content_block"]
            facts["kinds"].append(block.get("type"))
            if block.get("type") == "tool_use":
                facts["tools"][data.get("index")] = {"name": block.get("name"), "json": ""}
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            delta = data["delta"]
            if delta.get("type") == "text_delta":
                facts["text"] += str(delta.get("text", ""))
            elif delta.get("type") == "thinking_delta":
                facts["thinking"] += str(delta.get("thinking", ""))
            elif delta.get("type") == "input_json_delta" and data.get("index") in facts["tools"]:
                facts["tools"][data["index"]]["json"] += str(delta.get("partial_json", ""))
        elif kind == "message_delta":
            facts["stop_reason"] = (data.get("delta") or {}).get("stop_reason")
            facts["output_tokens"] = (data.get("usage") or {}).get("output_tokens")
    return facts


@check(
    "MESSAGES-STREAM-TEXT",
    "the stream carries the same answer as the non-streamed call",
    "at temperature 0 the text_deltas join to the non-streamed text, message_delta's stop_reason "
    "and usage.output_tokens equal the non-streamed ones, and message_start's input_tokens equals "
    "the non-streamed input_tokens",
    requires=NEEDS,
)
def messages_stream_text(ctx: CheckContext) -> None:
    data, _ = create(ctx)
    events, ex = stream(ctx)
    facts = stream_facts(events)
    usage = usage_of(data)
    pairs = [
        ("text", facts["text"], text_of(data)),
        ("stop_reason", facts.get("stop_reason"), data.get("stop_reason")),
        ("usage.output_tokens", facts.get("output_tokens"), usage.get("output_tokens")),
        (
            "usage.input_tokens (with cache reads)",
            facts.get("input_tokens", prompt_tokens(usage)),
            prompt_tokens(usage),
        ),
    ]
    diffs = [f"{k}: streamed {s!r}, non-streamed {n!r}" for k, s, n in pairs if s != n]
    ctx.expect(
        not diffs,
        "the stream and the non-streamed answer differ at temperature 0",
        expected="the same text, stop_reason and usage streamed or not",
        received="; ".join(diffs),
        exchange=ex,
        hint="if this is only the text, temperature 0 is not deterministic or deltas are lost",
    )


def _tool_problems(call: dict[str, Any], names: list[str]) -> list[str]:
    import jsonschema

    problems = []
    if not (isinstance(call.get("id"), str) and call["id"]):
        problems.append(f"tool_use id {call.get('id')!r} is not a non-empty string")
    name = call.get("name")
    if name not in names:
        return [*problems, f"tool_use name {name!r} is not one of {names}"]
    value = call.get("input")
    if not isinstance(value, dict):
        return [*problems, f"input is {type(value).__name__} {str(value)[:80]!r}, not an object"]
    errors = list(jsonschema.Draft202012Validator(SCHEMAS[name]).iter_errors(value))
    problems += [f"input {json.dumps(value)} breaks the schema: {e.message}" for e in errors[:3]]
    return problems


def _streamed_tool_problems(facts: dict[str, Any], names: list[str]) -> list[str]:
    problems = []
    for index, tool in facts["tools"].items():
        try:
            value = json.loads(tool["json"] or "{}")
        except ValueError:
            problems.append(f"block {index}: input_json_delta pieces join to {tool['json'][:80]!r}")
            continue
        problems += [
            f"block {index}: {p}"
            for p in _tool_problems({"id": "x", "name": tool["name"], "input": value}, names)
        ]
    if facts["tools"] and facts.get("stop_reason") != "tool_use":
        problems.append(f"message_delta stop_reason {facts.get('stop_reason')!r}, not 'tool_use'")
    return problems


def tool_answer(
    ctx: CheckContext, prompt: Any, choice: dict[str, Any], tools: list[Any] = ONE_TOOL
) -> tuple[dict[str, Any], Exchange, list[dict[str, Any]]]:
    data, ex = create(ctx, prompt, tools=tools, tool_choice=choice, max_tokens=TOOL_MAX_TOKENS)
    return data, ex, blocks(data, "tool_use")


def expect_call(
    ctx: CheckContext,
    data: dict[str, Any],
    ex: Exchange,
    calls: list[dict[str, Any]],
    want: list[str],
) -> None:
    """One valid tool_use block for a tool in ``want``, and stop_reason tool_use."""
    problems = [p for c in calls for p in _tool_problems(c, want)]
    if not calls:
        problems.append("no tool_use block")
    if data.get("stop_reason") != "tool_use":
        problems.append(f"stop_reason {data.get('stop_reason')!r}, not 'tool_use'")
    ctx.expect(
        not problems,
        "the forced tool call is missing or malformed",
        expected=f"a tool_use block {{id, name in {want}, input valid for its input_schema}} "
        "and stop_reason 'tool_use'",
        received="; ".join(problems) + f" -- content {body_snippet(data.get('content'), 300)}",
        exchange=ex,
        hint="tool calling is not wired up for /v1/messages (vLLM --enable-auto-tool-choice "
        "--tool-call-parser ...; llama.cpp --jinja)",
    )


@check(
    "MESSAGES-TOOLS",
    "tools with input_schema and tool_choice auto give well-formed answers",
    "with tools and tool_choice auto, a prompt naming get_weather is served; a tool_use block "
    "has an id, a listed name and an input object valid for its input_schema, with stop_reason "
    "'tool_use'; a text answer ends end_turn or max_tokens; streamed, each tool_use block's "
    "input_json_delta pieces join to such an object",
    requires=TOOL_NEEDS,
)
def messages_tools(ctx: CheckContext) -> None:
    names = [WEATHER["name"]]
    data, ex, calls = tool_answer(ctx, TOOL_PROMPT, {"type": "auto"})
    if calls:
        expect_call(ctx, data, ex, calls, names)
    else:
        ctx.expect(
            bool(blocks(data, "text")) and data.get("stop_reason") in ("end_turn", "max_tokens"),
            "an answer without a tool call is malformed",
            expected="a text block and stop_reason end_turn or max_tokens",
            received=body_snippet(data, 300),
            exchange=ex,
        )
    events, sex = stream(
        ctx, TOOL_PROMPT, tools=ONE_TOOL, tool_choice={"type": "auto"}, max_tokens=TOOL_MAX_TOKENS
    )
    problems = _streamed_tool_problems(stream_facts(events), names)
    ctx.expect(
        not problems,
        "a streamed tool_use block is malformed",
        expected="input_json_delta pieces that join to an input valid for the tool's input_schema, "
        "and message_delta stop_reason 'tool_use'",
        received="; ".join(problems),
        exchange=sex,
    )


@check(
    "MESSAGES-TOOL-CHOICE-ANY",
    "tool_choice any forces a tool call",
    "tool_choice {type: any} with a prompt naming no tool gives a tool_use block for a listed tool, "
    "input valid for its input_schema, and stop_reason 'tool_use'",
    requires=TOOL_NEEDS,
)
def messages_tool_choice_any(ctx: CheckContext) -> None:
    data, ex, calls = tool_answer(ctx, "Hello there.", {"type": "any", **ONE_CALL})
    expect_call(ctx, data, ex, calls, [WEATHER["name"]])


@check(
    "MESSAGES-TOOL-CHOICE-TOOL",
    "tool_choice naming a tool calls that tool",
    "tool_choice {type: tool, name: get_time} with a prompt about the weather gives a tool_use "
    "block for get_time (not get_weather), input valid for its schema, stop_reason 'tool_use'",
    requires=(*TOOL_NEEDS, "tool_choice_named"),
)
def messages_tool_choice_tool(ctx: CheckContext) -> None:
    data, ex, calls = tool_answer(
        ctx, TOOL_PROMPT, {"type": "tool", "name": "get_time", **ONE_CALL}, TOOLS
    )
    expect_call(ctx, data, ex, calls, ["get_time"])


@check(
    "MESSAGES-TOOL-CHOICE-NONE",
    "tool_choice none calls no tool",
    "tool_choice {type: none} with tools and a prompt naming get_weather gives a text answer: no "
    "tool_use block, stop_reason not 'tool_use'",
    requires=TOOL_NEEDS,
)
def messages_tool_choice_none(ctx: CheckContext) -> None:
    data, ex, calls = tool_answer(ctx, TOOL_PROMPT, {"type": "none"})
    ctx.expect(
        not calls and data.get("stop_reason") != "tool_use",
        "tool_choice none still called a tool",
        expected="a text answer, no tool_use block",
        received=body_snippet(data.get("content"), 300)
        + f", stop_reason {data.get('stop_reason')!r}",
        exchange=ex,
    )


def _result_turns(content: Any) -> list[dict[str, Any]]:
    call = {"type": "tool_use", "id": "toolu_servecheck_1", "name": "get_weather",
            "input": {"city": "Paris"}}  # fmt: skip
    result = {"type": "tool_result", "tool_use_id": "toolu_servecheck_1", "content": content}
    return [
        {"role": "user", "content": TOOL_PROMPT},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
    ]


@check(
    "MESSAGES-TOOL-RESULT",
    "a tool_result turn is accepted and answered",
    "a conversation of the user's question, the assistant's tool_use block and a user tool_result "
    "block answering it (content as a string, and as a list of text blocks) is served: 200 with a "
    "content block and a stop_reason from the API's set",
    requires=TOOL_NEEDS,
)
def messages_tool_result(ctx: CheckContext) -> None:
    for label, content in (
        ("a string", "18 C and sunny"),
        ("text blocks", [{"type": "text", "text": "18 C and sunny"}]),
    ):
        ex = send(ctx, request_body(ctx, _result_turns(content), tools=ONE_TOOL))
        ctx.expect(
            ex.ok and not ex.error,
            f"a tool_result turn (content as {label}) was refused",
            expected="HTTP 200 with the assistant's next message",
            received=ex.describe(300),
            exchange=ex,
            hint="agents send every tool's output back as a tool_result block",
        )
        data = ctx.ok_json(ex, "POST /v1/messages after a tool_result")
        problems = shape_problems(data)
        ctx.expect(
            not problems,
            "the answer to a tool_result turn is not a Messages API message",
            expected="a message with content blocks and a stop_reason",
            received="; ".join(problems),
            exchange=ex,
        )


@check(
    "MESSAGES-SYSTEM-BLOCKS",
    "system is accepted as a string and as text blocks, and reaches the model",
    "the same system prompt as a string and as a list of one text block are both served with the "
    "same input_tokens (cache reads and writes included) and, at temperature 0, the same text; "
    "that count is at least ten "
    "more than without the system prompt",
    requires=NEEDS,
)
def messages_system_blocks(ctx: CheckContext) -> None:
    plain, _ = create(ctx)
    as_string, ex = create(ctx, system=SYSTEM)
    ex_blocks = send(ctx, request_body(ctx, system=[{"type": "text", "text": SYSTEM}]))
    ctx.expect(
        ex_blocks.ok and not ex_blocks.error,
        "system as a list of text blocks was refused",
        expected="HTTP 200 (system may be a string or a list of text blocks)",
        received=ex_blocks.describe(300),
        exchange=ex_blocks,
        hint="Claude Code and the SDK's prompt caching send system as blocks with cache_control",
    )
    as_blocks = ctx.ok_json(ex_blocks, "POST /v1/messages with system blocks")
    n0, n1 = prompt_tokens(usage_of(plain)), prompt_tokens(usage_of(as_string))
    n2 = prompt_tokens(usage_of(as_blocks))
    ctx.expect(
        _count(n0) and _count(n1) and n1 - n0 >= 10,
        "the system prompt does not reach the model",
        expected=f"input_tokens with the system prompt >= {n0}+10 (counted {n0} without it)",
        received=f"input_tokens {n1!r} with system as a string",
        exchange=ex,
    )
    ctx.expect(
        n2 == n1 and text_of(as_blocks) == text_of(as_string),
        "system as text blocks is read differently from the same string",
        expected=f"input_tokens {n1} and text {text_of(as_string)!r}",
        received=f"input_tokens {n2!r} and text {text_of(as_blocks)!r}",
        exchange=ex_blocks,
    )


THINKING_MAX_TOKENS = 1100  # Anthropic's minimum budget (1024) must be less than max_tokens
THINKING = {"type": "enabled", "budget_tokens": 1024}
THINKING_PROMPT_ROOM = 64


def thinking_request(ctx: CheckContext) -> dict[str, Any]:
    """max_tokens and thinking for MESSAGES-THINKING, or a skip where the context cannot hold
    them (vLLM enforces both Anthropic's minimum budget and the context, measured 2026-12-02)."""
    context = ctx.info.context_length or ctx.target.context_length
    if context and context < THINKING_MAX_TOKENS + THINKING_PROMPT_ROOM:
        raise CheckSkipped(
            f"{ctx.check_id}: the context ({context} tokens) cannot hold max_tokens "
            f"{THINKING_MAX_TOKENS} with Anthropic's minimum thinking budget_tokens 1024"
        )
    return {"max_tokens": THINKING_MAX_TOKENS, "thinking": THINKING}


@check(
    "MESSAGES-THINKING",
    "thinking arrives in thinking blocks, never in the text",
    "for a reasoning model (targets.yaml reasoning:) whose context holds 1164 tokens, thinking "
    "{type: enabled, budget_tokens: 1024} with max_tokens 1100 "
    "gives a thinking block with non-empty thinking before the text; no text block holds a "
    "reasoning marker; streamed, thinking_deltas come in a thinking block opened before the text",
    requires=NEEDS,
)
def messages_thinking(ctx: CheckContext) -> None:
    s = settings(ctx)
    markers = list(dict.fromkeys([*ALWAYS_MARKERS, *s.markers]))
    prompt = "What is 7 times 6? Think it through, then answer in one short sentence."
    asked = thinking_request(ctx)
    data, ex = create(ctx, prompt, **asked)
    raw = data.get("content")
    content: list[Any] = raw if isinstance(raw, list) else []
    kinds = [b.get("type") for b in content if isinstance(b, dict)]
    thought = "".join(str(b.get("thinking", "")) for b in blocks(data, "thinking"))
    leaked = [m for m in markers if m in text_of(data)]
    problems = []
    if not thought:
        problems.append(f"no thinking block with text (blocks: {kinds})")
    elif "text" in kinds and kinds.index("thinking") > kinds.index("text"):
        problems.append("the thinking block comes after the text")
    if leaked:
        problems.append(f"the text holds the markers {leaked}")
    events, sex = stream(ctx, prompt, **asked)
    facts = stream_facts(events)
    if not facts["thinking"]:
        problems.append(f"streamed: no thinking_delta (blocks: {facts['kinds']})")
    if [m for m in markers if m in facts["text"]]:
        problems.append("streamed: the text_deltas hold reasoning markers")
    ctx.expect(
        not problems,
        "thinking is not separated from the answer",
        expected="content [{type: thinking, thinking, signature}, {type: text, text}] and no "
        f"marker of {markers} in the text",
        received="; ".join(problems) + f" -- content {body_snippet(content, 300)}",
        exchange=ex if not facts["thinking"] or not thought else sex,
        hint="start the engine with a reasoning parser so /v1/messages can split the reasoning",
    )


@check(
    "MESSAGES-AUTH",
    "the key is read from x-api-key and enforced",
    "with a key configured, a /v1/messages request carrying it only in x-api-key (what the "
    "anthropic SDK sends) gets 200; one without a key gets 401 or 403 with an Anthropic error "
    "(error.type authentication_error or permission_error)",
    requires=NEEDS,
    needs_api_key=True,
)
def messages_auth(ctx: CheckContext) -> None:
    key = _real_key(ctx)
    body = request_body(ctx, max_tokens=4)
    with_key = send(ctx, body, auth=False, headers={"x-api-key": key})
    ctx.expect(
        with_key.ok and not with_key.error,
        "the key sent in x-api-key was not accepted",
        expected="HTTP 200 with the key in x-api-key",
        received=with_key.describe(300),
        exchange=with_key,
        hint="the anthropic SDK and Claude Code send the key in x-api-key, not Authorization",
    )
    bare = send(ctx, body, auth=False)
    data = bare.json() if not bare.error else None
    error = data.get("error") if isinstance(data, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    ctx.expect(
        bare.status in AUTH_STATUSES and kind in ("authentication_error", "permission_error"),
        "a request without a key was not refused in the Anthropic way",
        expected="401 or 403 with {type: error, error: {type: authentication_error, message}}",
        received=bare.describe(300),
        exchange=bare,
        hint="the key is not enforced on /v1/messages" if bare.ok else "",
    )


def error_problem(ex: Exchange) -> str | None:
    """Why ``ex`` is not a 4xx Anthropic error answer (None when it is)."""
    if ex.error:
        return f"the request did not complete ({ex.error})"
    status = ex.status or 0
    if not 400 <= status < 500:
        return f"HTTP {status}, not a 4xx"
    data = ex.json()
    if not isinstance(data, dict):
        return "the body is not a JSON object"
    error = data.get("error")
    if data.get("type") != "error":
        return f"type {data.get('type')!r}, not 'error'"
    if not isinstance(error, dict) or error.get("type") not in ERROR_TYPES:
        kind = error.get("type") if isinstance(error, dict) else None
        return f"error.type {kind!r} is not one of Anthropic's error types"
    if not isinstance(error.get("message"), str):
        return "error.message is not a string"
    return None


@check(
    "MESSAGES-ERROR-SHAPE",
    "bad /v1/messages requests get Anthropic's error object",
    "messages as a string and a message with role 'robot' each get a 4xx whose body is "
    '{"type": "error", "error": {"type": <an Anthropic error type>, "message": <string>}}',
    requires=NEEDS,
)
def messages_error_shape(ctx: CheckContext) -> None:
    cases = {
        "messages as a string": request_body(ctx) | {"messages": "hello"},
        "role 'robot'": request_body(ctx, [{"role": "robot", "content": "hello"}]),
    }
    for label, body in cases.items():
        ex = send(ctx, body)
        problem = error_problem(ex)
        ctx.expect(
            problem is None,
            f"a bad request ({label}) did not get an Anthropic error",
            expected='4xx with {"type": "error", "error": {"type": "invalid_request_error", '
            '"message": "..."}}',
            received=f"{problem}; {ex.describe(300)}",
            exchange=ex,
            hint="the anthropic SDK maps error.type to its exception classes; OpenAI's shape "
            "reaches users as a bare APIStatusError",
        )


@check(
    "MESSAGES-COUNT-TOKENS",
    "count_tokens counts what /v1/messages reports",
    "POST /v1/messages/count_tokens with a system prompt and a user message answers "
    '{"input_tokens": N} with N equal to usage.input_tokens (plus cache_read_input_tokens and '
    "cache_creation_input_tokens) of the same /v1/messages request "
    "(skipped where count_tokens is not served: 404, 405 or 501)",
    requires=NEEDS,
)
def messages_count_tokens(ctx: CheckContext) -> None:
    body = request_body(ctx, system=SYSTEM)
    counted = {k: v for k, v in body.items() if k in ("model", "messages", "system")}
    ex = ctx.post(ROUTE + "/count_tokens", counted, headers=ANTHROPIC_VERSION)
    if ex.status in (404, 405, 501) and not ex.error:
        raise CheckSkipped(
            f"{ctx.check_id}: POST /v1/messages/count_tokens is not served (HTTP {ex.status})"
        )
    data = ctx.ok_json(ex, "POST /v1/messages/count_tokens")
    n = data.get("input_tokens")
    answer, _ = create(ctx, system=SYSTEM)
    want = prompt_tokens(usage_of(answer))
    ctx.expect(
        _count(n) and n == want,
        "count_tokens disagrees with the input_tokens /v1/messages reports",
        expected=f'{{"input_tokens": {want!r}}} (usage.input_tokens plus cache reads and writes '
        "of the same request)",
        received=body_snippet(data, 200),
        exchange=ex,
        hint="clients size their context with count_tokens; it must count the system prompt and "
        "the template as the request does",
    )
