"""Invariants x request variants, declared (issue 43).

A defect often lives on a request variant that a hand-written check does not send: the streamed
form of something checked non-streamed, the n=2 form of something checked with n=1. So the
invariants here are declared once, as functions of what a request got back (:data:`INVARIANTS`),
and the request variants once (:data:`VARIANTS`); every invariant is evaluated on every variant
where it has a meaning, each pair a check with a derived id such as
``GRID-USAGE[chat,stream,n=2,usage]`` (``surfaces/grid.py`` registers them). A pair where the
invariant has no meaning says why (:func:`why_not`), and docs/coverage.md's grid is generated
from the same tables (:func:`grid_markdown`).

The product is small (18 variants, 5 invariants, about 50 cells of one or two short requests),
so it is evaluated whole; no pairwise selection is needed.

Four variants are client request shapes (issue 43 item 5): the request a popular agent client
really sends, a fixture in ``checks/data/client_shapes/`` naming the client and its version (the
Vercel AI SDK and the OpenAI Agents SDK on chat completions, recorded from the clients; Claude
Code on ``/v1/messages`` and Codex CLI on ``/v1/responses``, the CLIENT-SHAPE-* fixtures). On the
Messages and Responses routes the invariants are said in those routes' own words: one
``stop_reason`` in one ``message_delta``, one terminal ``response.completed``, and their usage.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

from servecheck.checks.context import CONTEXT_REFUSALS, CheckContext, CheckSkipped, body_snippet
from servecheck.client.http import Exchange

Route = Literal["chat", "compl", "messages", "responses"]
PROMPT = "Say hello."
TOOL_PROMPT = "Weather in Paris? Use get_weather."
MAX_TOKENS = 8
TOOL_MAX_TOKENS = 64  # room for the call's arguments (tools.py's budget)
SEED = 7
# n > 1 is asked with a seeded sample: vLLM refuses n > 1 under greedy sampling (400 "n must be
# 1 when using greedy sampling"), and the seed keeps the answer repeatable all the same.
N2_TEMPERATURE = 0.8
FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
STOP_REASONS = frozenset({"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn"})
# A streamed response ends in one terminal event; failed is not a finish the client can use.
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
RESPONSE_ENDS = frozenset({"response.completed", "response.incomplete"})
CUT_REASONS = frozenset({"length", "max_tokens", "response.incomplete"})
MESSAGES_OUTPUT = frozenset({"text_delta", "thinking_delta", "input_json_delta"})
PATHS = {
    "chat": "/chat/completions",
    "compl": "/completions",
    "messages": "/messages",
    "responses": "/responses",
}
# What a replay changes in a recorded client body besides the model (client_shapes.py's rules):
# Claude Code's 32000 max_tokens fits no small context; Codex at temperature 0 repeats. The
# clients that send no output limit (Codex, the Agents SDK) get one: the grid's invariants do
# not depend on it, and a slow CPU engine (Xinference, ~2 tokens/s under load) ran them past
# 120 s to the context's end; CLIENT-SHAPE-CODEX keeps the unlimited request, its question.
REPLAY_CHANGES: dict[str, dict[str, Any]] = {
    "claude-code": {"max_tokens": 256},
    "codex": {"temperature": 0, "max_output_tokens": 64},
    "openai-agents": {"max_tokens": 64},
}
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


def client_fixture(client: str) -> dict[str, Any]:
    """The packaged client shape ``client_shapes/<client>.json`` (client, version, headers, body)."""
    path = resources.files("servecheck.checks").joinpath("data", "client_shapes", f"{client}.json")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@dataclass(frozen=True, slots=True)
class Variant:
    """One request shape: route, streamed or not, n, include_usage, a forced tool call; or a
    client's recorded request (``client``: its fixture, sent as recorded but for the model)."""

    route: Route
    stream: bool
    n: int = 1
    usage: bool = False  # stream_options.include_usage (streams only)
    tools: bool = False  # tools + tool_choice "required" (chat only)
    client: str = ""  # a client shape: the fixture client_shapes/<client>.json

    @property
    def label(self) -> str:
        parts = [self.route, "stream" if self.stream else "plain", f"n={self.n}"]
        parts += ["usage"] * (self.usage and self.route in ("chat", "compl")) + [
            "tools"
        ] * self.tools
        return ",".join(parts + [self.client] * bool(self.client))

    @property
    def path(self) -> str:
        return PATHS[self.route]

    @property
    def max_tokens(self) -> int | None:
        """The request's output limit; None where a client sends none."""
        if self.client:
            limit = self.body("m").get("max_tokens")
            return limit if isinstance(limit, int) else None
        return TOOL_MAX_TOKENS if self.tools else MAX_TOKENS

    @property
    def finish_reasons(self) -> frozenset[str]:
        """What may close a choice on this route (a Responses stream's: its terminal event)."""
        if self.route == "messages":
            return STOP_REASONS
        return RESPONSE_ENDS if self.route == "responses" else FINISH_REASONS

    @property
    def headers(self) -> dict[str, str]:
        return dict(client_fixture(self.client)["headers"]) if self.client else {}

    @property
    def requires(self) -> tuple[str, ...]:
        """The capabilities this variant needs the target to declare."""
        if self.route in ("messages", "responses"):
            return (self.route, f"route-accepts:{self.path}")
        need = ["completions"] * (self.route == "compl") + ["streaming"] * self.stream
        need += ["n"] * (self.n > 1) + ["usage_in_stream"] * self.usage + ["tools"] * self.tools
        return ("seed", *need) if not self.client else tuple(need)

    def body(self, model: str) -> dict[str, Any]:
        if self.client:
            recorded = client_fixture(self.client)["body"]
            return {**recorded, "model": model, **REPLAY_CHANGES.get(self.client, {})}
        body: dict[str, Any] = {"model": model, "max_tokens": self.max_tokens}
        body |= {"temperature": 0 if self.n == 1 else N2_TEMPERATURE, "seed": SEED}
        if self.route == "chat":
            prompt = TOOL_PROMPT if self.tools else PROMPT
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = PROMPT
        if self.n > 1:
            body["n"] = self.n
        if self.tools:
            body |= {"tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False}
        if self.stream:
            body["stream"] = True
            if self.usage:
                body["stream_options"] = {"include_usage": True}
        return body


def _variants() -> tuple[Variant, ...]:
    out: list[Variant] = []
    for route in ("chat", "compl"):
        for n in (1, 2):
            out.append(Variant(route, False, n))
            out += [Variant(route, True, n, usage) for usage in (False, True)]
    out += [Variant("chat", False, tools=True), Variant("chat", True, usage=True, tools=True)]
    return (*out, *CLIENT_VARIANTS)


# The client shapes: the AI SDK with includeUsage and toolChoice required, the Agents SDK with
# tool_choice required (it asks no usage from a base URL that is not OpenAI's), Claude Code's and
# Codex's first request of a turn (their usage is always sent; their tool_choice is auto).
CLIENT_VARIANTS: tuple[Variant, ...] = (
    Variant("chat", True, usage=True, tools=True, client="ai-sdk"),
    Variant("chat", True, tools=True, client="openai-agents"),
    Variant("messages", True, usage=True, client="claude-code"),
    Variant("responses", True, usage=True, client="codex"),
)


VARIANTS: tuple[Variant, ...] = _variants()


@dataclass(slots=True)
class ChoiceSeen:
    """What one choice index carried, from a body or over a stream (by chunk position)."""

    roles: list[tuple[int, Any]] = field(default_factory=list)  # (chunk, role) where one was sent
    first: int = -1  # the chunk that opened this choice
    finishes: list[tuple[int, Any]] = field(default_factory=list)  # (chunk, finish_reason)
    output_at: list[int] = field(default_factory=list)  # chunks with content or tool calls
    text: str = ""
    tool_deltas: list[dict[str, Any]] = field(default_factory=list)  # streamed, in order
    tool_calls: list[Any] = field(default_factory=list)  # a body's message.tool_calls


@dataclass(slots=True)
class Seen:
    """A variant's answer, parsed the same way whether it was streamed or not."""

    variant: Variant
    exchange: Exchange
    choices: dict[int, ChoiceSeen] = field(default_factory=dict)
    unindexed: int = 0  # choice objects without an integer index
    usage: Any = None  # the usage object (a stream's last), None when absent
    usage_chunks: int = 0


def _index(choice: dict[str, Any]) -> int | None:
    index = choice.get("index", 0)
    return index if isinstance(index, int) and not isinstance(index, bool) else None


def _add_delta(seen: ChoiceSeen, k: int, choice: dict[str, Any], chat: bool) -> None:
    delta = choice.get("delta") if chat else {"content": choice.get("text")}
    if seen.first < 0:
        seen.first = k
    if isinstance(delta, dict):
        if delta.get("role") is not None:
            seen.roles.append((k, delta.get("role")))
        calls = delta.get("tool_calls")
        if isinstance(delta.get("content"), str):
            seen.text += delta["content"]
        if (
            delta.get("content")
            or calls
            or delta.get("reasoning_content")
            or delta.get("reasoning")
        ):
            seen.output_at.append(k)
        seen.tool_deltas += (
            [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
        )
    if choice.get("finish_reason") is not None:
        seen.finishes.append((k, choice.get("finish_reason")))


def parse_stream(variant: Variant, ex: Exchange) -> Seen:
    seen = Seen(variant, ex)
    chunks = ex.stream.chunks if ex.stream is not None else []
    for k, chunk in enumerate(chunks):
        if isinstance(chunk.get("usage"), dict):
            seen.usage, seen.usage_chunks = chunk["usage"], seen.usage_chunks + 1
        raw = chunk.get("choices")
        for choice in raw if isinstance(raw, list) else []:
            index = _index(choice) if isinstance(choice, dict) else None
            if index is None:
                seen.unindexed += 1
                continue
            _add_delta(
                seen.choices.setdefault(index, ChoiceSeen()), k, choice, variant.route == "chat"
            )
    return seen


def parse_body(variant: Variant, ex: Exchange, data: dict[str, Any]) -> Seen:
    seen = Seen(variant, ex, usage=data.get("usage"))
    raw = data.get("choices")
    for choice in raw if isinstance(raw, list) else []:
        index = _index(choice) if isinstance(choice, dict) else None
        if index is None:
            seen.unindexed += 1
            continue
        one = seen.choices.setdefault(index, ChoiceSeen(first=0))
        message = choice.get("message") if variant.route == "chat" else {}
        message = message if isinstance(message, dict) else {}
        text = message.get("content") if variant.route == "chat" else choice.get("text")
        one.text += text if isinstance(text, str) else ""
        one.roles.append((0, message.get("role")) if variant.route == "chat" else (0, None))
        one.finishes.append((0, choice.get("finish_reason")))
        calls = message.get("tool_calls")
        one.tool_calls += calls if isinstance(calls, list) else []
    return seen


def _count_all(usage: Any, *keys: str) -> int:
    """The sum of ``keys`` in ``usage`` (absent ones 0), or -1 where one present is no count."""
    values = [usage.get(k, 0) for k in keys] if isinstance(usage, dict) else [None]
    counts = [_count(v) for v in values]
    return -1 if min(counts) < 0 else sum(counts)


def _obj(chunk: dict[str, Any], key: str) -> dict[str, Any]:
    value = chunk.get(key)
    return value if isinstance(value, dict) else {}


def parse_messages(variant: Variant, ex: Exchange) -> Seen:
    """A Messages event stream as one choice: message_start's role, each message_delta's
    stop_reason, the content deltas; usage as prompt (input and cache tokens), completion
    (message_delta's output_tokens) and their total."""
    seen = Seen(variant, ex)
    one = seen.choices.setdefault(0, ChoiceSeen())
    prompt = -1
    output: Any = None
    for k, chunk in enumerate(ex.stream.chunks if ex.stream is not None else []):
        kind = chunk.get("type")
        if kind == "message_start":
            message = _obj(chunk, "message")
            one.first = k if one.first < 0 else one.first
            one.roles.append((k, message.get("role")))
            keys = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
            prompt = _count_all(message.get("usage"), *keys)
        elif kind == "content_block_delta":
            delta = _obj(chunk, "delta")
            # a thinking block's signature_delta is no token; text, thinking and input are
            one.output_at += [k] * (delta.get("type") in MESSAGES_OUTPUT)
            one.text += delta.get("text", "") if isinstance(delta.get("text"), str) else ""
        elif kind == "message_delta":
            delta = _obj(chunk, "delta")
            one.finishes.append((k, delta.get("stop_reason")))
            usage = chunk.get("usage")
            seen.usage_chunks += isinstance(usage, dict)
            output = usage.get("output_tokens") if isinstance(usage, dict) else output
    if seen.usage_chunks:
        done = _count(output)
        total = prompt + done if min(prompt, done) >= 0 else None
        seen.usage = {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": total}
    return seen


def parse_responses(variant: Variant, ex: Exchange) -> Seen:
    """A Responses event stream as one choice: each terminal event is a finish (its type the
    reason), the output deltas; usage from the terminal response, in the chat names."""
    seen = Seen(variant, ex)
    one = seen.choices.setdefault(0, ChoiceSeen())
    for k, chunk in enumerate(ex.stream.chunks if ex.stream is not None else []):
        kind = chunk.get("type")
        if kind == "response.created":
            one.first = k if one.first < 0 else one.first
        elif isinstance(kind, str) and kind.endswith(".delta"):
            one.output_at.append(k)
            if kind == "response.output_text.delta" and isinstance(chunk.get("delta"), str):
                one.text += chunk["delta"]
        elif kind in TERMINAL:
            one.finishes.append((k, kind))
            final = _obj(chunk, "response")
            usage = final.get("usage")
            if isinstance(usage, dict):
                seen.usage_chunks += 1
                seen.usage = {
                    "prompt_tokens": usage.get("input_tokens"),
                    "completion_tokens": usage.get("output_tokens"),
                    "total_tokens": usage.get("total_tokens"),
                }
    return seen


PARSERS = {"messages": parse_messages, "responses": parse_responses}


def _skip_if_too_long(ctx: CheckContext, variant: Variant, ex: Exchange) -> None:
    """A client's recorded request refused for the context (CI models hold 512 tokens; Claude
    Code's cut request is ~740 of theirs): the cell cannot be judged there (CLIENT-SHAPE-*'s rule)."""
    said = ex.text[:600] if variant.client and ex.status == 400 else ""
    if any(words in said.lower() for words in CONTEXT_REFUSALS):
        raise CheckSkipped(
            f"{ctx.check_id}: the target's context cannot hold {variant.client}'s recorded "
            f"request: {said}"
        )


def send(ctx: CheckContext, variant: Variant) -> Seen:
    """Send ``variant``'s request; its answer parsed, or a failure saying what came instead."""
    body = variant.body(ctx.model)
    # A client that sends no max_tokens (the Agents SDK) gets the server's default, which may be
    # short (the reference's is 16): on a reasoning target it is sized as every check's answer
    # is (issue 43 item 2), else the thinking eats the forced call.
    unsized = variant.client and variant.route == "chat" and variant.max_tokens is None
    if unsized and ctx.target.reasoning is not None:
        body |= ctx.answer_budget(TOOL_MAX_TOKENS)
    what = f"{variant.route} request [{variant.label}]"
    headers = variant.headers
    if variant.stream:
        ex = ctx.post(variant.path, body, stream=True, headers=headers)
        _skip_if_too_long(ctx, variant, ex)
        return PARSERS.get(variant.route, parse_stream)(variant, ctx.ok_stream(ex, what))
    ex = ctx.post(variant.path, body, headers=headers)
    return parse_body(variant, ex, ctx.ok_json(ex, what))


# ---------------------------------------------------------------------------------------------
# The invariants: each a function of the answer that returns what is wrong (empty: holds)


def _count(value: Any) -> int:
    """A token count, or -1 where it is not a non-negative integer."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return int(value) if ok else -1


def usage_problems(seen: Seen) -> list[str]:
    """Usage arithmetic, in total and against what each choice produced."""
    v, usage = seen.variant, seen.usage
    if not isinstance(usage, dict):
        return [f"no usage object (received {body_snippet(usage, 120)})"]
    counts = [usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")]
    p, c, t = (_count(x) for x in counts)
    if min(p, c, t) < 0:
        return [f"counts are not non-negative integers: {body_snippet(usage, 200)}"]
    out = [f"total_tokens {t} != prompt_tokens {p} + completion_tokens {c}"] * (p + c != t)
    out += [f"prompt_tokens {p} for a non-empty prompt"] * (p == 0)
    out += [f"{seen.usage_chunks} chunks carry usage"] * (seen.usage_chunks > 1)
    # each choice made at least one token, exactly max_tokens where it was cut, and at least
    # one per chunk it streamed (an engine may pack several tokens into one chunk, never none)
    limit = v.max_tokens
    floor = sum(
        max(len(set(ch.output_at)) if v.stream else 1, limit if limit and _cut(ch) else 1)
        for ch in seen.choices.values()
    )
    # no output limit sent (a client's shape): only the context bounds it
    ceiling = v.n * limit if limit else c
    if not floor <= c <= ceiling:
        out.append(
            f"completion_tokens {c} outside [{floor}, {ceiling}]: the {len(seen.choices)} "
            f"choice(s) produced at least {floor} token(s) and n x max_tokens is {ceiling}"
        )
    return out


def _cut(choice: ChoiceSeen) -> bool:
    return any(reason in CUT_REASONS for _, reason in choice.finishes)


def finish_problems(seen: Seen) -> list[str]:
    """Every choice index 0..n-1, each closed by exactly one known finish_reason, nothing after."""
    out = [f"{seen.unindexed} choice object(s) without an integer index"] * bool(seen.unindexed)
    if sorted(seen.choices) != list(range(seen.variant.n)):
        out.append(f"choice indexes {sorted(seen.choices)}, expected {list(range(seen.variant.n))}")
    for index, ch in sorted(seen.choices.items()):
        reasons = [r for _, r in ch.finishes]
        if len(reasons) != 1 or reasons[0] not in seen.variant.finish_reasons:
            out.append(f"choice {index}: finish_reason(s) {reasons}")
            continue
        late = [k for k in ch.output_at if k > ch.finishes[0][0]]
        out += [f"choice {index}: output in chunk(s) {late[:5]} after its finish"] * bool(late)
    return out


def role_problems(seen: Seen) -> list[str]:
    """role 'assistant' exactly once per choice, on the chunk (or message) that opens it."""
    out = []
    for index, ch in sorted(seen.choices.items()):
        roles = [r for _, r in ch.roles]
        at = [k for k, _ in ch.roles]
        if roles != ["assistant"] or at != [ch.first]:
            where = f" in chunk(s) {at[:6]}, the choice opened at chunk {ch.first}"
            out.append(
                f"choice {index}: role(s) {roles[:6]}" + (where if seen.variant.stream else "")
            )
    return out


def _call_problems(index: int, calls: list[Any]) -> list[str]:
    """A body's message.tool_calls: id, type function, the tool's name, JSON arguments."""
    if not calls:
        return [f"choice {index}: no tool_calls although tool_choice is 'required'"]
    out = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        fn = fn if isinstance(fn, dict) else {}
        ok = isinstance(call, dict) and isinstance(call.get("id"), str) and bool(call.get("id"))
        ok = ok and call.get("type") == "function" and fn.get("name") == "get_weather"
        if not ok or _json_problem(fn.get("arguments")):
            out.append(f"choice {index}: malformed call {body_snippet(call, 200)}")
    return out


def _json_problem(arguments: Any) -> str | None:
    try:
        json.loads(arguments) if isinstance(arguments, str) else json.loads("?")
    except ValueError as exc:
        return str(exc)
    return None


def _delta_problems(index: int, deltas: list[dict[str, Any]], cut: bool = False) -> list[str]:
    """Streamed calls, as the SDKs' stream parsers merge them: per call index, the opening delta
    carries id, type and function.name; later ones only index and function.arguments (a
    repeated id or name is concatenated onto the first by the openai SDK). A call cut by the
    output limit (``cut``: finish_reason length) has partial arguments by right: a client's free
    string parameter on a random-weight model runs to max_tokens."""
    if not deltas:
        return [f"choice {index}: no tool_calls deltas although tool_choice is 'required'"]
    out: list[str] = []
    opened: set[int] = set()
    arguments: dict[int, str] = {}
    for k, d in enumerate(deltas):
        call = d.get("index")
        raw = d.get("function")
        fn: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if not isinstance(call, int):
            out.append(f"choice {index}: tool-call delta {k} has no integer index")
            continue
        if call not in opened:
            opened.add(call)
            good = bool(d.get("id")) and d.get("type") == "function" and bool(fn.get("name"))
            out += [
                f"choice {index}: call {call} opens without id/type/name: {body_snippet(d, 160)}"
            ] * (not good)
        elif d.get("id") or fn.get("name"):
            out.append(
                f"choice {index}: call {call} repeats id or name in a later delta: {body_snippet(d, 160)}"
            )
        arguments[call] = arguments.get(call, "") + (fn.get("arguments") or "")
    out += [
        f"choice {index}: call {c} arguments are not JSON once joined: {p}"
        for c, text in sorted(arguments.items())
        if not cut and (p := _json_problem(text))
    ]
    return out


def tool_problems(seen: Seen) -> list[str]:
    out: list[str] = []
    for index, ch in sorted(seen.choices.items()):
        if seen.variant.stream:
            out += _delta_problems(index, ch.tool_deltas, _cut(ch))
        else:
            out += _call_problems(index, ch.tool_calls)
    return out


def equal_problems(ctx: CheckContext, seen: Seen) -> list[str]:
    """The stream's text per choice equals the same request's non-streamed text (a seed, and
    temperature 0 where n is 1): the non-streamed request is sent here."""
    v = seen.variant
    plain = send(ctx, Variant(v.route, False, v.n, tools=v.tools))
    out = []
    for index in sorted(set(plain.choices) | set(seen.choices)):
        streamed = seen.choices.get(index, ChoiceSeen()).text
        expected = plain.choices.get(index, ChoiceSeen()).text
        # A cut inside a multi-byte character has no one right text: a stream may hold the
        # partial bytes back, a plain answer may show U+FFFD (llama.cpp does both, measured
        # 2026-12-06). Only the trailing replacement characters are let go.
        if streamed.rstrip("\ufffd") != expected.rstrip("\ufffd"):
            out.append(
                f"choice {index}: streamed {streamed[:80]!r}, non-streamed {expected[:80]!r}"
            )
    return out


Judge = Callable[[CheckContext, Seen], list[str]]


@dataclass(frozen=True, slots=True)
class Invariant:
    """A property of an answer, with where it has no meaning (``why_not``)."""

    name: str
    description: str
    expectation: str
    judge: Judge
    why_not: Callable[[Variant], str | None]
    hint: str


def _usage_na(v: Variant) -> str | None:
    if v.stream and not v.usage:
        if v.client:
            return f"{v.client} asks no usage in the stream (no stream_options)"
        return "no usage asked (include_usage off): its absence is STREAM-USAGE's"
    return None


def _role_na(v: Variant) -> str | None:
    if v.route in ("messages", "responses"):
        return (
            "not built: message_start's role and the output items' roles are MESSAGES-STREAM's "
            "and RESPONSES-STREAM's, not yet a grid cell"
        )
    return "a completions choice has no role" if v.route == "compl" else None


def _tools_na(v: Variant) -> str | None:
    if v.route in ("messages", "responses"):
        return (
            "not built: the client's recorded tool_choice is auto, so whether a call comes is the "
            "model's; the cell needs a forced call"
        )
    return None if v.tools else "no tools in the request"


def _equal_na(v: Variant) -> str | None:
    if v.client and not v.tools:
        return "the client sends no seed: its streamed and plain answers need not match"
    if not v.stream:
        return "the non-streamed answer is the reference the streamed one is held to"
    if v.tools:
        return "TOOLS-STREAM holds it: the streamed call reassembles into the non-streamed one"
    return None


INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "USAGE",
        "usage arithmetic holds",
        "prompt + completion == total, prompt_tokens > 0, one usage object, and completion_tokens "
        "between what the choices produced (one a choice, max_tokens for a choice cut by length, "
        "one a streamed output chunk) and n x max_tokens (Messages: input and cache tokens as "
        "prompt, message_delta's output_tokens; Responses: the terminal response's usage)",
        lambda ctx, seen: usage_problems(seen),
        _usage_na,
        "clients bill and budget from usage; with n > 1 or streamed it must still add up",
    ),
    Invariant(
        "FINISH",
        "exactly one finish_reason per choice",
        "choices with index 0..n-1, each closed by exactly one finish_reason from the OpenAI "
        "set, and no output for a choice after its finish_reason (Messages: one message_delta "
        "with a stop_reason; Responses: one terminal event, response.completed or incomplete)",
        lambda ctx, seen: finish_problems(seen),
        lambda v: None,
        "clients end each candidate at its finish_reason; a second one or a missing one "
        "truncates or never ends it",
    ),
    Invariant(
        "ROLE",
        "role 'assistant' exactly once per choice",
        "streamed: each choice's role 'assistant' once, on the chunk that opens it; non-streamed: "
        "each message's role is 'assistant'",
        lambda ctx, seen: role_problems(seen),
        _role_na,
        "the openai SDK concatenates a repeated delta.role ('assistantassistant')",
    ),
    Invariant(
        "TOOLS",
        "tool-call structure holds across deltas",
        "non-streamed: each call with id, type 'function', the tool's name and JSON arguments; "
        "streamed: per call index the opening delta has id, type and function.name, later "
        "deltas only index and function.arguments, and the joined arguments are JSON (unless "
        "the call was cut by the output limit)",
        lambda ctx, seen: tool_problems(seen),
        _tools_na,
        "the SDKs' stream parsers concatenate string fields: a repeated id or name corrupts "
        "the call",
    ),
    Invariant(
        "EQUAL",
        "stream == non-stream with a seed",
        "each choice's streamed text equals the same request's non-streamed text (seed 7; "
        "temperature 0, or 0.8 with n=2)",
        equal_problems,
        _equal_na,
        "the streaming path detokenizes or stops differently from the plain one",
    ),
)


def cell_id(invariant: Invariant, variant: Variant) -> str:
    return f"GRID-{invariant.name}[{variant.label}]"


def why_not(invariant: Invariant, variant: Variant) -> str | None:
    """None where ``invariant`` applies to ``variant``; else the reason it does not."""
    return invariant.why_not(variant)


def cells() -> list[tuple[Invariant, Variant]]:
    """Every (invariant, variant) pair that is a check."""
    return [(i, v) for i in INVARIANTS for v in VARIANTS if why_not(i, v) is None]


def run_cell(ctx: CheckContext, invariant: Invariant, variant: Variant) -> None:
    """Send the variant, judge the invariant, fail with every problem found."""
    seen = send(ctx, variant)
    # an answer with no choice at all would hold every per-choice invariant vacuously
    ctx.expect(
        bool(seen.choices),
        f"the answer to [{variant.label}] carries no choice",
        expected=f"choices with index 0..{variant.n - 1}",
        received=seen.exchange.describe(400),
        exchange=seen.exchange,
    )
    problems = invariant.judge(ctx, seen)
    if problems:
        more = f" (+{len(problems) - 4} more)" if len(problems) > 4 else ""
        ctx.fail(
            f"{invariant.description}: broken on [{variant.label}]",
            expected=invariant.expectation,
            received="; ".join(problems[:4]) + more,
            exchange=seen.exchange,
            hint=invariant.hint,
        )


GRID_BEGIN = "<!-- grid: generated by `python -m servecheck.docs`; do not edit by hand -->"
GRID_END = "<!-- grid: end -->"


def grid_markdown() -> str:
    """docs/coverage.md's invariant x variant grid: each cell its check id or why not."""
    head = ["variant", *(f"{i.name}: {i.description}" for i in INVARIANTS)]
    lines = [
        GRID_BEGIN,
        "",
        "| " + " | ".join(head) + " |",
        "| " + " | ".join("---" for _ in head) + " |",
    ]
    for v in VARIANTS:
        row = [f"`{v.label}`"]
        for inv in INVARIANTS:
            reason = why_not(inv, v)
            if reason is None:
                row.append(f"`{cell_id(inv, v)}`")
            else:
                row.append(reason if reason.startswith("not built") else f"n/a: {reason}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join([*lines, "", GRID_END]) + "\n"


def splice_grid(text: str) -> str:
    """``text`` (docs/coverage.md) with its generated grid replaced by the current one."""
    begin, end = text.find(GRID_BEGIN), text.find(GRID_END)
    if begin < 0 or end < begin:
        raise ValueError("docs/coverage.md has no grid markers")
    return text[:begin] + grid_markdown() + text[end + len(GRID_END) + 1 :]
