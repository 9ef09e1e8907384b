"""STREAM-*: server-sent-event streaming of chat completions.

Every check sends a real ``stream: true`` request and judges what the strict SSE parser in
:mod:`servecheck.client.sse` saw: the transport (framing, ``[DONE]``, UTF-8), the chunk protocol
(role, id, object, finish, usage) and the timing (incremental delivery, stalls).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.preconditions import CheckError
from servecheck.checks.registry import check
from servecheck.checks.surfaces.chat import FINISH_REASONS
from servecheck.checks.surfaces.ctx import filler
from servecheck.checks.surfaces.err import error_object_problem, error_shape_problem
from servecheck.client.http import Exchange, StreamResult
from servecheck.client.sse import classify_data

PROMPT = "Say hello."
LONG_PROMPT = "Write a long story about a river, a stone and a garden. Use many sentences."
UTF8_PROMPTS = (
    "Répondez en français et en chinois: café, 你好, 世界",
    "日本語で答えてください: 東京、数据、モデル 🙂",
    "Écrivez trois mots accentués et trois caractères chinois: déjà, über, Zürich, 模型",
)
REPLACEMENT = "\ufffd"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

# STREAM-INCREMENTAL. A buffering proxy delivers token chunks in a few large writes (all at the
# end, or in blocks of its buffer size); a streaming server in many small ones. Judging on time
# alone is not robust: a tiny model on vLLM CPU prefills for 600 ms and decodes 63 tokens in
# 37 ms (still 63 separate reads), and a 1-token "prefill" probe is distorted by prefix caching.
# So the measure is chunks per network read, taken twice so a momentarily busy client is not blamed.
MIN_JUDGE_S = 0.05  # below this end to end, TCP/Nagle/scheduler noise decides the pattern
MIN_TOKEN_CHUNKS = 8
MAX_CHUNKS_PER_READ = 4.0  # mean token chunks per distinct arrival time (read) at or above: bursty
LONG_STREAM_TOKENS = (
    512  # the second, longer request for engines that stream 64 tokens too fast to judge
)


def _streamed(
    ctx: CheckContext, what: str, prompt: str = PROMPT, *, usage: bool | None = None, **params: Any
) -> tuple[Exchange, StreamResult]:
    params.setdefault("max_tokens", 16)
    params.setdefault("temperature", 0)
    ex = ctx.ok_stream(ctx.stream_chat(prompt, usage=usage, **params), what)
    assert ex.stream is not None  # noqa: S101 - ok_stream guarantees it
    return ex, ex.stream


def _problems(stream: StreamResult, *codes: str) -> list[str]:
    return [f"{p.code}: {p.message}" for p in stream.problems if not codes or p.code in codes]


def _chunks(ctx: CheckContext, ex: Exchange, stream: StreamResult) -> list[dict[str, Any]]:
    """The stream's JSON chunks, or a failure when it carried none."""
    ctx.expect(
        bool(stream.chunks),
        "the stream carried no JSON chunks",
        expected="data: {...chat.completion.chunk...} events, then data: [DONE]",
        received="; ".join(_problems(stream)) or ex.describe(600),
        exchange=ex,
    )
    return stream.chunks


@dataclass(slots=True)
class _ChoiceTrack:
    """What one choice index did over a stream, by chunk position."""

    positions: list[int] = field(default_factory=list)  # chunks that carry this choice
    roles: list[tuple[int, Any]] = field(
        default_factory=list
    )  # (chunk, role) where a role was sent
    first_role: Any = None
    finishes: list[tuple[int, Any]] = field(default_factory=list)  # (chunk, finish_reason)
    output_at: list[int] = field(default_factory=list)  # chunks with content / tool calls
    no_delta: list[int] = field(default_factory=list)


def _track(chunks: list[dict[str, Any]]) -> dict[int, _ChoiceTrack]:
    tracks: dict[int, _ChoiceTrack] = {}
    for k, chunk in enumerate(chunks):
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            continue
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            index = index if isinstance(index, int) else -1
            t = tracks.setdefault(index, _ChoiceTrack())
            delta = choice.get("delta")
            if not t.positions:
                t.first_role = delta.get("role") if isinstance(delta, dict) else None
            t.positions.append(k)
            if isinstance(delta, dict):
                if delta.get("role") is not None:
                    t.roles.append((k, delta.get("role")))
                if (
                    delta.get("content")
                    or delta.get("tool_calls")
                    or delta.get("reasoning_content")
                    or delta.get("reasoning")
                ):
                    t.output_at.append(k)
            else:
                t.no_delta.append(k)
            if choice.get("finish_reason") is not None:
                t.finishes.append((k, choice.get("finish_reason")))
    return tracks


def _tracks(
    ctx: CheckContext, ex: Exchange, chunks: list[dict[str, Any]]
) -> dict[int, _ChoiceTrack]:
    tracks = _track(chunks)
    ctx.expect(
        bool(tracks),
        "no chunk in the stream carries a choice",
        expected="chunks with choices[{index, delta, finish_reason}]",
        received=body_snippet(chunks[:3]),
        exchange=ex,
    )
    return tracks


def _usage_chunks(chunks: list[dict[str, Any]]) -> list[int]:
    return [k for k, c in enumerate(chunks) if isinstance(c.get("usage"), dict)]


def _message_text(data: dict[str, Any]) -> str | None:
    """choices[0].message.content of a non-streamed answer, when it is a string."""
    choices = data.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else None


# ---------------------------------------------------------------------------------------------
# Chunk protocol


