"""REASON-*: reasoning models (DeepSeek-R1 distills, Qwen3 / gpt-oss style thinking).

A target declares its reasoning model in targets.yaml (``reasoning: auto`` or
``{field, markers, parser, thinking_off, thinking_on}``); without the block these checks are
skipped with that reason. Engines put the reasoning in ``reasoning_content`` (llama.cpp, LiteLLM,
Xinference, older vLLM) or ``reasoning`` (vLLM 0.32); ``field: auto`` accepts either, and every
failure names the field it saw. ``thinking_on`` is merged into every request (engines whose
default is thinking off), ``thinking_off`` into REASON-THINKING-OFF's.

Every request is made at temperature 0 with room for the reasoning and a short answer: a cut
inside the reasoning is what REASON-CUT-LENGTH asks for on purpose, and nowhere else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.registry import check
from servecheck.checks.surfaces.json import SCHEMA_CASES, json_schema_format
from servecheck.checks.surfaces.tools import TOOL_NAMES, tool_request
from servecheck.client.http import Exchange
from servecheck.config.model import ReasoningSettings

FIELDS = ("reasoning_content", "reasoning")
ALWAYS_MARKERS = ("<think>", "</think>")
PROMPT = "What is 7 times 6? Think it through, then answer in one short sentence."
MAX_TOKENS = 128  # reasoning plus a short answer
CUT_TOKENS = 2  # a cut that lands inside any reasoning longer than two tokens
JSON_MAX_TOKENS = 192

HINT_PARSER = (
    "start the engine with a reasoning parser that matches the model (vLLM --reasoning-parser "
    "deepseek_r1|qwen3, llama.cpp --reasoning-format deepseek, SGLang --reasoning-parser), or "
    "route the field through the gateway"
)


def _hint(ctx: CheckContext) -> str:
    """The parser hint, with what the target's engine profile records about reasoning."""
    known = ctx.profile.reasoning
    return HINT_PARSER + (f" ({ctx.profile.name}: {known})" if known else "")


def settings(ctx: CheckContext) -> ReasoningSettings:
    """The target's reasoning block, or a skip saying the target declares none."""
    declared = ctx.target.reasoning
    if declared is None:
        raise CheckSkipped(
            f"{ctx.check_id}: {ctx.target.name} declares no reasoning model "
            "(targets.yaml: reasoning: auto, or {field, markers, parser, thinking_off})"
        )
    return declared


def _fields(s: ReasoningSettings) -> tuple[str, ...]:
    return FIELDS if s.field == "auto" else (s.field,)


def _markers(s: ReasoningSettings) -> list[str]:
    return list(dict.fromkeys([*ALWAYS_MARKERS, *s.markers]))


@dataclass(slots=True)
class Parts:
    """The reasoning and the answer of one choice, and where they were found."""

    reasoning: str = ""
    content: str = ""
    fields: list[str] = field(default_factory=list)  # reasoning fields that carried text
    other_fields: list[str] = field(default_factory=list)  # reasoning fields not declared
    finish_reason: Any = None
    # streamed only: chunk positions of the first answer delta and of reasoning deltas after it
    first_answer_at: int | None = None
    reasoning_after_answer: list[int] = field(default_factory=list)
    tool_calls: list[Any] = field(default_factory=list)

    def seen(self) -> str:
        return ", ".join(self.fields) or "no reasoning field"


def _collect(parts: Parts, holder: dict[str, Any], s: ReasoningSettings) -> str:
    """Add one message/delta's reasoning to ``parts``; return the reasoning text it carried."""
    text = ""
    for name in FIELDS:
        value = holder.get(name)
        if not (isinstance(value, str) and value):
            continue
        if name not in _fields(s):
            if name not in parts.other_fields:
                parts.other_fields.append(name)
            continue
        if name not in parts.fields:
            parts.fields.append(name)
        text += value
    parts.reasoning += text
    return text


