"""COMPL-*: the legacy /v1/completions API beyond its shape (CHAT-COMPLETIONS checks that).

Clients that score or batch text (evaluation harnesses, the openai SDK's ``completions``) lean
on what the chat route does not have: a list of prompts answered in one request, prompts given
as token ids, ``echo``, and logprobs in the legacy shape (``tokens``, ``token_logprobs``,
``top_logprobs``, ``text_offset``).

The stream of the legacy route (COMPL-STREAM) is held to the whole answer of the same
request, and prompts no model can take (COMPL-PROMPT-INVALID) to a clean 4xx.

Tiny test models answer random tokens, and a token that is part of a UTF-8 character decodes
alone as U+FFFD, so where logprobs tokens are compared with the text a run of U+FFFD stands for
whatever characters the text has there. Two legal differences are accepted: a first token
without a logprob that the text does not show (a BOS before an echoed prompt, as vLLM sends),
and a last token that the text does not show on a 'stop' finish (the end-of-sequence token).
"""

from __future__ import annotations

import re
from typing import Any

from servecheck.checks.context import CheckContext, body_snippet
from servecheck.checks.preconditions import CheckError
from servecheck.checks.registry import check
from servecheck.checks.surfaces.chat import FINISH_REASONS, _choices, served_token_ids
from servecheck.checks.surfaces.err import ERROR_SHAPE, error_shape_problem
from servecheck.checks.surfaces.stream import (
    REPLACEMENT,
    Defect,
    fail_first,
    unasked_usage_defects,
    usage_shape_defects,
)
from servecheck.client.http import Exchange, StreamResult

PROMPTS = ("Once upon a time", "The river ran past the stone", "In the garden there was a")
ECHO_PROMPT = "The river ran past the old stone"
COUNTED = "Once upon a time, a river ran past the old stone mill."
# Token ids valid in any vocabulary of more than 108 tokens (the CI's tiny models have 2048).
LOW_IDS = list(range(100, 108))


def _complete(ctx: CheckContext, prompt: Any, **params: Any) -> Exchange:
    body: dict[str, Any] = {"model": ctx.model, "prompt": prompt, "max_tokens": 6, "temperature": 0}
    body.update(params)
    return ctx.post("/completions", body)


