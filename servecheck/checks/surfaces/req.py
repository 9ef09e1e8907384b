"""REQ-*: legal request shapes that real clients send, accepted and answered properly.

Every body here is one the openai SDK, the OpenAI Agents SDK, LangChain's ``ChatOpenAI`` or
LiteLLM sends unprompted: content as a list of text parts (LangChain for any message built from
content blocks, agents for tool results), the ``developer`` role (the SDK's type for
instructions; the Agents SDK and LangChain's o-series path send it), optional fields as explicit
``null`` (what ``create(stop=None, ...)`` puts on the wire), ``user`` / ``metadata`` / ``store``,
``max_completion_tokens`` (the SDK's current name; ``ChatOpenAI`` sends nothing else), rich tool
schemas from pydantic models, and an agent's tool-call history.

"Answered properly" is the same bar everywhere: HTTP 200, the ``chat.completion`` shape
(:func:`~servecheck.checks.surfaces.chat.shape_problems`), a non-empty answer (or the tool call
asked for), and the field's meaning honoured where it has one. Where text must reach the model
(parts, a developer message, a tool result), ``usage.prompt_tokens`` is the witness, as
RESPONSES-INSTRUCTIONS uses it: the same words as a string and as parts count the same, and a
developer message adds its tokens.
"""

from __future__ import annotations

import json
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet, cut_in_reasoning
from servecheck.checks.preconditions import CheckError
from servecheck.checks.registry import check
from servecheck.checks.surfaces.chat import LONG_PROMPT, shape_problems
from servecheck.checks.surfaces.err import error_shape_problem
from servecheck.checks.surfaces.tools import HINT_TOOLS, TOOLS, WEATHER, call_problems
from servecheck.client.http import Exchange

MAX_TOKENS = 8
# Joining parts with "\n" (vLLM's string content format) instead of a space may tokenize a
# little differently; a parts list rendered as its own JSON costs 10+ tokens a part.
PART_SLACK = 3
SYSTEM = "You answer in one short line."
USER_PARTS = ("Name three colours.", "Then name one animal.")
DEVELOPER = (
    "You are a terse assistant for a paint shop. Answer in one short line, lower case, "
    "and never mention prices, brands or delivery times."
)
HINT_DEVELOPER = (
    "read 'developer' as the system role, mapping it to 'system' for a chat template that has no "
    "branch for it (vllm#42407, llama.cpp PR#20215); the openai SDK types instructions so and agents send them"
)
HINT_PARTS = (
    "flatten text parts into the message text before the chat template (vLLM does: "
    "--chat-template-content-format string); a template that prints a list shows the model JSON"
)


