"""LOGPROBS-*: chat-completion logprobs a client can compute with.

CHAT-LOGPROBS asks whether logprobs come back at all; these checks ask whether they are right:
the tokens spell the answer, every value is a log-probability, top_logprobs has the count asked
for, and the same holds streamed. Only what engines guarantee is asserted: the tokens' ``bytes``
(where given) join to the answer's UTF-8 (a character may be split across tokens: llama.cpp's
``token`` holds the valid prefix and ``bytes`` the raw piece, vLLM gives the partial token ""
and the completing one the whole character); a logprob may be a large negative sentinel for
-inf (vLLM -9999.0, llama.cpp the lowest float), never -inf or NaN itself; top_logprobs need not
be sorted (vLLM puts the sampled token first) nor hold only the true top tokens.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn, TypeGuard

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.registry import check
from servecheck.client.http import Exchange

TOP = 3  # top_logprobs asked for (OpenAI allows 0..20)
MAX_TOKENS = 32
# An answer with words and multi-byte characters, so that a character split across tokens
# (byte-level BPE) is exercised where the model writes one.
PROMPT = "Write one sentence about a river, then the words café, 你好 and 🙂."
TOLERANCE = 1e-3  # one logprob, written twice (sampled and in its own top list)
REPLACEMENT = "\ufffd"


def _is_number(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _byte_list(v: Any) -> TypeGuard[list[int]]:
    return isinstance(v, list) and all(
        isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255 for b in v
    )


def _raw(entry: dict[str, Any]) -> bytes:
    """A token's bytes: its ``bytes`` when given, else its text in UTF-8."""
    given = entry.get("bytes")
    if _byte_list(given):
        return bytes(given)
    token = entry.get("token")
    return token.encode() if isinstance(token, str) else b""


def joined_text(entries: list[Any]) -> str:
    """The text the logprobs tokens spell: their bytes (else token strings) joined, then decoded."""
    raw = b"".join(_raw(e) for e in entries if isinstance(e, dict))
    return raw.decode("utf-8", errors="replace")


def comparable(text: str) -> str:
    """Text with U+FFFD removed: a model may emit invalid UTF-8, and engines replace it with a
    different number of U+FFFD in the answer and in tokens decoded one by one."""
    return text.replace(REPLACEMENT, "")


def _value_problem(where: str, e: Any) -> str | None:
    """Why one logprob object (sampled or top) is malformed, or None."""
    if not isinstance(e, dict):
        return f"{where} is not an object: {body_snippet(e, 80)}"
    if not isinstance(e.get("token"), str):
        return f"{where}.token is {body_snippet(e.get('token'), 40)}, not a string"
    lp = e.get("logprob")
    if not _is_number(lp):
        return f"{where}.logprob is {lp!r}, not a finite number"
    if not math.isfinite(lp):
        return f"{where}.logprob is {lp!r}, not a finite number"
    if lp > 0:
        return f"{where}.logprob is {lp!r} > 0 (a probability, not a log-probability?)"
    b = e.get("bytes")
    if b is not None and not _byte_list(b):
        return f"{where}.bytes is {body_snippet(b, 60)}, not null or a list of byte values 0..255"
    if b is not None:
        try:
            text = bytes(b).decode("utf-8")
        except UnicodeDecodeError:
            return None  # part of a character: the token holds what is whole (or nothing)
        if text != e["token"]:
            return f"{where}.bytes spell {text!r}, not its token {e['token']!r}"
    return None


def _top_problems(i: int, e: dict[str, Any], top: int) -> list[str]:
    tops = e.get("top_logprobs")
    if not isinstance(tops, list):
        return [f"content[{i}].top_logprobs is {body_snippet(tops, 60)}, not a list"]
    out = []
    if len(tops) != top:
        out.append(f"content[{i}].top_logprobs has {len(tops)} entries, not {top}")
    bad = [
        p for k, t in enumerate(tops) if (p := _value_problem(f"content[{i}].top_logprobs[{k}]", t))
    ]
    if bad:
        return out + bad
    lp = e["logprob"]
    best = max((t["logprob"] for t in tops), default=None)
    if best is not None and lp > best + TOLERANCE:
        out.append(
            f"content[{i}] {e['token']!r} has logprob {lp} above every top_logprobs entry (max {best})"
        )
    same = [t for t in tops if t["token"] == e["token"] and t.get("bytes") == e.get("bytes")]
    own = same[0]["logprob"] if len(same) == 1 else None
    if (
        own is not None
        and e["token"]
        and REPLACEMENT not in e["token"]
        and abs(own - lp) > TOLERANCE
    ):
        out.append(
            f"content[{i}] {e['token']!r} has logprob {lp}, but {same[0]['logprob']} in its own top_logprobs"
        )
    return out


def value_problems(entries: list[Any], top: int) -> list[str]:
    """What is wrong with ``logprobs.content`` entries asked with ``top_logprobs=top``."""
    out: list[str] = []
    for i, e in enumerate(entries):
        problem = _value_problem(f"content[{i}]", e)
        if problem:
            out.append(problem)
            continue
        out += _top_problems(i, e, top)
    return out