def message_parts(
    ctx: CheckContext, data: dict[str, Any], ex: Exchange, s: ReasoningSettings, index: int = 0
) -> Parts:
    """Choice ``index`` of a non-streamed answer, split into reasoning and content."""
    choices = data.get("choices")
    listed = choices if isinstance(choices, list) else []
    by_index = {c.get("index", i): c for i, c in enumerate(listed) if isinstance(c, dict)}
    first = by_index.get(index)
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        ctx.fail(
            f"the answer has no choice with index {index} and a message",
            expected=f"choices[{index}].message with content and a reasoning field",
            received=body_snippet(data),
            exchange=ex,
        )
    parts = Parts(finish_reason=first.get("finish_reason") if isinstance(first, dict) else None)
    _collect(parts, message, s)
    content = message.get("content")
    parts.content = content if isinstance(content, str) else ""
    calls = message.get("tool_calls")
    parts.tool_calls = calls if isinstance(calls, list) else []
    return parts


def stream_parts(chunks: list[dict[str, Any]], s: ReasoningSettings) -> Parts:
    """Choice 0 of a stream, split into reasoning and content, with the order they came in."""
    parts = Parts()
    for k, chunk in enumerate(chunks):
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason") is not None and parts.finish_reason is None:
                parts.finish_reason = choice.get("finish_reason")
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            if _collect(parts, delta, s) and parts.first_answer_at is not None:
                parts.reasoning_after_answer.append(k)
            content = delta.get("content")
            if isinstance(content, str) and content:
                parts.content += content
                if parts.first_answer_at is None:
                    parts.first_answer_at = k
            if delta.get("tool_calls"):
                parts.tool_calls.extend(delta["tool_calls"])
                if parts.first_answer_at is None:
                    parts.first_answer_at = k
    return parts


def _asked(ctx: CheckContext, **params: Any) -> dict[str, Any]:
    """Request parameters: the target's thinking_on body, then the check's own on top."""
    declared = ctx.target.reasoning
    asked = dict(declared.thinking_on) if declared is not None else {}
    asked.update(params)
    asked.setdefault("max_tokens", MAX_TOKENS)
    asked.setdefault("temperature", 0)
    return asked


def answer(
    ctx: CheckContext, s: ReasoningSettings, what: str, **params: Any
) -> tuple[Parts, Exchange]:
    ex = ctx.chat(PROMPT, **_asked(ctx, **params))
    return message_parts(ctx, ctx.ok_json(ex, what), ex, s), ex


def streamed(
    ctx: CheckContext, s: ReasoningSettings, what: str, *, usage: bool | None = None, **params: Any
) -> tuple[Parts, Exchange]:
    ex = ctx.ok_stream(ctx.stream_chat(PROMPT, usage=usage, **_asked(ctx, **params)), what)
    assert ex.stream is not None  # noqa: S101 - ok_stream guarantees it
    ctx.expect(
        bool(ex.stream.chunks),
        f"{what}: the stream carried no JSON chunks",
        expected="chat.completion.chunk events, then data: [DONE]",
        received=ex.describe(600),
        exchange=ex,
    )
    return stream_parts(ex.stream.chunks, s), ex


def _expect_reasoning(
    ctx: CheckContext, s: ReasoningSettings, parts: Parts, ex: Exchange, what: str
) -> None:
    if parts.reasoning:
        return
    if parts.other_fields:
        ctx.fail(
            f"{what}: the reasoning arrives in {', '.join(parts.other_fields)}, not in the declared field",
            expected=f"reasoning in {s.field} (targets.yaml reasoning.field)",
            received=f"{', '.join(parts.other_fields)} carries it",
            exchange=ex,
            hint="set reasoning.field to auto or to the field this engine (or gateway) writes",
        )
    leaked = [m for m in _markers(s) if m in parts.content]
    ctx.fail(
        f"{what}: no reasoning came back in {' or '.join(_fields(s))}"
        + (" and the content holds reasoning markers" if leaked else ""),
        expected=f"non-empty {' or '.join(_fields(s))} with the model's reasoning",
        received=f"content {parts.content[:300]!r}, {parts.seen()}",
        exchange=ex,
        hint=_hint(ctx),
    )


# ---------------------------------------------------------------------------------------------