def answered(
    ctx: CheckContext, ex: Exchange, what: str, *, hint: str = "", cut_ok: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A 200 chat.completion with a non-empty answer or a tool call: (body, message), else a
    failure. An empty answer cut while the model reasoned is not judged (a skip), or with
    ``cut_ok`` returned as it is, for a check that judges the cut itself."""
    if ex.status is not None and not ex.error and not ex.ok:
        ctx.fail(
            f"{what}: the server refused a request real clients send",
            expected="HTTP 200 with a chat.completion",
            received=ex.describe(400),
            exchange=ex,
            hint=hint,
        )
    data = ctx.ok_json(ex, what)
    problems = shape_problems(data)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        problems.append("choices is empty or missing")
    ctx.expect(
        not problems,
        f"{what}: the answer departs from the chat.completion shape",
        expected="the OpenAI chat.completion object",
        received="; ".join(problems),
        exchange=ex,
    )
    choice: dict[str, Any] = data["choices"][0]
    message: dict[str, Any] = choice.get("message") or {}
    if cut_ok and cut_in_reasoning(choice):
        return data, message
    ctx.not_judged_if_thinking(choice, what, ex)
    content, calls = message.get("content"), message.get("tool_calls")
    _not_judged_if_cut_calling(ctx, choice, ex, what)
    ctx.expect(
        (isinstance(content, str) and content.strip() != "") or bool(calls),
        f"{what}: the answer is empty",
        expected="non-empty message content (or a tool call)",
        received=f"finish_reason {choice.get('finish_reason')!r}, message {body_snippet(message, 300)}",
        exchange=ex,
        hint=hint,
    )
    return data, message


CALL_ROOM = 64  # tokens: a tiny model's whole call to get_weather took 39 on llama.cpp


def _not_judged_if_cut_calling(
    ctx: CheckContext, choice: dict[str, Any], ex: Exchange, what: str
) -> None:
    """Skip, as not judged, an answer cut by its budget with tools offered and no text: the
    parser holds a call back until it is whole, so a call cut short leaves nothing to judge."""
    message = choice.get("message") or {}
    content, body = message.get("content"), ex.request_body
    if (
        choice.get("finish_reason") == "length"
        and not message.get("tool_calls")
        and (content is None or (isinstance(content, str) and not content.strip()))
        and isinstance(body, dict)
        and body.get("tools")
    ):
        budget = body.get("max_completion_tokens") or body.get("max_tokens")
        raise CheckSkipped(
            f"{ctx.check_id}: not judged: {what}: the budget of {budget} tokens ran out with "
            "tools offered and no text (a tool call cut short is held back by the parser)"
        )


def prompt_tokens(ctx: CheckContext, data: dict[str, Any], ex: Exchange) -> int:
    usage = data.get("usage")
    count = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if not isinstance(count, int) or isinstance(count, bool):
        ctx.fail(
            "no usage.prompt_tokens to tell whether the text reached the model",
            expected="usage.prompt_tokens, an integer",
            received=body_snippet(usage),
            exchange=ex,
        )
    return count


def _parts(*texts: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": t} for t in texts]


@check(
    "REQ-CONTENT-PARTS",
    "content as an array of text parts is accepted and reaches the model as its text",
    "a system message and a user message whose content is a list of {type: text} parts get a 200 "
    f"chat.completion with an answer, and prompt_tokens within {PART_SLACK} of the same words sent as strings",
)
def req_content_parts(ctx: CheckContext) -> None:
    plain = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": " ".join(USER_PARTS)},
    ]
    parts = [
        {"role": "system", "content": _parts(SYSTEM)},
        {"role": "user", "content": _parts(*USER_PARTS)},
    ]
    budget = ctx.answer_budget(MAX_TOKENS)
    base = ctx.chat(plain, temperature=0, **budget)
    base_data, _ = answered(ctx, base, "string content")
    ex = ctx.chat(parts, temperature=0, **budget)
    data, _ = answered(ctx, ex, "content as text parts", hint=HINT_PARTS)
    with_parts, with_text = prompt_tokens(ctx, data, ex), prompt_tokens(ctx, base_data, base)
    ctx.expect(
        abs(with_parts - with_text) <= PART_SLACK,
        "text parts do not reach the model as the text they carry",
        expected=f"prompt_tokens {with_text} +- {PART_SLACK} (the same words sent as strings)",
        received=f"prompt_tokens {with_parts} with parts",
        exchange=ex,
        hint=HINT_PARTS,
    )


@check(
    "REQ-DEVELOPER-ROLE",
    "a 'developer' message is accepted and reaches the model",
    "a developer message (a ~30-token instruction) before the user message gets a 200 chat.completion "
    "with an answer, and counts more than 5 prompt tokens over the same request without it",
)
def req_developer_role(ctx: CheckContext) -> None:
    user = {"role": "user", "content": "Name three colours."}
    budget = ctx.answer_budget(MAX_TOKENS)
    bare = ctx.chat([user], temperature=0, **budget)
    bare_data, _ = answered(ctx, bare, "a user message alone")
    ex = ctx.chat([{"role": "developer", "content": DEVELOPER}, user], temperature=0, **budget)
    data, _ = answered(ctx, ex, "a developer message", hint=HINT_DEVELOPER)
    with_d, without = prompt_tokens(ctx, data, ex), prompt_tokens(ctx, bare_data, bare)
    ctx.expect(
        with_d > without + 5,
        "the developer message did not reach the prompt",
        expected=f"prompt_tokens > {without} + 5 (without the developer message)",
        received=f"prompt_tokens {with_d} with it",
        exchange=ex,
        hint="a template without a branch for 'developer' drops it silently (sglang#40082): "
        + HINT_DEVELOPER,
    )


# What `client.chat.completions.create(..., stop=None, tools=None ...)` and hand-built clients put
# on the wire: OpenAI documents each as optional and nullable, so null means "not given".
NULL_FIELDS: dict[str, None] = dict.fromkeys(
    (
        "n",
        "stop",
        "seed",
        "tools",
        "tool_choice",
        "response_format",
        "stream_options",
        "logprobs",
        "top_logprobs",
        "user",
        "logit_bias",
        "presence_penalty",
        "frequency_penalty",
        "top_p",
        "parallel_tool_calls",
        "max_completion_tokens",
    )
)


@check(
    "REQ-NULL-OPTIONALS",
    "optional fields sent as explicit null are read as not given",
    f"a request with max_tokens {MAX_TOKENS} and {', '.join(NULL_FIELDS)} all null gets a 200 "
    f"chat.completion with one choice, an answer and at most {MAX_TOKENS} completion tokens "
    "(max_completion_tokens: null does not lift max_tokens)",
)
def req_null_optionals(ctx: CheckContext) -> None:
    budget = ctx.answer_budget(MAX_TOKENS)
    body = ctx.chat_body("Name three colours.", temperature=0, **{**budget, **NULL_FIELDS})
    ex = ctx.post("/chat/completions", body)
    data, _ = answered(
        ctx,
        ex,
        "optional fields as null",
        hint="treat an explicit null as an absent field (OpenAI's schema makes each of them nullable)",
    )
    choices, usage = data.get("choices") or [], data.get("usage") or {}
    ctx.expect(
        len(choices) == 1,
        "n: null did not give one choice",
        expected="exactly one choice (n defaults to 1)",
        received=f"{len(choices)} choices",
        exchange=ex,
    )
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    ctx.expect(
        isinstance(tokens, int) and tokens <= budget["max_tokens"],
        "max_tokens was not honoured next to max_completion_tokens: null",
        expected=f"usage.completion_tokens <= {budget['max_tokens']}",
        received=f"usage {body_snippet(usage, 200)}",
        exchange=ex,
        hint="a null max_completion_tokens must fall back to max_tokens, not to the server default",
    )


# Fields clients send that change nothing for an engine; the first group must simply work
# (response_format {type: text} is the documented default that LiteLLM and the openai SDK's
# helpers send explicitly). OpenAI itself refuses the second group in these combinations
# (parallel_tool_calls without tools, stream_options without stream, tools: [] as "too short") or
# for some models (service_tier, reasoning_effort on a model that does not reason), so a clean
# 4xx with an error object is as good as a 200 there. A 5xx is never right.
CLIENT_FIELDS: dict[str, dict[str, Any]] = {
    "user": {"user": "servecheck-user-42"},
    "metadata": {"metadata": {"session": "servecheck", "purpose": "conformance"}},
    "store-false": {"store": False},
    "neutral-sampling": {"presence_penalty": 0, "frequency_penalty": 0, "top_p": 1, "n": 1},
    "penalties": {"frequency_penalty": 0.5, "presence_penalty": 0.5},
    "empty-logit-bias": {"logit_bias": {}},
    "response-format-text": {"response_format": {"type": "text"}},
}
MAY_REFUSE: dict[str, dict[str, Any]] = {
    "service-tier": {"service_tier": "auto"},
    "parallel-tool-calls-no-tools": {"parallel_tool_calls": False},
    "stream-options-unstreamed": {"stream_options": {"include_usage": True}},
    "reasoning-effort": {"reasoning_effort": "low"},
    "empty-tools": {"tools": []},
}


def _field_problem(
    ctx: CheckContext, name: str, params: dict[str, Any], may_refuse: bool, unjudged: list[str]
) -> tuple[str | None, str | None, Exchange]:
    """What is wrong with one field case's answer (None when fine), its deviation key, the
    exchange. A case whose budget ran out while the model reasoned is named in ``unjudged``."""
    ex = ctx.chat("Say hello.", temperature=0, **{**ctx.answer_budget(MAX_TOKENS), **params})
    status = ex.status or 0
    if ex.error or status >= 500 or status == 0:
        return f"{name}: {ex.describe(200)}", None, ex
    if 400 <= status < 500:
        if not may_refuse:
            return f"{name}: refused, {ex.describe(200)}", None, ex
        problem, deviation = error_shape_problem(ex)
        return (
            (f"{name}: a {status} without an OpenAI error object: {problem}" if problem else None),
            deviation,
            ex,
        )
    data = ex.json()
    if not isinstance(data, dict):
        return f"{name}: the body is not a JSON object: {ex.describe(200)}", None, ex
    problems = shape_problems(data)
    choices = data.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    message = message if isinstance(message, dict) else {}
    if cut_in_reasoning(first):
        unjudged.append(name)
        return (f"{name}: {'; '.join(problems)}" if problems else None), None, ex
    if not (isinstance(message.get("content"), str) and message["content"].strip()):
        problems.append(f"no answer: message {body_snippet(message, 120)}")
    return (f"{name}: {'; '.join(problems)}" if problems else None), None, ex


@check(
    "REQ-CLIENT-FIELDS",
    "fields SDKs and agents add (user, metadata, store ...) are accepted",
    f"each of {', '.join(CLIENT_FIELDS)} gets a 200 chat.completion with an answer; "
    f"{', '.join(MAY_REFUSE)} get that or a 4xx with an OpenAI error object; none gets a 5xx",
)
def req_client_fields(ctx: CheckContext) -> None:
    problems: list[str] = []
    deviations: set[str | None] = set()
    last: Exchange | None = None
    unjudged: list[str] = []
    for cases, may_refuse in ((CLIENT_FIELDS, False), (MAY_REFUSE, True)):
        for name, params in cases.items():
            problem, deviation, ex = _field_problem(ctx, name, params, may_refuse, unjudged)
            if problem:
                problems.append(problem)
                deviations.add(deviation)
                last = ex
    ctx.expect(
        not problems,
        f"{len(problems)} field(s) real clients send were not answered properly",
        expected="200 with an answer (or, for the fields OpenAI itself may refuse, a clean 4xx error object)",
        received=" | ".join(problems),
        exchange=last,
        deviation=deviations.pop() if len(deviations) == 1 else None,
        hint="ignore fields that do not apply to the engine (user, metadata, store, service_tier, "
        "reasoning_effort); read response_format {type: text} as the default and tools: [] as no "
        "tools; never pass them on to the generator, where they crash it",
    )
    if unjudged:
        ctx.not_judged_cut(f"the {', '.join(unjudged)} case(s)")


@check(
    "REQ-MAX-COMPLETION-TOKENS",
    "max_completion_tokens is honoured like max_tokens",
    "with max_completion_tokens=5 (and no max_tokens) on a prompt that wants a long answer, "
    "completion_tokens <= 5, and an answer cut at the limit has finish_reason 'length'",
)
def req_max_completion_tokens(ctx: CheckContext) -> None:
    limit = 5
    # The limit is what is judged, so it is never grown; a cut inside the reasoning counts.
    budget = ctx.answer_budget(limit, key="max_completion_tokens", grow=False)
    ex = ctx.chat(LONG_PROMPT, temperature=0, **budget)
    data, _ = answered(ctx, ex, "a request with max_completion_tokens", cut_ok=True)
    choice = data["choices"][0]
    usage = data.get("usage") or {}
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not isinstance(tokens, int):
        ctx.fail(
            "no usage.completion_tokens to judge max_completion_tokens by",
            expected="usage.completion_tokens",
            received=body_snippet(data),
            exchange=ex,
        )
    text = (choice.get("message") or {}).get("content") or ""
    ctx.expect(
        tokens <= limit,
        "max_completion_tokens is ignored: the output is longer",
        expected=f"completion_tokens <= {limit}",
        received=f"completion_tokens = {tokens}, text {str(text)[:200]!r}",
        exchange=ex,
        hint="read max_completion_tokens as the output limit (max_tokens is deprecated; LangChain's "
        "ChatOpenAI sends only max_completion_tokens); llama.cpp#13700, fixed by PR#19831",
    )
    if tokens == limit:
        ctx.expect(
            choice.get("finish_reason") == "length",
            "an output cut at max_completion_tokens does not say finish_reason 'length'",
            expected="finish_reason 'length'",
            received=f"finish_reason {choice.get('finish_reason')!r}",
            exchange=ex,
            hint="clients cannot tell a truncated answer from a complete one",
        )


# A schema like the ones pydantic models give agents and LangChain's bind_tools: a description, a
# nested object, an array, enums, anyOf with null (Optional[...]), strict mode. Bounded everywhere
# so a constrained tiny model finishes (see json.py), and as small as that allows: rendered by a
# Hermes template with the tiny test model's tokenizer the request takes 445 of 512 tokens, and
# the call ~55 (vLLM's forced-call JSON or llama.cpp's <tool_call> markup).
# Small on purpose, like tools.py's: the template renders the schema into the tiny models' 512-token
# context (vLLM: 406 prompt tokens, llama.cpp: 434) and a weak model pads the call's JSON with spaces
# (69-74 tokens measured): every construct once, no additionalProperties, room for 100 tokens.
RICH = {
    "type": "function",
    "function": {
        "name": "book",
        "description": "Book a room",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {
                "stay": {
                    "type": "object",
                    "properties": {"nights": {"enum": [1, 2]}},
                    "required": ["nights"],
                },
                "guests": {"type": "array", "items": {"enum": ["adult", "child"]}, "maxItems": 2},
                "view": {"anyOf": [{"enum": ["sea"]}, {"type": "null"}]},
            },
            "required": ["stay", "guests", "view"],
        },
    },
}
RICH_PROMPT = "Book two nights."
RICH_MAX_TOKENS = 100


@check(
    "REQ-TOOL-SCHEMA-RICH",
    "a rich tool schema is accepted and a forced call's arguments validate against it",
    "one tool whose schema has descriptions, a nested object, an array, enums, anyOf with null and "
    "strict: true, with tool_choice 'required', gets a 200 with a call to it whose arguments are a "
    "JSON string validating against the whole schema",
    requires=("tools",),
)
def req_tool_schema_rich(ctx: CheckContext) -> None:
    import jsonschema

    fn: dict[str, Any] = RICH["function"]  # type: ignore[assignment]
    body = ctx.chat_body(
        RICH_PROMPT,
        tools=[RICH],
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=0,
        **ctx.answer_budget(RICH_MAX_TOKENS),
    )
    ex = ctx.post("/chat/completions", body)
    _cut_is_not_judged(ctx, ex)
    _, message = answered(ctx, ex, "a tool with a rich schema", hint=HINT_TOOLS)
    calls = message.get("tool_calls")
    ctx.expect(
        isinstance(calls, list) and len(calls) >= 1 and isinstance(calls[0], dict),
        "tool_choice 'required' with a rich schema returned no tool call",
        expected=f"a call to {fn['name']}",
        received=body_snippet(message, 400),
        exchange=ex,
        hint=HINT_TOOLS,
    )
    first: dict[str, Any] = calls[0]  # type: ignore[index]  # a dict: checked just above
    call: dict[str, Any] = first["function"] if isinstance(first.get("function"), dict) else {}
    raw = call.get("arguments")
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        value = None
    errors = [
        e.message for e in jsonschema.Draft202012Validator(fn["parameters"]).iter_errors(value)
    ]
    ctx.expect(
        call.get("name") == fn["name"] and isinstance(raw, str) and not errors,
        "the forced call's arguments do not validate against the rich schema",
        expected=f"{fn['name']}(arguments valid for {json.dumps(fn['parameters'])[:200]}...)",
        received=f"{call.get('name')!r}({str(raw)[:300]}): {'; '.join(errors[:4]) or 'not a JSON string'}",
        exchange=ex,
        hint="constrain the call with the whole schema (nested objects, arrays, anyOf), not its top level; "
        "a grammar backend that cannot compile a construct must say so with a 400",
    )


def _cut_is_not_judged(ctx: CheckContext, ex: Exchange) -> None:
    """A call cut by max_tokens before its arguments close cannot be held to the schema
    (TOOLS-LENGTH judges the cut); arguments that closed are judged whatever the finish says."""
    data = ex.json() if ex.status == 200 else None
    choices = data.get("choices") if isinstance(data, dict) else None
    first = (
        choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    )
    message = first.get("message")
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    calls = calls if isinstance(calls, list) else []
    raw = (
        calls[0].get("function", {}).get("arguments")
        if calls and isinstance(calls[0], dict)
        else None
    )
    try:
        closed = isinstance(raw, str) and json.loads(raw) is not None
    except ValueError:
        closed = False
    if first.get("finish_reason") == "length" and calls and not closed:
        raise CheckError(
            ctx.check_id,
            f"the forced call was cut by max_tokens {RICH_MAX_TOKENS} before its arguments closed",
            received=body_snippet(first.get("message"), 300),
            hint="the model pads the call beyond the room this check leaves in a 512-token "
            "context; serve a longer context (or a model that writes compact JSON)",
            exchange=ex,
        )


CALL = {
    "id": "call0abc1",  # 9 alphanumerics: the strictest id format in use (Mistral templates)
    "type": "function",
    "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
}
RESULT = json.dumps({"temperature_c": 18, "sky": "clear"})
# A tool without parameters and its call replayed as agents store it: arguments "{}", content "".
# One tool only: each costs ~125 prompt tokens in a template and CI's models serve 512 (this
# history renders to about 320 on vLLM and llama.cpp).
NO_ARGS_TOOL = {
    "type": "function",
    "function": {
        "name": "list_zones",
        "description": "List the time zones.",
        "parameters": {"type": "object", "properties": {}},
    },
}
NO_ARGS_CALL = {
    "id": "call0zon1",
    "type": "function",
    "function": {"name": "list_zones", "arguments": "{}"},
}
NO_ARGS_HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "Which time zones are there?"},
    {"role": "assistant", "content": "", "tool_calls": [NO_ARGS_CALL]},
    {"role": "tool", "tool_call_id": NO_ARGS_CALL["id"], "content": json.dumps(["UTC", "CET"])},
]


def _history(tool_content: Any) -> list[dict[str, Any]]:
    """An agent's turn after one tool call, as LangChain and the Agents SDK replay it."""
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "name": "alice", "content": "Weather in Paris?"},
        {"role": "assistant", "name": "helper", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": CALL["id"], "content": tool_content},
    ]


