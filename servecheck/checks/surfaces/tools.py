"""TOOLS-*: tool calls (tool_choice required and named, streaming deltas, the tool-result turn).

Every forced call is sent with ``parallel_tool_calls: false``: vLLM piles calls up until
``length`` with parallel calls on (docs/engines.md). ``tool_choice: auto`` is never relied on: a
random-weight model never calls a tool by itself.
"""

from __future__ import annotations

import json
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.registry import check
from servecheck.checks.surfaces.json import first_choice
from servecheck.client.http import Exchange

# Small on purpose: chat templates render every tool into the prompt (vLLM's hermes template on the
# tiny test model: ~170 tokens of preamble and ~125 per tool), and tiny models serve 512 tokens.
# Two tools with one bounded property each take 419 of them and leave room for the call.
TOOL_MAX_TOKENS = 64
PROMPT = "Weather in Paris?"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, CLOCK]
TOOL_NAMES = [t["function"]["name"] for t in TOOLS]  # type: ignore[index]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}  # type: ignore[index]
# Named choice picks the second tool: a server that ignores the name and calls the first one is caught.
NAMED = "get_time"
UNDEFINED = "servecheck_undefined_tool"

HINT_TOOLS = (
    "tool calling is not wired up: enable it on the engine (vLLM --enable-auto-tool-choice --tool-call-parser ...; "
    "llama.cpp --jinja) or stop advertising the tools capability"
)


def tool_request(ctx: CheckContext, tool_choice: Any, **params: Any) -> dict[str, Any]:
    body = ctx.chat_body(
        PROMPT,
        tools=TOOLS,
        tool_choice=tool_choice,
        parallel_tool_calls=False,
        temperature=0,
        **ctx.answer_budget(TOOL_MAX_TOKENS),
    )
    body.update(params)
    return body


def forced_call(
    ctx: CheckContext, tool_choice: Any = "required", body: dict[str, Any] | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]], Exchange]:
    """A non-streaming forced tool call: (choice, tool_calls, exchange), or a failure if no call
    came back. ``body`` replaces the default request (TOOLS with ``tool_choice``)."""
    ex = ctx.post("/chat/completions", body or tool_request(ctx, tool_choice))
    data = ctx.ok_json(ex, "chat completion with tools")
    choices = data.get("choices")
    if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
        ctx.fail(
            "the response has no choices",
            expected="a non-empty choices list",
            received=body_snippet(data),
            exchange=ex,
        )
    choice: dict[str, Any] = choices[0]
    message: dict[str, Any] = choice["message"] if isinstance(choice.get("message"), dict) else {}
    calls = message.get("tool_calls")
    hint = HINT_TOOLS
    if choice.get("finish_reason") == "length":
        # Measured on llama.cpp (--jinja, hermes template): `required` still lets the model write text
        # first, and a random-weight model writes text until the context is full.
        hint = (
            "the answer ran to the length limit without a call: either 'required' is not enforced from the first "
            "token (a lazy tool-call grammar lets a weak model write text until it runs out of room) or "
            + HINT_TOOLS
        )
    ctx.expect(
        isinstance(calls, list) and bool(calls),
        f"tool_choice {json.dumps(tool_choice)} returned no tool call",
        expected="choices[0].message.tool_calls with at least one call",
        received=f"finish_reason {choice.get('finish_reason')!r}, message {body_snippet(message, 400)}",
        exchange=ex,
        hint=hint,
    )
    return choice, calls, ex  # type: ignore[return-value]


def call_problems(calls: list[Any], names: list[str] = TOOL_NAMES) -> list[str]:
    """Why each call is malformed: not {id, type: function, function: {name in ``names``, arguments: str}}."""
    problems = []
    for i, call in enumerate(calls):
        if not isinstance(call, dict):
            problems.append(f"tool_calls[{i}] is not an object")
            continue
        if call.get("type") != "function":
            problems.append(f"tool_calls[{i}].type is {call.get('type')!r}, not 'function'")
        if not isinstance(call.get("id"), str) or not call.get("id"):
            problems.append(
                f"tool_calls[{i}].id must be a non-empty string, got {call.get('id')!r}"
            )
        fn = call.get("function")
        if not isinstance(fn, dict):
            problems.append(f"tool_calls[{i}].function is missing")
            continue
        if fn.get("name") not in names:
            problems.append(
                f"tool_calls[{i}].function.name {fn.get('name')!r} is not one of the tools {names}"
            )
        if not isinstance(fn.get("arguments"), str):
            problems.append(
                f"tool_calls[{i}].function.arguments must be a JSON string, got {type(fn.get('arguments')).__name__}"
            )
    return problems


