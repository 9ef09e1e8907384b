"""CTX-*: prompts at and past the context length, and max_tokens beyond the room left.

Prompts are sized from the known context length (targets.yaml ``context_length`` or what
discovery found). Counts come from the target itself: ``/tokenize`` where it exists (vLLM,
llama.cpp, the reference server) and ``usage.prompt_tokens`` of short calibration requests, so the
chat template's overhead is included. Filler is plain common words, one token each in the BPE
vocabularies in use, so the word count is also a safe fallback.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.registry import check
from servecheck.client.http import Exchange
from servecheck.engines.registry import context_policy

FILLER = (
    "river",
    "stone",
    "garden",
    "light",
    "window",
    "paper",
    "cloud",
    "north",
    "field",
    "green",
    "metal",
    "glass",
    "orbit",
    "signal",
    "kernel",
    "queue",
)
CALIBRATION_WORDS = (24, 88)
TRUNCATION_MARKERS = ("warning", "truncat")


def filler(words: int) -> str:
    return " ".join(FILLER[i % len(FILLER)] for i in range(max(words, 0)))


def context_length(ctx: CheckContext) -> int:
    limit = ctx.info.context_length
    if not limit:
        raise CheckSkipped(
            f"{ctx.check_id}: the context length is unknown: set context_length for target "
            f"{ctx.target.name!r} in targets.yaml (the server does not report it in /v1/models)"
        )
    return limit


def tokenize_count(ctx: CheckContext, text: str) -> int | None:
    """Tokens of ``text`` by the target's /tokenize (vLLM/reference or llama.cpp shape), or None."""
    if not ctx.capabilities.get("tokenize", False):
        return None
    body: dict[str, Any] = (
        {"content": text}
        if ctx.target.engine == "llamacpp"
        else {"model": ctx.model, "prompt": text}
    )
    ex = ctx.post(ctx.server_root + "/tokenize", body)
    data = ex.json() if ex.ok else None
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("count"), int):
        return int(data["count"])
    if isinstance(data.get("tokens"), list):
        return len(data["tokens"])
    return None


def _prompt_tokens(data: Any) -> int | None:
    usage = data.get("usage") if isinstance(data, dict) else None
    value = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(slots=True)
class Sizer:
    """Chat prompt tokens as a function of filler words: ``overhead + per_word * words``.

    Fitted on two short chats (``usage.prompt_tokens``), never near the limit, so a server whose
    real limit is lower than advertised cannot steer the sizes (CTX-FITS relies on that).
    """

    overhead: float
    per_word: float
    measured: bool

    @classmethod
    def calibrate(cls, ctx: CheckContext) -> Sizer:
        points: list[int | None] = []
        for words in CALIBRATION_WORDS:
            ex = ctx.chat(filler(words), max_tokens=1, temperature=0)
            data = ctx.ok_json(ex, f"calibration chat of {words} words")
            tokens = _prompt_tokens(data)
            if tokens is None:
                # No usage: count the text with /tokenize when possible; guess the template at 16.
                counted = tokenize_count(ctx, filler(words))
                tokens = counted + 16 if counted is not None else None
            points.append(tokens)
        p1, p2 = points
        if p1 is None or p2 is None or p2 <= p1:
            return cls(overhead=16, per_word=1.0, measured=False)
        w1, w2 = CALIBRATION_WORDS
        per_word = (p2 - p1) / (w2 - w1)
        return cls(overhead=p1 - per_word * w1, per_word=per_word, measured=True)

    def words_for(self, tokens: int) -> int:
        return max(1, math.floor((tokens - self.overhead) / self.per_word))

    def estimate(self, words: int) -> int:
        return round(self.overhead + self.per_word * words)


def _status_class(ex: Exchange) -> str:
    if ex.error:
        return "error"
    status = ex.status or 0
    return "5xx" if status >= 500 else "4xx" if status >= 400 else "2xx"