@check(
    "REQ-TOOL-HISTORY",
    "an agent's tool-call history is accepted and answered",
    "messages with name fields, an assistant turn with content null and tool_calls, and a tool "
    "result whose content is a list of text parts get a 200 chat.completion with an answer (or a "
    f"well-formed call), and prompt_tokens within {PART_SLACK} of the same history with the result as a "
    "string; a tool with no parameters (properties {}) offered beside a replayed call to it whose arguments "
    'are "{}" and content "" gets the same',
    requires=("tools",),
)
def req_tool_history(ctx: CheckContext) -> None:
    params = {"tools": [WEATHER], "temperature": 0, **ctx.answer_budget(CALL_ROOM)}
    base = ctx.chat(_history(RESULT), **params)
    base_data, _ = answered(ctx, base, "a tool history with a string result")
    hint = (
        "accept the history agents replay: content null beside tool_calls, name fields, a tool "
        "result as text parts (flatten them like any content); " + HINT_PARTS
    )
    ex = ctx.chat(_history(_parts(RESULT)), **params)
    data, message = answered(ctx, ex, "a tool history with the result as text parts", hint=hint)
    problems = call_problems(message.get("tool_calls") or [])
    ctx.expect(
        not problems,
        "the answer to a tool history carries a malformed tool call",
        expected="text, or calls {id, type: function, function: {name: an offered tool, arguments: str}}",
        received="; ".join(problems),
        exchange=ex,
    )
    with_parts, with_text = prompt_tokens(ctx, data, ex), prompt_tokens(ctx, base_data, base)
    ctx.expect(
        abs(with_parts - with_text) <= PART_SLACK,
        "a tool result sent as text parts does not reach the model as its text",
        expected=f"prompt_tokens {with_text} +- {PART_SLACK} (the result sent as a string)",
        received=f"prompt_tokens {with_parts} with the result as parts",
        exchange=ex,
        hint=hint,
    )
    no_args = ctx.chat(NO_ARGS_HISTORY, **{**params, "tools": [NO_ARGS_TOOL]})
    _, message = answered(
        ctx,
        no_args,
        'a history replaying a parameterless call (arguments "{}", content "")',
        hint="accept a tool whose parameters have no properties and a replayed call whose arguments "
        "are the empty object: the template must render {} (and content '') without indexing a first "
        "argument; agents replay every call they made, parameterless ones included",
    )
    problems = call_problems(message.get("tool_calls") or [], ["list_zones"])
    ctx.expect(
        not problems,
        "the answer to a parameterless tool's history carries a malformed tool call",
        expected="text, or calls {id, type: function, function: {name: list_zones, arguments: str}}",
        received="; ".join(problems),
        exchange=no_args,
    )


