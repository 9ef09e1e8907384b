"""AGENT-*: agent-sized requests (issue 44 item 3), as coding agents really send them.

Each check sends one generated request (:mod:`servecheck.checks.agent_sized`: seeded, the same
every run) of the size agents send: 32 tools of 2-3 kB with nested schemas, a 20k-word system
prompt, Claude Code's shape on ``/v1/messages`` with ``cache_control`` markers, and the tools with
reasoning on. A server must accept it and answer (content or a tool call), or refuse it with a
clear 4xx; it must never answer ``stop`` with empty content (llama.cpp with a large toolset and
reasoning does), never a 5xx, never hang.

Sized to the target: the prompt is counted by the target's ``/tokenize`` where it has one (else
estimated for a real model's vocabulary) and set against its context (targets.yaml ``context_length`` or what
discovery found). Where the context cannot hold it, a clear 4xx is expected and the check is
skipped with "context too small: needs N tokens, has M": a finding that says so, never a pass
counted as conformance. A refusal naming the context is judged so by the server's own words
too, so an estimate never makes a false failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from servecheck.checks import agent_sized as gen
from servecheck.checks.context import CONTEXT_REFUSALS, CheckContext, CheckSkipped, body_snippet
from servecheck.checks.preconditions import ANTHROPIC_VERSION
from servecheck.checks.registry import check
from servecheck.checks.surfaces import messages as msgs
from servecheck.checks.surfaces.ctx import tokenize_count
from servecheck.checks.surfaces.reason import settings
from servecheck.client.http import Exchange

ANSWER_TOKENS = 256  # room for an answer or a call's arguments
REASONING_TOKENS = 1024  # the same with room for the thinking first
TASK = "Find where this project's tests live and list the test files. Use a tool if it helps."
SHORT_SYSTEM = "You are a coding agent. Use the tools to look before you answer."
HINT_EMPTY = (
    "llama.cpp answers a large toolset with reasoning on this way (the template or the parser "
    "drops the answer); an agent shows the user nothing and stops"
)
HINT_REFUSED = (
    "a server whose context holds the request must serve it: agents send this much on every turn"
)
# The request is 100-130 kB: a curl line of it helps nobody, so failures carry no exchange and
# say how to send it again instead.
AGAIN = f"; the request is generated the same every run (seed {gen.SEED}): run this check again to resend it"


@dataclass(frozen=True, slots=True)
class Sized:
    """A generated request and what the target can hold: tokens it needs, the context, where
    the count came from."""

    route: str
    body: dict[str, Any]
    needs: int
    context: int | None
    counted: str  # "/tokenize" or "estimated"

    @property
    def fits(self) -> bool:
        return self.context is None or self.needs <= self.context

    def too_small(self) -> str:
        has = f"has {self.context}" if self.context else "has less (the server says so)"
        return f"context too small: needs {self.needs} tokens ({self.counted}), {has}"


def sized(ctx: CheckContext, route: str, body: dict[str, Any], budget: int) -> Sized:
    """``body`` with its size: the prompt's tokens plus the answer ``budget``."""
    text = json.dumps([body.get("system"), body.get("messages"), body.get("tools")])
    counted = tokenize_count(ctx, text)
    needs = counted if counted is not None else gen.estimate_tokens(text)
    how = "/tokenize" if counted is not None else "estimated"
    return Sized(route, body, needs + budget, ctx.info.context_length, how)


def _said(ex: Exchange) -> str:
    """The refusal's message: an OpenAI or Anthropic error object's, or the body's text."""
    try:
        data = json.loads(ex.text or "null")
    except ValueError:
        return ex.text.strip()[:300]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:300]
    if isinstance(error, str):
        return error[:300]
    message = data.get("message") if isinstance(data, dict) else None
    return message[:300] if isinstance(message, str) else ""


def _stream_error(ex: Exchange) -> str | None:
    """An error inside a 200 stream (a legal way to refuse an oversized prompt late)."""
    obj = ex.stream.error_obj if ex.stream is not None else None
    if obj is None:
        return None
    error = obj.get("error", obj)
    said = error.get("message") if isinstance(error, dict) else error
    return str(said)[:300]