def _arguments(call: dict[str, Any]) -> tuple[Any, str | None]:
    raw = (call.get("function") or {}).get("arguments")
    if not isinstance(raw, str):
        return None, f"arguments is {type(raw).__name__}, not a JSON string"
    try:
        return json.loads(raw), None
    except ValueError as exc:
        return None, f"arguments is not JSON ({exc}): {raw[:200]!r}"


@check(
    "TOOLS-REQUIRED",
    "tool_choice required returns a well-formed tool call",
    "with tool_choice 'required', choices[0].message.tool_calls holds a call with type 'function', a string id and "
    "function.name one of the offered tools",
    requires=("tools",),
    model_dependent=True,
)
def tools_required(ctx: CheckContext) -> None:
    _, calls, ex = forced_call(ctx, "required")
    problems = call_problems(calls)
    ctx.expect(
        not problems,
        "the tool call departs from the OpenAI shape",
        expected="[{id: str, type: 'function', function: {name: one of the tools, arguments: str}}]",
        received="; ".join(problems),
        exchange=ex,
        hint="clients (the openai SDK, agents) cannot dispatch malformed calls",
    )


@check(
    "TOOLS-ARGS-SCHEMA",
    "tool arguments are JSON that validates against the tool's parameters",
    "function.arguments of a forced call is a JSON string whose value validates against that tool's parameters schema",
    requires=("tools",),
    model_dependent=True,
)
def tools_args_schema(ctx: CheckContext) -> None:
    import jsonschema

    _, calls, ex = forced_call(ctx, "required")
    for i, call in enumerate(calls):
        name = (call.get("function") or {}).get("name") if isinstance(call, dict) else None
        ctx.expect(
            name in PARAMS,
            f"tool_calls[{i}] names no offered tool",
            expected=f"one of {TOOL_NAMES}",
            received=repr(name),
            exchange=ex,
        )
        value, problem = _arguments(call)
        ctx.expect(
            problem is None,
            f"tool_calls[{i}].function.arguments is not a JSON string",
            expected="a JSON object serialised as a string",
            received=problem or "",
            exchange=ex,
            hint="constrain tool arguments with the parameters schema (guided decoding for forced calls)",
        )
        errors = list(jsonschema.Draft202012Validator(PARAMS[name]).iter_errors(value))
        ctx.expect(
            not errors,
            f"tool_calls[{i}] arguments do not validate against {name}'s parameters",
            expected=f"an instance of {json.dumps(PARAMS[name])}",
            received="; ".join(e.message for e in errors[:4])
            + f" -- arguments {body_snippet(value, 200)}",
            exchange=ex,
            hint="constrain tool arguments with the parameters schema (guided decoding for forced calls)",
        )


@check(
    "TOOLS-NAMED",
    "a named tool_choice calls exactly that function",
    f"with tool_choice {{type: function, function: {{name: {NAMED!r}}}}} every returned call names {NAMED!r} "
    "(the second of two tools, so 'call the first tool' is caught)",
    requires=("tools", "tool_choice_named"),
    model_dependent=True,
)
def tools_named(ctx: CheckContext) -> None:
    _, calls, ex = forced_call(ctx, {"type": "function", "function": {"name": NAMED}})
    names = [(c.get("function") or {}).get("name") if isinstance(c, dict) else None for c in calls]
    ctx.expect(
        all(n == NAMED for n in names),
        f"the named tool_choice did not call {NAMED!r}",
        expected=f"tool_calls naming only {NAMED!r}",
        received=f"calls to {names}",
        exchange=ex,
        hint="the named tool_choice is ignored or treated as 'auto'/'required'",
    )


