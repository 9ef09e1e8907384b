"""RESPONSES-*: the Responses API (``POST /v1/responses``) as agent frameworks and the SDK call it.

Bodies are validated with the openai SDK's own pydantic types (``openai.types.responses``):
what the SDK cannot parse, its users cannot use. The cases follow what the published types and
the Open Responses compliance suite cover (a basic answer, streaming, instructions, function
tools and their output turn, structured output), plus the defects engines shipped: an empty
``output`` on ``response.completed`` (vllm PR#30223), chat-style SSE on the responses route,
usage that disagrees between stream and answer, a tool call left as text.

Every request is stateless (``store: false``, the whole conversation in ``input``): engines that
keep no response store (Ollama, the reference server) must still pass.
"""

from __future__ import annotations

import json
from typing import Any

from servecheck.checks.context import CheckContext, body_snippet
from servecheck.checks.registry import check
from servecheck.checks.surfaces.err import detail_deviation
from servecheck.checks.surfaces.tools import PARAMS
from servecheck.client.http import Exchange

MAX_OUTPUT = 24
PROMPT = "Name three colours."
INSTRUCTIONS = (
    "You are a terse assistant for a paint shop. Answer in one short line, lower case, "
    "and never mention prices, brands or delivery times."
)
# The chat surface's get_weather tool in the Responses API's flat function-tool shape.
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": PARAMS["get_weather"],
    "strict": True,
}
COLOUR_SCHEMA = {
    "type": "object",
    "properties": {
        "colour": {"type": "string", "enum": ["red", "green", "blue"]},
        "count": {"type": "integer", "minimum": 1, "maximum": 9},
    },
    "required": ["colour", "count"],
    "additionalProperties": False,
}
TERMINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")
HINT_ROUTE = (
    "serve the Responses API (vLLM and SGLang do at /v1/responses; LiteLLM maps it onto chat) or "
    "declare capabilities: {responses: false}"
)


def request_body(ctx: CheckContext, input_: Any = PROMPT, **params: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": ctx.model,
        "input": input_,
        "max_output_tokens": MAX_OUTPUT,
        "temperature": 0,
        "store": False,
    }
    body.update(params)
    return {k: v for k, v in body.items() if v is not None}


def create(
    ctx: CheckContext, input_: Any = PROMPT, **params: Any
) -> tuple[dict[str, Any], Exchange]:
    """A non-streamed response, as a JSON object, or a failure saying what came back."""
    ex = ctx.post("/responses", request_body(ctx, input_, **params))
    if ex.status == 404 and not ex.error:
        ctx.fail(
            "POST /v1/responses does not exist here",
            expected="HTTP 200 with a response object",
            received=ex.describe(300),
            exchange=ex,
            hint=HINT_ROUTE,
        )
    return ctx.ok_json(ex, "POST /v1/responses"), ex


# Fields newer openai SDK types declare required that engines do not send yet. The SDK builds its
# objects without validation (``construct``), so their absence breaks no SDK user; everything
# else the types require is enforced.
LENIENT_MISSING = frozenset(
    {
        "usage.input_tokens_details.cache_write_tokens",  # required since the SDK's 2026 types
        "response.usage.input_tokens_details.cache_write_tokens",
    }
)


def _validation_problems(model_cls: Any, data: Any) -> list[str]:
    import pydantic

    try:
        model_cls.model_validate(data)
    except pydantic.ValidationError as exc:
        out = []
        for e in exc.errors():
            where = ".".join(str(p) for p in e["loc"])
            if e["type"] == "missing" and where in LENIENT_MISSING:
                continue
            out.append(f"{where}: {e['msg']}")
        return out[:6]
    return []


def sdk_problems(data: Any) -> list[str]:
    """Where ``data`` does not parse as the SDK's ``Response`` (empty when it does)."""
    from openai.types.responses import Response

    return _validation_problems(Response, data)


def _event_types() -> dict[str, Any]:
    """The SDK's stream event classes by their ``type`` literal."""
    import typing

    from openai.types.responses import ResponseStreamEvent

    union = typing.get_args(ResponseStreamEvent)[0]
    out: dict[str, Any] = {}
    for cls in typing.get_args(union):
        for value in typing.get_args(cls.model_fields["type"].annotation):
            out[value] = cls
    return out


def event_problems(event: dict[str, Any], types: dict[str, Any]) -> list[str]:
    """Where one stream event departs from the SDK's type for its ``type``."""
    cls = types.get(str(event.get("type")))
    if cls is None:
        return [f"unknown event type {event.get('type')!r}"]
    return _validation_problems(cls, event)