@check(
    "STREAM-ROLE",
    "the role is sent first, once per choice",
    "the first delta of every choice carries role 'assistant' and no later delta of that choice carries a role again",
)
def stream_role(ctx: CheckContext) -> None:
    ex, stream = _streamed(ctx, "streamed chat completion")
    tracks = _tracks(ctx, ex, _chunks(ctx, ex, stream))
    for index, t in sorted(tracks.items()):
        ctx.expect(
            t.first_role == "assistant",
            f"the first chunk of choice {index} carries no role 'assistant'",
            expected=f'choices[{index}] first delta {{"role": "assistant", ...}}',
            received=f"first delta role {t.first_role!r} (chunk {t.positions[0]}: {body_snippet(stream.chunks[t.positions[0]], 300)})",
            exchange=ex,
            hint="clients that build the message from the first delta (the openai SDK's helpers, LangChain) lose the role",
        )
        ctx.expect(
            len(t.roles) <= 1,
            f"choice {index} sends its role {len(t.roles)} times",
            expected="role in the first delta only",
            received=f"role in chunks {[k for k, _ in t.roles][:10]} of {len(stream.chunks)}",
            exchange=ex,
            hint="clients that append a new message whenever a role appears split the answer into many messages",
        )


@check(
    "STREAM-ID",
    "one id and one created across the whole stream",
    "every chunk (usage chunk included) carries the same non-empty string id and the same integer created "
    "(OpenAI: each chunk has the same timestamp)",
)
def stream_id(ctx: CheckContext) -> None:
    ex, stream = _streamed(ctx, "streamed chat completion")
    chunks = _chunks(ctx, ex, stream)
    ids = [c.get("id") for c in chunks]
    bad = [k for k, v in enumerate(ids) if not isinstance(v, str) or not v]
    ctx.expect(
        not bad,
        "chunks without a string id",
        expected="every chunk has a non-empty string id",
        received=f"chunk(s) {bad[:10]} have id {[ids[k] for k in bad[:3]]!r}",
        exchange=ex,
    )
    distinct = list(dict.fromkeys(ids))
    ctx.expect(
        len(distinct) == 1,
        f"the id changes within one stream ({len(distinct)} different ids)",
        expected=f"every chunk has id {distinct[0]!r}",
        received=f"ids {distinct[:5]!r}",
        exchange=ex,
        hint="clients and gateways group chunks by id; a changing id splits one answer into several",
    )
    created = [c.get("created") for c in chunks]
    untyped = [k for k, v in enumerate(created) if not isinstance(v, int) or isinstance(v, bool)]
    ctx.expect(
        not untyped,
        "chunks without an integer created",
        expected="every chunk has created as an integer (unix seconds)",
        received=f"chunk(s) {untyped[:10]} have created {[created[k] for k in untyped[:3]]!r}",
        exchange=ex,
    )
    stamps = list(dict.fromkeys(created))
    ctx.expect(
        len(stamps) == 1,
        f"created changes within one stream ({len(stamps)} different values)",
        expected=f"every chunk has created {stamps[0]!r}, the time the completion was created",
        received=f"created {stamps[:5]!r}",
        exchange=ex,
        hint="take the timestamp once per request, not once per chunk: OpenAI sends one created for "
        "the whole stream, and clients that rebuild the completion from chunks keep the first",
    )


@check(
    "STREAM-OBJECT",
    "chunks say object 'chat.completion.chunk'",
    "every chunk of a streamed chat completion has object 'chat.completion.chunk'",
)
def stream_object(ctx: CheckContext) -> None:
    ex, stream = _streamed(ctx, "streamed chat completion")
    chunks = _chunks(ctx, ex, stream)
    wrong = [
        (k, c.get("object"))
        for k, c in enumerate(chunks)
        if c.get("object") != "chat.completion.chunk"
    ]
    ctx.expect(
        not wrong,
        f"{len(wrong)} of {len(chunks)} chunks have the wrong object type",
        expected="object 'chat.completion.chunk' in every chunk",
        received=f"object {', '.join(sorted({repr(o) for _, o in wrong}))} in chunk(s) {[k for k, _ in wrong][:10]}",
        exchange=ex,
        hint="typed clients dispatch on object; 'chat.completion' is the non-streaming type",
    )


@check(
    "STREAM-FINISH",
    "finish_reason exactly once per choice, at its end",
    "each choice has exactly one chunk with a non-null finish_reason from the OpenAI set, and no content, tool-call "
    "or role delta of that choice follows it",
)
def stream_finish(ctx: CheckContext) -> None:
    ex, stream = _streamed(ctx, "streamed chat completion")
    chunks = _chunks(ctx, ex, stream)
    tracks = _tracks(ctx, ex, chunks)
    for index, t in sorted(tracks.items()):
        ctx.expect(
            bool(t.finishes),
            f"choice {index} never says finish_reason",
            expected=f"one chunk with choices[{index}].finish_reason set",
            received=f"{len(t.positions)} chunk(s) for choice {index}, all with finish_reason null",
            exchange=ex,
            hint="clients cannot tell a finished answer from a cut connection",
        )
        first_k, reason = t.finishes[0]
        ctx.expect(
            reason in FINISH_REASONS,
            f"choice {index} finishes with {reason!r}, not an OpenAI value",
            expected=f"finish_reason one of {sorted(FINISH_REASONS)}",
            received=f"{reason!r} in chunk {first_k}",
            exchange=ex,
        )
        after = [k for k in t.output_at if k > first_k] + [k for k, _ in t.roles if k > first_k]
        ctx.expect(
            not after,
            f"choice {index} sends output after its finish_reason",
            expected=f"nothing for choice {index} after chunk {first_k} (finish_reason {reason!r})",
            received=f"content/tool-call/role deltas in chunk(s) {sorted(after)[:10]}: {body_snippet(chunks[min(after)], 300) if after else ''}",
            exchange=ex,
            hint="clients stop reading a choice at its finish_reason and drop the rest",
        )
        if len(t.finishes) > 1:
            # Extra finish chunks without output (Xinference repeats the finish with include_usage, even
            # 'stop' after 'length'): legal for that profile only; output after a finish failed above.
            ctx.fail(
                f"choice {index} says finish_reason {len(t.finishes)} times ({', '.join(repr(r) for _, r in t.finishes)})",
                expected="exactly one chunk with a finish_reason per choice",
                received=f"finish_reason in chunks {[k for k, _ in t.finishes]}: {[r for _, r in t.finishes]}",
                exchange=ex,
                deviation="stream-extra-finish-chunk",
                hint="clients that finalise a message on finish_reason finalise it twice (duplicate messages, double billing events)",
            )