@check(
    "TOOLS-FINISH",
    "a forced tool call finishes with 'tool_calls', streamed too",
    "with tool_choice 'required' the choice's finish_reason is 'tool_calls' (OpenAI's value; a named choice is not "
    "used because OpenAI itself answers 'stop' there); where the target streams, the streamed forced call's "
    "finish chunk says 'tool_calls' too",
    requires=("tools",),
    model_dependent=True,
)
def tools_finish(ctx: CheckContext) -> None:
    choice, _, ex = forced_call(ctx, "required")
    ctx.expect(
        choice.get("finish_reason") == "tool_calls",
        "a tool call does not finish with 'tool_calls'",
        expected="finish_reason 'tool_calls'",
        received=f"finish_reason {choice.get('finish_reason')!r}",
        exchange=ex,
        deviation="tool-finish-stop",
        hint="agents branch on finish_reason == 'tool_calls' and will treat the call as a final answer",
    )
    if not ctx.capabilities.get("streaming", False):
        return
    streamed = ctx.ok_stream(
        ctx.post("/chat/completions", tool_request(ctx, "required", stream=True), stream=True),
        "streamed chat completion with tools",
    )
    assert streamed.stream is not None  # noqa: S101 - ok_stream guarantees it
    finishes = [
        c.get("finish_reason")
        for chunk in streamed.stream.chunks
        for c in chunk.get("choices") or []
        if isinstance(c, dict) and c.get("index", 0) == 0 and c.get("finish_reason")
    ]
    ctx.expect(
        finishes[-1:] == ["tool_calls"],
        "a streamed tool call does not finish with 'tool_calls'",
        expected="the finish chunk of the streamed forced call says finish_reason 'tool_calls' "
        "(as the non-streamed answer does)",
        received=f"finish reasons in the stream: {finishes}",
        exchange=streamed,
        deviation="tool-finish-stop",
        hint="the streaming path sets its own finish_reason (sglang, vLLM's streaming tool parsers "
        "have each got this wrong): streamed agents (the openai Agents SDK, LangGraph) then take "
        "the call for a final answer",
    )


def _stream_calls(ctx: CheckContext, ex: Exchange) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """Reassemble streamed tool-call deltas by index; also list what is wrong with them."""
    assert ex.stream is not None  # noqa: S101 - ok_stream guarantees it
    calls: dict[int, dict[str, Any]] = {}
    problems: list[str] = []
    for n, chunk in enumerate(ex.stream.chunks):
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict) or not delta.get("tool_calls"):
                continue
            for part in delta["tool_calls"]:
                if not isinstance(part, dict):
                    problems.append(f"chunk {n}: a tool_calls delta is not an object")
                    continue
                index = part.get("index")
                if not isinstance(index, int) or isinstance(index, bool):
                    problems.append(
                        f"chunk {n}: tool_calls delta without an integer index: {body_snippet(part, 160)}"
                    )
                    index = 0
                slot = calls.setdefault(index, {"id": None, "names": [], "arguments": ""})
                if isinstance(part.get("id"), str) and part["id"]:
                    slot["id"] = slot["id"] or part["id"]
                fn: dict[str, Any] = (
                    part["function"] if isinstance(part.get("function"), dict) else {}
                )
                if isinstance(fn.get("name"), str) and fn["name"]:
                    slot["names"].append(fn["name"])
                if isinstance(fn.get("arguments"), str):
                    slot["arguments"] += fn["arguments"]
    for index, slot in sorted(calls.items()):
        if len(slot["names"]) != 1:
            problems.append(
                f"call {index}: the function name arrived {len(slot['names'])} times ({slot['names']}), expected once"
            )
        if not slot["id"]:
            problems.append(f"call {index}: no id in any delta")
    return calls, problems