def _error_message(ex: Exchange) -> str:
    data = ex.json()
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"]
        if isinstance(err, str):
            return err
        if isinstance(data.get("detail"), str):
            return data["detail"]
        if isinstance(data.get("message"), str):
            return data["message"]
    return ex.text


def _names_limit(message: str, limit: int) -> bool:
    if re.search(rf"(?<!\d){limit}(?!\d)", message):
        return True
    # Another number next to context wording (a declared limit that differs is CTX-FITS's business).
    return bool(re.search(r"\d", message)) and bool(
        re.search(r"context|maximum|too long|exceed|limit", message, re.I)
    )


def _truncation_signals(ex: Exchange, data: dict[str, Any], max_tokens: int) -> list[str]:
    """Visible signs that a prompt was truncated: a warning header or field, or a context-length cut."""
    signs = [f"header {k}" for k in ex.response_headers if any(m in k for m in TRUNCATION_MARKERS)]
    scopes: list[tuple[str, Any]] = [("", data)]
    scopes += [
        (f"choices[{i}].", c)
        for i, c in enumerate(data.get("choices") or [])
        if isinstance(c, dict)
    ]
    for where, obj in scopes:
        for key, value in obj.items():
            if any(m in key.lower() for m in TRUNCATION_MARKERS) and value not in (
                None,
                False,
                "",
                [],
                {},
            ):
                signs.append(f"field {where}{key}")
    usage = data.get("usage") or {}
    completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
    for i, c in enumerate(data.get("choices") or []):
        # 'length' before max_tokens was reached can only be the context filling up.
        if (
            isinstance(c, dict)
            and c.get("finish_reason") == "length"
            and isinstance(completion, int)
            and completion < max_tokens
        ):
            signs.append(
                f"choices[{i}].finish_reason 'length' after {completion} < {max_tokens} tokens"
            )
    return signs