def _entries(ctx: CheckContext, choice: dict[str, Any], ex: Exchange) -> list[Any]:
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(content, list):
        ctx.fail(
            "logprobs were asked for but choices[0].logprobs.content is not a list",
            expected="choices[0].logprobs: {content: [{token, logprob, bytes, top_logprobs}, ...]}",
            received=body_snippet(choice, 400),
            exchange=ex,
            hint="clients (evals, confidence scores, classifiers) read logprobs.content",
        )
    return content


def empty_with_logprobs(ctx: CheckContext, plain: str, ex: Exchange, what: str) -> NoReturn:
    """An answer asked with logprobs came back empty: a skip only when ``plain``, the same
    request's answer without logprobs, is empty too; otherwise the logprobs blanked it."""
    if plain:
        ctx.fail(
            f"{what} with logprobs is empty, the same request without logprobs is not",
            expected=f"the text the request gives without logprobs ({plain[:120]!r}), with its logprobs",
            received="no text content",
            exchange=ex,
            hint="asking for logprobs must not change the answer: return the text and its logprobs",
        )
    raise CheckSkipped(f"the model gave no text content to spell with logprobs ({what})")


def _answer(ctx: CheckContext) -> tuple[Exchange, dict[str, Any], dict[str, Any], str]:
    """A temperature-0 answer with logprobs: (exchange, body, choices[0], its text)."""
    budget = ctx.answer_budget(MAX_TOKENS)
    ex = ctx.chat(PROMPT, temperature=0, logprobs=True, top_logprobs=TOP, **budget)
    data = ctx.ok_json(ex, "chat completion with logprobs")
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict):
        ctx.fail(
            "the response has no choices",
            expected="a non-empty choices list",
            received=body_snippet(data),
            exchange=ex,
        )
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else None
    if not isinstance(text, str) or not text:
        plain = ctx.ok_json(
            ctx.chat(PROMPT, temperature=0, **budget),
            "the same request without logprobs",
        )
        choices = plain.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        msg = first.get("message") if isinstance(first, dict) else None
        again = msg.get("content") if isinstance(msg, dict) else None
        empty_with_logprobs(ctx, again if isinstance(again, str) else "", ex, "the chat answer")
    return ex, data, choice, text


@check(
    "LOGPROBS-JOIN",
    "the logprobs tokens spell the answer",
    f"at temperature 0 with logprobs=true and top_logprobs={TOP}, the entries of choices[0].logprobs.content, joined "
    "(their bytes where given, decoded as UTF-8, else their token strings), equal message.content (U+FFFD "
    "left out on both sides), and there are no more entries than usage.completion_tokens; an empty answer "
    "skips only when the same request without logprobs is empty too",
    requires=("logprobs",),
)
def logprobs_join(ctx: CheckContext) -> None:
    ex, data, choice, text = _answer(ctx)
    entries = _entries(ctx, choice, ex)
    spelled = joined_text(entries)
    ctx.expect(
        comparable(spelled) == comparable(text),
        "the logprobs tokens do not spell the answer",
        expected=f"tokens joined == message.content {text[:200]!r}",
        received=f"{len(entries)} tokens joined: {spelled[:200]!r}; first tokens "
        f"{[e.get('token') for e in entries[:8] if isinstance(e, dict)]!r}",
        exchange=ex,
        hint="each token must be the exact text it adds (leading spaces kept; tokens decoded alone lose "
        "SentencePiece's leading space) and bytes its raw UTF-8, so that clients can align logprobs with the text",
    )
    usage = data.get("usage")
    generated = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if _is_number(generated):
        ctx.expect(
            len(entries) <= generated,
            "there are more logprobs entries than generated tokens",
            expected=f"at most usage.completion_tokens = {generated} entries",
            received=f"{len(entries)} entries",
            exchange=ex,
            hint="logprobs must cover the generated tokens only (not the prompt, not a token twice)",
        )


@check(
    "LOGPROBS-VALUES",
    "every logprob is a log-probability, top_logprobs has the count asked for",
    f"with logprobs=true and top_logprobs={TOP}, every entry (sampled and top) has a string token, a finite number "
    "logprob <= 0 (a large negative sentinel stands for -inf) and bytes null or a list of byte values whose UTF-8, "
    f"where whole, is the token; every top_logprobs list has exactly {TOP} entries; the sampled logprob is not above "
    "the best of its top list, and equals its own entry there; and the same request with logprobs=false, "
    "or with no logprobs field, has choices[0].logprobs null or absent; an empty answer skips only when the "
    "same request without logprobs is empty too",
    requires=("logprobs",),
)
def logprobs_values(ctx: CheckContext) -> None:
    ex, _, choice, _ = _answer(ctx)
    entries = _entries(ctx, choice, ex)
    ctx.expect(
        bool(entries),
        "logprobs.content is empty for a non-empty answer",
        expected="one entry per generated token",
        received=body_snippet(choice, 300),
        exchange=ex,
    )
    problems = value_problems(entries, TOP)
    ctx.expect(
        not problems,
        f"{len(problems)} logprobs value(s) are malformed",
        expected=f"{{token: str, logprob: finite <= 0, bytes: [0..255] | null, top_logprobs: {TOP} such entries}}",
        received="; ".join(problems[:5]),
        exchange=ex,
        hint="a logprob is ln(p) <= 0 (send -9999.0 or the lowest float for -inf: JSON has no -Infinity); "
        "top_logprobs must hold as many alternatives as the request asked for",
    )
    for what, params in UNASKED:
        _expect_no_logprobs(ctx, what, params)