@check(
    "TOOLS-STREAM",
    "streamed tool calls reassemble into the non-streamed call",
    "at temperature 0 with tool_choice 'required', every tool_calls delta carries an integer index, the name arrives "
    "once with an id, and the concatenated arguments equal the non-streamed arguments (as JSON values)",
    requires=("tools", "streaming"),
    model_dependent=True,
)
def tools_stream(ctx: CheckContext) -> None:
    _, calls, plain_ex = forced_call(ctx, "required")
    plain_value, problem = _arguments(calls[0])
    ctx.expect(
        problem is None,
        "the non-streamed call has unparseable arguments",
        expected="JSON arguments",
        received=problem or "",
        exchange=plain_ex,
    )
    plain_name = (calls[0].get("function") or {}).get("name")
    body = tool_request(ctx, "required", stream=True)
    ex = ctx.ok_stream(
        ctx.post("/chat/completions", body, stream=True), "streamed chat completion with tools"
    )
    streamed, problems = _stream_calls(ctx, ex)
    ctx.expect(
        bool(streamed),
        "the stream carried no tool-call deltas",
        expected="delta.tool_calls chunks",
        received=f"text {ex.stream.text()[:200]!r}" if ex.stream else "no stream",
        exchange=ex,
        hint=HINT_TOOLS,
    )
    ctx.expect(
        not problems,
        "streamed tool-call deltas are malformed",
        expected="deltas {index, id, type, function: {name}} once, then {index, function: {arguments}}",
        received="; ".join(problems[:4]),
        exchange=ex,
        hint="the openai SDK and agent frameworks merge deltas by index; without it calls are lost or mixed",
    )
    first = streamed[min(streamed)]
    try:
        stream_value = json.loads(first["arguments"])
    except ValueError as exc:
        ctx.fail(
            "the reassembled streamed arguments are not JSON",
            expected="JSON arguments after concatenating the deltas",
            received=f"{exc}: {first['arguments'][:200]!r}",
            exchange=ex,
        )
    ctx.expect(
        first["names"][:1] == [plain_name] and stream_value == plain_value,
        "the streamed tool call differs from the non-streamed one at temperature 0",
        expected=f"{plain_name}({json.dumps(plain_value)})",
        received=f"{(first['names'] or [None])[0]}({first['arguments'][:300]})",
        exchange=ex,
        hint="argument deltas are dropped, duplicated or re-ordered when streaming",
    )


@check(
    "TOOLS-UNDEFINED-400",
    "a named tool_choice for an undefined tool is refused",
    "tool_choice naming a function that is not in tools gets 400 (not a 200 with a made-up call, not a 5xx)",
    requires=("tools", "tool_choice_named", "route-accepts:/chat/completions"),
)
def tools_undefined(ctx: CheckContext) -> None:
    ex = ctx.post(
        "/chat/completions",
        tool_request(ctx, {"type": "function", "function": {"name": UNDEFINED}}),
    )
    ctx.expect(
        not ex.error,
        "the request did not complete",
        expected="a 400 answer",
        received=ex.describe(),
        exchange=ex,
    )
    status = ex.status or 0
    ctx.expect(
        status != 422,
        "a named tool that is not defined was refused with 422",
        expected="HTTP 400",
        received=ex.describe(300),
        exchange=ex,
        deviation="error-status-422",
    )
    ctx.expect(
        status == 400,
        f"tool_choice naming the undefined function {UNDEFINED!r} was not refused with 400",
        expected="HTTP 400 saying the function is not in tools",
        received=ex.describe(400),
        exchange=ex,
        hint="validate tool_choice against tools; otherwise the model is forced to call a function nobody implements",
    )