def _answer(
    ctx: CheckContext, ex: Exchange, what: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    data = ctx.ok_json(ex, what)
    return data, _choices(ctx, data, ex)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _prompt_tokens(ctx: CheckContext, data: dict[str, Any], ex: Exchange) -> int:
    usage = data.get("usage")
    got = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if not _count(got):
        ctx.fail(
            "the completion has no usage.prompt_tokens",
            expected="usage.prompt_tokens, an integer >= 0",
            received=body_snippet(usage if usage is not None else data),
            exchange=ex,
        )
    assert isinstance(got, int)
    return got


def _indexes(choices: list[dict[str, Any]]) -> list[Any]:
    return [c.get("index") for c in choices]


@check(
    "COMPL-BATCH-N",
    "a list of prompts times n gives every choice",
    "prompt as a list of 3 strings with n=2 gets one JSON object with exactly 6 choices, indexes "
    "0..5 once each, each with a text and an OpenAI finish_reason; usage.prompt_tokens counts "
    "every prompt (at least the sum of each prompt's count sent alone, at most n times it)",
    requires=("completions", "n"),
)
def compl_batch_n(ctx: CheckContext) -> None:
    alone = []
    for prompt in PROMPTS:
        single = _complete(ctx, prompt, max_tokens=1)
        alone.append(_prompt_tokens(ctx, ctx.ok_json(single, "single-prompt completion"), single))
    n, want = 2, 2 * len(PROMPTS)
    ex = _complete(ctx, list(PROMPTS), n=n, temperature=0.8, seed=3)
    data, choices = _answer(ctx, ex, f"a batch of {len(PROMPTS)} prompts with n={n}")
    indexes = _indexes(choices)
    ctx.expect(
        len(choices) == want
        and all(isinstance(i, int) for i in indexes)
        and sorted(indexes) == list(range(want)),
        f"{len(PROMPTS)} prompts x n={n} did not give {want} indexed choices",
        expected=f"{want} choices, indexes 0..{want - 1} once each",
        received=f"{len(choices)} choice(s), indexes {indexes}",
        exchange=ex,
        hint="batch clients map choice i to prompt i // n; a missing or repeated index loses answers",
    )
    bad = [
        f"choices[{i}]: text {body_snippet(c.get('text'), 60)}, finish_reason {c.get('finish_reason')!r}"
        for i, c in enumerate(choices)
        if not isinstance(c.get("text"), str) or c.get("finish_reason") not in FINISH_REASONS
    ]
    ctx.expect(
        not bad,
        "some batch choices are not answered",
        expected=f"each choice with a text string and a finish_reason in {sorted(FINISH_REASONS)}",
        received="; ".join(bad[:4]),
        exchange=ex,
    )
    got, least = _prompt_tokens(ctx, data, ex), sum(alone)
    ctx.expect(
        least <= got <= n * least,
        "usage.prompt_tokens of the batch does not count every prompt",
        expected=f"{least} (the prompts alone: {alone}) <= prompt_tokens <= {n * least}",
        received=f"prompt_tokens {got}",
        exchange=ex,
        hint="usage of a batch counted only some of its prompts: billing undercounts",
    )


def _ids(ctx: CheckContext) -> tuple[list[int], str]:
    if ctx.capabilities.get("tokenize"):
        tokens, _ = served_token_ids(ctx, "Once upon a time there was a river and a stone")
        if tokens and len(tokens) >= 4:
            return tokens, "ids from /tokenize"
    return list(LOW_IDS), "low ids 100..107"


@check(
    "COMPL-TOKEN-IDS",
    "a prompt of token ids is accepted and counted as given",
    "prompt as a list of token ids (from /tokenize where the server has it, else ids 100..107) "
    "is answered with usage.prompt_tokens == the number of ids, and a list of two such lists "
    "gets two choices with prompt_tokens == the ids of both",
    requires=("completions",),
)
def compl_token_ids(ctx: CheckContext) -> None:
    ids, source = _ids(ctx)
    other = ids[: max(2, len(ids) - 3)]
    for prompt, want, choices_want in (
        (ids, len(ids), 1),
        ([ids, other], len(ids) + len(other), 2),
    ):
        what = "a list of token-id lists" if choices_want == 2 else "a token-id prompt"
        ex = _complete(ctx, prompt, max_tokens=4)
        data, choices = _answer(ctx, ex, f"{what} ({source})")
        ctx.expect(
            len(choices) == choices_want and all(isinstance(c.get("text"), str) for c in choices),
            f"{what} did not get {choices_want} answered choice(s)",
            expected=f"{choices_want} choice(s) with a text string",
            received=f"{len(choices)} choice(s): {body_snippet(choices, 300)}",
            exchange=ex,
        )
        got = _prompt_tokens(ctx, data, ex)
        ctx.expect(
            got == want,
            f"usage.prompt_tokens of {what} is not the number of ids sent",
            expected=f"prompt_tokens {want} ({source})",
            received=f"prompt_tokens {got}",
            exchange=ex,
            hint="one more: a BOS added in front of ids the client already tokenized; other: "
            "the ids were re-tokenized as text",
        )


def _matches(joined: str, text: str) -> bool:
    """Whether ``joined`` is ``text``, each run of U+FFFD standing for any characters."""
    if joined == text:
        return True
    if REPLACEMENT not in joined:
        return False
    pattern = ".*?".join(re.escape(part) for part in re.split(REPLACEMENT + "+", joined))
    return re.fullmatch(pattern, text, re.DOTALL) is not None


def _joins(tokens: list[str], values: list[Any], text: str, finish: Any) -> bool:
    firsts = [tokens]
    if values and values[0] is None:
        firsts.append(tokens[1:])  # a BOS before an echoed prompt, without a logprob
    candidates = [*firsts, *([t[:-1] for t in firsts if t] if finish == "stop" else [])]
    return any(_matches("".join(t), text) for t in candidates)


def _value_problem(i: int, value: Any, echo: bool) -> str | None:
    if value is None and echo and i == 0:
        return None  # the first prompt token has no context to score it
    if isinstance(value, int | float) and not isinstance(value, bool) and value <= 0:
        return None
    return f"token_logprobs[{i}] = {value!r}, not a number <= 0"


def _top_problem(i: int, top: Any, k: int, echo: bool) -> str | None:
    if top is None and echo and i == 0:
        return None
    if not isinstance(top, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and v <= 0 for v in top.values()
    ):
        return f"top_logprobs[{i}] = {body_snippet(top, 120)}, not an object of logprobs <= 0"
    # K, or K + 1 with the sampled token added (vLLM); fewer only where decoded strings collide
    if len(top) > k + 1 or (len(top) < max(k, 1) and not any(REPLACEMENT in t for t in top)):
        return f"top_logprobs[{i}] has {len(top)} entries for logprobs={k}"
    return None


def _offset_problem(tokens: list[Any], offsets: list[Any]) -> str | None:
    if not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets):
        return f"text_offset holds non-integers: {body_snippet(offsets, 120)}"
    for i in range(min(len(tokens), len(offsets)) - 1):
        step = offsets[i + 1] - offsets[i]
        if step < 0 or (REPLACEMENT not in tokens[i] and step != len(tokens[i])):
            return f"text_offset[{i + 1}] - text_offset[{i}] = {step}, token {tokens[i]!r} has {len(tokens[i])} characters"
    return None


