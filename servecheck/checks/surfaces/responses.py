"""RESPONSES-*: the Responses API (``POST /v1/responses``) as agent frameworks and the SDK call it.

Bodies are validated with the openai SDK's own pydantic types (``openai.types.responses``):
what the SDK cannot parse, its users cannot use. The Open Responses schema, which requires more
than the SDK's types, is held by RESPONSES-OPEN-SCHEMA and RESPONSES-STREAM-OPEN-SCHEMA (our own
field table, read from the spec). The cases follow what the published types and the Open
Responses compliance suite cover (a basic answer, streaming, typed input items with system,
history and phase, instructions, function tools forced or named and their output turn, structured
output; each of the suite's cases is mapped in docs/coverage.md), plus the defects engines
shipped: an empty
``output`` on ``response.completed`` (vllm PR#30223), chat-style SSE on the responses route,
usage that disagrees between stream and answer, a tool call left as text.

Every request is stateless (``store: false``, the whole conversation in ``input``): engines that
keep no response store (Ollama, llama.cpp, vLLM by default) must still pass. RESPONSES-STORE
alone keeps state (``store`` true, ``GET /v1/responses/{id}``, ``previous_response_id``), for
targets with the ``responses_store`` capability.
"""

from __future__ import annotations

import json
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.registry import check
from servecheck.checks.surfaces.err import detail_deviation
from servecheck.checks.surfaces.logprobs import (
    comparable,
    empty_with_logprobs,
    joined_text,
    value_problems,
)
from servecheck.checks.surfaces.tools import BOTH, PARAMS
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
    "usage has integer input_tokens > 0 and output_tokens, total_tokens = input + output, "
    f"output_tokens <= max_output_tokens ({MAX_OUTPUT}), output_tokens_details.reasoning_tokens "
    "(where given) an integer in 0..output_tokens, and a completed response has "
    "incomplete_details null",
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
    expect_usage_details(ctx, data, ex)


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
    "streamed with tool_choice 'required', the function_call item is added and done "
    "(response.output_item.added / .done), its response.function_call_arguments.delta events "
    "concatenate to the arguments of the .done item, of response.completed's function_call and "
    "of the response.function_call_arguments.done event, which is sent, and parse as JSON",
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
    call_id = added[0].get("call_id")
    item_done = [
        e["item"]
        for e in events
        if e.get("type") == "response.output_item.done"
        and isinstance(e.get("item"), dict)
        and e["item"].get("type") == "function_call"
        and (e["item"].get("id") == item_id or e["item"].get("call_id") == call_id)
    ]
    ctx.expect(
        bool(item_done),
        "the streamed function_call item is never done",
        expected=f"response.output_item.done with the function_call item {item_id!r}",
        received=f"event types {[e.get('type') for e in events][-8:]}",
        exchange=ex,
        hint="stream consumers (the SDK's responses.stream(), agent UIs) run a call when its item "
        "is done; without the event the call stays in progress for them",
    )
    done_args = item_done[0].get("arguments")
    ctx.expect(
        streamed == final_args == done_args and done in (None, streamed),
        "the streamed function-call arguments do not add up",
        expected=f"deltas == completed arguments ({str(final_args)[:120]!r}) == output_item.done "
        "== .done",
        received=f"deltas {streamed[:120]!r}, .done {str(done)[:120]!r}, output_item.done "
        f"{str(done_args)[:120]!r}, completed {str(final_args)[:120]!r}",
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
    # Last, so a profile's allowance for it hides nothing above: llama.cpp sends no .done (the
    # item's done event and response.completed carry the call, so SDK users lose nothing).
    ctx.expect(
        done is not None,
        "the streamed function call has no response.function_call_arguments.done",
        expected=f"response.function_call_arguments.done for item {item_id!r} (the Open "
        "Responses event sequence has one per call)",
        received=f"event types {sorted({str(e.get('type')) for e in events})}",
        exchange=ex,
        deviation="responses-no-args-done",
        hint="send .done with the whole arguments after the last delta",
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
    (
        "text.format json_schema without a schema",
        {"input": "hi", "text": {"format": {"type": "json_schema", "name": "colour"}}},
    ),
    (
        "an unknown text.format type",
        {"input": "hi", "text": {"format": {"type": "servecheck_bogus"}}},
    ),
    (
        "a function_call item without call_id",
        {
            "input": [
                {"role": "user", "content": "What is the weather in Paris?"},
                {
                    "type": "function_call",
                    "name": "get_weather",
                    "arguments": json.dumps({"city": "Paris"}),
                },
            ]
        },
    ),
    (
        "a function_call_output item without call_id",
        {
            "input": [
                {"role": "user", "content": "What is the weather in Paris?"},
                {"type": "function_call_output", "output": json.dumps({"temperature_c": 18})},
            ]
        },
    ),
    (
        "a tool of an unknown type",
        {"input": "hi", "tools": [{"type": "servecheck_bogus", "name": "x"}]},
    ),
    (
        "a malformed previous_response_id",
        {"input": "hi", "previous_response_id": "not a response id!"},
    ),
]


@check(
    "RESPONSES-ERROR",
    "invalid /responses bodies get a 400 error object",
    "a body without input, with input 42, with an unknown input item type, with text.format "
    "json_schema without a schema, with an unknown text.format type, with a function_call or a "
    "function_call_output item without call_id (the API requires it on both), with a tool of an unknown type, or with a malformed "
    "previous_response_id gets a 4xx (not 5xx) with an OpenAI error object {error: {message, ...}}",
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


# ---- the Open Responses compliance suite's cases (docs/coverage.md) -------------------------
# The response fields the Open Responses schema requires, with the JSON types it allows. The
# openai SDK's Response type requires far fewer (and takes a float created_at); clients written
# against the Open Responses spec read these. metadata is left out: the schema takes any value.
OPEN_RESPONSE_FIELDS: dict[str, tuple[str, ...]] = {
    "id": ("string",),
    "object": ("string",),
    "created_at": ("integer",),
    "completed_at": ("integer", "null"),
    "status": ("string",),
    "incomplete_details": ("object", "null"),
    "model": ("string",),
    "previous_response_id": ("string", "null"),
    "instructions": ("string", "null"),
    "output": ("array",),
    "error": ("object", "null"),
    "tools": ("array",),
    "tool_choice": ("string", "object"),
    "truncation": ("string",),
    "parallel_tool_calls": ("boolean",),
    "text": ("object",),
    "top_p": ("number",),
    "presence_penalty": ("number",),
    "frequency_penalty": ("number",),
    "top_logprobs": ("integer",),
    "temperature": ("number",),
    "reasoning": ("object", "null"),
    "usage": ("object", "null"),
    "max_output_tokens": ("integer", "null"),
    "max_tool_calls": ("integer", "null"),
    "store": ("boolean",),
    "background": ("boolean",),
    "service_tier": ("string",),
    "safety_identifier": ("string", "null"),
    "prompt_cache_key": ("string", "null"),
}
OPEN_ITEM_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "message": {
        "id": ("string",),
        "status": ("string",),
        "role": ("string",),
        "content": ("array",),
    },
    "function_call": {
        "id": ("string",),
        "call_id": ("string",),
        "name": ("string",),
        "arguments": ("string",),
        "status": ("string",),
    },
}
OPEN_USAGE_FIELDS = ("input_tokens", "output_tokens", "total_tokens")
RESPONSE_STATUSES = ("completed", "failed", "in_progress", "cancelled", "queued", "incomplete")
ITEM_STATUSES = ("in_progress", "completed", "incomplete")
LIFECYCLE_EVENTS = ("response.created", "response.queued", "response.in_progress", *TERMINAL_EVENTS)


def json_kind(value: Any) -> str:
    """The JSON type of a decoded value; an integral number is 'integer' (and a 'number')."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}.get(type(value), "?")


def _field_problems(
    obj: dict[str, Any], fields: dict[str, tuple[str, ...]], where: str
) -> tuple[list[str], list[str]]:
    """(wrong, missing): fields of the wrong JSON type, and absent required fields."""
    wrong, missing = [], []
    for name, kinds in fields.items():
        if name not in obj:
            missing.append(f"{where}{name}")
            continue
        kind = json_kind(obj[name])
        if kind not in kinds and not (kind == "integer" and "number" in kinds):
            wrong.append(
                f"{where}{name}: {kind} {body_snippet(obj[name], 40)}, not {'|'.join(kinds)}"
            )
    return wrong, missing


def open_item_problems(item: Any, where: str) -> tuple[list[str], list[str]]:
    """What one output item lacks against the Open Responses item schema (message, function_call)."""
    if not isinstance(item, dict) or not isinstance(item.get("type"), str):
        return [f"{where}: not an item with a type: {body_snippet(item, 60)}"], []
    fields = OPEN_ITEM_FIELDS.get(item["type"])
    if fields is None:
        return [], []  # reasoning and hosted-tool items: the SDK's type covers them
    wrong, missing = _field_problems(item, fields, where)
    if "status" in item and item["status"] not in ITEM_STATUSES:
        wrong.append(f"{where}status: {item['status']!r}, not one of {ITEM_STATUSES}")
    content = item.get("content") if item["type"] == "message" else None
    for n, part in enumerate(content if isinstance(content, list) else []):
        if isinstance(part, dict) and part.get("type") == "output_text":
            w, m = _field_problems(
                part, {"text": ("string",), "annotations": ("array",)}, f"{where}content.{n}."
            )
            wrong, missing = wrong + w, missing + m
    return wrong, missing


def open_response_problems(resp: Any, where: str = "") -> tuple[list[str], list[str]]:
    """(wrong, missing) for a response object against the Open Responses ResponseResource."""
    if not isinstance(resp, dict):
        return [f"{where or 'the body'}: not a JSON object"], []
    wrong, missing = _field_problems(resp, OPEN_RESPONSE_FIELDS, where)
    if resp.get("object", "response") != "response":
        wrong.append(f"{where}object: {resp.get('object')!r}, not 'response'")
    if isinstance(resp.get("status"), str) and resp["status"] not in RESPONSE_STATUSES:
        wrong.append(f"{where}status: {resp['status']!r}, not one of {RESPONSE_STATUSES}")
    usage = resp.get("usage")
    if isinstance(usage, dict):
        w, m = _field_problems(
            usage, dict.fromkeys(OPEN_USAGE_FIELDS, ("integer",)), f"{where}usage."
        )
        wrong, missing = wrong + w, missing + m
        for detail, key in (
            ("input_tokens_details", "cached_tokens"),
            ("output_tokens_details", "reasoning_tokens"),
        ):
            sub = usage.get(detail)
            if not isinstance(sub, dict):
                missing.append(f"{where}usage.{detail}")
                continue
            w, m = _field_problems(sub, {key: ("integer",)}, f"{where}usage.{detail}.")
            wrong, missing = wrong + w, missing + m
    output = resp.get("output")
    for n, item in enumerate(output if isinstance(output, list) else []):
        w, m = open_item_problems(item, f"{where}output.{n}.")
        wrong, missing = wrong + w, missing + m
    return wrong, missing


HINT_OPEN = (
    "clients generated from the Open Responses schema (openresponses.org; its compliance suite "
    "parses every body with it) reject the response; send every field it requires, null where "
    "the value is unknown"
)


def expect_open_schema(
    ctx: CheckContext, wrong: list[str], missing: list[str], ex: Exchange, what: str
) -> None:
    """Fail on a wrong type; fail on missing fields with a deviation a profile may allow."""
    ctx.expect(
        not wrong,
        f"{what} has fields of the wrong type for the Open Responses schema",
        expected="every field with the JSON type the Open Responses schema gives it "
        "(created_at integer seconds, statuses from its enums ...)",
        received="; ".join(wrong[:6]) + (f"; missing {', '.join(missing[:8])}" if missing else ""),
        exchange=ex,
        hint=HINT_OPEN,
    )
    ctx.expect(
        not missing,
        f"{what} lacks fields the Open Responses schema requires",
        expected=f"these fields present (null only where the schema allows it): {', '.join(missing[:12])}",
        received=f"{len(missing)} missing: {', '.join(missing[:12])}",
        exchange=ex,
        deviation="responses-open-fields-missing",
        hint=HINT_OPEN,
    )


@check(
    "RESPONSES-OPEN-SCHEMA",
    "a response is the Open Responses ResponseResource",
    "a non-streamed response (input: one typed user message item) carries every field the Open "
    "Responses schema requires with its JSON type (created_at and completed_at integer seconds, "
    "store, background, service_tier, penalties, top_logprobs, usage details ...), its message "
    "items have id, status and role, and status is completed (or incomplete at the token limit)",
    requires=("responses",),
)
def responses_open_schema(ctx: CheckContext) -> None:
    item = {"type": "message", "role": "user", "content": "Say hello in exactly three words."}
    data, ex = create(ctx, [item])
    wrong, missing = open_response_problems(data)
    if data.get("status") not in ("completed", "incomplete"):
        wrong.append(f"status: {data.get('status')!r}, not completed")
    if not data.get("output"):
        wrong.append("output: empty")
    expect_open_schema(ctx, wrong, missing, ex, "the response")


@check(
    "RESPONSES-STREAM-OPEN-SCHEMA",
    "a streamed response is the Open Responses event sequence",
    "streamed, every event has an integer sequence_number, response.created / in_progress / "
    "completed each carry a whole Open Responses ResponseResource, every output_item.added / "
    ".done item has the item fields, and the terminal response has status completed (or "
    "incomplete) and a non-empty output",
    requires=("responses", "streaming"),
)
def responses_stream_open_schema(ctx: CheckContext) -> None:
    events, ex = stream(ctx, [{"type": "message", "role": "user", "content": "Count from 1 to 5."}])
    wrong: list[str] = []
    missing: list[str] = []
    for n, event in enumerate(events):
        kind = str(event.get("type"))
        if json_kind(event.get("sequence_number")) != "integer":
            (missing if "sequence_number" not in event else wrong).append(
                f"event {n} ({kind}).sequence_number"
            )
        if kind in LIFECYCLE_EVENTS:
            w, m = open_response_problems(event.get("response"), f"{kind}.response.")
        elif kind in ("response.output_item.added", "response.output_item.done"):
            w, m = open_item_problems(event.get("item"), f"{kind}.item.")
        else:
            continue
        wrong += [p for p in w if p not in wrong]
        missing += [p for p in m if p not in missing]
    final = terminal(events)
    if (
        final is None
        or final.get("status") not in ("completed", "incomplete")
        or not final.get("output")
    ):
        wrong.append(
            "no terminal response with status completed and output: "
            f"{body_snippet({k: (final or {}).get(k) for k in ('status', 'output')}, 160)}"
        )
    expect_open_schema(ctx, wrong, missing, ex, "the response stream")


# Conversation shapes the suite sends as typed input items, each with the prompt it must reach.
INPUT_ITEM_CASES: dict[str, list[dict[str, Any]]] = {
    "a system item": [
        {
            "type": "message",
            "role": "system",
            "content": "You are a pirate. Always answer in pirate speak, in one short line, and "
            "never mention ships, gold or the sea.",
        },
    ],
    "a multi-turn history": [
        {"type": "message", "role": "user", "content": "My name is Alice and I live in Lima."},
        {
            "type": "message",
            "role": "assistant",
            "content": "Hello Alice! Nice to meet you. How can I help you today in Lima?",
        },
    ],
    "assistant items with phase": [
        {
            "type": "message",
            "role": "assistant",
            "phase": "commentary",
            "content": "I should answer with the number the user saved earlier today.",
        },
        {
            "type": "message",
            "role": "assistant",
            "phase": "final_answer",
            "content": "The number you saved earlier today is four hundred and four.",
        },
    ],
    "a developer item of input_text parts": [
        {
            "type": "message",
            "role": "developer",
            "content": [
                {"type": "input_text", "text": "You are a terse assistant for a map shop."},
                {
                    "type": "input_text",
                    "text": "Answer in one short line and never mention prices, brands or "
                    "delivery times.",
                },
            ],
        },
    ],
    # A turn replayed as clients send it back: output items without id and status (annotations
    # left out too), and a function_call_output whose output is input_text parts.
    "a replayed tool turn without ids": [
        {"type": "message", "role": "user", "content": "What is the weather in Paris?"},
        {
            "type": "function_call",
            "call_id": "call_servecheck_replay",
            "name": "get_weather",
            "arguments": json.dumps({"city": "Paris"}),
        },
        {
            "type": "function_call_output",
            "call_id": "call_servecheck_replay",
            "output": [
                {"type": "input_text", "text": json.dumps({"temperature_c": 18, "sky": "clear"})}
            ],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "It is 18 degrees and clear in Paris."}],
        },
    ],
}
QUESTION_ITEM = {
    "type": "message",
    "role": "user",
    "content": [{"type": "input_text", "text": "What is my name?"}],
}


@check(
    "RESPONSES-INPUT-ITEMS",
    "typed input items (system, developer, history, phase, replayed turns) are accepted and "
    "reach the prompt",
    "input as typed message items gets 200 with a message answer for each conversation the Open "
    "Responses suite sends: a system item, a user/assistant/user history, and assistant items "
    "with phase commentary / final_answer; and for the shapes clients replay: a developer item "
    "of input_text parts and (with tools) a tool turn whose function_call and assistant "
    "output_text items carry no id or status and whose function_call_output is input_text "
    "parts; each counts more input_tokens than the last user item (input_text parts) alone "
    "with the same tools",
    requires=("responses",),
)
def responses_input_items(ctx: CheckContext) -> None:
    bases: dict[bool, Any] = {}
    for name, items in INPUT_ITEM_CASES.items():
        with_tools = any(i.get("type") == "function_call" for i in items)
        if with_tools and not ctx.capabilities.get("tools"):
            continue  # the tool turn is rendered with its tool declared
        tools = [WEATHER] if with_tools else None
        if with_tools not in bases:
            bare, _ = create(ctx, [QUESTION_ITEM], max_output_tokens=16, tools=tools)
            bases[with_tools] = _usage(bare).get("input_tokens")
        base = bases[with_tools]
        ex = ctx.post(
            "/responses",
            request_body(ctx, [*items, QUESTION_ITEM], max_output_tokens=16, tools=tools),
        )
        data = ctx.ok_json(ex, f"POST /v1/responses with {name}")
        answered = output_text(data) != "" or (with_tools and output_items(data, "function_call"))
        ctx.expect(
            data.get("status") in ("completed", "incomplete") and bool(answered),
            f"{name}: no message answer",
            expected="status completed (or incomplete) and a message with output_text"
            + (" (or another function_call)" if with_tools else ""),
            received=f"status {data.get('status')!r}, output {body_snippet(data.get('output'), 300)}",
            exchange=ex,
        )
        got = _usage(data).get("input_tokens")
        ctx.expect(
            isinstance(got, int) and isinstance(base, int) and got > base + 5,
            f"{name}: the items did not reach the prompt",
            expected=f"input_tokens > {base} + 5 (the question alone)",
            received=f"input_tokens {got}",
            exchange=ex,
            hint="every message item in input, whatever its role, must be rendered into the "
            "prompt; dropping system or assistant items changes what the model is asked",
        )


CLOCK = {
    "type": "function",
    "name": "get_time",
    "description": "Current time in a time zone",
    "parameters": PARAMS["get_time"],
    "strict": True,
}


@check(
    "RESPONSES-TOOL-CHOICE-NAMED",
    "tool_choice {type: function, name} calls that function",
    "with tools [get_weather, get_time], a weather question and tool_choice {type: function, "
    "name: get_time}, every function_call item names get_time with arguments valid for its "
    "parameters (the Open Responses round-trip case forces its call this way), and the item has "
    "the Open Responses function_call fields (id, call_id, name, arguments, status)",
    requires=("responses", "tools", "tool_choice_named"),
)
def responses_tool_choice_named(ctx: CheckContext) -> None:
    import jsonschema

    data, ex = create(
        ctx,
        "What is the weather in Paris?",
        tools=[WEATHER, CLOCK],
        tool_choice={"type": "function", "name": "get_time"},
        max_output_tokens=64,
        parallel_tool_calls=False,
    )
    calls = output_items(data, "function_call")
    ctx.expect(
        bool(calls) and all(c.get("name") == "get_time" for c in calls),
        "the named tool_choice was not followed",
        expected="output: function_call items naming get_time only",
        received=f"output {body_snippet(data.get('output'), 400)}",
        exchange=ex,
        hint="an object tool_choice must force that function (a guided decode of its call), not "
        "any tool and not free text",
    )
    try:
        args = json.loads(calls[0].get("arguments") or "")
    except (TypeError, ValueError) as exc:
        ctx.fail(
            "the forced call's arguments are not JSON",
            expected="arguments: a JSON object as a string",
            received=f"{exc}: {str(calls[0].get('arguments'))[:200]!r}",
            exchange=ex,
        )
    errors = list(jsonschema.Draft202012Validator(CLOCK["parameters"]).iter_errors(args))
    ctx.expect(
        not errors,
        "the forced call's arguments do not validate against get_time's parameters",
        expected=json.dumps(CLOCK["parameters"]),
        received="; ".join(e.message for e in errors[:3]) + f" -- {body_snippet(args, 200)}",
        exchange=ex,
    )
    # The suite parses the call with the Open Responses schema: the item's id and status, which
    # the SDK's type leaves optional, are required there.
    wrong, missing = open_item_problems(calls[0], "output.function_call.")
    expect_open_schema(ctx, wrong, missing, ex, "the function_call item")


# ---- issue 25 wave 3: event pairing, tool_choice none, cut calls, usage details, logprobs -----
def expect_usage_details(ctx: CheckContext, data: dict[str, Any], ex: Exchange) -> None:
    """RESPONSES-USAGE's widened part: reasoning_tokens in range, no details on a completed answer."""
    usage = _usage(data)
    out = usage.get("output_tokens")
    details = usage.get("output_tokens_details")
    reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
    ctx.expect(
        reasoning is None
        or (
            isinstance(reasoning, int) and not isinstance(reasoning, bool) and 0 <= reasoning <= out  # type: ignore[operator]
        ),
        "usage.output_tokens_details.reasoning_tokens is out of range",
        expected=f"reasoning_tokens an integer in 0..output_tokens ({out})",
        received=body_snippet(usage, 300),
        exchange=ex,
        hint="reasoning tokens are output tokens the answer does not show: they are counted in "
        "output_tokens, never more than it; send 0 for a model that does not reason",
    )
    ctx.expect(
        data.get("status") != "completed" or data.get("incomplete_details") is None,
        "a completed response carries incomplete_details",
        expected="incomplete_details null when status is 'completed'",
        received=f"status 'completed', incomplete_details {body_snippet(data.get('incomplete_details'))}",
        exchange=ex,
        hint="clients read a non-null incomplete_details as a cut answer (the SDK's users test it "
        "before status); send it only with status 'incomplete'",
    )


TEXT_PART_EVENTS = ("response.output_text.", "response.refusal.")


def _item_key(event: dict[str, Any]) -> str:
    item = event.get("item")
    item_id = item.get("id") if isinstance(item, dict) else None
    return item_id if isinstance(item_id, str) else f"#{event.get('output_index')}"


class _Pairing:
    """The open/close state of one response stream's items and content parts."""

    def __init__(self) -> None:
        self.items: dict[str, str] = {}  # item id -> open | done
        self.parts: dict[tuple[str, Any], str] = {}  # (item id, content_index) -> open | done
        self.closed: set[tuple[str, Any, Any]] = set()  # (event type, item id, content_index)
        self.problems: list[str] = []
        self.unknown: set[str] = set()  # item ids already reported as not open

    def item_event(self, where: str, kind: str, event: dict[str, Any]) -> None:
        key, state = _item_key(event), self.items.get(_item_key(event))
        if kind == "response.output_item.added":
            if state is not None:
                self.problems.append(f"{where} announces item {key!r} a second time")
            self.items[key] = "open"
            return
        if state != "open":
            why = "already done" if state else "never announced by output_item.added"
            self.problems.append(f"{where} closes item {key!r}, {why}")
        still = [p for p, s in self.parts.items() if p[0] == key and s == "open"]
        if still:
            self.problems.append(f"{where} closes item {key!r} with content parts open: {still}")
        self.items[key] = "done"

    def named_event(self, where: str, kind: str, event: dict[str, Any]) -> None:
        item_id = event.get("item_id")
        state = self.items.get(str(item_id))
        if state != "open" and str(item_id) not in self.unknown:
            self.unknown.add(str(item_id))
            why = "already done" if state else "which no output_item.added announced"
            self.problems.append(f"{where} names item {item_id!r}, {why}")
        part = (str(item_id), event.get("content_index", 0))
        if kind == "response.content_part.added":
            if part in self.parts:
                self.problems.append(f"{where} adds content part {part} a second time")
            self.parts[part] = "open"
            return
        if kind == "response.content_part.done":
            if self.parts.get(part) != "open":
                self.problems.append(f"{where} closes content part {part}, which is not open")
            self.parts[part] = "done"
            return
        if (
            kind.startswith(TEXT_PART_EVENTS)
            and self.parts.get(part) != "open"
            and str(item_id) not in self.unknown
        ):
            self.problems.append(
                f"{where} writes to content part {part}, which is not open "
                "(no content_part.added before it, or already done)"
            )
        family = kind.rsplit(".", 1)[0]
        if (family, str(item_id), part[1]) in self.closed:
            self.problems.append(f"{where} comes after {family}.done for the same item and part")
        if kind.endswith(".done"):
            self.closed.add((family, str(item_id), part[1]))

    def left_open(self) -> list[str]:
        items = [k for k, s in self.items.items() if s == "open"]
        parts = [p for p, s in self.parts.items() if s == "open"]
        return ([f"items never done: {items}"] if items else []) + (
            [f"content parts never done: {parts}"] if parts else []
        )


def pairing_problems(events: list[dict[str, Any]]) -> list[str]:
    """Where a response stream's events do not pair up (empty when they do)."""
    pairing = _Pairing()
    problems = pairing.problems
    ids: list[Any] = []
    ended = False
    for n, event in enumerate(events):
        kind = str(event.get("type"))
        where = f"event {n} ({kind})"
        if ended:
            problems.append(f"{where} comes after the terminal event")
            break
        if kind in LIFECYCLE_EVENTS:
            raw = event.get("response")
            resp: dict[str, Any] = raw if isinstance(raw, dict) else {}
            ids.append(resp.get("id"))
            ended = kind in TERMINAL_EVENTS
            if not ended and resp.get("usage") is not None:
                problems.append(f"{where} carries usage {body_snippet(resp['usage'], 80)}")
        elif event.get("usage") is not None:
            problems.append(f"{where} carries usage {body_snippet(event['usage'], 80)}")
        elif kind in ("response.output_item.added", "response.output_item.done"):
            pairing.item_event(where, kind, event)
        elif "item_id" in event:
            pairing.named_event(where, kind, event)
    if not ended:
        problems.append("no terminal event (response.completed / incomplete / failed)")
    problems += pairing.left_open()
    if not ids or len(set(map(str, ids))) != 1 or not isinstance(ids[0], str) or not ids[0]:
        problems.append(f"the lifecycle events carry response ids {ids}, not one id")
    return problems


@check(
    "RESPONSES-STREAM-PAIRS",
    "a streamed response's events open and close in pairs",
    "streamed (a text answer, and a forced function call where tools are served), the lifecycle "
    "events (created, in_progress, completed) carry one response id; every content_part / "
    "output_text / function_call_arguments event names an item announced by output_item.added "
    "and not yet done, and output_text events an open content part; every .done closes a "
    "matching .added (or its deltas) once; no item or part is left open at the end; only the "
    "terminal response carries usage (created / in_progress have usage null)",
    requires=("responses", "streaming"),
)
def responses_stream_pairs(ctx: CheckContext) -> None:
    runs: list[tuple[str, str, dict[str, Any]]] = [("a text answer", PROMPT, {})]
    if ctx.capabilities.get("tools"):
        forced = {
            "tools": [WEATHER],
            "tool_choice": "required",
            "max_output_tokens": 64,
            "parallel_tool_calls": False,
        }
        runs.append(("a forced function call", "What is the weather in Paris?", forced))
    for name, prompt, params in runs:
        events, ex = stream(ctx, prompt, **params)
        problems = pairing_problems(events)
        ctx.expect(
            not problems,
            f"{name}: the stream's events do not pair up",
            expected="created -> in_progress -> output_item.added -> content_part.added -> "
            "deltas -> .done events -> content_part.done -> output_item.done -> completed, one "
            "response id, usage only on the terminal response",
            received="; ".join(problems[:6])
            + f" -- event types {[e.get('type') for e in events][:14]}",
            exchange=ex,
            hint="stream consumers (the SDK's responses.stream(), agent UIs) build the answer from "
            "these events: an item never announced or never done, a second id or an early usage "
            "leaves them with a wrong or unfinished answer",
        )


@check(
    "RESPONSES-TOOL-CHOICE-NONE",
    "tool_choice 'none' answers without a function call",
    "with tools [get_weather], a prompt naming it and tool_choice 'none', the response has a "
    "message item and no function_call item",
    requires=("responses", "tools"),
)
def responses_tool_choice_none(ctx: CheckContext) -> None:
    data, ex = create(
        ctx,
        "Call get_weather for Paris.",
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=16,
    )
    calls = output_items(data, "function_call")
    ctx.expect(
        not calls and bool(output_items(data, "message")),
        "tool_choice 'none' still produced a function call",
        expected="output: a message item, no function_call item",
        received=f"output {body_snippet(data.get('output'), 400)}",
        exchange=ex,
        hint="'none' forbids calls: do not parse (or constrain) tool calls when tool_choice is "
        "'none'; an agent that sent it runs no tool and is left with no answer",
    )


TOOL_LENGTH_LIMIT = 3  # far fewer tokens than any get_weather call with its arguments needs


@check(
    "RESPONSES-TOOL-LENGTH",
    "a forced call cut by max_output_tokens is marked incomplete",
    f"with tool_choice 'required' and max_output_tokens {TOOL_LENGTH_LIMIT}, the response has "
    "status 'incomplete' with incomplete_details.reason 'max_output_tokens', usage.output_tokens "
    "present and <= "
    f"{TOOL_LENGTH_LIMIT}, and any function_call item left in output has status 'incomplete' "
    "(none is presented as completed), unless the whole call fit (arguments JSON, status completed)",
    requires=("responses", "tools"),
)
def responses_tool_length(ctx: CheckContext) -> None:
    data, ex = create(
        ctx,
        "What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
        max_output_tokens=TOOL_LENGTH_LIMIT,
        parallel_tool_calls=False,
    )
    calls = output_items(data, "function_call")
    out = _usage(data).get("output_tokens")
    counted = isinstance(out, int) and not isinstance(out, bool)
    within = counted and out <= TOOL_LENGTH_LIMIT  # type: ignore[operator]
    fit = data.get("status") == "completed" and calls and counted and within
    if fit and all(_is_json(c) for c in calls):
        return  # the whole call fit in the limit: nothing was cut
    details = data.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    ctx.expect(
        data.get("status") == "incomplete" and reason == "max_output_tokens" and within,
        "a function call cut by max_output_tokens does not say so",
        expected=f"status 'incomplete', incomplete_details {{reason: 'max_output_tokens'}}, "
        f"output_tokens <= {TOOL_LENGTH_LIMIT}",
        received=f"status {data.get('status')!r}, incomplete_details {details!r}, output_tokens "
        f"{out!r}, output {body_snippet(data.get('output'), 200)}",
        exchange=ex,
        hint="apply max_output_tokens to tool calls too and mark the cut response incomplete, "
        "as a cut text answer is",
    )
    done = [c for c in calls if c.get("status") in (None, "completed")]
    ctx.expect(
        not done,
        "a function call cut by max_output_tokens is presented as completed",
        expected="no function_call item, or one with status 'incomplete'",
        received=f"function_call items {body_snippet(done, 300)}",
        exchange=ex,
        hint="an agent runs every completed function_call item: a call cut mid-arguments must "
        "be dropped or marked incomplete",
    )


def _is_json(call: dict[str, Any]) -> bool:
    try:
        json.loads(call.get("arguments") or "")
    except (TypeError, ValueError):
        return False
    return True


LOGPROBS_INCLUDE = "message.output_text.logprobs"
TOP_K = 2
LOGPROBS_TOLERANCE = 1e-4  # the same logprob written in two events


def part_logprobs(items: Any) -> list[Any] | None:
    """The logprobs entries of the output_text parts of message items (None: none is a list)."""
    out: list[Any] = []
    found = False
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        for part in item.get("content") or []:
            if isinstance(part, dict) and isinstance(part.get("logprobs"), list):
                found = True
                out += part["logprobs"]
    return out if found else None


def _same_entries(a: list[Any], b: list[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if not (isinstance(x, dict) and isinstance(y, dict)) or x.get("token") != y.get("token"):
            return False
        lx, ly = x.get("logprob"), y.get("logprob")
        if not isinstance(lx, int | float) or not isinstance(ly, int | float):
            return False
        if abs(lx - ly) > LOGPROBS_TOLERANCE:
            return False
    return True


def _tokens(entries: list[Any]) -> list[Any]:
    return [e.get("token") if isinstance(e, dict) else e for e in entries][:10]


@check(
    "RESPONSES-LOGPROBS",
    "include message.output_text.logprobs gives logprobs that spell the text",
    f"with include ['{LOGPROBS_INCLUDE}'] and top_logprobs {TOP_K}, the output_text part has "
    f"logprobs: every logprob a finite number <= 0, {TOP_K} top_logprobs alternatives each, the "
    "tokens (their bytes where given) joined equal the text, no more entries than output_tokens; "
    "streamed, the output_text deltas' logprobs entries, in order, equal the finished part's "
    "(response.completed, content_part.done) and the response.output_text.done event's; an empty "
    "output_text skips only when the same request without logprobs is empty too",
    requires=("responses", "logprobs"),
)
def responses_logprobs(ctx: CheckContext) -> None:
    params = {"include": [LOGPROBS_INCLUDE], "top_logprobs": TOP_K, "max_output_tokens": 16}
    data, ex = create(ctx, **params)
    text = output_text(data)
    if not text:
        plain, _ = create(ctx, max_output_tokens=16)
        empty_with_logprobs(ctx, output_text(plain), ex, "the output_text")
    entries = part_logprobs(data.get("output")) or []
    ctx.expect(
        bool(entries),
        "include message.output_text.logprobs gave no logprobs",
        expected="output[].content[].logprobs: [{token, logprob, bytes, top_logprobs}, ...]",
        received=f"output {body_snippet(data.get('output'), 400)}",
        exchange=ex,
        hint="map include ['message.output_text.logprobs'] and top_logprobs onto the sampler's "
        "logprobs (evals and confidence scores read them)",
    )
    problems = value_problems(entries, TOP_K)
    ctx.expect(
        not problems,
        "the output_text logprobs are malformed",
        expected=f"each entry {{token: str, logprob <= 0, top_logprobs: {TOP_K} entries}}",
        received="; ".join(problems[:4]),
        exchange=ex,
    )
    spelled = joined_text(entries)
    ctx.expect(
        comparable(spelled) == comparable(text),
        "the logprobs tokens do not spell the output_text",
        expected=f"tokens joined == {text[:200]!r}",
        received=f"{len(entries)} tokens joined: {spelled[:200]!r}",
        exchange=ex,
        hint="each token must be the exact text it adds (leading spaces kept) and bytes its UTF-8",
    )
    out = _usage(data).get("output_tokens")
    ctx.expect(
        not isinstance(out, int) or len(entries) <= out,
        "there are more logprobs entries than output tokens",
        expected=f"at most usage.output_tokens = {out} entries",
        received=f"{len(entries)} entries",
        exchange=ex,
    )
    if ctx.capabilities.get("streaming"):
        _streamed_logprobs(ctx, params)


def _streamed_logprobs(ctx: CheckContext, params: dict[str, Any]) -> None:
    events, ex = stream(ctx, **params)
    streamed: list[Any] = []
    for e in events:
        if e.get("type") == "response.output_text.delta" and isinstance(e.get("logprobs"), list):
            streamed += e["logprobs"]
    ctx.expect(
        bool(streamed) and not value_problems(streamed, TOP_K),
        "the streamed output_text deltas carry no well-formed logprobs",
        expected=f"response.output_text.delta events with logprobs [{{token, logprob <= 0, "
        f"top_logprobs: {TOP_K} entries}}]",
        received="; ".join(value_problems(streamed, TOP_K)[:3])
        or f"{len(streamed)} entries in {sum(e.get('type') == 'response.output_text.delta' for e in events)} deltas",
        exchange=ex,
        hint="a streaming client gets logprobs only from the deltas",
    )
    finished = {"response.completed": part_logprobs((terminal(events) or {}).get("output"))}
    parts = [
        e["part"]["logprobs"]
        for e in events
        if e.get("type") == "response.content_part.done"
        and isinstance(e.get("part"), dict)
        and isinstance(e["part"].get("logprobs"), list)
    ]
    if parts:
        finished["content_part.done"] = [x for p in parts for x in p]
    differ = {k: v for k, v in finished.items() if not _same_entries(streamed, v or [])}
    ctx.expect(
        not differ,
        "the streamed logprobs do not add up to the finished part's",
        expected=f"the deltas' {len(streamed)} entries, tokens {_tokens(streamed)}",
        received="; ".join(
            f"{k}: {len(v or [])} entries, tokens {_tokens(v or [])}" for k, v in differ.items()
        ),
        exchange=ex,
        hint="each delta must carry the entries of exactly the tokens it adds",
    )
    done: list[Any] = []
    for e in events:
        if e.get("type") == "response.output_text.done" and isinstance(e.get("logprobs"), list):
            done += e["logprobs"]
    ctx.expect(
        _same_entries(streamed, done) or not done,
        "response.output_text.done's logprobs differ from the deltas'",
        expected=f"{len(streamed)} entries, tokens {_tokens(streamed)}",
        received=f"{len(done)} entries, tokens {_tokens(done)}",
        exchange=ex,
    )
    # Last, so a profile's allowance for it hides nothing above (vLLM 0.32 leaves it empty).
    ctx.expect(
        bool(done),
        "response.output_text.done carries no logprobs",
        expected=f"logprobs: the {len(streamed)} entries the deltas carried",
        received="logprobs [] (or missing)",
        exchange=ex,
        deviation="responses-text-done-no-logprobs",
        hint="send the whole part's logprobs in output_text.done, as content_part.done has them",
    )


# ---- stored responses and parallel calls (RESPONSES-STORE, RESPONSES-TOOL-PARALLEL) --------
# The only checks that keep state on the server: a response created with store true, read back
# and continued with previous_response_id. Engines without a store (vLLM unless
# VLLM_ENABLE_RESPONSES_API_STORE=1, llama.cpp) leave the capability off.
STORE_FACT = (
    "My name is Alice, I live in Lima, I keep two cats called Sol and Luna, and my favourite "
    "colour is green."
)
STORE_QUESTION = "What is my name?"
STORE_BRANCH = (
    "Forget all that. My name is Bob, I live in Oslo, and I walk my dog Rex in the snow every "
    "morning before work."
)
UNKNOWN_RESPONSE_ID = "resp_servecheck0unknown0000000000"
HINT_STORE = (
    "keep a response created with store true for GET /v1/responses/{id} and previous_response_id "
    "(vLLM: VLLM_ENABLE_RESPONSES_API_STORE=1), or declare capabilities: {responses_store: false}"
)


def _expect_not_found(
    ctx: CheckContext, ex: Exchange, what: str, statuses: tuple[int, ...], hint: str
) -> None:
    """A refusal with one of ``statuses`` and an OpenAI error object."""
    ctx.expect(
        not ex.error and ex.status in statuses,
        f"{what}: not refused as not found",
        expected=f"HTTP {' or '.join(map(str, statuses))} with an error object",
        received=ex.describe(300),
        exchange=ex,
        hint=hint,
    )
    data = ex.json()
    err = data.get("error") if isinstance(data, dict) else None
    ctx.expect(
        isinstance(err, dict) and isinstance(err.get("message"), str),
        f"{what}: the refusal is not an OpenAI error object",
        expected="{error: {message: str, type: ..., code: ...}}",
        received=ex.describe(300),
        exchange=ex,
        deviation=detail_deviation(data),
    )


def _retrieve(ctx: CheckContext, parent: dict[str, Any], pid: str) -> None:
    """GET /v1/responses/{id} returns the stored response."""
    ex = ctx.get(f"/responses/{pid}")
    ctx.expect(
        not ex.error and ex.status == 200,
        "a store true response cannot be retrieved",
        expected=f"GET /v1/responses/{pid}: HTTP 200 with the response",
        received=ex.describe(300),
        exchange=ex,
        hint=HINT_STORE,
    )
    got = ctx.ok_json(ex, f"GET /v1/responses/{pid}")
    ctx.expect(
        got.get("id") == pid
        and got.get("status") == parent.get("status")
        and output_text(got) == output_text(parent),
        "the retrieved response is not the one created",
        expected=f"id {pid!r}, status {parent.get('status')!r}, output_text "
        f"{output_text(parent)[:80]!r}",
        received=f"id {got.get('id')!r}, status {got.get('status')!r}, output_text "
        f"{output_text(got)[:80]!r}",
        exchange=ex,
    )


def _input_tokens(ctx: CheckContext, data: dict[str, Any], ex: Exchange, what: str) -> int:
    got = _usage(data).get("input_tokens")
    if not isinstance(got, int) or isinstance(got, bool):
        ctx.fail(
            f"{what}: usage has no input_tokens",
            expected="usage.input_tokens, an integer (the chain is judged by it)",
            received=body_snippet(data.get("usage")),
            exchange=ex,
        )
    return int(got)


@check(
    "RESPONSES-STORE",
    "stored responses are retrieved and chained by previous_response_id",
    "a response created with store true (and instructions) is returned by GET "
    "/v1/responses/{id}; a request with its previous_response_id counts more input_tokens than "
    "the parent's input alone, echoes previous_response_id, and does not inherit the parent's "
    "instructions (fewer input_tokens than the stateless replay of the conversation plus half "
    "of what the instructions add); a second branch from the same parent counts exactly the "
    "tokens of the first (branches are independent); a store false response and an unknown id "
    "get a 404 error object on GET, and a 404 (or 400) error object as previous_response_id",
    requires=("responses", "responses_store"),
)
def responses_store(ctx: CheckContext) -> None:
    parent, pex = create(
        ctx, STORE_FACT, store=True, instructions=INSTRUCTIONS, max_output_tokens=8
    )
    pid = parent.get("id")
    if not isinstance(pid, str) or not pid:
        ctx.fail(
            "the stored response has no id",
            expected="a response with a non-empty id",
            received=body_snippet(parent, 200),
            exchange=pex,
        )
    _retrieve(ctx, parent, pid)
    unstored, uex = create(ctx, STORE_FACT, max_output_tokens=8)  # store false, no instructions
    child, cex = create(ctx, STORE_QUESTION, previous_response_id=pid, max_output_tokens=8)
    replay_input = [
        {"type": "message", "role": "user", "content": STORE_FACT},
        {"type": "message", "role": "assistant", "content": output_text(parent)},
        {"type": "message", "role": "user", "content": STORE_QUESTION},
    ]
    replay, rex = create(ctx, replay_input, max_output_tokens=8)
    own = _input_tokens(ctx, unstored, uex, "the unstored first turn")
    added = _input_tokens(ctx, parent, pex, "the stored response") - own
    got = _input_tokens(ctx, child, cex, "the chained request")
    want = _input_tokens(ctx, replay, rex, "the stateless replay")
    ctx.expect(
        got > own,
        "previous_response_id did not bring the stored conversation",
        expected=f"input_tokens > {own} (the parent's input alone; the stateless replay counts "
        f"{want})",
        received=f"input_tokens {got}",
        exchange=cex,
        hint="render the parent's input and output before the new input; agents that send only "
        "the new turn lose the conversation",
    )
    ctx.expect(
        child.get("previous_response_id") == pid,
        "the chained response does not echo previous_response_id",
        expected=f"previous_response_id {pid!r}",
        received=f"previous_response_id {body_snippet(child.get('previous_response_id'), 80)}",
        exchange=cex,
        hint="the response object carries the previous_response_id it was created with; "
        "clients walk the chain back by it",
    )
    ctx.expect(
        added > 10,
        "the parent's instructions did not reach its prompt, so their inheritance cannot be told",
        expected=f"input_tokens with instructions > {own} + 10",
        received=f"input_tokens {own + added}",
        exchange=pex,
        hint="see RESPONSES-INSTRUCTIONS",
    )
    ctx.expect(
        got < want + added / 2 and not child.get("instructions"),
        "the chained request inherited the parent's instructions",
        expected=f"input_tokens about {want} (the stateless replay, no instructions; the "
        f"instructions add {added}), instructions null",
        received=f"input_tokens {got}, instructions {body_snippet(child.get('instructions'), 60)}",
        exchange=cex,
        hint="instructions are not carried over with previous_response_id (the API reference); "
        "an agent that changes them per turn gets both",
    )
    _branches(ctx, pid, got)
    _not_found_cases(ctx, unstored.get("id"))


def _branches(ctx: CheckContext, pid: str, first: int) -> None:
    """A sibling branch from the same parent leaves the first branch's prompt as it was."""
    create(ctx, STORE_BRANCH, previous_response_id=pid, store=True, max_output_tokens=8)
    again, ex = create(ctx, STORE_QUESTION, previous_response_id=pid, max_output_tokens=8)
    got = _input_tokens(ctx, again, ex, "the second branch")
    ctx.expect(
        got == first,
        "two branches from one parent are not independent",
        expected=f"input_tokens {first} (the same request before a sibling branch was made)",
        received=f"input_tokens {got}",
        exchange=ex,
        hint="each request chained by previous_response_id must read the parent's conversation "
        "as stored, not a history its siblings appended to",
    )


def _not_found_cases(ctx: CheckContext, unstored_id: Any) -> None:
    ids = [("an unknown id", UNKNOWN_RESPONSE_ID)]
    if isinstance(unstored_id, str) and unstored_id:
        ids.insert(0, ("a store false response", unstored_id))
    for what, rid in ids:
        _expect_not_found(
            ctx,
            ctx.get(f"/responses/{rid}"),
            f"GET /v1/responses/{{id}} of {what}",
            (404,),
            hint="a response kept despite store false leaks what the client asked not to keep"
            if what.startswith("a store")
            else "answer an unknown id with 404 and an error object",
        )
        ex = ctx.post(
            "/responses",
            request_body(ctx, STORE_QUESTION, previous_response_id=rid, max_output_tokens=8),
        )
        _expect_not_found(
            ctx,
            ex,
            f"previous_response_id of {what}",
            (404, 400),
            hint="refuse a previous_response_id that names no stored response (OpenAI: "
            "previous_response_not_found); answering without it drops the conversation silently",
        )


@check(
    "RESPONSES-TOOL-PARALLEL",
    "parallel_tool_calls is honoured, and parallel calls stream as their own items",
    "with tools [get_weather, get_time], a prompt asking for both and tool_choice 'required': "
    "parallel_tool_calls false gives at most one function_call item; streamed with "
    "parallel_tool_calls true, every function_call item added has its own output_index, id and "
    "call_id, its argument deltas (by item_id) join to its output_item.done arguments, which "
    "parse as JSON, and response.completed's output holds that call at that output_index "
    "(skipped when the streamed request makes a single call)",
    requires=("responses", "tools", "streaming"),
)
def responses_tool_parallel(ctx: CheckContext) -> None:
    params: dict[str, Any] = {
        "tools": [WEATHER, CLOCK],
        "tool_choice": "required",
        "max_output_tokens": 96,
    }
    data, ex = create(ctx, BOTH, parallel_tool_calls=False, **params)
    calls = output_items(data, "function_call")
    ctx.expect(
        len(calls) <= 1,
        f"parallel_tool_calls false returned {len(calls)} function_call items",
        expected="at most one function_call item",
        received=f"calls to {[c.get('name') for c in calls]}",
        exchange=ex,
        hint="the engine ignores parallel_tool_calls on /v1/responses; clients that run one call "
        "per turn drop the others",
    )
    events, sex = stream(ctx, BOTH, parallel_tool_calls=True, **params)
    added = [
        (e.get("output_index"), e["item"])
        for e in events
        if e.get("type") == "response.output_item.added"
        and isinstance(e.get("item"), dict)
        and e["item"].get("type") == "function_call"
    ]
    if len(added) < 2:
        raise CheckSkipped(
            f"{ctx.check_id}: parallel_tool_calls false gave {len(calls)} call(s); streamed with "
            f"parallel_tool_calls true the server made {len(added)} call(s) for a prompt naming "
            "two tools, so parallel streaming could not be observed"
        )
    problems = _parallel_problems(events, added)
    ctx.expect(
        not problems,
        "parallel streamed function calls cannot be told apart",
        expected="each function_call item: its own output_index, id and call_id, deltas that "
        "join to its done arguments (JSON), and the same call at that index of response.completed",
        received="; ".join(problems[:5]),
        exchange=sex,
        hint="stream consumers (the SDK's responses.stream(), agent UIs) file deltas and done "
        "events by item and output_index: shared ones mix two calls into one",
    )


def _parallel_problems(
    events: list[dict[str, Any]], added: list[tuple[Any, dict[str, Any]]]
) -> list[str]:
    problems = []
    for key, values in (
        ("output_index", [index for index, _ in added]),
        ("id", [item.get("id") for _, item in added]),
        ("call_id", [item.get("call_id") for _, item in added]),
    ):
        if len(set(map(str, values))) != len(values):
            problems.append(f"the calls share {key}: {values}")
    final = terminal(events) or {}
    got = final.get("output")
    output: list[Any] = got if isinstance(got, list) else []
    for n, (index, item) in enumerate(added):
        item_id = item.get("id")
        streamed = "".join(
            str(e.get("delta", ""))
            for e in events
            if e.get("type") == "response.function_call_arguments.delta"
            and e.get("item_id") == item_id
        )
        done = next(
            (
                e["item"]
                for e in events
                if e.get("type") == "response.output_item.done"
                and isinstance(e.get("item"), dict)
                and e["item"].get("id") == item_id
            ),
            None,
        )
        if done is None or done.get("arguments") != streamed:
            problems.append(
                f"item {item_id!r}: deltas {streamed[:60]!r}, done arguments "
                f"{str((done or {}).get('arguments'))[:60]!r}"
            )
        elif not (final.get("status") == "incomplete" and n == len(added) - 1):
            try:
                json.loads(streamed)  # the last call may be cut by max_output_tokens
            except ValueError:
                problems.append(f"item {item_id!r}: arguments {streamed[:60]!r} are not JSON")
        at = output[index] if isinstance(index, int) and 0 <= index < len(output) else None
        if not isinstance(at, dict) or at.get("call_id") != item.get("call_id"):
            problems.append(
                f"response.completed output[{index}] is {body_snippet(at, 80)}, not the call "
                f"{item.get('call_id')!r}"
            )
    return problems


@check(
    "RESPONSES-STREAM-REASONING-TOOL",
    "a streamed forced call with reasoning completes with one function_call",
    "streamed with reasoning {effort: low}, tools [get_weather], tool_choice 'required' and "
    "parallel_tool_calls false, the stream reaches response.completed, whose output holds exactly "
    "one function_call item, announced once (response.output_item.added) and named get_weather "
    "(vLLM #55284: the reasoning parser's copy of the call was listed beside the tool parser's)",
    requires=("responses", "tools", "streaming"),
)
def responses_stream_reasoning_tool(ctx: CheckContext) -> None:
    body = request_body(
        ctx,
        "What is the weather in Paris?",
        stream=True,
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        reasoning={"effort": "low"},
        max_output_tokens=256,  # room to reason before the call
    )
    ex = ctx.post("/responses", body, stream=True)
    if ctx.target.reasoning is None and ex.status is not None and 400 <= ex.status < 500:
        # OpenAI refuses reasoning settings for a model that does not reason; so may a gateway
        # (LiteLLM: "doesn't support reasoning.effort"). Nothing to judge, nothing wrong.
        raise CheckSkipped(
            f"{ctx.check_id}: not judged: {ctx.target.name} declares no reasoning model and "
            f"refused reasoning {{effort: low}} with HTTP {ex.status} ({body_snippet(ex.text, 160)})"
        )
    ctx.ok_stream(ex, "streamed POST /v1/responses")
    assert ex.stream is not None  # noqa: S101 - ok_stream guarantees it
    events = ex.stream.chunks
    kinds = [str(e.get("type")) for e in events]
    final = terminal(events)
    ctx.expect(
        "response.completed" in kinds and final is not None,
        "the streamed response with reasoning and a forced call never completes",
        expected="a response.completed event",
        received=f"last events {kinds[-6:]}; terminal {body_snippet(final, 300)}",
        exchange=ex,
        hint="a forced call after reasoning must end the response like any other call",
    )
    calls = output_items(final or {}, "function_call")
    added = [
        e
        for e in events
        if e.get("type") == "response.output_item.added"
        and isinstance(e.get("item"), dict)
        and e["item"].get("type") == "function_call"
    ]
    ctx.expect(
        len(calls) == 1 and len(added) == 1 and calls[0].get("name") == "get_weather",
        "the completed response does not hold exactly one function_call",
        expected="one function_call item named get_weather, added once",
        received=f"{len(calls)} function_call item(s) in response.completed "
        f"({body_snippet(calls, 300)}), {len(added)} announced",
        exchange=ex,
        hint="a client runs every function_call item it is given: a duplicate runs the tool twice",
    )
