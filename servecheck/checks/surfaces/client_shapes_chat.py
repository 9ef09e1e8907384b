"""CLIENT-SHAPE-* of the chat completions clients: AI SDK, Agents SDK, pydantic-ai, LangChain,
opencode.

Each replays its client's recorded request (``client_shapes/<client>.json``, written by
``servecheck clients --record-shapes``, or recorded by hand where the fixture says so) and judges
the answer by the rules that client's own parser holds, learned from the pinned version's
source, not by the API's reference: a server can pass STREAM-* and break one client. The rules:

- AI SDK 6 and opencode (which streams through the AI SDK's openai-compatible provider): every
  chunk is validated by a schema that requires a ``choices`` list (a usage chunk without one
  is a "type validation" error); a stream that ends without any ``finish_reason`` is an error
  ("Response stream ended without a finish reason."); a tool call whose first delta names no
  function is dropped; an ``error`` object in a 200 stream is an error part; when
  ``include_usage`` was asked the usage chunk is what its token counts come from. opencode's
  older bundled provider also throws on a tool-call delta without an ``index`` and on a first
  delta without an ``id``.
- Agents SDK and LangChain (the openai SDK's stream below them): a chunk carrying an ``error``
  key raises ``APIError``; the Agents SDK raises ``ModelBehaviorError`` on a stream that says
  ``finish_reason: tool_calls`` but streamed no tool call; LangChain merges tool-call deltas by
  their ``index`` (a delta without one becomes a second, nameless call).
- pydantic-ai's tool request is not streamed: it validates the whole body (``created`` an
  integer, ``choices`` not empty, each with a message and a non-empty ``finish_reason``,
  tool calls with an id, a name and string arguments).

Only ``model`` is changed on replay, opencode's ``max_tokens`` 32000 is lowered to
:data:`~servecheck.checks.surfaces.client_shapes.REPLAY_MAX_TOKENS` as Claude Code's is, so that
the replay fits a CI model's context, and a request sent without an output limit (the Agents
SDK, LangChain, pydantic-ai) gets :data:`UNLIMITED_REPLAY_MAX_TOKENS`; a context too small for
the request is a skip.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servecheck.checks.context import CheckContext, body_snippet
from servecheck.checks.registry import check
from servecheck.checks.surfaces.client_shapes import (
    REPLAY_MAX_TOKENS,
    ClientShape,
    load_shape,
    replay,
)
from servecheck.client.http import Exchange


@dataclass(frozen=True, slots=True)
class ChatRules:
    """What one client's chat completions stream parser holds to (see the module's list)."""

    choices_list: bool = False  # every chunk has a choices list
    finish: bool = False  # some chunk has a finish_reason
    named_first: bool = False  # a tool call's first delta names the function
    id_first: bool = False  # a tool call's first delta has its id
    index_every: bool = False  # every tool-call delta has an index
    tool_calls_finish: bool = False  # finish_reason tool_calls only after a streamed tool call
    usage: bool = False  # a usage chunk when include_usage was asked


AI_SDK = ChatRules(choices_list=True, finish=True, named_first=True, usage=True)
# opencode bundles an older provider-utils (4.0.23) whose tool-call parser throws on a delta
# without an index or a first delta without an id ("Expected 'id' to be a string.")
OPENCODE = ChatRules(
    choices_list=True, finish=True, named_first=True, id_first=True, index_every=True, usage=True
)
AGENTS = ChatRules(tool_calls_finish=True)
LANGCHAIN = ChatRules(index_every=True)


def _tool_problems(chunks: list[dict[str, Any]], rules: ChatRules) -> list[str]:
    problems: list[str] = []
    seen: set[Any] = set()
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            for call in (delta or {}).get("tool_calls") or []:
                index = call.get("index")
                if rules.index_every and not isinstance(index, int):
                    problems.append(
                        f"a tool-call delta without an index: {body_snippet(call, 200)}"
                    )
                name = (call.get("function") or {}).get("name")
                first = index not in seen
                if rules.named_first and first and not (isinstance(name, str) and name):
                    problems.append(f"a tool call's first delta names no function: {call}")
                if rules.id_first and first and not isinstance(call.get("id"), str):
                    problems.append(f"a tool call's first delta has no id: {call}")
                seen.add(index)
    return problems[:3]


def stream_problems(
    chunks: list[dict[str, Any]],
    body: dict[str, Any],
    rules: ChatRules,
    error: dict[str, Any] | None = None,
) -> list[str]:
    """Why a client with ``rules`` cannot read this chat completions stream (empty: it can);
    ``error``: an error object the stream carried (every one of these clients fails on it)."""
    problems = [f"an error object in the 200 stream: {body_snippet(error, 200)}"] if error else []
    if rules.choices_list:
        bad = [c for c in chunks if "error" not in c and not isinstance(c.get("choices"), list)]
        if bad:
            problems.append(f"a chunk without a choices list: {body_snippet(bad[0], 200)}")
    choices = [ch for c in chunks for ch in c.get("choices") or [] if isinstance(ch, dict)]
    if not choices and not error:
        # Every one of these clients reads its answer from the choices: none at all (an empty
        # stream, a sign-in page answered 200) is an empty answer, whatever else it checks.
        problems.append(f"no chunk carries a choice ({len(chunks)} JSON chunk(s) in the stream)")
    finishes = [ch.get("finish_reason") for ch in choices if ch.get("finish_reason")]
    if rules.finish and not finishes:
        problems.append("the stream ends without a finish_reason")
    streamed_call = any((ch.get("delta") or {}).get("tool_calls") for ch in choices)
    if rules.tool_calls_finish and "tool_calls" in finishes and not streamed_call:
        problems.append("finish_reason tool_calls, but no tool-call delta was streamed")
    asked = (body.get("stream_options") or {}).get("include_usage")
    if rules.usage and asked and not any(isinstance(c.get("usage"), dict) for c in chunks):
        problems.append("include_usage was asked, but no chunk carries usage")
    return problems + _tool_problems(chunks, rules)


# A recorded request without an output limit is replayed with one: these parser rules do not
# depend on the answer's length, and a slow CPU engine (Xinference under load, ~2 tokens/s) ran
# an unlimited answer past the 120 s timeout to the context's end.
UNLIMITED_REPLAY_MAX_TOKENS = 64


def _bounded(shape: ClientShape, changes: dict[str, Any]) -> dict[str, Any]:
    limits = ("max_tokens", "max_completion_tokens")
    if any(shape.body.get(k) is not None for k in limits) or any(k in changes for k in limits):
        return changes
    return {**changes, "max_tokens": UNLIMITED_REPLAY_MAX_TOKENS}


def completion_problems(data: dict[str, Any]) -> list[str]:
    """Why pydantic-ai's validation of a non-streamed chat completion fails (empty: it passes)."""
    problems = []
    if type(data.get("created")) is not int and data.get("created") is not None:
        problems.append(f"created is {data.get('created')!r}, not an integer")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return [*problems, f"choices is {body_snippet(choices, 100)}, not a list of one or more"]
    for choice in choices:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            problems.append(f"a choice without a message: {body_snippet(choice, 200)}")
            continue
        finish = choice.get("finish_reason")
        if finish is not None and not (isinstance(finish, str) and finish):
            problems.append(f"finish_reason {finish!r}")
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            if not isinstance(call.get("id"), str) or not isinstance(fn.get("name"), str):
                problems.append(f"a tool call without an id or a name: {body_snippet(call, 200)}")
            elif not isinstance(fn.get("arguments"), str):
                problems.append(f"tool-call arguments are not a string: {fn.get('arguments')!r}")
    return problems