def _unindexed(chunks: list[dict[str, Any]]) -> list[int]:
    """Chunks with a choice whose index is missing or not an integer."""
    out = []
    for k, chunk in enumerate(chunks):
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            index = choice.get("index") if isinstance(choice, dict) else 0
            if not isinstance(index, int) or isinstance(index, bool):
                out.append(k)
                break
    return out


@check(
    "STREAM-N",
    "n > 1 streams every choice",
    "a stream with n=2 carries choices with index 0 and 1 only, every choice object naming its integer index; "
    "each choice is opened by role 'assistant' (sent once), carries its own content and is closed by exactly one "
    "finish_reason with nothing after it (at temperature 0 identical choices would be legal; this asks at 0.8)",
    requires=("n",),
)
def stream_n(ctx: CheckContext) -> None:
    ex, stream = _streamed(
        ctx, "streamed chat completion with n=2", n=2, temperature=0.8, seed=11, max_tokens=8
    )
    chunks = _chunks(ctx, ex, stream)
    tracks = _tracks(ctx, ex, chunks)
    ctx.expect(
        sorted(tracks) == [0, 1],
        "n=2 did not stream two indexed choices",
        expected="choices with index 0 and 1",
        received=f"choice indexes {sorted(tracks)}",
        exchange=ex,
        hint="clients that ask for several candidates in one stream get fewer than they pay for",
    )
    unindexed = _unindexed(chunks)
    ctx.expect(
        not unindexed,
        "with n=2 some streamed choices carry no integer index",
        expected="every choices[] object with its index (0 or 1)",
        received=f"chunk(s) {unindexed[:10]}: {body_snippet(chunks[unindexed[0]], 300) if unindexed else ''}",
        exchange=ex,
        hint="clients route each delta to its candidate by index; without one they cannot",
    )
    for index, t in sorted(tracks.items()):
        ctx.expect(
            t.first_role == "assistant" and len(t.roles) == 1 and len(t.finishes) == 1,
            f"choice {index} of n=2 is not a complete stream",
            expected="role first and once, exactly one finish_reason per choice",
            received=f"first role {t.first_role!r}, roles in chunks {[k for k, _ in t.roles][:10]}, "
            f"finish_reasons {[r for _, r in t.finishes]}",
            exchange=ex,
        )
        finish_k, reason = t.finishes[0]
        ctx.expect(
            bool(t.output_at) or reason != "length",
            f"choice {index} of n=2 was cut at max_tokens but streamed no content",
            expected=f"content deltas with index {index} before its finish_reason 'length'",
            received=f"choice {index}: {len(t.positions)} chunk(s) and no content; choice texts "
            f"{[stream.text(i)[:60] for i in sorted(tracks)]!r}",
            exchange=ex,
            hint="the content of every choice is streamed under one index (or merged into one choice); each "
            "choice's deltas must say their own index",
        )
        late = [k for k in t.output_at if k > finish_k]
        ctx.expect(
            not late,
            f"choice {index} of n=2 streams content after its finish_reason",
            expected=f"nothing for choice {index} after chunk {finish_k}",
            received=f"content in chunk(s) {late[:10]}",
            exchange=ex,
        )


@dataclass(slots=True)
class Defect:
    """One thing wrong with a stream, kept so that the defects a profile allows are raised last."""

    summary: str
    expected: str
    received: str
    deviation: str | None = None
    hint: str = ""
    exchange: Exchange | None = None  # where it was seen, when not the check's main exchange


def fail_first(ctx: CheckContext, defects: list[Defect], ex: Exchange) -> None:
    """Raise the first defect the engine profile does not allow; else the first allowed one (non-strict)."""
    if not defects:
        return
    defects = sorted(defects, key=lambda d: ctx.profile.allowance(d.deviation) is not None)
    d = defects[0]
    ctx.fail(
        d.summary,
        expected=d.expected,
        received=d.received,
        exchange=d.exchange or ex,
        deviation=d.deviation,
        hint=d.hint,
    )


def usage_shape_defects(chunks: list[dict[str, Any]], found: list[int]) -> list[Defect]:
    """STREAM-USAGE's shape defects: usage repeated or stray, choices in the usage chunk."""
    usage_chunk = chunks[found[-1]]
    defects = []
    if len(found) > 1:
        defects.append(
            Defect(
                f"{len(found)} chunks carry a usage object",
                "exactly one usage chunk",
                f"usage in chunks {found[:10]} of {len(chunks)} (same counts)",
                "usage-chunk-repeated",
                "clients that add up usage chunks count the tokens several times",
            )
        )
    stray = [
        k for k, chunk in enumerate(chunks) if chunk.get("usage") is not None and k not in found
    ]
    if stray:
        defects.append(
            Defect(
                f"{len(stray)} chunk(s) carry a usage that is neither absent, null nor a usage object",
                'no "usage" (or "usage": null) on every chunk but the usage chunk',
                f"usage {body_snippet(chunks[stray[0]].get('usage'), 80)} in chunk(s) {stray[:10]} of {len(chunks)}",
                hint="clients test `chunk.usage is not None` and then read its counts (the openai SDK's type is "
                "CompletionUsage | None); anything else there breaks them",
            )
        )
    if not isinstance(usage_chunk.get("choices"), list):
        defects.append(
            Defect(
                "the usage chunk has no choices list",
                '"choices": [] in the usage chunk',
                body_snippet(usage_chunk, 400),
                hint="choices is required in every chunk (the openai SDK's ChatCompletionChunk, and Completion "
                "for /v1/completions); "
                "clients that loop over chunk.choices fail on this chunk",
            )
        )
    elif usage_chunk.get("choices") != []:
        defects.append(
            Defect(
                "the usage chunk has non-empty choices",
                '"choices": [] in the usage chunk',
                body_snippet(usage_chunk, 400),
                "usage-chunk-has-choices",
                "clients read choices[0] of every chunk; a choice in the usage chunk repeats or duplicates the finish",
            )
        )
    return defects