@check(
    "REASON-SEPARATED",
    "the reasoning is separated from the answer",
    "with the target's reasoning mode on, a temperature-0 answer has non-empty reasoning in "
    "reasoning_content or reasoning (the one targets.yaml names, either with field: auto) and its "
    "content holds none of the reasoning markers (<think>, </think> and the markers the target names)",
    model_dependent=True,
)
def reason_separated(ctx: CheckContext) -> None:
    s = settings(ctx)
    parts, ex = answer(ctx, s, "chat completion from a reasoning model")
    leaked = [m for m in _markers(s) if m in parts.content]
    ctx.expect(
        not leaked,
        "reasoning markers leak into content",
        expected=f"content without {', '.join(_markers(s))}",
        received=f"content {parts.content[:300]!r} holds {', '.join(leaked)}; {parts.seen()}",
        exchange=ex,
        hint=_hint(ctx),
    )
    _expect_reasoning(ctx, s, parts, ex, "non-streamed answer")
    in_reasoning = [m for m in _markers(s) if m in parts.reasoning]
    ctx.expect(
        not in_reasoning,
        "the reasoning field still holds the markers",
        expected=f"{parts.seen()} without {', '.join(_markers(s))}",
        received=f"{parts.reasoning[:300]!r} holds {', '.join(in_reasoning)}",
        exchange=ex,
        hint="the parser keeps the markers; engines strip them",
    )


@check(
    "REASON-STREAM-EQUALS",
    "streamed and non-streamed answers split reasoning and answer alike",
    "at temperature 0 the concatenated streamed reasoning deltas equal the non-streamed reasoning, "
    "and the streamed content equals the non-streamed content",
    requires=("streaming",),
    model_dependent=True,
)
def reason_stream_equals(ctx: CheckContext) -> None:
    s = settings(ctx)
    ns, ns_ex = answer(ctx, s, "non-streamed chat completion")
    _expect_reasoning(ctx, s, ns, ns_ex, "non-streamed answer")
    st, ex = streamed(ctx, s, "streamed chat completion")
    if (st.reasoning, st.content) == (ns.reasoning, ns.content):
        return
    again, _ = answer(ctx, s, "second non-streamed chat completion")
    deterministic = (again.reasoning, again.content) == (ns.reasoning, ns.content)
    ctx.fail(
        "streamed and non-streamed answers split reasoning and answer differently"
        if deterministic
        else "temperature 0 is not deterministic here, so the split cannot be compared",
        expected=f"reasoning {ns.reasoning[-120:]!r} then content {ns.content[:120]!r} (non-streamed)",
        received=f"streamed reasoning {st.reasoning[-120:]!r} then content {st.content[:120]!r}",
        exchange=ex,
        hint="the streaming reasoning parser finds the end of the reasoning elsewhere (a marker "
        "split across deltas, or the streaming path uses another parser)"
        if deterministic
        else "greedy decoding is not greedy here",
    )


@check(
    "REASON-STREAM-ORDER",
    "no reasoning after the answer began",
    "in a stream, no reasoning delta (reasoning_content / reasoning) arrives after the first "
    "delta with answer content or a tool call",
    requires=("streaming",),
    model_dependent=True,
)
def reason_stream_order(ctx: CheckContext) -> None:
    s = settings(ctx)
    st, ex = streamed(ctx, s, "streamed chat completion")
    _expect_reasoning(ctx, s, st, ex, "streamed answer")
    if st.first_answer_at is None:
        raise CheckSkipped(
            f"{ctx.check_id}: the stream reasoned for all {MAX_TOKENS} tokens and never answered"
        )
    ctx.expect(
        not st.reasoning_after_answer,
        "a reasoning delta arrives after the answer began",
        expected=f"every reasoning delta before chunk {st.first_answer_at} (the first answer delta)",
        received=f"reasoning deltas in chunks {st.reasoning_after_answer[:5]}",
        exchange=ex,
        hint="clients (and TTFA measurements) take the first answer delta as the end of thinking",
    )