@check(
    "TOOLS-RESULT-TURN",
    "a tool result is accepted in the next turn",
    "after an assistant message with tool_calls, a 'tool' role message with tool_call_id and the result is accepted "
    "(200 with an assistant message)",
    requires=("tools",),
)
def tools_result_turn(ctx: CheckContext) -> None:
    # Take a real call when the server makes one (its id format is then one it accepts); otherwise
    # a 9-character alphanumeric id, the strictest format in use (Mistral templates).
    first = ctx.post("/chat/completions", tool_request(ctx, "required"))
    data = first.json() if first.ok else None
    call: dict[str, Any] = {
        "id": "call0abc1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
    }
    try:
        got = data["choices"][0]["message"]["tool_calls"][0]  # type: ignore[index]
        if (
            isinstance(got.get("id"), str)
            and got["function"]["name"] in TOOL_NAMES
            and isinstance(got["function"]["arguments"], str)
        ):
            call = {
                "id": got["id"],
                "type": "function",
                "function": {
                    "name": got["function"]["name"],
                    "arguments": got["function"]["arguments"],
                },
            }
    except (KeyError, IndexError, TypeError, AttributeError):
        pass
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": call["id"],
            "content": json.dumps({"temperature_c": 18, "sky": "clear"}),
        },
    ]
    # Only the called tool: every tool costs ~125 prompt tokens in a template, and 512-token contexts are common here.
    offered = [t for t in TOOLS if t["function"]["name"] == call["function"]["name"]]  # type: ignore[index]
    ex = ctx.chat(messages, tools=offered, max_tokens=16, temperature=0)
    data = ctx.ok_json(ex, "chat completion with a tool result")
    choices = data.get("choices")
    message = (
        choices[0].get("message")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict)
        else None
    )
    ctx.expect(
        isinstance(message, dict) and message.get("role") == "assistant",
        "the tool-result turn has no assistant message",
        expected="choices[0].message with role 'assistant'",
        received=body_snippet(data),
        exchange=ex,
        hint="the chat template cannot render tool messages; the agent loop stops after the first call",
    )


# ---- parallel calls and a call cut by max_tokens (issue 16) ----------------------------
# TOOLS-* cases users hit beyond one forced call: parallel calls and a call cut by max_tokens.
#
# - ``parallel_tool_calls: false`` must give at most one call (vLLM honours it since PR#26233;
#   SGLang ignored it, sglang#9696).
# - A call cut by ``max_tokens`` must end with ``length``: agents run a ``tool_calls`` answer, and
#   run it with half its arguments (vllm#9053, PR#46303).
# - Several parallel calls stream with distinct indexes and ids, or the SDK merges them into one
#   call with mixed arguments (vllm#18412).
#
# The prompt names both tools, so a server that makes parallel calls (the reference server with
# ``tool_choice: required``; vLLM piles calls up with parallel calls on) makes several.

BOTH = "Call get_weather for Paris and get_time for UTC, both at once."
CUT_TOKENS = 3  # fewer than any complete call's arguments: {"city": "Paris"} is ~9 tokens


def _body(ctx: CheckContext, parallel: bool, **params: Any) -> dict[str, Any]:
    body = tool_request(ctx, "required", parallel_tool_calls=parallel, **params)
    body["messages"] = [{"role": "user", "content": BOTH}]
    return body


@check(
    "TOOLS-PARALLEL-OFF",
    "parallel_tool_calls false gives at most one call",
    "with a prompt asking for both tools, tool_choice 'required' and parallel_tool_calls false, "
    "choices[0].message.tool_calls holds exactly one call",
    requires=("tools",),
    model_dependent=True,
)
def tools_parallel_off(ctx: CheckContext) -> None:
    ex = ctx.post("/chat/completions", _body(ctx, parallel=False))
    choice = first_choice(ctx, ctx.ok_json(ex, "chat completion with tools"), ex)
    calls = (choice.get("message") or {}).get("tool_calls") or []
    ctx.expect(
        isinstance(calls, list) and len(calls) >= 1,
        "tool_choice required returned no tool call",
        expected="one tool call",
        received=f"finish_reason {choice.get('finish_reason')!r}, {body_snippet(choice.get('message'), 300)}",
        exchange=ex,
        hint=HINT_TOOLS,
    )
    names = [(c.get("function") or {}).get("name") for c in calls if isinstance(c, dict)]
    ctx.expect(
        len(calls) == 1,
        f"parallel_tool_calls false returned {len(calls)} calls",
        expected="exactly one tool call",
        received=f"calls to {names}",
        exchange=ex,
        hint="the engine ignores parallel_tool_calls (vLLM honours it since PR#26233); clients "
        "that run one call per turn drop the others",
    )