# Unasked usage: what a stream without include_usage must not carry (an unasked chunk with
# choices: [] breaks clients that read chunk.choices[0] of every chunk).
UNASKED_USAGE: tuple[tuple[str, dict[str, Any]], ...] = (
    ("without stream_options", {}),
    ("with include_usage false", {"stream_options": {"include_usage": False}}),
)


def unasked_usage_defects(chunks: list[dict[str, Any]], what: str, ex: Exchange) -> list[Defect]:
    """Usage objects in a stream that did not ask for them (``what`` says how it did not): a
    choices-less usage chunk is a defect; usage riding on a chunk with a choice is the deviation
    ``usage-unasked``."""
    found = _usage_chunks(chunks)
    bare = [k for k in found if not chunks[k].get("choices")]
    riding = [k for k in found if k not in bare]
    defects = []
    if bare:
        defects.append(
            Defect(
                f"a stream {what} ends with a usage chunk nobody asked for",
                "no chunk with a usage object unless stream_options.include_usage is true",
                f"usage chunk(s) {bare[:5]} of {len(chunks)}: {body_snippet(chunks[bare[0]], 300)}",
                hint="send the choices: [] usage chunk only with include_usage: clients that read "
                "chunk.choices[0] of every chunk (as the openai SDK's examples do) crash on it",
                exchange=ex,
            )
        )
    if riding:
        defects.append(
            Defect(
                f"chunks of a stream {what} carry usage nobody asked for",
                "no usage object on any chunk unless stream_options.include_usage is true",
                f"usage on chunk(s) {riding[:5]} of {len(chunks)}: "
                f"{body_snippet(chunks[riding[0]], 300)}",
                "usage-unasked",
                "leave usage out (or null) unless include_usage asks for it; clients that add up "
                "every usage they see count a request twice when they do ask",
                exchange=ex,
            )
        )
    return defects


def _unasked_usage(ctx: CheckContext, max_tokens: int) -> list[Defect]:
    defects = []
    for what, params in UNASKED_USAGE:
        ex, stream = _streamed(
            ctx, f"streamed chat completion {what}", usage=False, max_tokens=max_tokens, **params
        )
        defects += unasked_usage_defects(_chunks(ctx, ex, stream), what, ex)
    return defects


@check(
    "STREAM-USAGE",
    "include_usage gives one consistent usage chunk",
    "with stream_options.include_usage, exactly one chunk carries usage, every other chunk has usage absent or null; "
    "it is the last chunk before [DONE] and has choices: [] (an empty list, not a missing key); prompt + completion == total; and completion_tokens is the same as the non-streamed usage of the same "
    "temperature-0 request when the texts match (otherwise at least the number of content chunks and at most max_tokens: "
    "an engine may put several tokens in one chunk, never less than one); and the same stream without "
    "stream_options, or with include_usage false, has no chunk with a usage object (usage riding on a "
    "choice's chunk there is the deviation usage-unasked)",
    requires=("usage_in_stream",),
)
def stream_usage(ctx: CheckContext) -> None:
    max_tokens = 16
    ex, stream = _streamed(
        ctx, "streamed chat completion with include_usage", usage=True, max_tokens=max_tokens
    )
    chunks = _chunks(ctx, ex, stream)
    found = _usage_chunks(chunks)
    ctx.expect(
        bool(found),
        "no usage chunk although stream_options.include_usage was sent",
        expected='a final chunk {"choices": [], "usage": {...}} before [DONE]',
        received=f"{len(chunks)} chunks, none with a usage object; last: {body_snippet(chunks[-1], 300)}",
        exchange=ex,
        hint="clients that meter tokens from the stream get nothing (LiteLLM drops usage unless include_usage is forwarded)",
    )
    k = found[-1]
    usage_chunk = chunks[k]
    usage = usage_chunk["usage"]
    ctx.expect(
        k == len(chunks) - 1,
        "chunks follow the usage chunk",
        expected="the usage chunk is the last chunk before [DONE]",
        received=f"usage in chunk {k}, then {len(chunks) - 1 - k} more chunk(s): {body_snippet(chunks[k + 1 :][:2], 300)}",
        exchange=ex,
    )
    counts = [
        {
            n: chunks[i]["usage"].get(n)
            for n in ("prompt_tokens", "completion_tokens", "total_tokens")
        }
        for i in found
    ]
    ctx.expect(
        all(c == counts[-1] for c in counts),
        f"{len(found)} chunks carry different usage counts",
        expected="one usage object",
        received=f"usage in chunks {found[:10]}: {body_snippet(counts[:4], 300)}",
        exchange=ex,
        hint="clients cannot tell which usage is the bill",
    )
    p, c, t = (usage.get(name) for name in ("prompt_tokens", "completion_tokens", "total_tokens"))
    ints = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (p, c, t))
    ctx.expect(
        ints,
        "usage counts are not non-negative integers",
        expected="prompt_tokens, completion_tokens, total_tokens >= 0",
        received=body_snippet(usage),
        exchange=ex,
    )
    ctx.expect(
        p + c == t,
        "usage.total_tokens is not prompt_tokens + completion_tokens",
        expected=f"total_tokens == {p} + {c} = {p + c}",
        received=f"total_tokens = {t}",
        exchange=ex,
    )
    ctx.expect(
        p > 0,
        "usage.prompt_tokens is 0 for a non-empty prompt",
        expected="prompt_tokens > 0",
        received=body_snippet(usage),
        exchange=ex,
    )
    content_chunks = stream.content_chunk_count()
    ns = ctx.chat(PROMPT, max_tokens=max_tokens, temperature=0)
    ns_data = ctx.ok_json(ns, "non-streamed chat completion (for comparison)")
    raw_usage = ns_data.get("usage")
    ns_usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    ns_text = _message_text(ns_data)
    if ns_text == stream.text(0) and isinstance(ns_usage.get("completion_tokens"), int):
        expected_c, expected_p = ns_usage["completion_tokens"], ns_usage.get("prompt_tokens")
        ctx.expect(
            c == expected_c,
            "streamed completion_tokens differ from the non-streamed count for the same text",
            expected=f"completion_tokens {expected_c} (non-streamed usage of the identical temperature-0 answer)",
            received=f"completion_tokens {c} in the usage chunk ({content_chunks} content chunks)",
            exchange=ex,
            hint="the stream's token accounting is off (counting chunks, role/finish chunks or the prompt)",
        )
        ctx.expect(
            p == expected_p,
            "streamed prompt_tokens differ from the non-streamed count for the same prompt",
            expected=f"prompt_tokens {expected_p} (non-streamed usage)",
            received=f"prompt_tokens {p}",
            exchange=ex,
        )
    ctx.expect(
        content_chunks <= c <= max_tokens,
        "usage.completion_tokens does not fit what was streamed",
        expected=f"{content_chunks} (content chunks) <= completion_tokens <= {max_tokens} (max_tokens)",
        received=f"completion_tokens {c}",
        exchange=ex,
    )
    # Last: the shape defects an engine profile may allow (Xinference), so the counts are judged first.
    defects = usage_shape_defects(chunks, found) + _unasked_usage(ctx, max_tokens)
    fail_first(ctx, defects, ex)