@check(
    "REASON-CUT-LENGTH",
    "a cut inside the reasoning is reported as a cut",
    f"with max_tokens {CUT_TOKENS} the answer is cut inside the reasoning: streamed and "
    "non-streamed finish_reason is 'length', never 'stop' with an empty answer",
)
def reason_cut_length(ctx: CheckContext) -> None:
    s = settings(ctx)
    ns, ns_ex = answer(ctx, s, "chat completion cut by max_tokens", max_tokens=CUT_TOKENS)
    if ns.content:
        raise CheckSkipped(
            f"{ctx.check_id}: the reasoning ended within {CUT_TOKENS} tokens, so no cut lands inside it"
        )
    results = [("non-streamed", ns, ns_ex)]
    if ctx.capabilities.get("streaming", False):
        st, ex = streamed(
            ctx, s, "streamed chat completion cut by max_tokens", max_tokens=CUT_TOKENS
        )
        results.append(("streamed", st, ex))
    for what, parts, ex in results:
        ctx.expect(
            parts.finish_reason == "length",
            f"a {what} cut inside the reasoning is not reported as 'length'",
            expected=f"finish_reason 'length' (max_tokens {CUT_TOKENS}, empty answer)",
            received=f"finish_reason {parts.finish_reason!r}, content {parts.content!r}, "
            f"reasoning {parts.reasoning[:80]!r}",
            exchange=ex,
            hint="a client sees a complete, empty answer; raise max_tokens or report the cut",
        )


def _reasoning_tokens(
    ctx: CheckContext, usage: Any, ex: Exchange, what: str
) -> tuple[int, int] | None:
    """(reasoning_tokens, completion_tokens) from a usage object; None when not reported."""
    if not isinstance(usage, dict):
        return None
    details = usage.get("completion_tokens_details")
    value = details.get("reasoning_tokens") if isinstance(details, dict) else None
    if value is None:
        return None
    completion = usage.get("completion_tokens")
    ok = (
        isinstance(value, int)
        and not isinstance(value, bool)
        and isinstance(completion, int)
        and 0 <= value <= completion
    )
    ctx.expect(
        ok,
        f"{what}: reasoning_tokens is not a count within completion_tokens",
        expected="0 <= completion_tokens_details.reasoning_tokens <= completion_tokens (integers)",
        received=body_snippet(usage),
        exchange=ex,
    )
    return value, completion  # type: ignore[return-value]


@check(
    "REASON-USAGE",
    "reasoning tokens are counted",
    "where usage reports completion_tokens_details.reasoning_tokens it is an integer in "
    "[0, completion_tokens], above 0 when reasoning came back, and equal in streamed (include_usage) "
    "and non-streamed usage at temperature 0; skipped where the engine does not report it",
)
def reason_usage(ctx: CheckContext) -> None:
    s = settings(ctx)
    ex = ctx.chat(PROMPT, **_asked(ctx))
    data = ctx.ok_json(ex, "chat completion from a reasoning model")
    parts = message_parts(ctx, data, ex, s)
    counted = _reasoning_tokens(ctx, data.get("usage"), ex, "non-streamed usage")
    if counted is None:
        raise CheckSkipped(
            f"{ctx.check_id}: {ctx.target.name} does not report usage.completion_tokens_details.reasoning_tokens"
        )
    ctx.expect(
        counted[0] > 0 or not parts.reasoning,
        "reasoning_tokens is 0 although the answer reasoned",
        expected=f"reasoning_tokens > 0 ({len(parts.reasoning)} characters of reasoning came back)",
        received=body_snippet(data.get("usage")),
        exchange=ex,
        hint="capacity plans and bills that read reasoning_tokens undercount reasoning models",
    )
    if not (ctx.capabilities.get("streaming") and ctx.capabilities.get("usage_in_stream")):
        return
    st, st_ex = streamed(ctx, s, "streamed chat completion with include_usage", usage=True)
    assert st_ex.stream is not None  # noqa: S101 - streamed() checked it
    st_counted = _reasoning_tokens(ctx, st_ex.stream.usage(), st_ex, "streamed usage")
    ctx.expect(
        st_counted == counted,
        "streamed and non-streamed usage count reasoning tokens differently",
        expected=f"(reasoning_tokens, completion_tokens) {counted} as non-streamed",
        received=f"streamed {st_counted}" + ("" if st_counted else " (not reported)"),
        exchange=st_ex,
    )