def legacy_problems(lp: Any, text: str, k: int, *, echo: bool, finish: Any) -> list[str]:
    """Where a legacy logprobs object departs from its text and from logprobs=k (empty: none)."""
    names = ("tokens", "token_logprobs", "top_logprobs", "text_offset")
    if not isinstance(lp, dict) or not all(isinstance(lp.get(n), list) for n in names):
        return [f"logprobs is {body_snippet(lp, 200)}, not the legacy object with lists {names}"]
    tokens, values, tops, offsets = (lp[n] for n in names)
    problems = []
    lengths = {n: len(lp[n]) for n in names}
    if len(set(lengths.values())) != 1:
        problems.append(f"the lists differ in length: {lengths}")
    if not all(isinstance(t, str) for t in tokens):
        return [*problems, f"tokens holds non-strings: {body_snippet(tokens, 120)}"]
    if text and not tokens:
        problems.append("no tokens for a non-empty text")
    found = [_value_problem(i, v, echo) for i, v in enumerate(values)]
    found += [_top_problem(i, t, k, echo) for i, t in enumerate(tops)]
    found.append(_offset_problem(tokens, offsets))
    problems += [p for p in found if p][:3]
    if not _joins(tokens, values, text, finish):
        problems.append(
            f"the tokens joined, {''.join(tokens)[:120]!r}, are not the text {text[:120]!r}"
        )
    return problems


@check(
    "COMPL-LOGPROBS",
    "legacy logprobs line up with the text",
    "with logprobs=2, choices[0].logprobs has tokens, token_logprobs, top_logprobs and "
    "text_offset of one length; the tokens join to the text, every logprob is <= 0, each "
    "top_logprobs object has 2 entries (3 with the sampled token added), and text_offset steps "
    "by each token's length; the same request without logprobs has choices[].logprobs null or "
    "absent",
    requires=("completions", "logprobs"),
)
def compl_logprobs(ctx: CheckContext) -> None:
    k = 2
    ex = _complete(ctx, PROMPTS[0], max_tokens=8, logprobs=k)
    _, choices = _answer(ctx, ex, f"completion with logprobs={k}")
    choice = choices[0]
    text = choice.get("text")
    text = text if isinstance(text, str) else ""
    problems = legacy_problems(
        choice.get("logprobs"), text, k, echo=False, finish=choice.get("finish_reason")
    )
    ctx.expect(
        not problems,
        "the legacy logprobs do not line up with the text",
        expected="tokens / token_logprobs / top_logprobs / text_offset of one length, matching the text",
        received="; ".join(problems),
        exchange=ex,
        hint="a chat-shaped {'content': [...]} here is the chat API's form, which legacy clients "
        "(lm-eval-harness, the SDK's Logprobs type) do not read",
    )
    plain = _complete(ctx, PROMPTS[0], max_tokens=4)
    _, choices = _answer(ctx, plain, "completion without logprobs")
    given = [c.get("logprobs") for c in choices if c.get("logprobs") is not None]
    ctx.expect(
        not given,
        "legacy logprobs come back although the request has no logprobs field",
        expected="choices[].logprobs null or absent",
        received=f"logprobs {body_snippet(given[0] if given else None, 300)}",
        exchange=plain,
        hint="send logprobs only when the request asks for them (logprobs: K); clients that test "
        "the field for null read these as asked for",
    )