@check(
    "TOOLS-LENGTH",
    "a tool call cut by max_tokens finishes with 'length'",
    f"a forced call with max_tokens {CUT_TOKENS} (too few for its arguments) ends with "
    "finish_reason 'length'; 'tool_calls' is accepted only when every call's arguments are "
    "complete JSON",
    requires=("tools",),
)
def tools_length(ctx: CheckContext) -> None:
    ex = ctx.post("/chat/completions", _body(ctx, parallel=False, max_tokens=CUT_TOKENS))
    data = ctx.ok_json(ex, "chat completion with tools and a tiny max_tokens")
    choice = first_choice(ctx, data, ex)
    calls = (choice.get("message") or {}).get("tool_calls") or []
    reason = choice.get("finish_reason")
    broken = []
    for i, call in enumerate(calls if isinstance(calls, list) else []):
        raw = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
        try:
            json.loads(raw if isinstance(raw, str) else "")
        except ValueError:
            broken.append(f"tool_calls[{i}].arguments {str(raw)[:80]!r}")
    ctx.expect(
        not (reason == "tool_calls" and broken),
        "a tool call cut by max_tokens says finish_reason 'tool_calls'",
        expected=f"finish_reason 'length' for a call cut at {CUT_TOKENS} tokens",
        received=f"finish_reason {reason!r} with cut arguments: {'; '.join(broken) or 'no calls'}",
        exchange=ex,
        hint="agents execute a 'tool_calls' answer; with cut arguments they crash or act on half "
        "a request (vllm#9053, fixed by PR#46303)",
    )
    ctx.expect(
        reason in ("length", "tool_calls"),
        "a cut tool call ends with an unexpected finish_reason",
        expected="finish_reason 'length'",
        received=f"finish_reason {reason!r}, message {body_snippet(choice.get('message'), 200)}",
        exchange=ex,
    )


@check(
    "TOOLS-PARALLEL-STREAM",
    "parallel streamed tool calls have distinct indexes and ids",
    "with a prompt asking for both tools, tool_choice 'required' and parallel_tool_calls true, a "
    "stream with several calls gives each its own index and id, its name once, and arguments "
    "that parse as JSON (skipped when the server makes a single call)",
    requires=("tools", "streaming"),
    model_dependent=True,
)
def tools_parallel_stream(ctx: CheckContext) -> None:
    body = _body(ctx, parallel=True, stream=True)
    ex = ctx.ok_stream(
        ctx.post("/chat/completions", body, stream=True), "streamed chat completion with tools"
    )
    calls, problems = _stream_calls(ctx, ex)
    names = [n for slot in calls.values() for n in slot["names"]]
    if len(names) < 2:
        raise CheckSkipped(
            f"{ctx.check_id}: the server made {len(names)} call(s) for a prompt naming two tools; "
            "parallel streaming could not be observed"
        )
    ids = [slot["id"] for slot in calls.values()]
    if len(set(ids)) != len(ids):
        problems.append(f"calls share ids: {ids}")
    finish = [
        c.get("finish_reason")
        for chunk in ex.stream.chunks  # type: ignore[union-attr]
        for c in chunk.get("choices") or []
        if isinstance(c, dict) and c.get("finish_reason")
    ]
    for index, slot in sorted(calls.items()):
        if finish[-1:] == ["length"] and index == max(calls):
            continue  # the last call may be cut by max_tokens, and then says so
        try:
            json.loads(slot["arguments"])
        except ValueError:
            problems.append(f"call {index}: arguments {slot['arguments'][:80]!r} are not JSON")
        if slot["names"] and slot["names"][0] not in TOOL_NAMES:
            problems.append(f"call {index}: name {slot['names'][0]!r} is not an offered tool")
    ctx.expect(
        not problems,
        "parallel streamed tool calls cannot be told apart",
        expected="each call: its own index, an id, the name once, JSON arguments",
        received="; ".join(problems[:4]) + f" -- {len(calls)} index(es), names {names}",
        exchange=ex,
        hint="the openai SDK merges tool-call deltas by index: shared indexes mix two calls into "
        "one with both names and concatenated arguments",
    )