def _after_reasoning(text: str, s: ReasoningSettings) -> str:
    """``text`` after the last closing marker (what a client would have to strip)."""
    closing = [m for m in _markers(s) if m.startswith("</")] or [ALWAYS_MARKERS[1]]
    cut = max((text.rfind(m) + len(m) for m in closing if m in text), default=0)
    return text[cut:]


@check(
    "REASON-JSON",
    "JSON mode holds with reasoning on",
    "with the reasoning mode on and response_format json_schema (a bounded schema; json_object "
    "where the target has no json_schema), content (not the reasoning) parses by itself as a JSON "
    "object that validates, with no reasoning text or markers around it; where n is declared, "
    "both choices of an n=2 request (temperature 0.8) hold the same rule",
    requires=("json_object",),
    model_dependent=True,
)
def reason_json(ctx: CheckContext) -> None:
    s = settings(ctx)
    bounded = ctx.capabilities.get("json_schema", False)
    fmt = (
        json_schema_format("reason_json", SCHEMA_CASES[0].schema)
        if bounded
        else {"type": "json_object"}
    )
    parts, ex = answer(
        ctx, s, "chat completion in JSON mode", max_tokens=JSON_MAX_TOKENS, response_format=fmt
    )
    cut = _judge_json(ctx, s, parts, ex, bounded, "the answer")
    if cut:
        raise CheckSkipped(f"{ctx.check_id}: inconclusive: {cut}")
    if not ctx.capabilities.get("n", False):
        return
    # n > 1 needs sampling (vLLM refuses n=2 at temperature 0); the schema bounds the JSON.
    ex = ctx.chat(
        PROMPT,
        **_asked(
            ctx,
            max_tokens=JSON_MAX_TOKENS,
            response_format=fmt,
            n=2,
            temperature=0.8,
            seed=3,
        ),
    )
    data = ctx.ok_json(ex, "chat completion in JSON mode with n=2")
    cuts = [
        found
        for index in (0, 1)
        if (
            found := _judge_json(
                ctx,
                s,
                message_parts(ctx, data, ex, s, index),
                ex,
                bounded,
                f"choice {index} of n=2",
            )
        )
    ]
    if cuts:
        raise CheckSkipped(
            f"{ctx.check_id}: inconclusive for n=2 (the single answer passed): {'; '.join(cuts)}"
        )


def _judge_json(
    ctx: CheckContext, s: ReasoningSettings, parts: Parts, ex: Exchange, bounded: bool, what: str
) -> str | None:
    """Fail unless ``parts`` holds the JSON answer; a cut before it closed is returned instead."""
    import jsonschema

    schema = SCHEMA_CASES[0].schema
    try:
        value = json.loads(parts.content)
    except ValueError:
        value = None
    if isinstance(value, dict):
        errors = (
            [] if not bounded else list(jsonschema.Draft202012Validator(schema).iter_errors(value))
        )
        ctx.expect(
            not errors,
            f"{what}: the JSON answer does not validate against the schema with reasoning on",
            expected=f"content valid for {json.dumps(schema)[:200]}",
            received=f"{errors[0].message if errors else ''}: {parts.content[:200]!r}",
            exchange=ex,
            hint="the grammar is dropped or started in the wrong place when a reasoning parser runs",
        )
        return None
    stripped = _after_reasoning(parts.content, s)
    try:
        json.loads(stripped)
        only_after_strip = stripped != parts.content
    except ValueError:
        only_after_strip = False
    open_object = parts.content.lstrip().startswith("{") and not bounded
    if (
        not only_after_strip
        and parts.finish_reason == "length"
        and (not parts.content or open_object)
    ):
        # reasoning took every token, or an unbounded object ran on (random weights)
        return (
            f"{what} was cut at {JSON_MAX_TOKENS} tokens before the JSON answer closed "
            f"(content {parts.content[:60]!r})"
        )
    ctx.fail(
        f"{what}: the JSON answer parses only once the reasoning is stripped from content"
        if only_after_strip
        else f"{what}: content is not a JSON object with reasoning on",
        expected="content that json.loads() turns into an object, the reasoning in its own field",
        received=f"content {parts.content[:300]!r}; {parts.seen()}; finish_reason {parts.finish_reason!r}",
        exchange=ex,
        hint="the structured-output grammar must start after the reasoning ends (vLLM applies it "
        "after the reasoning parser's end marker) and the parser must take the reasoning out"
        if only_after_strip
        else _hint(ctx),
    )