@check(
    "STREAM-DONE",
    "the stream ends with data: [DONE]",
    "a complete stream ends with the event data: [DONE] (the OpenAI end-of-stream sentinel)",
)
def stream_done(ctx: CheckContext) -> None:
    ex, stream = _streamed(ctx, "streamed chat completion")
    last = stream.events[-1].data[:200] if stream.events else "(no events)"
    ctx.expect(
        stream.done,
        "the stream ended without data: [DONE]",
        expected="a final event data: [DONE]",
        received=f"{len(stream.events)} event(s), the last: {last!r}",
        exchange=ex,
        hint="the openai SDK and most clients treat a stream without [DONE] as cut off (or wait for more)",
    )


@check(
    "STREAM-ERROR-OBJECT",
    "a valid streamed request gets content, not an error object in a 200",
    "a valid streaming request answered HTTP 200 carries chat.completion.chunk events and no "
    'data: {"error": ...} event',
)
def stream_error_object(ctx: CheckContext) -> None:
    ex, stream = _streamed(ctx, "streamed chat completion")
    if stream.error_obj is not None:
        error = stream.error_obj.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        ctx.fail(
            "the server answered a valid request with an error object inside a 200 stream",
            expected="HTTP 200 with content chunks (and, for a real failure, an HTTP error status before streaming)",
            received=f"HTTP 200 text/event-stream carrying {body_snippet(stream.error_obj, 400)}"
            f" after {len(stream.chunks)} content chunk(s)",
            exchange=ex,
            hint=f"the engine failed while generating ({message!r}); clients that check only the status code report success "
            "with an empty answer; look at the engine's log",
        )
    _chunks(ctx, ex, stream)


# STREAM-ERROR-EVENT. Requests an engine may refuse only once its scheduler sees them, after the 200
# and its headers went out: then the error must travel in the stream, as an event SDKs read.
SSE_FIELDS = frozenset({b"data", b"event", b"id", b"retry"})
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
LATE_ERROR_TIMEOUT_S = 30.0
MAX_OVERLONG_CONTEXT = 131072  # a prompt of twice a longer context is megabytes of filler


def _late_error_cases(ctx: CheckContext) -> list[tuple[str, dict[str, Any]]]:
    """(what, body) of each streamed request that asks for more than the engine can give."""
    limit = ctx.info.context_length
    cases = [
        (
            f"max_tokens {(limit or 10**7) * 4} (context {limit or 'unknown'})",
            ctx.chat_body(PROMPT, stream=True, max_tokens=(limit or 10**7) * 4),
        ),
        (
            "top_logprobs 50 (the API allows 0 to 20)",
            ctx.chat_body(PROMPT, stream=True, max_tokens=4, logprobs=True, top_logprobs=50),
        ),
    ]
    if limit and limit <= MAX_OVERLONG_CONTEXT:
        cases.append(
            (
                f"a prompt of {2 * limit} words (context {limit})",
                ctx.chat_body(filler(2 * limit), stream=True, max_tokens=4),
            )
        )
    return cases


def _non_sse_lines(body: bytes) -> list[str]:
    """Lines of an event stream that are neither a comment nor a data / event / id / retry field:
    what SSE parsers skip without a word (an ``error: {...}`` line, a bare JSON error)."""
    out = []
    for line in _LINE_BREAK.split(body):
        if line and not line.startswith(b":") and line.split(b":", 1)[0] not in SSE_FIELDS:
            out.append(line[:160].decode("utf-8", "replace"))
    return out


def _error_event_at(stream: StreamResult) -> int | None:
    return next(
        (k for k, e in enumerate(stream.events) if classify_data(e.data).kind == "error"), None
    )


