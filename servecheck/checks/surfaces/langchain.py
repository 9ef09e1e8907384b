"""CLIENT-LANGCHAIN-*: LangChain's ``ChatOpenAI`` pointed at the target, as agent code uses it.

LangChain wraps the openai SDK but parses answers its own way: ``usage_metadata`` from usage,
``tool_calls`` (and ``invalid_tool_calls`` for arguments it cannot parse) from the tool-call
deltas, structured output from ``response_format``. A defect that the SDK tolerates may still
break an agent here. Needs the optional ``langchain-openai`` package
(``pip install 'servecheck[langchain]'``); without it each check is skipped with that reason.
Every call is bounded by the target's ``timeout_s`` and makes no retries.
"""

from __future__ import annotations

from typing import Any, NoReturn

import jsonschema

from servecheck.checks.context import CheckContext, CheckSkipped
from servecheck.checks.registry import check
from servecheck.checks.surfaces.client import (
    _raw,
    _sdk_options,
    describe_exception,
    sdk_http_client,
)
from servecheck.redact import redact

PROMPT = "Say hello."
INSTALL = "pip install 'servecheck[langchain]'"
SCHEMA: dict[str, Any] = {
    "title": "Verdict",
    "description": "a short verdict",
    "type": "object",
    "properties": {
        "word": {"type": "string", "enum": ["yes", "no", "maybe"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 9},
    },
    "required": ["word", "count"],
    "additionalProperties": False,
}
TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def chat_model(ctx: CheckContext, **options: Any) -> Any:
    """A ``ChatOpenAI`` for the target (its base_url, key, headers, timeout; no retries)."""
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:
        raise CheckSkipped(
            f"{ctx.check_id}: langchain-openai is not installed ({INSTALL})"
        ) from None
    sdk = _sdk_options(ctx)
    params: dict[str, Any] = {
        "model": ctx.model,
        "base_url": sdk["base_url"],
        "api_key": sdk["api_key"],
        "timeout": sdk["timeout"],
        "max_retries": 0,
        "temperature": 0,
        "max_tokens": 16,
        "default_headers": sdk["default_headers"],
        # the SDK's timeout is per read: an endless stream needs the whole-response deadline
        "http_client": sdk_http_client(ctx),
    }
    params.update(options)
    return ChatOpenAI(**params)


def budget_options(ctx: CheckContext, tokens: int) -> dict[str, Any]:
    """:meth:`CheckContext.answer_budget` as ChatOpenAI's options: the limit as ``max_tokens``,
    a thinking switch as ``extra_body``."""
    budget = ctx.answer_budget(tokens)
    limit = budget.pop("max_tokens")
    return {"max_tokens": limit, **({"extra_body": budget} if budget else {})}


def _failed(ctx: CheckContext, call: str, exc: BaseException, body: dict[str, Any]) -> NoReturn:
    raw = _raw(ctx, body)
    ctx.fail(
        f"LangChain ChatOpenAI failed on {call}: {type(exc).__name__}",
        expected=f"{call} returns a message",
        received=f"{describe_exception(exc)}; raw answer: {raw.describe(300)}",
        exchange=raw,
        hint="LangChain agents call the server exactly this way; the raw answer shows what it could not use",
    )


@check(
    "CLIENT-LANGCHAIN-INVOKE",
    "LangChain ChatOpenAI.invoke works",
    "ChatOpenAI(base_url, api_key).invoke gets an AIMessage with string content, a finish_reason "
    "in response_metadata and usage_metadata with input and output tokens",
)
def langchain_invoke(ctx: CheckContext) -> None:
    llm = chat_model(ctx)
    body = ctx.chat_body(PROMPT, max_tokens=16, temperature=0)
    try:
        message = llm.invoke(PROMPT)
    except Exception as exc:  # noqa: BLE001 - every client failure is the finding
        _failed(ctx, "invoke", exc, body)
    usage = getattr(message, "usage_metadata", None) or {}
    meta = getattr(message, "response_metadata", None) or {}
    ok = (
        isinstance(message.content, str)
        and meta.get("finish_reason") is not None
        and usage.get("input_tokens", 0) > 0
        and usage.get("output_tokens", 0) > 0
    )
    ctx.expect(
        ok,
        "invoke returned a message agent code cannot fully read",
        expected="content: str, response_metadata.finish_reason, usage_metadata input/output tokens > 0",
        received=redact(f"content={message.content!r:.200} metadata={meta} usage={usage}"),
        exchange=_raw(ctx, body),
    )


@check(
    "CLIENT-LANGCHAIN-STREAM",
    "LangChain ChatOpenAI.stream works",
    "ChatOpenAI.stream yields message chunks that add up to one message with a finish_reason "
    "(and usage_metadata where the target streams usage)",
)
def langchain_stream(ctx: CheckContext) -> None:
    streams_usage = bool(ctx.capabilities.get("usage_in_stream"))
    llm = chat_model(ctx, stream_usage=streams_usage)
    body = ctx.chat_body(PROMPT, max_tokens=16, temperature=0, stream=True)
    try:
        chunks = list(llm.stream(PROMPT))
    except Exception as exc:  # noqa: BLE001
        _failed(ctx, "stream", exc, body)
    ctx.expect(
        bool(chunks),
        "stream yielded no chunks",
        expected="at least one AIMessageChunk",
        received="nothing",
        exchange=_raw(ctx, body),
    )
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    meta = getattr(total, "response_metadata", None) or {}
    usage = getattr(total, "usage_metadata", None) or {}
    ok = isinstance(total.content, str) and meta.get("finish_reason") is not None
    if streams_usage:
        ok = ok and usage.get("output_tokens", 0) > 0
    ctx.expect(
        ok,
        "the streamed chunks do not add up to a complete message",
        expected="content: str and a finish_reason"
        + (", usage_metadata output tokens > 0" if streams_usage else ""),
        received=redact(
            f"{len(chunks)} chunks, content={total.content!r:.200} metadata={meta} usage={usage}"
        ),
        exchange=_raw(ctx, body),
    )


@check(
    "CLIENT-LANGCHAIN-STRUCTURED",
    "LangChain with_structured_output(json_schema) returns a valid object",
    "ChatOpenAI.with_structured_output(schema, method='json_schema').invoke returns a dict valid "
    "for the schema",
    requires=("json_schema",),
)
def langchain_structured(ctx: CheckContext) -> None:
    llm = chat_model(ctx, **budget_options(ctx, 64)).with_structured_output(
        SCHEMA, method="json_schema"
    )
    body = ctx.chat_body(
        "Answer yes or no, and count to three.",
        temperature=0,
        **ctx.answer_budget(64),
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "Verdict", "schema": SCHEMA},
        },
    )
    try:
        result = llm.invoke("Answer yes or no, and count to three.")
    except Exception as exc:  # noqa: BLE001
        _failed(ctx, "with_structured_output(...).invoke", exc, body)
    errors = (
        [e.message for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(result)]
        if isinstance(result, dict)
        else ["not a dict"]
    )
    ctx.expect(
        not errors,
        "the structured output is not valid for the schema",
        expected="a dict valid for the schema {word: yes|no|maybe, count: 0..9}",
        received=redact(f"{result!r:.300}: {'; '.join(errors[:3])}"),
        exchange=_raw(ctx, body),
        hint="the engine must constrain output to response_format.json_schema",
    )