def send(ctx: CheckContext, req: Sized, what: str) -> Exchange:
    """Send the request; return a 200 stream to judge, or end the check: a skip for a clear
    refusal of a request the context cannot hold, a failure for a 5xx, a hang, an unclear
    refusal or a refusal of a request that fits."""
    headers = ANTHROPIC_VERSION if req.route == msgs.ROUTE else None
    ex = ctx.post(req.route, req.body, stream=True, headers=headers)
    ctx.expect(
        not ex.error and ex.status is not None and ex.status < 500,
        f"{what}: the server broke on an agent-sized request",
        expected="a 200 answer, or a clear 4xx refusal, within the deadline",
        received=ex.describe(400),
        hint="a large tool list or system prompt must never crash or stall the server" + AGAIN,
    )
    said = _said(ex) if ex.status != 200 else _stream_error(ex)
    if said is None:
        return ex
    contextual = any(words in said.lower() for words in CONTEXT_REFUSALS)
    if req.fits and not contextual:
        ctx.fail(
            f"{what}: refused although the context holds it",
            expected=f"HTTP 200: the request needs {req.needs} tokens of {req.context or '?'}",
            received=ex.describe(400),
            hint=HINT_REFUSED + AGAIN,
        )
    ctx.expect(
        bool(said.strip()),
        f"{what}: refused without saying why",
        expected=f"a 4xx whose error message says the prompt is too long ({req.too_small()})",
        received=ex.describe(400),
    )
    raise CheckSkipped(f"{ctx.check_id}: {req.too_small()}; refused with {ex.status}: {said}")


@dataclass(slots=True)
class Answer:
    """What a stream carried: the answer text, the thinking, the calls, how it ended."""

    text: str = ""
    thinking: str = ""
    calls: int = 0
    finish: Any = None


def chat_answer(ex: Exchange) -> Answer:
    out = Answer()
    for chunk in ex.stream.chunks if ex.stream is not None else []:
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            delta = delta if isinstance(delta, dict) else {}
            out.text += delta["content"] if isinstance(delta.get("content"), str) else ""
            for key in ("reasoning_content", "reasoning"):
                out.thinking += delta[key] if isinstance(delta.get(key), str) else ""
            calls = delta.get("tool_calls")
            out.calls += len(calls) if isinstance(calls, list) else 0
            if isinstance(choice, dict) and choice.get("finish_reason") is not None:
                out.finish = choice["finish_reason"]
    return out


def messages_answer(ctx: CheckContext, ex: Exchange, what: str) -> Answer:
    facts = msgs.stream_facts(msgs.events_of(ctx, ex, what))
    return Answer(facts["text"], facts["thinking"], len(facts["tools"]), facts.get("stop_reason"))


def judge(ctx: CheckContext, ex: Exchange, answer: Answer, req: Sized, what: str) -> None:
    """An answer (text or a call) with its finish; an answer cut while thinking is not judged."""
    ctx.expect(
        answer.finish is not None,
        f"{what}: the stream ended without a finish reason",
        expected="a finish_reason / stop_reason closing the answer",
        received=ex.describe(400),
    )
    if answer.text.strip() or answer.calls:
        return
    if answer.finish in ("length", "max_tokens") and answer.thinking:
        ctx.not_judged_cut(what, req.body.get("max_tokens"))
    ctx.fail(
        f"{what}: answered {answer.finish!r} with empty content and no tool call",
        expected="content or a tool call, or a clear 4xx refusal",
        received=f"finish {answer.finish!r}, {len(answer.thinking)} characters of thinking, "
        f"no text, no call -- {body_snippet(ex.text[-300:], 300)}",
        hint=HINT_EMPTY + AGAIN,
    )