def output_items(data: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    items = data.get("output")
    return (
        [i for i in items if isinstance(i, dict) and i.get("type") == kind]
        if isinstance(items, list)
        else []
    )


def output_text(data: dict[str, Any]) -> str:
    """The concatenated output_text parts of the message items (the SDK's ``output_text``)."""
    out = []
    for item in output_items(data, "message"):
        for part in item.get("content") or []:
            if isinstance(part, dict) and part.get("type") == "output_text":
                out.append(str(part.get("text", "")))
    return "".join(out)


def _usage(data: dict[str, Any]) -> dict[str, Any]:
    usage = data.get("usage")
    return usage if isinstance(usage, dict) else {}


def expect_sdk_shape(ctx: CheckContext, data: dict[str, Any], ex: Exchange, what: str) -> None:
    problems = sdk_problems(data)
    ctx.expect(
        not problems,
        f"{what} does not parse as the openai SDK's Response",
        expected="a body openai.types.responses.Response validates",
        received="; ".join(problems) + f" -- body {body_snippet(data, 300)}",
        exchange=ex,
        hint="the SDK (client.responses.create) and agent frameworks raise on this body",
    )


def stream(
    ctx: CheckContext, input_: Any = PROMPT, **params: Any
) -> tuple[list[dict[str, Any]], Exchange]:
    """A streamed response: its JSON events in order, or a failure naming what broke."""
    ex = ctx.post("/responses", request_body(ctx, input_, stream=True, **params), stream=True)
    ctx.ok_stream(ex, "streamed POST /v1/responses")
    assert ex.stream is not None  # noqa: S101 - ok_stream guarantees it
    return ex.stream.chunks, ex


def terminal(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    last = next((e for e in reversed(events) if e.get("type") in TERMINAL_EVENTS), None)
    resp = last.get("response") if last else None
    return resp if isinstance(resp, dict) else None


def deltas(events: list[dict[str, Any]]) -> str:
    return "".join(
        str(e.get("delta", ""))
        for e in events
        if e.get("type") == "response.output_text.delta" and isinstance(e.get("delta"), str)
    )


@check(
    "RESPONSES-SHAPE",
    "a non-streamed response has the Responses API shape",
    "POST /v1/responses with a string input gets 200 with a body the openai SDK's Response type "
    "validates: object 'response', an id, status completed or incomplete, and a message item in "
    "output whose output_text parts hold text",
    requires=("responses",),
)
def responses_shape(ctx: CheckContext) -> None:
    data, ex = create(ctx)
    expect_sdk_shape(ctx, data, ex, "the response")
    ctx.expect(
        data.get("object") == "response" and isinstance(data.get("id"), str) and data["id"] != "",
        "the response is not a 'response' object with an id",
        expected="object 'response', a non-empty id",
        received=f"object {data.get('object')!r}, id {data.get('id')!r}",
        exchange=ex,
    )
    ctx.expect(
        data.get("status") in ("completed", "incomplete"),
        "the response did not finish",
        expected="status 'completed' (or 'incomplete' at the token limit)",
        received=f"status {data.get('status')!r}",
        exchange=ex,
    )
    ctx.expect(
        bool(output_items(data, "message")) and output_text(data) != "",
        "the response has no message with output_text",
        expected="output: [{type: message, role: assistant, content: [{type: output_text, text: ...}]}]",
        received=body_snippet(data.get("output"), 400),
        exchange=ex,
    )


@check(
    "RESPONSES-USAGE",
    "response usage is consistent",
    "usage has integer input_tokens > 0 and output_tokens, total_tokens = input + output, and "
    f"output_tokens <= max_output_tokens ({MAX_OUTPUT})",
    requires=("responses",),
)
def responses_usage(ctx: CheckContext) -> None:
    data, ex = create(ctx)
    usage = _usage(data)
    counts = {k: usage.get(k) for k in ("input_tokens", "output_tokens", "total_tokens")}
    ctx.expect(
        all(isinstance(v, int) and not isinstance(v, bool) for v in counts.values()),
        "usage lacks integer token counts",
        expected="usage {input_tokens, output_tokens, total_tokens} as integers",
        received=body_snippet(data.get("usage")),
        exchange=ex,
        hint="clients bill and budget from usage; the Responses API names them input/output_tokens",
    )
    inp, out, total = counts["input_tokens"], counts["output_tokens"], counts["total_tokens"]
    ctx.expect(
        inp > 0 and total == inp + out,  # type: ignore[operator]
        "usage does not add up",
        expected="input_tokens > 0 and total_tokens == input_tokens + output_tokens",
        received=json.dumps(counts),
        exchange=ex,
    )
    ctx.expect(
        out <= MAX_OUTPUT,  # type: ignore[operator]
        "more output tokens than max_output_tokens allowed",
        expected=f"output_tokens <= {MAX_OUTPUT}",
        received=json.dumps(counts),
        exchange=ex,
        hint="max_output_tokens is not applied",
    )


@check(
    "RESPONSES-STREAM-EVENTS",
    "a streamed response is the typed Responses event stream",
    "stream: true gets text/event-stream whose events each validate as the SDK's "
    "ResponseStreamEvent, with strictly increasing sequence_number and the SSE event name equal "
    "to the type, starting with response.created, with output_text deltas, and ending with "
    "response.completed (no chat.completion.chunk, no [DONE] needed)",
    requires=("responses", "streaming"),
)
def responses_stream_events(ctx: CheckContext) -> None:
    events, ex = stream(ctx)
    assert ex.stream is not None  # noqa: S101
    types = _event_types()
    problems: list[str] = []
    kinds = [str(e.get("type")) for e in events]
    if any(e.get("object") == "chat.completion.chunk" for e in events):
        problems.append("chat.completion.chunk objects on the responses route")
    for n, event in enumerate(events):
        found = event_problems(event, types)
        if found:
            problems.append(f"event {n} ({event.get('type')!r}): {found[0]}")
            if len(problems) > 4:
                break
    sse = [e for e in ex.stream.events if e.data and e.data != "[DONE]"]
    named = [(e.event, c.get("type")) for e, c in zip(sse, events, strict=False) if e.event]
    problems += [
        f"SSE event {name!r} carries type {kind!r}" for name, kind in named if name != kind
    ][:2]
    seqs = [e.get("sequence_number") for e in events if "sequence_number" in e]
    if seqs and any(
        not isinstance(b, int) or not isinstance(a, int) or b <= a
        for a, b in zip(seqs, seqs[1:], strict=False)
    ):
        problems.append(f"sequence_number not strictly increasing: {seqs[:12]}")
    if not kinds or kinds[0] != "response.created":
        problems.append(f"the first event is {kinds[0] if kinds else None!r}, not response.created")
    if "response.output_text.delta" not in kinds:
        problems.append("no response.output_text.delta event")
    if not kinds or kinds[-1] not in TERMINAL_EVENTS:
        problems.append(
            f"the last event is {kinds[-1] if kinds else None!r}, not response.completed"
        )
    ctx.expect(
        not problems,
        "the /v1/responses stream is not the Responses event stream",
        expected="event: response.created ... response.output_text.delta ... response.completed",
        received="; ".join(problems[:6]) + f" -- event types {kinds[:8]}",
        exchange=ex,
        hint="the SDK's responses.stream() and agent frameworks dispatch on these typed events; a "
        "chat-shaped stream on this route means a chat handler answers it",
    )


@check(
    "RESPONSES-STREAM-COMPLETED",
    "response.completed carries the streamed output and usage",
    "the terminal response.completed event holds the full response: a non-empty output whose "
    "output_text equals the concatenated output_text deltas, and usage with output_tokens > 0",
    requires=("responses", "streaming"),
)
def responses_stream_completed(ctx: CheckContext) -> None:
    events, ex = stream(ctx)
    final = terminal(events)
    ctx.expect(
        final is not None,
        "the stream has no response.completed event with a response",
        expected="a final response.completed {response: {...}}",
        received=f"event types {[e.get('type') for e in events][-6:]}",
        exchange=ex,
    )
    assert final is not None  # noqa: S101
    text = deltas(events)
    ctx.expect(
        bool(final.get("output")) and output_text(final) == text,
        "response.completed's output does not hold what was streamed",
        expected=f"output with output_text {text[:200]!r} (the deltas)",
        received=f"output {body_snippet(final.get('output'), 300)}",
        exchange=ex,
        hint="clients that read the final response (the SDK's get_final_response, agents) see an "
        "empty answer (vllm PR#30223)",
    )
    out = _usage(final).get("output_tokens")
    ctx.expect(
        isinstance(out, int) and out > 0,
        "response.completed has no usage",
        expected="response.usage.output_tokens > 0",
        received=body_snippet(final.get("usage")),
        exchange=ex,
    )


@check(
    "RESPONSES-STREAM-EQUALS",
    "a streamed response equals the non-streamed one at temperature 0",
    "at temperature 0 the concatenated output_text deltas equal the non-streamed output_text, and "
    "response.completed's usage (input and output tokens) equals the non-streamed usage",
    requires=("responses", "streaming"),
)
def responses_stream_equals(ctx: CheckContext) -> None:
    data, plain_ex = create(ctx)
    events, ex = stream(ctx)
    final = terminal(events) or {}
    text, plain = deltas(events), output_text(data)
    ctx.expect(
        text == plain,
        "the streamed text differs from the non-streamed text",
        expected=repr(plain[:300]),
        received=repr(text[:300]),
        exchange=ex,
        hint="the streaming path detokenizes or samples differently",
    )
    keys = ("input_tokens", "output_tokens")
    got = {k: _usage(final).get(k) for k in keys}
    want = {k: _usage(data).get(k) for k in keys}
    ctx.expect(
        got == want,
        "the streamed usage differs from the non-streamed usage",
        expected=json.dumps(want),
        received=json.dumps(got),
        exchange=ex,
        hint="usage in response.completed is counted differently from the answer's",
    )
    del plain_ex


@check(
    "RESPONSES-INSTRUCTIONS",
    "instructions reach the prompt and are echoed",
    "a request with instructions (a ~30-token system text) counts more input_tokens than the same "
    "request without them, and the response echoes the instructions",
    requires=("responses",),
)
def responses_instructions(ctx: CheckContext) -> None:
    bare, _ = create(ctx, max_output_tokens=16)
    data, ex = create(ctx, instructions=INSTRUCTIONS, max_output_tokens=16)
    with_i, without = _usage(data).get("input_tokens"), _usage(bare).get("input_tokens")
    ctx.expect(
        isinstance(with_i, int) and isinstance(without, int) and with_i > without + 5,
        "instructions did not reach the prompt",
        expected=f"input_tokens with instructions > {without} + 5 (without them)",
        received=f"input_tokens {with_i} with, {without} without",
        exchange=ex,
        hint="instructions must be rendered as the system (developer) message; dropping them "
        "silently changes every agent's behaviour",
    )
    ctx.expect(
        data.get("instructions") == INSTRUCTIONS,
        "the response does not echo the instructions",
        expected=f"instructions {INSTRUCTIONS[:40]!r}...",
        received=f"instructions {body_snippet(data.get('instructions'), 120)}",
        exchange=ex,
    )


def forced_call(ctx: CheckContext) -> tuple[dict[str, Any], dict[str, Any], Exchange]:
    """A forced function call: (response, its function_call item, exchange), or a failure."""
    data, ex = create(
        ctx,
        "What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
        max_output_tokens=64,
        parallel_tool_calls=False,
    )
    calls = output_items(data, "function_call")
    ctx.expect(
        bool(calls),
        "tool_choice required returned no function_call item",
        expected="output: [{type: function_call, call_id, name: get_weather, arguments}]",
        received=f"output {body_snippet(data.get('output'), 400)}",
        exchange=ex,
        hint="the tool-call parser is not applied on the responses route (the call is left as "
        "text), or tool calling is not enabled on the engine",
    )
    return data, calls[0], ex


@check(
    "RESPONSES-TOOL-CALL",
    "a forced function call is a function_call output item",
    "with tools [get_weather] and tool_choice 'required' the output holds a function_call item "
    "(validated by the SDK's type) with a call_id, name get_weather and arguments that are JSON "
    "valid for the parameters",
    requires=("responses", "tools"),
)
def responses_tool_call(ctx: CheckContext) -> None:
    import jsonschema

    data, call, ex = forced_call(ctx)
    expect_sdk_shape(ctx, data, ex, "the response with a function call")
    ctx.expect(
        call.get("name") == "get_weather"
        and isinstance(call.get("call_id"), str)
        and call["call_id"],
        "the function_call item names no offered tool or has no call_id",
        expected="name 'get_weather', a non-empty call_id",
        received=body_snippet(call, 300),
        exchange=ex,
    )
    try:
        args = json.loads(call.get("arguments") or "")
    except (TypeError, ValueError) as exc:
        ctx.fail(
            "the function_call arguments are not JSON",
            expected="arguments: a JSON object as a string",
            received=f"{exc}: {str(call.get('arguments'))[:200]!r}",
            exchange=ex,
        )
    errors = list(jsonschema.Draft202012Validator(WEATHER["parameters"]).iter_errors(args))
    ctx.expect(
        not errors,
        "the function_call arguments do not validate against the parameters",
        expected=json.dumps(WEATHER["parameters"]),
        received="; ".join(e.message for e in errors[:3]) + f" -- {body_snippet(args, 200)}",
        exchange=ex,
    )


@check(
    "RESPONSES-STREAM-TOOL",
    "a streamed function call adds up",
    "streamed with tool_choice 'required', the function_call item's "
    "response.function_call_arguments.delta events concatenate to the arguments of the "
    "function_call in response.completed (and of the .done event when one is sent), and parse "
    "as JSON",
    requires=("responses", "tools", "streaming"),
)
def responses_stream_tool(ctx: CheckContext) -> None:
    events, ex = stream(
        ctx,
        "What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
        max_output_tokens=64,
        parallel_tool_calls=False,
    )
    added = [
        e["item"]
        for e in events
        if e.get("type") == "response.output_item.added"
        and isinstance(e.get("item"), dict)
        and e["item"].get("type") == "function_call"
    ]
    ctx.expect(
        bool(added),
        "the stream announced no function_call item",
        expected="response.output_item.added with item {type: function_call}",
        received=f"event types {sorted({str(e.get('type')) for e in events})}",
        exchange=ex,
        hint="the tool-call parser is not applied to streamed responses",
    )
    item_id = added[0].get("id")
    streamed = "".join(
        str(e.get("delta", ""))
        for e in events
        if e.get("type") == "response.function_call_arguments.delta" and e.get("item_id") == item_id
    )
    done = next(
        (
            e.get("arguments")
            for e in events
            if e.get("type") == "response.function_call_arguments.done"
            and e.get("item_id") == item_id
        ),
        None,
    )
    final = [
        i for i in output_items(terminal(events) or {}, "function_call") if i.get("id") == item_id
    ]
    final_args = final[0].get("arguments") if final else None
    # llama.cpp sends no .done event; output_item.done and response.completed carry the call, so
    # SDK users lose nothing: only a .done that disagrees is a defect.
    ctx.expect(
        streamed == final_args and done in (None, streamed),
        "the streamed function-call arguments do not add up",
        expected=f"deltas == completed arguments ({str(final_args)[:120]!r}) == .done (when sent)",
        received=f"deltas {streamed[:120]!r}, .done {str(done)[:120]!r}, completed {str(final_args)[:120]!r}",
        exchange=ex,
        hint="clients that assemble arguments from the deltas (the SDK's stream helpers, agent "
        "UIs) run a different call than the one the server reports",
    )
    try:
        json.loads(streamed)
    except ValueError as exc:
        ctx.fail(
            "the streamed function-call arguments are not JSON",
            expected="a JSON object",
            received=f"{exc}: {streamed[:200]!r}",
            exchange=ex,
        )


@check(
    "RESPONSES-TOOL-OUTPUT",
    "a function_call_output turn is accepted",
    "input [user message, the function_call item, a function_call_output with its call_id] gets "
    "200 with a message item in output (the agent loop's second step, stateless)",
    requires=("responses", "tools"),
)
def responses_tool_output(ctx: CheckContext) -> None:
    call = {
        "type": "function_call",
        "call_id": "call_servecheck1",
        "name": "get_weather",
        "arguments": json.dumps({"city": "Paris"}),
    }
    first = ctx.post(
        "/responses",
        request_body(
            ctx,
            "What is the weather in Paris?",
            tools=[WEATHER],
            tool_choice="required",
            max_output_tokens=64,
        ),
    )
    got = (
        output_items(first.json(), "function_call")
        if first.ok and isinstance(first.json(), dict)
        else []
    )
    if got and all(isinstance(got[0].get(k), str) for k in ("call_id", "name", "arguments")):
        call = {k: got[0][k] for k in ("type", "call_id", "name", "arguments")}
    turn = [
        {"role": "user", "content": "What is the weather in Paris?"},
        call,
        {
            "type": "function_call_output",
            "call_id": call["call_id"],
            "output": json.dumps({"temperature_c": 18}),
        },
    ]
    data, ex = create(ctx, turn, tools=[WEATHER], max_output_tokens=16)
    ctx.expect(
        bool(output_items(data, "message") or output_items(data, "function_call")),
        "the tool-output turn produced no output item",
        expected="output with a message (or another function_call)",
        received=body_snippet(data.get("output"), 300),
        exchange=ex,
        hint="function_call_output items are not rendered into the prompt; the agent loop stops",
    )


@check(
    "RESPONSES-FORMAT",
    "text.format json_schema gives JSON valid for the schema",
    "text: {format: {type: json_schema, name, schema, strict: true}} makes output_text a JSON "
    "document that validates against the schema",
    requires=("responses", "json_schema"),
)
def responses_format(ctx: CheckContext) -> None:
    import jsonschema

    fmt = {"type": "json_schema", "name": "colour", "schema": COLOUR_SCHEMA, "strict": True}
    data, ex = create(
        ctx, "Pick a colour and a count as JSON.", text={"format": fmt}, max_output_tokens=64
    )
    text = output_text(data)
    try:
        value = json.loads(text)
    except ValueError as exc:
        ctx.fail(
            "text.format json_schema did not give JSON",
            expected="output_text that parses as JSON",
            received=f"{exc}: {text[:200]!r}",
            exchange=ex,
            hint="text.format is not mapped to guided decoding on the responses route",
        )
    errors = list(jsonschema.Draft202012Validator(COLOUR_SCHEMA).iter_errors(value))
    ctx.expect(
        not errors,
        "the structured output does not validate against the schema",
        expected=json.dumps(COLOUR_SCHEMA),
        received="; ".join(e.message for e in errors[:3]) + f" -- {text[:200]!r}",
        exchange=ex,
    )


BAD_BODIES: list[tuple[str, dict[str, Any]]] = [
    ("input missing", {}),
    ("input of the wrong type", {"input": 42}),
    ("an unknown input item type", {"input": [{"type": "servecheck_bogus", "text": "hi"}]}),
]


@check(
    "RESPONSES-ERROR",
    "invalid /responses bodies get a 400 error object",
    "a body without input, with input 42, or with an unknown input item type gets a 4xx (not 5xx) "
    "with an OpenAI error object {error: {message, ...}}",
    requires=("responses", "route-accepts:/responses"),
)
def responses_error(ctx: CheckContext) -> None:
    for name, extra in BAD_BODIES:
        body = {"model": ctx.model, "max_output_tokens": 16, **extra}
        ex = ctx.post("/responses", body)
        ctx.expect(
            not ex.error and ex.status is not None and 400 <= ex.status < 500,
            f"{name}: not refused with a 4xx",
            expected="HTTP 400 with an error object",
            received=ex.describe(300),
            exchange=ex,
            hint="validate the Responses body before generating; a 5xx reads as an outage",
        )
        data = ex.json()
        err = data.get("error") if isinstance(data, dict) else None
        ctx.expect(
            isinstance(err, dict) and isinstance(err.get("message"), str),
            f"{name}: the refusal is not an OpenAI error object",
            expected="{error: {message: str, type: ..., code: ...}}",
            received=ex.describe(300),
            exchange=ex,
            deviation=detail_deviation(data),
        )


@check(
    "RESPONSES-MAX-OUTPUT",
    "an answer cut by max_output_tokens is marked incomplete",
    "with max_output_tokens 2 and a prompt that needs more, status is 'incomplete' with "
    "incomplete_details.reason 'max_output_tokens' (unless the answer ended by itself in 1 token)",
    requires=("responses",),
)
def responses_max_output(ctx: CheckContext) -> None:
    # 16 is OpenAI's minimum; engines accept less, and 2 is sure to cut a random model's answer.
    data, ex = create(ctx, "Write a long story about a river.", max_output_tokens=2)
    out = _usage(data).get("output_tokens")
    reason = (
        (data.get("incomplete_details") or {}).get("reason")
        if isinstance(data.get("incomplete_details"), dict)
        else None
    )
    ctx.expect(
        (data.get("status") == "incomplete" and reason == "max_output_tokens")
        or (isinstance(out, int) and out < 2),
        "an answer cut at max_output_tokens does not say so",
        expected="status 'incomplete', incomplete_details {reason: 'max_output_tokens'}",
        received=f"status {data.get('status')!r}, incomplete_details {data.get('incomplete_details')!r}, "
        f"output_tokens {out!r}, text {output_text(data)[:80]!r}",
        exchange=ex,
        hint="clients take a 'completed' cut answer as the whole answer (the chat API's "
        "finish_reason 'length' has this role here)",
    )