@dataclass(frozen=True, slots=True)
class ClientCheck:
    """One CLIENT-SHAPE-* check of a chat completions client: the recorded request to replay
    and the rules its answer is judged by."""

    id: str
    description: str
    expectation: str
    stem: str  # the fixture client_shapes/<stem>.json
    # The stream parser's rules; None: the request is not streamed and the whole body is judged
    # by pydantic-ai's validation (:func:`completion_problems`).
    rules: ChatRules | None
    changes: tuple[tuple[str, Any], ...] = ()  # fields changed on replay besides the model


def _judge_stream(ctx: CheckContext, shape: ClientShape, ex: Exchange, rules: ChatRules) -> None:
    ctx.ok_stream(ex, f"the streamed request of {shape.name}")
    assert ex.stream is not None  # noqa: S101 - ok_stream guarantees it
    chunks = [c for c in ex.stream.chunks if isinstance(c, dict)]
    problems = stream_problems(chunks, shape.body, rules, ex.stream.error_obj)
    ctx.expect(
        not problems,
        f"{shape.name} cannot read the answer to its own request",
        expected=f"a chat completions stream {shape.client}'s parser reads (see the check's rules)",
        received="; ".join(problems),
        exchange=ex,
    )


def _judge_completion(ctx: CheckContext, shape: ClientShape, ex: Exchange) -> None:
    data = ctx.ok_json(ex, f"the request of {shape.name}")
    problems = completion_problems(data)
    ctx.expect(
        not problems,
        f"{shape.name} rejects the answer to its own request as invalid",
        expected="a chat.completion pydantic-ai validates (see the check's rules)",
        received="; ".join(problems),
        exchange=ex,
    )