# Logprobs left out, and logprobs=false: OpenAI answers "logprobs": null on the choice.
UNASKED: tuple[tuple[str, dict[str, Any]], ...] = (
    ("logprobs=false", {"logprobs": False}),
    ("no logprobs field", {}),
)


def _expect_no_logprobs(ctx: CheckContext, what: str, params: dict[str, Any]) -> None:
    ex = ctx.chat(PROMPT, max_tokens=4, temperature=0, **params)
    data = ctx.ok_json(ex, f"chat completion with {what}")
    choices = data.get("choices")
    given = [
        c.get("logprobs")
        for c in (choices if isinstance(choices, list) else [])
        if isinstance(c, dict) and c.get("logprobs") is not None
    ]
    ctx.expect(
        not given,
        f"logprobs come back although the request has {what}",
        expected="choices[].logprobs null or absent",
        received=f"logprobs {body_snippet(given[0] if given else None, 300)}",
        exchange=ex,
        hint="compute and send logprobs only when logprobs is true: clients that test the field for "
        "null read these as asked for, and every answer pays for them",
    )


def _stream_entries(ctx: CheckContext, ex: Exchange, chunks: list[dict[str, Any]]) -> list[Any]:
    """Choice 0's logprobs entries over the whole stream, in order; a chunk with content and no
    logprobs list fails."""
    entries: list[Any] = []
    for k, chunk in enumerate(chunks):
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            lp = choice.get("logprobs")
            content = lp.get("content") if isinstance(lp, dict) else None
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else None
            if text and not isinstance(content, list):
                ctx.fail(
                    f"chunk {k} carries content but no logprobs",
                    expected="choices[].logprobs.content with the tokens of every content chunk",
                    received=body_snippet(chunk, 400),
                    exchange=ex,
                    hint="streaming clients that collect logprobs lose these tokens",
                )
            entries += content if isinstance(content, list) else []
    return entries


@check(
    "LOGPROBS-STREAM",
    "streamed logprobs spell the streamed answer",
    f"a temperature-0 stream with logprobs=true and top_logprobs={TOP}: every chunk with content has "
    "logprobs.content, the entries of all chunks joined (bytes where given) equal the streamed text (U+FFFD left "
    f"out), and every entry holds the LOGPROBS-VALUES invariants ({TOP} top entries, logprobs <= 0); an "
    "empty stream skips only when the same stream without logprobs is empty too",
    requires=("logprobs",),
)
def logprobs_stream(ctx: CheckContext) -> None:
    budget = ctx.answer_budget(MAX_TOKENS)
    body = ctx.chat_body(
        PROMPT, stream=True, temperature=0, logprobs=True, top_logprobs=TOP, **budget
    )
    ex = ctx.ok_stream(
        ctx.post("/chat/completions", body, stream=True), "streamed chat completion with logprobs"
    )
    assert ex.stream is not None  # noqa: S101 - ok_stream guarantees it
    text = ex.stream.text(0)
    if not text:
        plain_body = ctx.chat_body(PROMPT, stream=True, temperature=0, **budget)
        plain = ctx.ok_stream(
            ctx.post("/chat/completions", plain_body, stream=True),
            "the same stream without logprobs",
        )
        again = plain.stream.text(0) if plain.stream is not None else ""
        empty_with_logprobs(ctx, again, ex, "the streamed answer")
    entries = _stream_entries(ctx, ex, ex.stream.chunks)
    spelled = joined_text(entries)
    ctx.expect(
        comparable(spelled) == comparable(text),
        "the streamed logprobs tokens do not spell the streamed text",
        expected=f"tokens of all chunks joined == streamed content {text[:200]!r}",
        received=f"{len(entries)} tokens joined: {spelled[:200]!r}",
        exchange=ex,
        hint="each chunk's logprobs must hold the tokens of that chunk's content, no token late, missing or twice",
    )
    problems = value_problems(entries, TOP)
    ctx.expect(
        not problems,
        f"{len(problems)} streamed logprobs value(s) are malformed",
        expected=f"{{token: str, logprob: finite <= 0, bytes: [0..255] | null, top_logprobs: {TOP} such entries}}",
        received="; ".join(problems[:5]),
        exchange=ex,
        hint="the streaming path builds logprobs differently from the non-streamed one",
    )