def _refused_echo(ctx: CheckContext, ex: Exchange) -> None:
    """An engine that declares echo unsupported: a 4xx error object that says so."""
    data = ex.json() if ex.status is not None and 400 <= ex.status < 500 else None
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if isinstance(message, str) and "echo" in message.lower():
        ctx.fail(
            "echo is refused as unsupported",
            expected="the prompt echoed before the completion",
            received=f"HTTP {ex.status}: {message[:200]!r}",
            exchange=ex,
            deviation="echo-refused",
            hint="a clean refusal; clients that score prompts with echo need another engine",
        )


@check(
    "COMPL-ECHO",
    "echo returns the prompt before the completion",
    "echo=true with max_tokens 4 answers a text that starts with the prompt; with logprobs "
    "(where declared) the legacy logprobs cover the echoed prompt too and line up with the whole "
    "text (the first token may have a null logprob). A 4xx error object that names echo is the "
    "deviation echo-refused (non-strict where the profile lists it); echo ignored fails",
    requires=("completions",),
)
def compl_echo(ctx: CheckContext) -> None:
    ex = _complete(ctx, ECHO_PROMPT, echo=True, max_tokens=4)
    _refused_echo(ctx, ex)
    asks = [(ex, False)]
    if ctx.capabilities.get("logprobs"):
        asks.append((_complete(ctx, ECHO_PROMPT, echo=True, max_tokens=4, logprobs=1), True))
    for exchange, extra in asks:
        what = "echo with logprobs=1" if extra else "echo"
        _, choices = _answer(ctx, exchange, what)
        choice = choices[0]
        text = choice.get("text")
        ctx.expect(
            isinstance(text, str) and text.startswith(ECHO_PROMPT),
            f"{what}: the text does not start with the prompt",
            expected=f"a text starting with {ECHO_PROMPT!r}",
            received=f"text {body_snippet(text, 200)}",
            exchange=exchange,
            hint="echo is accepted and ignored: say it is unsupported with a 400 instead",
        )
        if extra:
            assert isinstance(text, str)
            problems = legacy_problems(
                choice.get("logprobs"), text, 1, echo=True, finish=choice.get("finish_reason")
            )
            ctx.expect(
                not problems,
                "echo with logprobs: the logprobs do not cover the echoed text",
                expected="legacy logprobs over prompt and completion, lining up with the text",
                received="; ".join(problems),
                exchange=exchange,
            )


@check(
    "COMPL-PROMPT-TOKENS",
    "a text prompt's prompt_tokens equals the served tokenizer's count",
    "usage.prompt_tokens of a text prompt equals what the server's own /tokenize counts for it "
    "with special tokens (vLLM add_special_tokens, llama.cpp add_special): a BOS counted twice "
    "or another tokenizer shows; not judged (an error) when the declared /tokenize gives no count",
    requires=("completions", "tokenize"),
)
def compl_prompt_tokens(ctx: CheckContext) -> None:
    # One body for both dialects, as TEXT-* send it, here asking for the specials a prompt gets.
    body = {
        "model": ctx.model,
        "prompt": COUNTED,
        "content": COUNTED,
        "add_special_tokens": True,
        "add_special": True,
        "parse_special": True,
    }
    tx = ctx.post(ctx.server_root + "/tokenize", body)
    data = tx.json() if tx.ok else None
    count = data.get("count") if isinstance(data, dict) else None
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not _count(count):
        count = len(tokens) if isinstance(tokens, list) and tokens else None
    if count is None:
        # tokenize is declared (required above): a /tokenize that errors is a broken declaration.
        raise CheckError(
            ctx.check_id,
            "not judged: the declared /tokenize gave no count",
            received=tx.describe(300),
            hint="fix /tokenize (it must answer 200 with count or tokens) or declare tokenize: false",
            exchange=tx,
        )
    ex = _complete(ctx, COUNTED, max_tokens=1)
    got = _prompt_tokens(ctx, ctx.ok_json(ex, "completion"), ex)
    ctx.expect(
        got == count,
        "prompt_tokens differs from the served tokenizer's count",
        expected=f"prompt_tokens {count} (/tokenize with special tokens)",
        received=f"prompt_tokens {got}",
        exchange=ex,
        hint="one token more: a BOS added twice"
        if got == count + 1
        else "the completions route counts with another tokenizer (or other specials) than /tokenize",
    )


# ---------------------------------------------------------------------------------------------
# COMPL-STREAM: the legacy stream, against the same request answered whole

STREAM_PROMPT = "The river ran past the stone and the garden"
STREAM_MAX_TOKENS = 12