# ---- argument escaping -------------------------------------------------------------------
# A tool parser (or a gateway) that rebuilds the arguments string by templating instead of a
# JSON serialiser breaks on quotes, backslashes, markup characters and non-ASCII text. A
# single-value enum pins the argument, so what comes back is known exactly.

TRICKY = 'Zürich & "Genève" <x> \\ 東京'
ESCAPE_TOOL = {
    "type": "function",
    "function": {
        "name": "find_place",
        "description": "Look a place up by its exact name.",
        "parameters": {
            "type": "object",
            "properties": {"place": {"type": "string", "enum": [TRICKY]}},
            "required": ["place"],
            "additionalProperties": False,
        },
    },
}
ESCAPE_MAX_TOKENS = 128  # the call spells out ~30 characters, several of them multi-byte


def _escape_request(ctx: CheckContext, **params: Any) -> dict[str, Any]:
    return ctx.chat_body(
        "Find the place.",
        tools=[ESCAPE_TOOL],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=ESCAPE_MAX_TOKENS,
        temperature=0,
        **params,
    )


def _expect_tricky(ctx: CheckContext, raw: Any, finish: Any, ex: Exchange, what: str) -> None:
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError as exc:
        ctx.fail(
            f"the {what} arguments are not JSON",
            expected=f"a JSON string such as {json.dumps({'place': TRICKY})!s}",
            received=f"{exc}; finish_reason {finish!r}; arguments {str(raw)[:300]!r}",
            exchange=ex,
            hint="quotes or backslashes in an argument are not escaped: serialise the parsed call "
            "with a JSON encoder, never by string templating"
            + ("; the call was also cut by max_tokens" if finish == "length" else ""),
        )
    got = value.get("place") if isinstance(value, dict) else None
    html_escaped = isinstance(got, str) and "&amp;" in got
    ctx.expect(
        got == TRICKY,
        f"the {what} argument does not decode to the one value the enum allows",
        expected=f"json.loads(arguments)['place'] == {TRICKY!r}",
        received=f"{got!r} (arguments {str(raw)[:300]!r})",
        exchange=ex,
        hint="the arguments were HTML-escaped on their way (an autoescaping template): emit them "
        "as the JSON serialiser wrote them"
        if html_escaped
        else "the arguments were re-escaped or re-encoded on their way (tool parser, detokenizer, "
        "gateway): a client reading them gets another string than the model was forced to write",
    )


@check(
    "TOOLS-ARGS-ESCAPING",
    "tool arguments keep quotes, backslashes, markup and non-ASCII intact",
    f"a forced call whose one argument is pinned by a single-value enum ({TRICKY!r}) has arguments that "
    "json.loads to exactly that string, non-streamed and (where streaming is declared) with the streamed "
    "argument deltas joined",
    requires=("tools",),
    model_dependent=True,
)
def tools_args_escaping(ctx: CheckContext) -> None:
    choice, calls, ex = forced_call(ctx, body=_escape_request(ctx))
    raw = (calls[0].get("function") or {}).get("arguments") if isinstance(calls[0], dict) else None
    _expect_tricky(ctx, raw, choice.get("finish_reason"), ex, "non-streamed")
    if not ctx.capabilities.get("streaming"):
        return
    sx = ctx.ok_stream(
        ctx.post("/chat/completions", _escape_request(ctx, stream=True), stream=True),
        "streamed chat completion with a forced call",
    )
    streamed, _ = _stream_calls(ctx, sx)
    ctx.expect(
        bool(streamed),
        "the stream carried no tool-call deltas",
        expected="delta.tool_calls chunks",
        received=f"text {sx.stream.text()[:200]!r}" if sx.stream else "no stream",
        exchange=sx,
        hint=HINT_TOOLS,
    )
    finish = next(
        (
            c.get("finish_reason")
            for chunk in sx.stream.chunks  # type: ignore[union-attr]
            for c in chunk.get("choices") or []
            if isinstance(c, dict) and c.get("finish_reason")
        ),
        None,
    )
    _expect_tricky(ctx, streamed[min(streamed)]["arguments"], finish, sx, "streamed")