def _late_error_verdict(ex: Exchange) -> tuple[str, str, str | None]:
    """How one answer delivered its error: (ok | served | bad, what came back, deviation)."""
    if ex.status is None:
        return "bad", f"no answer ({ex.describe(200)})", None
    if ex.status >= 500:
        return "bad", f"a server error: {ex.describe(200)}", None
    if ex.status >= 400:
        problem, deviation = error_shape_problem(ex)
        if problem:
            return "bad", f"HTTP {ex.status} without an OpenAI error object: {problem}", deviation
        return "ok", f"HTTP {ex.status} before the stream", None
    ctype = ex.content_type.split(";")[0].strip().lower()
    if ctype != "text/event-stream" or ex.stream is None:
        return "bad", f"a {ex.status} that is not an event stream: {ex.describe(200)}", None
    stream = ex.stream
    bare = _non_sse_lines(ex.body)
    if bare:
        return "bad", f"a line that is not an SSE field in the 200 stream: {bare[0]!r}", None
    at = _error_event_at(stream)
    if at is None:
        if ex.error == "timeout" and stream.content_chunk_count():
            return "served", "a 200 stream still generating at the deadline", None
        tracks = _track(stream.chunks).values()
        finished = any(t.finishes for t in tracks)
        answered = any(t.output_at for t in tracks)
        if not ex.error and (finished or (stream.done and answered)):
            return "served", "a complete 200 stream (served)", None  # [DONE] is STREAM-DONE's
        if not ex.error and stream.done:
            return (
                "bad",
                f"a 200 stream with no error event and no answer ({len(stream.events)} event(s), "
                f"no content and no finish_reason), then [DONE]: {ex.describe(120)}",
                None,
            )
        how = ex.describe(120) if ex.error else "it ended with no finish_reason and no [DONE]"
        return (
            "bad",
            f"the 200 stream broke off with no error event after {len(stream.events)} event(s): {how}",
            None,
        )
    assert stream.error_obj is not None  # noqa: S101 - set with the error event
    problem, deviation = error_object_problem(stream.error_obj)
    if problem:
        return (
            "bad",
            f"the stream's error event is not an OpenAI error object: {problem}",
            deviation,
        )
    after = [e.data[:80] for e in stream.events[at + 1 :] if e.data.strip() != "[DONE]"]
    if after:
        return "bad", f"{len(after)} event(s) after the error event, the first {after[0]!r}", None
    if ex.error or any(p.code == "truncated-event" for p in stream.problems):
        return (
            "bad",
            f"after its error event the stream did not end cleanly: {ex.describe(120)}",
            None,
        )
    return (
        "ok",
        "an error event in the 200 stream, then " + ("[DONE]" if stream.done else "the end"),
        None,
    )


@check(
    "STREAM-ERROR-EVENT",
    "an error in a streamed request reaches the client",
    "streamed requests asking for more than the engine gives (max_tokens 4x the context, top_logprobs 50, a "
    "prompt of twice the context) are each refused with a 4xx and an OpenAI error object before the stream, "
    'or inside the 200 stream as data: {"error": {...}} followed only by [DONE] or the end; never a 5xx, a '
    "dropped or stalled stream without an error event, a stream with neither an error event nor an answer, "
    "or a non-SSE line; answers that serve the request (content or a finish_reason) are not judged, nor is "
    "a server that does not serve a valid streamed request",
    requires=("route-accepts:/chat/completions",),
)
def stream_error_event(ctx: CheckContext) -> None:
    timeout = min(ctx.target.timeout_s, LATE_ERROR_TIMEOUT_S)
    good = ctx.post(
        "/chat/completions",
        ctx.chat_body(PROMPT, stream=True, max_tokens=4),
        stream=True,
        timeout_s=timeout,
    )
    if good.error or good.status != 200 or good.stream is None:
        raise CheckError(
            ctx.check_id,
            "a valid streamed chat request is not served, so a refused oversized one says nothing",
            received=good.describe(200),
            hint="fix streaming first (STREAM-* judge it); this check needs a server that streams "
            "a valid request to tell a delivered error from a refusal of every stream",
            exchange=good,
        )
    bad: list[str] = []
    deviations: set[str | None] = set()
    first: Exchange | None = None
    judged = 0
    for what, body in _late_error_cases(ctx):
        ex = ctx.post("/chat/completions", body, stream=True, timeout_s=timeout)
        verdict, line, deviation = _late_error_verdict(ex)
        judged += verdict != "served"
        if verdict == "bad":
            bad.append(f"{what}: {line}")
            deviations.add(deviation)
            first = first or ex
    if not judged:
        raise CheckSkipped(
            "STREAM-ERROR-EVENT: the server served every request meant to be refused, so there was no "
            "error to deliver (CTX-MAX-TOKENS and ERR-VALUES judge serving them)"
        )
    ctx.expect(
        not bad,
        f"{len(bad)} streamed request(s) lost or garbled their error",
        expected='a 4xx with {"error": {...}} before the stream, or data: {"error": {"message", "type"}} in '
        "the stream and then only data: [DONE]",
        received="; ".join(bad),
        exchange=first,
        deviation=deviations.pop() if len(deviations) == 1 else None,
        hint="validate before sending the 200; an error found later must be written as a data: event (the "
        "openai SDK raises APIError with its message) and the stream closed, not dropped; a dropped stream "
        "or an unknown SSE field leaves the client with an empty answer and no reason",
    )