def _stream(ctx: CheckContext, what: str, **params: Any) -> tuple[Exchange, StreamResult]:
    body: dict[str, Any] = {
        "model": ctx.model,
        "prompt": STREAM_PROMPT,
        "max_tokens": STREAM_MAX_TOKENS,
        "temperature": 0,
        "stream": True,
    }
    body.update(params)
    ex = ctx.ok_stream(ctx.post("/completions", body, stream=True), what)
    assert ex.stream is not None  # noqa: S101 - ok_stream guarantees it
    ctx.expect(
        bool(ex.stream.chunks),
        f"{what}: the stream carried no JSON chunks",
        expected="data: {...text_completion...} events, then data: [DONE]",
        received=ex.describe(600),
        exchange=ex,
    )
    return ex, ex.stream


def _framing(stream: StreamResult, indexes: set[int], usage_at: frozenset[int]) -> list[str]:
    """Where a legacy stream departs from its framing: [DONE] last, each choice a ``text``
    string, the indexes asked for and each with exactly one OpenAI finish_reason, no text after.
    A choice in an asked-for usage chunk (``usage_at``) that repeats a finish or has no text is
    left to the usage chunk's judgement (the deviation usage-chunk-has-choices)."""
    problems = [] if stream.done else ["no data: [DONE] at the end"]
    finishes: dict[int, list[tuple[int, Any]]] = {}
    late: list[str] = []
    for k, chunk in enumerate(stream.chunks):
        for choice in chunk.get("choices") or []:
            index = choice.get("index") if isinstance(choice, dict) else None
            text = choice.get("text") if isinstance(choice, dict) else None
            if k in usage_at and (
                not isinstance(text, str) or (isinstance(index, int) and finishes.get(index))
            ):
                continue
            if not isinstance(index, int) or not isinstance(text, str):
                problems.append(
                    f"chunk {k}: choice {body_snippet(choice, 120)} has no index and text string"
                )
                continue
            seen = finishes.setdefault(index, [])
            if seen and text:
                late.append(f"index {index} has text {text!r} in chunk {k}, after its finish")
            if choice.get("finish_reason") is not None:
                seen.append((k, choice["finish_reason"]))
    if set(finishes) != indexes:
        problems.append(f"choice indexes {sorted(finishes)}, not {sorted(indexes)}")
    for index, seen in sorted(finishes.items()):
        reasons = [r for _, r in seen]
        if len(seen) != 1 or reasons[0] not in FINISH_REASONS:
            problems.append(
                f"index {index}: finish_reason(s) {reasons} at chunks {[k for k, _ in seen]}"
            )
    return problems + late


def _expect_framing(
    ctx: CheckContext, ex: Exchange, stream: StreamResult, what: str, n: int, *, usage: bool = False
) -> None:
    usage_at = frozenset(
        k for k, c in enumerate(stream.chunks) if usage and isinstance(c.get("usage"), dict)
    )
    problems = _framing(stream, set(range(n)), usage_at)
    ctx.expect(
        not problems,
        f"{what}: the stream is not framed as the legacy API's",
        expected=f"text_completion chunks with choices[{{index, text, finish_reason}}] for "
        f"index(es) 0..{n - 1}, exactly one finish_reason in {sorted(FINISH_REASONS)} per index and "
        "no text after it, then data: [DONE]",
        received="; ".join(problems[:6]),
        exchange=ex,
        hint="the openai SDK's completions stream and batch clients key answers by index and stop "
        "reading an index at its finish_reason",
    )


def _stream_usage(
    ctx: CheckContext, ex: Exchange, stream: StreamResult, ns_usage: Any
) -> list[Defect]:
    """The include_usage chunk: one, the last, counts that add up and equal the non-streamed
    usage of the same text; its shape defects (which a profile may allow) are returned."""
    chunks = stream.chunks
    found = [k for k, c in enumerate(chunks) if isinstance(c.get("usage"), dict)]
    ctx.expect(
        bool(found) and found[-1] == len(chunks) - 1,
        "the include_usage chunk is missing or not last",
        expected='a last chunk {"choices": [], "usage": {...}} before [DONE]',
        received=f"usage in chunks {found[:5]} of {len(chunks)}; last: {body_snippet(chunks[-1], 300)}",
        exchange=ex,
        hint="clients that meter tokens from the legacy stream get nothing, or a usage they "
        "cannot tell from a choice",
    )
    usage = chunks[found[-1]]["usage"]
    names = ("prompt_tokens", "completion_tokens", "total_tokens")
    p, c, t = (usage.get(n) for n in names)
    want = tuple(ns_usage.get(n) for n in names) if isinstance(ns_usage, dict) else None
    ctx.expect(
        all(_count(v) for v in (p, c, t)) and p + c == t and (p, c, t) == want,
        "the streamed usage does not match the non-streamed usage of the same text",
        expected=f"prompt/completion/total tokens {want} (the non-streamed answer), total == "
        "prompt + completion",
        received=f"{(p, c, t)}: {body_snippet(usage, 200)}",
        exchange=ex,
        hint="the stream's token accounting differs from the non-streamed one (counting chunks, "
        "the finish chunk or a BOS)",
    )
    return usage_shape_defects(chunks, found)