def chat_body(
    ctx: CheckContext, system: str, tools: list[gen.Tool], budget: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A streamed chat request; ``budget``: its limit and thinking fields (by default the
    answer budget a reasoning target needs, its thinking switched off where it can be)."""
    body: dict[str, Any] = {
        "model": ctx.model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": TASK}],
        "stream": True,
        **(budget if budget is not None else ctx.answer_budget(ANSWER_TOKENS)),
    }
    if tools:
        body["tools"] = gen.openai_tools(tools)
    return body


def run_chat(ctx: CheckContext, body: dict[str, Any], what: str) -> None:
    req = sized(ctx, "/chat/completions", body, int(body.get("max_tokens") or ANSWER_TOKENS))
    ex = send(ctx, req, what)
    judge(ctx, ex, chat_answer(ex), req, what)


@check(
    "AGENT-SIZED-TOOLS",
    f"a chat request with {gen.TOOL_COUNT} agent-sized tools is answered or clearly refused",
    f"a streamed chat request with {gen.TOOL_COUNT} tools (descriptions of 1-2 kB, nested "
    "schemas three objects deep, ~23k tokens) gets content or a tool call, or, where the "
    "context cannot hold it, a 4xx saying so (skipped: context too small); never finish "
    "'stop' with empty content, a 5xx or a hang",
    requires=("tools", "streaming", "route-accepts:/chat/completions"),
)
def agent_sized_tools(ctx: CheckContext) -> None:
    body = chat_body(ctx, SHORT_SYSTEM, gen.tools())
    run_chat(ctx, body, f"chat with {gen.TOOL_COUNT} tools")


@check(
    "AGENT-SIZED-SYSTEM",
    f"a chat request with a {gen.SYSTEM_TOKENS // 1000}k-word system prompt is answered or "
    "clearly refused",
    f"a streamed chat request whose system prompt is {gen.SYSTEM_TOKENS} words of rules (~22k "
    "tokens, a coding agent's) gets content, or, where the context cannot hold it, a 4xx "
    "saying so (skipped: context too small); never empty content, a 5xx or a hang",
    requires=("streaming", "route-accepts:/chat/completions"),
)
def agent_sized_system(ctx: CheckContext) -> None:
    body = chat_body(ctx, gen.system_prompt(gen.SYSTEM_TOKENS), [])
    run_chat(ctx, body, f"chat with a {gen.SYSTEM_TOKENS}-word system prompt")


@check(
    "AGENT-SIZED-REASONING",
    f"a chat request with {gen.TOOL_COUNT} agent-sized tools and reasoning on is answered",
    f"on a target that declares a reasoning model, the {gen.TOOL_COUNT}-tool request of "
    f"AGENT-SIZED-TOOLS with thinking on (the target's thinking_on) and {REASONING_TOKENS} "
    "tokens of room gets content or a tool call after its reasoning, never finish 'stop' "
    "with empty content (llama.cpp's failure with large toolsets and reasoning); an answer "
    "cut while still thinking is not judged",
    requires=("tools", "streaming", "route-accepts:/chat/completions"),
)
def agent_sized_reasoning(ctx: CheckContext) -> None:
    declared = settings(ctx)  # skips where the target declares no reasoning model
    budget = {"max_tokens": REASONING_TOKENS, **declared.thinking_on}  # thinking stays on
    body = chat_body(ctx, SHORT_SYSTEM, gen.tools(), budget)
    run_chat(ctx, body, f"chat with {gen.TOOL_COUNT} tools and reasoning on")


@check(
    "AGENT-SIZED-MESSAGES",
    "Claude Code's agent-sized request on /v1/messages, with cache_control, is answered",
    f"a streamed /v1/messages request as Claude Code sends one (a {gen.MESSAGES_SYSTEM_TOKENS}"
    f"-word system prompt in blocks with cache_control, {gen.MESSAGES_TOOL_COUNT} tools of "
    "2-3 kB with cache_control on the last, a user block with cache_control) gets text or a "
    "tool_use block and a stop_reason, or, where the context cannot hold it, a 4xx saying so "
    "(skipped: context too small); never end_turn with no content, a 5xx or a hang",
    requires=msgs.TOOL_NEEDS,
)
def agent_sized_messages(ctx: CheckContext) -> None:
    marker = {"cache_control": {"type": "ephemeral"}}
    body = {
        "model": ctx.model,
        "max_tokens": ANSWER_TOKENS,
        "stream": True,
        "system": [
            {"type": "text", "text": SHORT_SYSTEM},
            {"type": "text", "text": gen.system_prompt(gen.MESSAGES_SYSTEM_TOKENS), **marker},
        ],
        "messages": [{"role": "user", "content": [{"type": "text", "text": TASK, **marker}]}],
        "tools": gen.anthropic_tools(gen.tools(gen.MESSAGES_TOOL_COUNT)),
    }
    what = "Claude Code-sized /v1/messages request"
    req = sized(ctx, msgs.ROUTE, body, ANSWER_TOKENS)
    ex = send(ctx, req, what)
    judge(ctx, ex, messages_answer(ctx, ex, what), req, what)