def run_client_check(ctx: CheckContext, spec: ClientCheck) -> None:
    """Replay ``spec``'s recorded request and judge the answer as its client would."""
    shape = load_shape(spec.stem)
    ex = replay(ctx, shape, **_bounded(shape, dict(spec.changes)))
    if spec.rules is None:
        _judge_completion(ctx, shape, ex)
    else:
        _judge_stream(ctx, shape, ex, spec.rules)


# In the catalogue's order (docs/checks.md lists them as registered).
CLIENT_CHECKS: tuple[ClientCheck, ...] = (
    ClientCheck(
        "CLIENT-SHAPE-AI-SDK",
        "the request Vercel's AI SDK 6.0.333 streams to /chat/completions is served as it parses "
        "it",
        "the AI SDK's recorded streamed tool request (openai-compatible provider: a draft-07 tool "
        "schema, tool_choice required, stream_options.include_usage, no max_tokens by default) "
        "gets 200 and a stream whose every chunk has a choices list, with a finish_reason, no "
        "error object, a usage chunk, and each tool call's first delta naming its function",
        "ai-sdk",
        AI_SDK,
    ),
    ClientCheck(
        "CLIENT-SHAPE-OPENCODE",
        "the request opencode 1.18.33 streams to /chat/completions is served as it parses it",
        "opencode's recorded first request of a turn (an 8.8k-character system prompt, its read "
        "tool with a 2020-12 schema, max_tokens 32000 lowered on replay, include_usage) gets 200 "
        "and a stream its AI SDK provider reads: a choices list on every chunk, a finish_reason, "
        "no error object, a usage chunk, an index on every tool-call delta and an id and a name "
        "on the first",
        "opencode",
        OPENCODE,
        (("max_tokens", REPLAY_MAX_TOKENS),),
    ),
    ClientCheck(
        "CLIENT-SHAPE-OPENAI-AGENTS",
        "the request the OpenAI Agents SDK 0.24.0 streams to /chat/completions is served as it "
        "parses it",
        "the Agents SDK's recorded streamed tool request (a strict function tool, tool_choice "
        "required, no max_tokens and no stream_options) gets 200 and a stream with no error "
        "object (the openai SDK raises APIError on one) and no finish_reason tool_calls without "
        "a streamed tool call",
        "openai-agents",
        AGENTS,
    ),
    ClientCheck(
        "CLIENT-SHAPE-LANGCHAIN",
        "the request LangChain (langchain-openai 1.8.1) streams to /chat/completions is served "
        "as it parses it",
        "LangChain's recorded streamed request with a bound tool (no tool_choice, no max_tokens) "
        "gets 200 and a stream with no error object (the openai SDK raises APIError on one) whose "
        "tool-call deltas each carry an index (LangChain merges them by it)",
        "langchain",
        LANGCHAIN,
    ),
    ClientCheck(
        "CLIENT-SHAPE-PYDANTIC-AI",
        "the request pydantic-ai 2.78.0 sends to /chat/completions is answered as it validates it",
        "pydantic-ai's recorded tool request (not streamed: stream false, a strict tool, "
        "tool_choice auto, no max_tokens) gets 200 and a body its full validation passes: "
        "created an integer, one or more choices each with a message and a non-empty "
        "finish_reason (or none), tool calls with an id, a name and string arguments",
        "pydantic-ai",
        None,
    ),
)


def _runner(spec: ClientCheck) -> Callable[[CheckContext], None]:
    def run(ctx: CheckContext) -> None:
        run_client_check(ctx, spec)

    run.__doc__ = spec.description
    return run


def _register() -> None:
    for spec in CLIENT_CHECKS:
        check(spec.id, spec.description, spec.expectation, requires=("tools",))(_runner(spec))


_register()