def _first_finish(stream: StreamResult) -> Any:
    return next(
        (
            c.get("finish_reason")
            for chunk in stream.chunks
            for c in chunk.get("choices") or []
            if isinstance(c, dict) and c.get("finish_reason") is not None
        ),
        None,
    )


def _stop_in(text: str) -> str | None:
    """A 3-character stop string first found mid-text (no U+FFFD, not only whitespace)."""
    mid = len(text) // 2
    for start in [*range(mid, len(text) - 1), *range(mid - 1, 0, -1)]:
        stop = text[start : start + 3]
        if len(stop) >= 2 and stop.strip() and REPLACEMENT not in stop and text.find(stop) > 0:
            return stop
    return None


def _expect_same_text(ctx: CheckContext, ex: Exchange, joined: str, text: str) -> None:
    if joined == text:
        return
    again = _complete(ctx, STREAM_PROMPT, max_tokens=STREAM_MAX_TOKENS)
    _, again_choices = _answer(ctx, again, "second non-streamed completion")
    same = again_choices[0].get("text") == text
    ctx.fail(
        "the streamed text differs from the non-streamed text at temperature 0"
        if same
        else "temperature 0 is not deterministic here, so streamed and non-streamed texts differ",
        expected=f"the non-streamed text {text!r}",
        received=f"the stream's texts joined: {joined!r}"
        + ("" if same else f"; a second non-streamed answer: {again_choices[0].get('text')!r}"),
        exchange=ex,
        hint="the legacy streaming path detokenizes differently (dropped or repeated pieces)"
        if same
        else "greedy decoding is not greedy (sampling defaults override temperature)",
    )


def _expect_stop(ctx: CheckContext, text: str) -> list[Defect]:
    stop = _stop_in(text)
    if stop is None:
        return []  # no usable stop string in a gibberish text: the other parts still ran
    stops = [stop, "\n\n\n"]
    cut = min(p for p in (text.find(s) for s in stops) if p >= 0)
    ex, stream = _stream(ctx, f"streamed completion with stop {stops!r}", stop=stops)
    _expect_framing(ctx, ex, stream, "the stream with a stop list", 1)
    joined, finish = stream.text(0), _first_finish(stream)
    leaked = [s for s in stops if s in joined]
    ctx.expect(
        not leaked and joined == text[:cut] and finish == "stop",
        "the stream with a stop list "
        + ("shows a stop string" if leaked else "is not the text cut before the stop string"),
        expected=f"{text[:cut]!r} (the non-streamed text up to {stop!r}), no stop string in it, "
        "finish_reason 'stop'",
        received=f"the stream's texts joined: {joined!r}, finish_reason {finish!r}",
        exchange=ex,
        hint="hold back text that may begin a stop string until it is known not to, and end the "
        "stream before it; streamed stop lists are checked on the joined text, not per chunk",
    )
    return unasked_usage_defects(stream.chunks, "without stream_options", ex)


