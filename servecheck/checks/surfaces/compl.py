"""COMPL-*: the legacy /v1/completions API beyond its shape (CHAT-COMPLETIONS checks that).

Clients that score or batch text (evaluation harnesses, the openai SDK's ``completions``) lean
on what the chat route does not have: a list of prompts answered in one request, prompts given
as token ids, ``echo``, and logprobs in the legacy shape (``tokens``, ``token_logprobs``,
``top_logprobs``, ``text_offset``).

Tiny test models answer random tokens, and a token that is part of a UTF-8 character decodes
alone as U+FFFD, so where logprobs tokens are compared with the text a run of U+FFFD stands for
whatever characters the text has there. Two legal differences are accepted: a first token
without a logprob that the text does not show (a BOS before an echoed prompt, as vLLM sends),
and a last token that the text does not show on a 'stop' finish (the end-of-sequence token).
"""

from __future__ import annotations

import re
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.registry import check
from servecheck.checks.surfaces.chat import FINISH_REASONS, _choices, served_token_ids
from servecheck.checks.surfaces.stream import REPLACEMENT
from servecheck.client.http import Exchange

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
    "by each token's length",
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
    "or another tokenizer shows; skipped when /tokenize gives no count",
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
        raise CheckSkipped(f"COMPL-PROMPT-TOKENS: /tokenize gave no count: {tx.describe(200)}")
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