@check(
    "STREAM-EQUALS-NONSTREAM",
    "the stream says what the non-streamed answer says",
    "at temperature 0, with max_tokens 12, the concatenated delta.content of a stream equals message.content of the same "
    "request without stream, and the stream's (first) finish_reason equals the non-streamed finish_reason",
)
def stream_equals_nonstream(ctx: CheckContext) -> None:
    prompt = "Name three colours and say why you like them."
    max_tokens = 12
    ns = ctx.chat(prompt, max_tokens=max_tokens, temperature=0)
    data = ctx.ok_json(ns, "non-streamed chat completion")
    ns_text = _message_text(data)
    ctx.expect(
        ns_text is not None,
        "the non-streamed answer has no text content",
        expected="choices[0].message.content: str",
        received=body_snippet(data),
        exchange=ns,
    )
    ex, stream = _streamed(ctx, "streamed chat completion", prompt, max_tokens=max_tokens)
    text = stream.text(0)
    if text != ns_text:
        again = ctx.chat(prompt, max_tokens=max_tokens, temperature=0)
        again_text = _message_text(ctx.ok_json(again, "second non-streamed chat completion"))
        deterministic = again_text == ns_text
        ctx.fail(
            "the streamed text differs from the non-streamed text at temperature 0"
            if deterministic
            else "temperature 0 is not deterministic here, so streamed and non-streamed answers differ",
            expected=f"the non-streamed text {ns_text!r}",
            received=f"streamed {text!r}"
            + ("" if deterministic else f"; a second non-streamed answer was {again_text!r}"),
            exchange=ex,
            hint="the streaming path detokenizes differently (dropped or duplicated pieces, stop handling)"
            if deterministic
            else "greedy decoding is not greedy (sampling defaults override temperature, or batching changes numerics)",
        )
    choices = data.get("choices")
    ns_finish = (
        choices[0].get("finish_reason")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict)
        else None
    )
    track = _track(stream.chunks).get(0)
    finish = track.finishes[0][1] if track is not None and track.finishes else None
    ctx.expect(
        finish == ns_finish,
        "the stream's finish_reason differs from the non-streamed one for the same answer",
        expected=f"finish_reason {ns_finish!r} (non-streamed, same text)",
        received=f"streamed finish_reason {finish!r}",
        exchange=ex,
        hint="streaming clients cannot tell a cut answer ('length') from a complete one ('stop')",
    )


@check(
    "STREAM-UTF8",
    "multi-byte text survives chunking",
    "streamed answers to French/Chinese/Japanese prompts are valid UTF-8 on the wire, have no lone UTF-16 surrogates and "
    "no more U+FFFD replacement characters than the non-streamed answer to the same temperature-0 request (a model may "
    "emit U+FFFD itself; a character cut between two chunks adds more); prompts are tried until an answer contains a "
    "multi-byte character, and the check is skipped when none does",
)
def stream_utf8(ctx: CheckContext) -> None:
    budget = ctx.answer_budget(32)
    for prompt in UTF8_PROMPTS:
        ex, stream = _streamed(ctx, "streamed chat completion (non-ASCII prompt)", prompt, **budget)
        bad = _problems(stream, "bad-utf8")
        ctx.expect(
            not bad,
            "the stream is not valid UTF-8",
            expected="UTF-8 bytes on the wire (JSON text is UTF-8)",
            received="; ".join(bad[:3]),
            exchange=ex,
            hint="the server writes raw token bytes; it must hold back incomplete characters until the next token",
        )
        text = stream.text(0)
        lone = _LONE_SURROGATE.findall(text)
        ctx.expect(
            not lone,
            "the stream carries lone UTF-16 surrogates (a character split between two chunks' \\u escapes)",
            expected="whole characters in every chunk",
            received=f"{len(lone)} lone surrogate(s) in {text!r}",
            exchange=ex,
            hint="an emoji or other non-BMP character was split into its two \\uD8xx\\uDCxx halves across chunks",
        )
        ns = ctx.chat(prompt, temperature=0, **budget)
        ns_text = (
            _message_text(ctx.ok_json(ns, "non-streamed chat completion (non-ASCII prompt)")) or ""
        )
        extra = text.count(REPLACEMENT) - ns_text.count(REPLACEMENT)
        if extra > 0:
            at = text.find(REPLACEMENT)
            ctx.fail(
                f"the stream has {extra} more U+FFFD replacement character(s) than the non-streamed answer",
                expected=f"the same characters as the non-streamed answer {ns_text[:200]!r}",
                received=f"...{text[max(0, at - 40) : at + 40]!r}... (U+FFFD at {at})",
                exchange=ex,
                hint="the streaming detokenizer decodes each token's bytes alone; multi-byte characters cut across tokens "
                "must be held back until complete",
            )
        if any(ord(ch) > 0x7F for ch in text + ns_text):
            return
    raise CheckSkipped(
        f"the model answered {len(UTF8_PROMPTS)} non-ASCII prompts in ASCII only, so no multi-byte "
        "character crossed a chunk boundary"
    )


# ---------------------------------------------------------------------------------------------
# Transport and timing


@check(
    "STREAM-SSE-VALID",
    "the event stream is well-formed",
    "the answer is text/event-stream; every data: event is a JSON object or [DONE]; nothing follows [DONE]; the "
    "body does not end inside an event (legal variations, e.g. 'data:' without a space, CRLF, comments, are accepted)",
)
def stream_sse_valid(ctx: CheckContext) -> None:
    ex, stream = _streamed(ctx, "streamed chat completion")
    ctype = ex.content_type.split(";")[0].strip().lower()
    ctx.expect(
        ctype == "text/event-stream",
        "the stream is not served as text/event-stream",
        expected="Content-Type: text/event-stream",
        received=f"Content-Type: {ex.content_type or '(none)'}",
        exchange=ex,
        hint="EventSource clients refuse other types and proxies buffer them; set the media type on the streaming response",
    )
    bad = _problems(stream, "non-json", "data-after-done", "truncated-event")
    ctx.expect(
        not bad,
        "the event stream is malformed",
        expected="data: <JSON object> events, then data: [DONE] and nothing after",
        received="; ".join(bad[:4]),
        exchange=ex,
        hint="the openai SDK raises on non-JSON data and silently drops events after [DONE]",
    )