@check(
    "COMPL-STREAM",
    "a streamed legacy completion says what the whole answer says",
    f"at temperature 0 with max_tokens {STREAM_MAX_TOKENS}, the texts of a streamed /v1/completions "
    "answer join to the non-streamed text, with the same finish_reason; each index (n=2 where n "
    "is declared) gets exactly one finish_reason and no text after it, then data: [DONE]; with "
    "include_usage (where usage_in_stream is declared) the last chunk is the usage chunk with "
    "choices [] and the non-streamed counts; with a stop list taken from the text (where stop is "
    "declared) the stream is "
    "that text cut before the stop string, which never appears; a stream without "
    "stream_options has no chunk with a usage object; and with logprobs=2 (where logprobs is "
    "declared) every chunk with text carries legacy logprobs, whose lists joined over the stream "
    "hold COMPL-LOGPROBS's rules against the streamed text (text_offset counted from the start "
    "of the answer, not of each chunk)",
    requires=("completions", "streaming"),
)
def compl_stream(ctx: CheckContext) -> None:
    ns = _complete(ctx, STREAM_PROMPT, max_tokens=STREAM_MAX_TOKENS)
    data, choices = _answer(ctx, ns, "non-streamed completion")
    text, finish = choices[0].get("text"), choices[0].get("finish_reason")
    ctx.expect(
        isinstance(text, str),
        "the non-streamed completion has no text",
        expected="choices[0].text: str",
        received=body_snippet(choices[0]),
        exchange=ns,
    )
    assert isinstance(text, str)
    usage = bool(ctx.capabilities.get("usage_in_stream"))
    params: dict[str, Any] = {"stream_options": {"include_usage": True}} if usage else {}
    what = "streamed completion" + (" with include_usage" if usage else "")
    ex, stream = _stream(ctx, what, **params)
    _expect_framing(ctx, ex, stream, what, 1, usage=usage)
    _expect_same_text(ctx, ex, stream.text(0), text)
    streamed_finish = _first_finish(stream)
    ctx.expect(
        streamed_finish == finish,
        "the stream's finish_reason differs from the non-streamed one for the same text",
        expected=f"finish_reason {finish!r} (non-streamed)",
        received=f"streamed finish_reason {streamed_finish!r}",
        exchange=ex,
        hint="streaming clients cannot tell a cut answer ('length') from a complete one ('stop')",
    )
    defects = (
        _stream_usage(ctx, ex, stream, data.get("usage"))
        if usage
        else unasked_usage_defects(stream.chunks, "without stream_options", ex)
    )
    if ctx.capabilities.get("n"):
        ex_n, stream_n = _stream(ctx, "streamed completion with n=2", n=2, temperature=0.8, seed=7)
        _expect_framing(ctx, ex_n, stream_n, "the stream with n=2", 2)
        defects += unasked_usage_defects(stream_n.chunks, "without stream_options", ex_n)
    if ctx.capabilities.get("stop"):
        defects += _expect_stop(ctx, text)
    if ctx.capabilities.get("logprobs"):
        _expect_stream_logprobs(ctx)
    fail_first(ctx, defects, ex)


LEGACY_LISTS = ("tokens", "token_logprobs", "top_logprobs", "text_offset")


def _expect_stream_logprobs(ctx: CheckContext) -> None:
    """Streamed legacy logprobs: each text chunk's lists, joined over the stream, line up with
    the streamed text as the non-streamed ones do with theirs."""
    k = 2
    what = f"streamed completion with logprobs={k}"
    ex, stream = _stream(ctx, what, logprobs=k)
    joined: dict[str, list[Any]] = {n: [] for n in LEGACY_LISTS}
    bare: list[int] = []
    for i, chunk in enumerate(stream.chunks):
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            lp = choice.get("logprobs")
            if isinstance(lp, dict) and all(isinstance(lp.get(n), list) for n in LEGACY_LISTS):
                for n in LEGACY_LISTS:
                    joined[n] += lp[n]
            elif choice.get("text"):
                bare.append(i)
    ctx.expect(
        not bare,
        f"{what}: {len(bare)} chunk(s) carry text without legacy logprobs",
        expected="choices[].logprobs {tokens, token_logprobs, top_logprobs, text_offset} on every "
        "chunk with text",
        received=f"chunks {bare[:5]}: {body_snippet(stream.chunks[bare[0]] if bare else None, 300)}",
        exchange=ex,
        hint="a chat-shaped {'content': [...]} (or none) here is not the legacy form; streaming "
        "legacy clients lose these tokens' logprobs",
    )
    problems = legacy_problems(joined, stream.text(0), k, echo=False, finish=_first_finish(stream))
    ctx.expect(
        not problems,
        f"{what}: the streamed legacy logprobs do not line up with the streamed text",
        expected="the chunks' lists joined: one length, tokens spelling the text, text_offset "
        "stepping by each token's length from the start of the answer",
        received="; ".join(problems),
        exchange=ex,
        hint="count text_offset from the start of the choice's text across chunks (as the "
        "non-streamed answer does), not from the start of each chunk",
    )


# ---------------------------------------------------------------------------------------------
# COMPL-PROMPT-INVALID