@check(
    "REQ-TOOL-CHOICE-NONE",
    "tool_choice 'none' answers in text; 'auto' is accepted",
    "with tools offered and a prompt naming one, tool_choice 'none' gets a 200 with non-empty "
    "content, no tool_calls and a finish_reason other than 'tool_calls'; tool_choice 'auto' gets a "
    "200 chat.completion with text or a well-formed call",
    requires=("tools",),
)
def req_tool_choice_none(ctx: CheckContext) -> None:
    prompt = "Call get_weather for Paris."
    params = {"tools": TOOLS, "temperature": 0, **ctx.answer_budget(CALL_ROOM)}
    ex = ctx.chat(prompt, tool_choice="none", **params)
    data, message = answered(ctx, ex, "tool_choice 'none'")
    finish = data["choices"][0].get("finish_reason")
    ctx.expect(
        not message.get("tool_calls") and finish != "tool_calls",
        "tool_choice 'none' still produced a tool call",
        expected="a text answer: no tool_calls, finish_reason not 'tool_calls'",
        received=f"finish_reason {finish!r}, tool_calls {body_snippet(message.get('tool_calls'), 300)}",
        exchange=ex,
        hint="'none' forbids calls: do not parse tool calls (or constrain them) when tool_choice is 'none'; "
        "clients that sent it run no tools and show the call as the answer",
    )
    auto = ctx.chat(prompt, tool_choice="auto", **params)
    _, message = answered(ctx, auto, "tool_choice 'auto'", hint=HINT_TOOLS)
    problems = call_problems(message.get("tool_calls") or [])
    ctx.expect(
        not problems,
        "tool_choice 'auto' returned a malformed tool call",
        expected="[{id: str, type: 'function', function: {name: one of the tools, arguments: str}}]",
        received="; ".join(problems),
        exchange=auto,
    )