@check(
    "CTX-OVERLONG",
    "a prompt longer than the context is refused (or visibly truncated)",
    "a prompt over the context length gets a 4xx whose message names the limit; with context_policy 'truncate', a 200 "
    "must report fewer prompt tokens than were sent and say so (a warning field/header or finish_reason 'length'); "
    "never a silent 200, never a 5xx",
    requires=("route-accepts:/chat/completions",),
)
def ctx_overlong(ctx: CheckContext) -> None:
    limit = context_length(ctx)
    margin = max(32, limit // 8)
    words = fallback = math.ceil(limit * 1.5) + 16  # one token or more per filler word: surely over
    sent = words
    counted = tokenize_count(ctx, filler(words))
    if counted is not None:
        # Size with the target's own tokenizer: just over the limit, not an unbounded upload.
        words = max(1, math.ceil((limit + margin) * words / max(counted, 1)))
        counted = tokenize_count(ctx, filler(words))
        for _ in range(
            8
        ):  # bounded: a /tokenize that does not grow with the text must not hang the check
            if counted is None or counted > limit + margin // 2:
                break
            words += margin
            counted = tokenize_count(ctx, filler(words))
        if (
            counted is None or counted <= limit
        ):  # the tokenizer did not help: the word count is surely over
            words, counted = max(words, fallback), None
        sent = counted if counted is not None else words
    max_tokens = 8
    ex = ctx.chat(filler(words), max_tokens=max_tokens, temperature=0)
    kind = _status_class(ex)
    if counted is not None:
        what = f"a prompt of about {sent} tokens (context {limit})"
    else:  # no tokenizer to ask: each filler word is at least one token
        what = f"a prompt of {words} words (at least {sent} tokens; context {limit})"
    ctx.expect(
        kind != "error",
        f"{what}: the request did not complete",
        expected="a 4xx answer",
        received=ex.describe(),
        exchange=ex,
        hint="the server hangs or drops the connection on an over-long prompt",
    )
    ctx.expect(
        kind != "5xx",
        f"{what} crashed the request with a server error",
        expected=f"HTTP 400 naming the limit ({limit} tokens)",
        received=ex.describe(400),
        exchange=ex,
        hint="check the prompt length before scheduling it and answer 400 (vLLM and llama.cpp do)",
    )
    if kind == "4xx":
        message = _error_message(ex)
        ctx.expect(
            _names_limit(message, limit),
            f"{what} was refused without saying what the limit is",
            expected=f"an error message naming the context limit ({limit} tokens)",
            received=ex.describe(400),
            exchange=ex,
            hint="say the limit and the prompt size in the message so clients can trim their prompts",
        )
        return
    data = ex.json() if isinstance(ex.json(), dict) else {}
    policy = context_policy(ctx.target)
    ctx.expect(
        policy == "truncate",
        f"{what} was served with a 200",
        expected=f"HTTP 400 naming the limit ({limit} tokens); context_policy is {policy!r}",
        received=f"HTTP {ex.status}, usage {body_snippet(data.get('usage'), 200)}",
        exchange=ex,
        hint="the server silently truncates over-long prompts (the answer ignores part of the input); reject them, "
        "or set context_policy: truncate if truncation is intended and signalled",
    )
    got = _prompt_tokens(data)
    ctx.expect(
        got is not None and got < sent,
        f"{what} was served, but usage does not show the truncation",
        expected=f"usage.prompt_tokens < {sent} (what was sent)",
        received=f"usage {body_snippet(data.get('usage'), 200)}",
        exchange=ex,
        hint="report the prompt tokens actually used, so clients can tell the prompt was cut",
    )
    signs = _truncation_signals(ex, data, max_tokens)
    ctx.expect(
        bool(signs),
        f"{what} was truncated silently",
        expected="a visible signal: a warning field or header, or finish_reason 'length' before max_tokens",
        received=f"usage.prompt_tokens {got} and no warning: {body_snippet(data, 300)}",
        exchange=ex,
        hint="a truncated prompt must be visible to the client (warning field/header); silent truncation loses input",
    )


def _near_limit_prompt(ctx: CheckContext, sizer: Sizer, limit: int, room: int) -> tuple[str, int]:
    """Filler whose chat prompt leaves about ``room`` tokens; measured by a max_tokens=1 request, shrunk if refused."""
    words = sizer.words_for(limit - room)
    for _ in range(4):
        ex = ctx.chat(filler(words), max_tokens=1, temperature=0)
        if _status_class(ex) == "4xx":
            words = max(
                1, words - max(8, room)
            )  # the estimate overshot: step back and measure again
            continue
        data = ctx.ok_json(ex, "sizing chat near the context limit")
        measured = _prompt_tokens(data)
        if measured is None:
            return filler(words), sizer.estimate(words)
        if limit - measured >= room // 2 or words <= 1:
            return filler(words), measured
        words = max(1, words - math.ceil((room - (limit - measured)) / max(sizer.per_word, 0.1)))
    ctx.fail(
        "could not size a prompt that fits the context",
        expected=f"a prompt of about {limit - room} tokens that is accepted",
        received=f"the server refused prompts down to {words} filler words",
        exchange=ex,
        hint="the real context is far below the declared one; see CTX-FITS",
    )


@check(
    "CTX-MAX-TOKENS",
    "max_tokens beyond the room left is refused or clamped",
    "with a prompt that leaves a few tokens of room, max_tokens past the room (and past the whole context) gets a 4xx, or "
    "a 200 that stops inside the context with finish_reason 'length' (or 'stop' before the end); never a 5xx",
)
def ctx_max_tokens(ctx: CheckContext) -> None:
    limit = context_length(ctx)
    sizer = Sizer.calibrate(ctx)
    text, prompt_tokens = _near_limit_prompt(ctx, sizer, limit, room=8)
    room = limit - prompt_tokens
    cases = (("past-room", room + 32), ("past-context", limit * 2))
    for case, max_tokens in cases:
        ex = ctx.chat(text, max_tokens=max_tokens, temperature=0)
        what = f"[{case}] max_tokens={max_tokens} with {room} tokens of room (context {limit})"
        kind = _status_class(ex)
        ctx.expect(
            kind != "error",
            f"{what}: the request did not complete",
            expected="a 4xx, or a 200 cut at the context",
            received=ex.describe(),
            exchange=ex,
        )
        ctx.expect(
            kind != "5xx",
            f"{what} crashed the request with a server error",
            expected="HTTP 400, or a 200 clamped to the room with finish_reason 'length'",
            received=ex.describe(400),
            exchange=ex,
            hint="clamp max_tokens to the room left (or reject it with 400) before scheduling",
        )
        if kind == "4xx":
            continue
        data = ctx.ok_json(ex, what)
        usage = data.get("usage")
        p = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        c = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if not isinstance(p, int) or not isinstance(c, int):
            ctx.fail(
                f"{what}: no usage to judge the clamp by",
                expected="usage.prompt_tokens and usage.completion_tokens",
                received=body_snippet(data, 300),
                exchange=ex,
            )
        choices = data.get("choices") if isinstance(data.get("choices"), list) else []
        finish = (
            choices[0].get("finish_reason") if choices and isinstance(choices[0], dict) else None
        )
        ctx.expect(
            p + c <= limit,
            f"{what}: the output ran past the context",
            expected=f"prompt_tokens + completion_tokens <= {limit}",
            received=f"{p} + {c} = {p + c}, finish_reason {finish!r}",
            exchange=ex,
            hint="max_tokens is not clamped to the room left: tokens past the context are garbage or a crash",
        )
        ctx.expect(
            finish == "length" or (finish == "stop" and p + c < limit),
            f"{what}: an output cut at the context does not say 'length'",
            expected="finish_reason 'length' when the context is full",
            received=f"{p} + {c} tokens, finish_reason {finish!r}",
            exchange=ex,
            hint="clients cannot tell an answer cut by the context from a complete one",
        )


@check(
    "CTX-FITS",
    "a prompt just under the context length is served",
    "a prompt sized a little under the context length (sized from short calibration requests and /tokenize) with "
    "max_tokens 8 gets a 200: the real limit is not lower than the advertised one",
)
def ctx_fits(ctx: CheckContext) -> None:
    limit = context_length(ctx)
    max_tokens = 8
    sizer = Sizer.calibrate(ctx)
    slack = max(16, limit // 32) if sizer.measured else max(48, limit // 8)
    words = sizer.words_for(limit - max_tokens - slack)
    text = filler(words)
    estimate = sizer.estimate(words)
    counted = tokenize_count(ctx, text)
    if counted is not None and sizer.measured:
        estimate = round(counted + sizer.overhead)
    ex = ctx.chat(text, max_tokens=max_tokens, temperature=0)
    what = f"a prompt of about {estimate} tokens with max_tokens {max_tokens} (context {limit})"
    kind = _status_class(ex)
    ctx.expect(
        kind == "2xx",
        f"{what} was not served",
        expected=f"HTTP 200: {estimate} + {max_tokens} <= {limit}",
        received=ex.describe(400),
        exchange=ex,
        hint="the real context is lower than advertised (llama.cpp: -c is split across -np slots; vLLM: "
        "--max-model-len vs the KV cache), or context_length in targets.yaml is too high",
    )
    data = ctx.ok_json(ex, what)
    got = _prompt_tokens(data)
    ctx.expect(
        got is None or got >= estimate - max(16, estimate // 10),
        f"{what} was served with fewer prompt tokens than sent",
        expected=f"usage.prompt_tokens about {estimate}",
        received=f"usage.prompt_tokens {got}",
        exchange=ex,
        hint="the prompt was cut below the advertised context: the real limit is lower than advertised",
    )