def _bursts(ctx: CheckContext, max_tokens: int) -> tuple[Exchange, int, int]:
    """One stream: (exchange, token chunks, distinct reads they arrived in); skips when too short to judge."""
    ex, _ = _streamed(
        ctx, "streamed chat completion", LONG_PROMPT, max_tokens=max_tokens, usage=False
    )
    times = ex.timing.token_times
    e2e = ex.timing.e2e or 0.0
    if len(times) < MIN_TOKEN_CHUNKS:
        raise CheckSkipped(
            f"only {len(times)} token chunk(s) arrived; at least {MIN_TOKEN_CHUNKS} are needed to judge buffering"
        )
    if e2e < MIN_JUDGE_S:
        raise CheckSkipped(
            f"generation too fast to judge buffering ({len(times)} token chunks in {e2e * 1000:.1f} ms end "
            f"to end, under {MIN_JUDGE_S * 1000:.0f} ms)"
        )
    return ex, len(times), len(set(times))


@check(
    "STREAM-INCREMENTAL",
    "tokens arrive while they are generated (no buffering)",
    f"the token chunks of a stream of up to 64 tokens (up to {LONG_STREAM_TOKENS} when 64 take under "
    f"{MIN_JUDGE_S * 1000:.0f} ms) arrive in separate network reads: a stream is buffered when, in two tries, they "
    f"average >= {MAX_CHUNKS_PER_READ:.0f} chunks per read (all at the end, or in a proxy's blocks); streams still "
    f"under {MIN_JUDGE_S * 1000:.0f} ms or with fewer than {MIN_TOKEN_CHUNKS} token chunks are not judged",
)
def stream_incremental(ctx: CheckContext) -> None:
    max_tokens = 64
    try:
        ex, chunks, reads = _bursts(ctx, max_tokens)
    except CheckSkipped:
        # A fast engine (llama.cpp with a tiny model: 64 tokens in 25 ms): ask for more, within the context.
        max_tokens = max(
            max_tokens, min(LONG_STREAM_TOKENS, (ctx.target.context_length or 4096) - 100)
        )
        ex, chunks, reads = _bursts(ctx, max_tokens)
    if chunks / reads < MAX_CHUNKS_PER_READ:
        return
    ex, chunks, reads = _bursts(
        ctx, max_tokens
    )  # again: a busy client can coalesce reads once, a buffer does it every time
    if chunks / reads < MAX_CHUNKS_PER_READ:
        return
    timing = ex.timing
    times = timing.token_times
    e2e = timing.e2e or 0.0
    ms = [round((t - timing.t_start) * 1000) for t in sorted(set(times))]
    where = (
        "all at the end"
        if times[-1] - times[0] < 0.2 * e2e
        else f"in {reads} bursts at {ms[:8]} ms"
    )
    ctx.fail(
        f"the stream arrives in bursts, not token by token (buffered {where})",
        expected=f"{chunks} token chunks delivered as they are generated (fewer than {MAX_CHUNKS_PER_READ:.0f} per read)",
        received=f"{chunks} chunks in {reads} read(s) ({chunks / reads:.1f} per read) twice; first token at "
        f"{(timing.ttft or 0) * 1000:.0f} ms, last at {(times[-1] - timing.t_start) * 1000:.0f} ms, "
        f"end {e2e * 1000:.0f} ms",
        exchange=ex,
        hint="a proxy buffers the response: nginx `proxy_buffering off;` (or `X-Accel-Buffering: no`), no response "
        "compression for text/event-stream, and no buffering in load balancers or API gateways",
    )


def _stall_limit(ctx: CheckContext, baseline_s: float) -> float:
    return min(
        ctx.target.timeout_s, max(3.0, min(10.0, 5 * baseline_s + 2.0), 2 * baseline_s + 2.0)
    )


@check(
    "STREAM-NO-STALL",
    "a stream finishes in bounded time",
    "a streamed 16-token request completes with [DONE] within min(timeout_s, max(3 s, min(10 s, 5 x t + 2 s), "
    "2 x t + 2 s)), t being the non-streamed time of the same request; a stream that stops sending is reported as a "
    "timeout, never waited on forever",
)
def stream_no_stall(ctx: CheckContext) -> None:
    base = ctx.chat(PROMPT, max_tokens=16, temperature=0)
    ctx.ok_json(base, "non-streamed chat completion (the time a stream should take)")
    limit = _stall_limit(ctx, base.timing.e2e or 0.0)
    body = ctx.chat_body(PROMPT, stream=True, max_tokens=16, temperature=0)
    ex = ctx.post("/chat/completions", body, stream=True, timeout_s=limit)
    if ex.error == "timeout":
        stream = ex.stream or StreamResult()
        last = (stream.chunk_times[-1] - ex.timing.t_start) if stream.chunk_times else None
        ctx.fail(
            f"the stream stalled: no complete answer within {limit:.1f} s",
            expected=f"data: [DONE] within {limit:.1f} s (the non-streamed answer took {(base.timing.e2e or 0) * 1000:.0f} ms)",
            received=f"{len(stream.chunks)} chunk(s), the last at "
            f"{'%.0f ms' % (last * 1000) if last is not None else 'never'}, then no chunk until the client gave up "
            f"({len(ex.body)} bytes in all)",
            exchange=ex,
            hint="the engine or a proxy stops forwarding mid-generation (a stuck request, a scheduler deadlock, a "
            "proxy read timeout); clients without their own timeout hang here",
        )
    ctx.ok_stream(ex, "streamed chat completion")
    assert ex.stream is not None  # noqa: S101 - ok_stream guarantees it
    ctx.expect(
        ex.stream.done,
        "the stream ended without completing",
        expected=f"data: [DONE] within {limit:.1f} s",
        received=f"{len(ex.stream.chunks)} chunk(s), no [DONE]; "
        + "; ".join(_problems(ex.stream))[:300],
        exchange=ex,
    )