BIG_ID = 100_000_000  # beyond any vocabulary (the largest have about 260,000 ids)
INVALID_PROMPTS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("empty-list", "prompt []", {"prompt": []}),
    ("negative-id", "a negative id in a token-id prompt", {"prompt": [100, -1, 101]}),
    (
        "negative-id-nested",
        "a negative id in a list of id lists",
        {"prompt": [[100, 101], [102, -5]]},
    ),
    ("out-of-vocab", f"id {BIG_ID}, beyond any vocabulary", {"prompt": [100, BIG_ID]}),
    ("missing", "no prompt field", {}),
)


def _send_invalid(ctx: CheckContext, body: dict[str, Any]) -> Exchange:
    timeout = min(ctx.target.timeout_s, 30.0)
    ex = ctx.post("/completions", body, timeout_s=timeout)
    if ex.error in ("read", "protocol") and ex.status is None:
        # the server closed its kept-alive connection after the previous error: once more, fresh
        ex = ctx.post("/completions", body, timeout_s=timeout)
    return ex


@check(
    "COMPL-PROMPT-INVALID",
    "an invalid legacy prompt is a client error",
    "a /v1/completions request whose prompt is [], holds a negative token id (flat or in a list "
    f"of id lists), holds id {BIG_ID} (beyond any vocabulary) or is missing gets a 4xx with an "
    "OpenAI error object; never a 5xx, a dropped connection or a 200 (422 is the deviation "
    "error-status-422). The valid token-id prompt [100, 101] is served first (a server that "
    "refuses every token-id prompt fails)",
    requires=("completions", "route-accepts:/completions"),
)
def compl_prompt_invalid(ctx: CheckContext) -> None:
    # A server refusing every token-id prompt refuses the bad ones too: that is not validation.
    valid = _send_invalid(ctx, {"model": ctx.model, "max_tokens": 4, "prompt": [100, 101]})
    ctx.ok_json(valid, "the valid token-id prompt [100, 101] (sent before the invalid ones)")
    sent = [
        (name, what, _send_invalid(ctx, {"model": ctx.model, "max_tokens": 4, **extra}))
        for name, what, extra in INVALID_PROMPTS
    ]
    # A refusal whose body never completed (a stall, a body past the size bound) is no answer.
    broken = [(n, w, ex) for n, w, ex in sent if ex.error or ex.status is None or ex.status >= 500]
    accepted = [
        (n, w, ex)
        for n, w, ex in sent
        if not ex.error and ex.status is not None and ex.status < 400
    ]
    for group, summary, hint in (
        (
            broken,
            "crashed the request (5xx or no answer)",
            "check prompt forms and token ids against the vocabulary before they reach the model; a "
            "5xx makes clients retry a request that can never work",
        ),
        (
            accepted,
            "were answered with a 2xx",
            "refuse an empty or out-of-range prompt: serving it hides the client's bug behind an "
            "answer generated from nothing (or from another token)",
        ),
    ):
        ctx.expect(
            not group,
            f"{len(group)} invalid prompt(s) {summary}",
            expected="4xx with an OpenAI error object for each",
            received="; ".join(f"{n} ({w}): {ex.describe(200)}" for n, w, ex in group),
            exchange=group[0][2] if group else None,
            hint=hint,
        )
    shapeless = [(n, w, ex, error_shape_problem(ex)) for n, w, ex in sent]
    shapeless = [s for s in shapeless if s[3][0] is not None]
    deviations = {s[3][1] for s in shapeless}
    ctx.expect(
        not shapeless,
        f"{len(shapeless)} of {len(sent)} refusals have no OpenAI error object",
        expected=ERROR_SHAPE,
        received="; ".join(f"{n} ({w}) -> HTTP {ex.status}: {p[0]}" for n, w, ex, p in shapeless),
        exchange=shapeless[0][2] if shapeless else None,
        deviation=deviations.pop() if len(deviations) == 1 else None,
        hint='return errors as {"error": {"message", "type", "param", "code"}} so SDKs can report them',
    )
    status_422 = [(n, w, ex) for n, w, ex in sent if ex.status == 422]
    ctx.expect(
        not status_422,
        f"{len(status_422)} invalid prompt(s) answered 422",
        expected="400",
        received="; ".join(f"{n} ({w}): {ex.describe(200)}" for n, w, ex in status_422),
        exchange=status_422[0][2] if status_422 else None,
        deviation="error-status-422",
        hint="the OpenAI API answers invalid requests with 400 invalid_request_error",
    )