@check(
    "CLIENT-LANGCHAIN-TOOL",
    "LangChain bind_tools gets a parsed tool call",
    "ChatOpenAI.bind_tools([get_weather], tool_choice='required').invoke returns an AIMessage "
    "whose tool_calls hold one get_weather call with dict args valid for its schema "
    "(nothing in invalid_tool_calls)",
    requires=("tools",),
)
def langchain_tool(ctx: CheckContext) -> None:
    llm = chat_model(ctx, **budget_options(ctx, 64)).bind_tools(
        [TOOL], tool_choice="required", parallel_tool_calls=False
    )
    prompt = "What is the weather in Paris?"
    body = ctx.chat_body(
        prompt,
        temperature=0,
        **ctx.answer_budget(64),
        tools=[TOOL],
        tool_choice="required",
        parallel_tool_calls=False,
    )
    try:
        message = llm.invoke(prompt)
    except Exception as exc:  # noqa: BLE001
        _failed(ctx, "bind_tools(...).invoke", exc, body)
    calls = getattr(message, "tool_calls", None) or []
    invalid = getattr(message, "invalid_tool_calls", None) or []
    args = calls[0].get("args") if calls else None
    schema = TOOL["function"]["parameters"]
    ok = (
        len(calls) >= 1
        and not invalid
        and calls[0].get("name") == "get_weather"
        and isinstance(args, dict)
        and not list(jsonschema.Draft202012Validator(schema).iter_errors(args))
    )
    ctx.expect(
        ok,
        "LangChain did not get a usable tool call",
        expected="tool_calls: [{name: get_weather, args: {city: Paris|Tokyo|Lima}}], no invalid_tool_calls",
        received=redact(f"tool_calls={calls!r:.300} invalid_tool_calls={invalid!r:.300}"),
        exchange=_raw(ctx, body),
        hint="an agent loop cannot run a call whose arguments do not parse as JSON for the schema",
    )