@check(
    "REASON-TOOLS",
    "a forced tool call is a tool call, not reasoning text",
    "with tool_choice required and the reasoning mode on, the call is in message.tool_calls with "
    "a declared function name, and neither the reasoning nor the content holds the call as text",
    requires=("tools",),
    model_dependent=True,
)
def reason_tools(ctx: CheckContext) -> None:
    s = settings(ctx)
    body = tool_request(ctx, "required", **_asked(ctx))
    ex = ctx.post("/chat/completions", body)
    parts = message_parts(ctx, ctx.ok_json(ex, "chat completion with tools"), ex, s)
    names = [
        c.get("function", {}).get("name")
        for c in parts.tool_calls
        if isinstance(c, dict) and isinstance(c.get("function"), dict)
    ]
    as_text = [n for n in TOOL_NAMES if n in parts.reasoning or n in parts.content]
    if names and all(n in TOOL_NAMES for n in names):
        return
    if not names and parts.finish_reason == "length" and not parts.content:
        raise CheckSkipped(f"{ctx.check_id}: the reasoning used all {MAX_TOKENS} tokens")
    ctx.fail(
        "the forced tool call is written inside the reasoning instead of tool_calls"
        if as_text
        else "no tool call in tool_calls with reasoning on",
        expected=f"message.tool_calls calling one of {', '.join(TOOL_NAMES)}",
        received=f"tool_calls {body_snippet(parts.tool_calls, 200)}, reasoning {parts.reasoning[-200:]!r}, "
        f"content {parts.content[:120]!r}, finish_reason {parts.finish_reason!r}",
        exchange=ex,
        hint="the tool-call parser must run on the answer after the reasoning (and on calls the "
        "model makes while reasoning, vLLM PR#55759)",
    )


@check(
    "REASON-THINKING-OFF",
    "turning thinking off is honoured",
    "a request with the target's thinking-off switch (default chat_template_kwargs "
    "{enable_thinking: false}) gets an answer with no reasoning and no markers in content, "
    "non-streamed and (where streaming is declared) streamed: no reasoning delta; skipped where "
    "reasoning.thinking_off is false",
)
def reason_thinking_off(ctx: CheckContext) -> None:
    s = settings(ctx)
    if s.thinking_off is False:
        raise CheckSkipped(
            f"{ctx.check_id}: {ctx.target.name} has no thinking-off switch (reasoning.thinking_off: false)"
        )
    parts, ex = answer(ctx, s, "chat completion with thinking off", **s.thinking_off)
    _expect_no_reasoning(
        ctx, s, parts, ex, "the model reasons although the request turned thinking off"
    )
    if ctx.capabilities.get("streaming"):
        st, st_ex = streamed(ctx, s, "streamed chat completion with thinking off", **s.thinking_off)
        _expect_no_reasoning(
            ctx, s, st, st_ex, "the stream reasons although the request turned thinking off"
        )


def _expect_no_reasoning(
    ctx: CheckContext, s: ReasoningSettings, parts: Parts, ex: Exchange, summary: str
) -> None:
    leaked = [m for m in _markers(s) if m in parts.content]
    ctx.expect(
        not parts.reasoning and not leaked,
        summary,
        expected=f"no reasoning with {json.dumps(s.thinking_off)}",
        received=f"{parts.seen()}: {parts.reasoning[:200]!r}"
        + (f"; content holds {', '.join(leaked)}" if leaked else ""),
        exchange=ex,
        hint="the chat template ignores the switch, or the parser and the template disagree on "
        "the thinking default (vllm#22507); set reasoning.thinking_off to what this engine honours",
    )
