"""CHAT-*: non-streaming chat completions (and legacy completions)."""

from __future__ import annotations

import re
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.preconditions import CheckError
from servecheck.checks.registry import check
from servecheck.client.http import Exchange

FINISH_REASONS = {"stop", "length", "tool_calls", "content_filter", "function_call"}
LONG_PROMPT = "Write a long story about a river, a stone and a garden. Use many sentences."


def _choices(ctx: CheckContext, data: dict[str, Any], ex: Exchange) -> list[dict[str, Any]]:
    choices = data.get("choices")
    if (
        not isinstance(choices, list)
        or not choices
        or not all(isinstance(c, dict) for c in choices)
    ):
        ctx.fail(
            "the response has no choices",
            expected="a non-empty choices list",
            received=body_snippet(data),
            exchange=ex,
        )
    return choices


def _content(choice: dict[str, Any]) -> str:
    message = choice.get("message") or {}
    content = message.get("content")
    return content if isinstance(content, str) else ""


def shape_problems(data: dict[str, Any], *, obj: str = "chat.completion") -> list[str]:
    """Where a completion body departs from the OpenAI shape (empty when it conforms)."""
    problems = []
    if not isinstance(data.get("id"), str) or not data.get("id"):
        problems.append(f"id must be a non-empty string, got {data.get('id')!r}")
    if data.get("object") != obj:
        problems.append(f"object must be {obj!r}, got {data.get('object')!r}")
    created = data.get("created")
    if not isinstance(created, int) or isinstance(created, bool):
        problems.append(f"created must be an integer (unix seconds), got {created!r}")
    if not isinstance(data.get("model"), str):
        problems.append(f"model must be a string, got {data.get('model')!r}")
    for i, choice in enumerate(data.get("choices") or []):
        if not isinstance(choice, dict):
            problems.append(f"choices[{i}] is not an object")
            continue
        if choice.get("index") != i:
            problems.append(f"choices[{i}].index is {choice.get('index')!r}")
        if choice.get("finish_reason") not in FINISH_REASONS:
            problems.append(
                f"choices[{i}].finish_reason {choice.get('finish_reason')!r} is not one of {sorted(FINISH_REASONS)}"
            )
        if obj == "chat.completion":
            message = choice.get("message")
            if not isinstance(message, dict) or message.get("role") != "assistant":
                problems.append(
                    f"choices[{i}].message must be an object with role 'assistant', got {body_snippet(message, 120)}"
                )
            elif not isinstance(message.get("content"), str | None):
                problems.append(f"choices[{i}].message.content must be a string or null")
        elif not isinstance(choice.get("text"), str):
            problems.append(f"choices[{i}].text must be a string")
    return problems


@check(
    "CHAT-SHAPE",
    "a chat completion has the OpenAI shape",
    "the body validates against the openai SDK's ChatCompletion type and has id, object 'chat.completion', integer created, "
    "model, choices[].message with role assistant and a finish_reason from the OpenAI set",
)
def chat_shape(ctx: CheckContext) -> None:
    from openai.types.chat import ChatCompletion
    from pydantic import ValidationError

    ex = ctx.chat("Say hello.", max_tokens=8, temperature=0)
    data = ctx.ok_json(ex, "chat completion")
    _choices(ctx, data, ex)
    problems = shape_problems(data)
    try:
        ChatCompletion.model_validate(data)
    except ValidationError as exc:
        problems += [
            f"openai SDK: {'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
            for e in exc.errors()[:5]
        ]
    ctx.expect(
        not problems,
        "the response departs from the OpenAI chat.completion shape",
        expected="the OpenAI chat.completion object",
        received="; ".join(problems),
        exchange=ex,
    )


@check(
    "CHAT-USAGE",
    "usage counts add up",
    "usage.prompt_tokens, completion_tokens and total_tokens are non-negative integers and prompt + completion == total",
)
def chat_usage(ctx: CheckContext) -> None:
    ex = ctx.chat("Say hello.", max_tokens=8, temperature=0)
    data = ctx.ok_json(ex, "chat completion")
    usage = data.get("usage")
    if not isinstance(usage, dict):
        ctx.fail(
            "the response has no usage object",
            expected="usage {prompt_tokens, completion_tokens, total_tokens}",
            received=body_snippet(data),
            exchange=ex,
        )
    p, c, t = (usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (p, c, t)):
        ctx.fail(
            "usage counts are not non-negative integers",
            expected="three integers >= 0",
            received=body_snippet(usage),
            exchange=ex,
        )
    p, c, t = int(p), int(c), int(t)  # type: ignore[arg-type]  # checked just above
    ctx.expect(
        p + c == t,
        "usage.total_tokens is not prompt_tokens + completion_tokens",
        expected=f"total_tokens == {p} + {c} = {p + c}",
        received=f"total_tokens = {t}",
        exchange=ex,
        hint="billing and capacity reports built on usage will be wrong",
    )
    ctx.expect(
        p > 0,
        "usage.prompt_tokens is 0 for a non-empty prompt",
        expected="prompt_tokens > 0",
        received=body_snippet(usage),
        exchange=ex,
    )


# Usage counts by where they sit (None: usage itself). Each is an integer >= 0 or null; the
# first three are required. cache_read_input_tokens / cache_creation_input_tokens are where
# gateways that speak Anthropic's usage too (LiteLLM) put the cached share.
USAGE_COUNTS: dict[str | None, tuple[str, ...]] = {
    None: (
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ),
    "prompt_tokens_details": ("cached_tokens", "audio_tokens"),
    "completion_tokens_details": (
        "reasoning_tokens",
        "audio_tokens",
        "accepted_prediction_tokens",
        "rejected_prediction_tokens",
    ),
}
# (part, where it sits, the whole it must not exceed)
_WITHIN = (
    ("cached_tokens", "prompt_tokens_details", "prompt_tokens"),
    ("cache_read_input_tokens", None, "prompt_tokens"),
    ("audio_tokens", "prompt_tokens_details", "prompt_tokens"),
    ("reasoning_tokens", "completion_tokens_details", "completion_tokens"),
    ("audio_tokens", "completion_tokens_details", "completion_tokens"),
)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def usage_detail_problems(usage: Any) -> list[str]:
    """Where a usage object's counts are not counts or exceed their totals (empty: none)."""
    if not isinstance(usage, dict):
        return [f"usage is {body_snippet(usage, 120)}, not an object"]
    problems = [
        f"{k} = {usage.get(k)!r}, not an integer >= 0"
        for k in ("prompt_tokens", "completion_tokens", "total_tokens")
        if not _is_count(usage.get(k))
    ]
    for group, keys in USAGE_COUNTS.items():
        where = usage if group is None else usage.get(group)
        if where is None:
            continue
        if not isinstance(where, dict):
            problems.append(f"{group} = {body_snippet(where, 80)}, not an object or null")
            continue
        problems += [
            f"{group + '.' if group else ''}{k} = {where[k]!r}, not an integer >= 0 or null"
            for k in keys
            if where.get(k) is not None and not _is_count(where[k])
        ]
    if problems:
        return problems
    p, c, t = (usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
    if p + c != t:
        problems.append(f"total_tokens {t} != prompt_tokens {p} + completion_tokens {c}")
    for part, group, whole in _WITHIN:
        where = usage if group is None else usage.get(group) or {}
        value = where.get(part)
        if value is not None and value > usage[whole]:
            name = f"{group}.{part}" if group else part
            problems.append(f"{name} {value} > {whole} {usage[whole]}")
    return problems


@check(
    "CHAT-USAGE-DETAILS",
    "usage details are counts within their totals, streamed or not",
    "every usage count (prompt/completion/total_tokens, prompt_tokens_details.cached_tokens and "
    "audio_tokens, completion_tokens_details.reasoning_tokens ..., cache_read_input_tokens) is an "
    "integer >= 0 or null, total == prompt + completion, cached_tokens and "
    "cache_read_input_tokens <= prompt_tokens, reasoning_tokens <= completion_tokens; the same in "
    "the streamed include_usage chunk (where streaming and usage_in_stream are declared)",
)
def chat_usage_details(ctx: CheckContext) -> None:
    prompt = "Say hello to the river and to the stone."
    ctx.chat(prompt, max_tokens=8, temperature=0)  # the repeat may then hit a prefix cache
    ex = ctx.chat(prompt, max_tokens=8, temperature=0)
    answers = [("non-streamed", ex, ctx.ok_json(ex, "chat completion").get("usage"))]
    if ctx.capabilities.get("streaming") and ctx.capabilities.get("usage_in_stream"):
        sx = ctx.ok_stream(
            ctx.stream_chat(prompt, usage=True, max_tokens=8, temperature=0), "streamed chat"
        )
        assert sx.stream is not None
        answers.append(("streamed", sx, sx.stream.usage()))
    for what, exchange, usage in answers:
        problems = usage_detail_problems(usage)
        ctx.expect(
            not problems,
            f"{what}: usage details are not counts within their totals",
            expected="integers >= 0 (or null), total = prompt + completion, each detail within its total",
            received="; ".join(problems[:4]) + f"; usage {body_snippet(usage, 300)}",
            exchange=exchange,
            hint="cache-hit and reasoning shares computed from these exceed 100%",
        )


@check(
    "CHAT-MAX-TOKENS",
    "max_tokens is honoured and a cut says 'length'",
    "with max_tokens=5 on a prompt that wants a long answer, completion_tokens <= 5, and an answer cut at the limit "
    "has finish_reason 'length'",
)
def chat_max_tokens(ctx: CheckContext) -> None:
    limit = 5
    ex = ctx.chat(LONG_PROMPT, max_tokens=limit, temperature=0)
    data = ctx.ok_json(ex, "chat completion")
    choice = _choices(ctx, data, ex)[0]
    usage = data.get("usage") or {}
    tokens = usage.get("completion_tokens")
    if not isinstance(tokens, int):
        ctx.fail(
            "no usage.completion_tokens to judge max_tokens by",
            expected="usage.completion_tokens",
            received=body_snippet(data),
            exchange=ex,
        )
    ctx.expect(
        tokens <= limit,
        "the output is longer than max_tokens",
        expected=f"completion_tokens <= {limit}",
        received=f"completion_tokens = {tokens}, text {_content(choice)[:200]!r}",
        exchange=ex,
        hint="max_tokens is ignored or overridden by a server default; clients and cost limits depend on it",
    )
    if tokens == limit:
        ctx.expect(
            choice.get("finish_reason") == "length",
            "an output cut at max_tokens does not say finish_reason 'length'",
            expected="finish_reason 'length'",
            received=f"finish_reason {choice.get('finish_reason')!r}",
            exchange=ex,
            hint="clients cannot tell a truncated answer from a complete one",
        )


@check(
    "CHAT-STOP",
    "stop sequences are honoured",
    "at temperature 0, a stop string taken from the unconstrained answer ends the output before it, with finish_reason "
    "'stop'; the same request sent again without stop is not cut before the stop string (stop strings do not "
    "outlive their request)",
    requires=("stop",),
    model_dependent=True,
)
def chat_stop(ctx: CheckContext) -> None:
    prompt = "List some words about rivers, stones and gardens."
    budget = ctx.answer_budget(24)
    first = ctx.chat(prompt, temperature=0, seed=7, **budget)
    text = _content(_choices(ctx, ctx.ok_json(first, "chat completion"), first)[0])
    # A stop string must be plain text the engine can match: tiny models emit U+FFFD for partial
    # UTF-8 and long junk "words", so take four ASCII letters/digits from a run past the start.
    runs = [m for m in re.finditer(r"[A-Za-z0-9]{4,}", text) if m.start() >= 1]
    ctx.expect(
        len(runs) >= 1,
        "the unconstrained answer has no plain text to use as a stop string",
        expected="four ASCII letters or digits in a row after the first character of a 24-token answer",
        received=repr(text),
        exchange=first,
    )
    stop_word = runs[len(runs) // 2].group()[:4]
    ex = ctx.chat(prompt, temperature=0, seed=7, stop=[stop_word], **budget)
    data = ctx.ok_json(ex, "chat completion with stop")
    choice = _choices(ctx, data, ex)[0]
    out = _content(choice)
    ctx.expect(
        stop_word not in out,
        f"the output contains the stop string {stop_word!r}",
        expected=f"output ends before {stop_word!r}",
        received=repr(out),
        exchange=ex,
    )
    ctx.expect(
        choice.get("finish_reason") == "stop",
        "a stop-sequence end does not say finish_reason 'stop'",
        expected="finish_reason 'stop'",
        received=f"finish_reason {choice.get('finish_reason')!r}, output {out!r}",
        exchange=ex,
    )
    # Cut where the stop string would begin: a server that kept the stop list answers a prefix of
    # the first answer that never reaches it. A server that merely samples differently does not.
    again = ctx.chat(prompt, temperature=0, seed=7, **budget)
    later = _content(_choices(ctx, ctx.ok_json(again, "the same request without stop"), again)[0])
    ctx.expect(
        stop_word in later or not text.startswith(later),
        "a stop string outlived its request: the next request without stop was cut at it",
        expected=f"the full answer again, {text!r} (it holds {stop_word!r})",
        received=f"{later!r}, cut before {stop_word!r}",
        exchange=again,
        hint="stop strings are kept in state shared between requests (a reused sampling-params "
        "object or a slot's settings); build them from each request alone",
    )


@check(
    "CHAT-N",
    "n returns n choices",
    "with n=2 the response has exactly two choices with index 0 and 1",
    requires=("n",),
)
def chat_n(ctx: CheckContext) -> None:
    ex = ctx.chat("Say hello.", max_tokens=6, n=2, temperature=0.8, seed=3)
    data = ctx.ok_json(ex, "chat completion with n=2")
    choices = _choices(ctx, data, ex)
    ctx.expect(
        len(choices) == 2 and {c.get("index") for c in choices} == {0, 1},
        "n=2 did not return two indexed choices",
        expected="2 choices, index 0 and 1",
        received=f"{len(choices)} choice(s), indexes {[c.get('index') for c in choices]}",
        exchange=ex,
    )


def _expect_repeatable(
    ctx: CheckContext,
    prompt: str,
    params: dict[str, Any],
    differ: str,
    *,
    hint: str = "",
    deviation: str | None = None,
) -> None:
    """Send the same 12-token request twice and expect the same text; ``differ`` is the failure."""
    texts = []
    for _ in range(2):
        last = ctx.chat(prompt, max_tokens=12, **params)
        texts.append(_content(_choices(ctx, ctx.ok_json(last, "chat completion"), last)[0]))
    ctx.expect(
        texts[0] == texts[1],
        differ,
        expected=f"the same text twice: {texts[0]!r}",
        received=f"{texts[1]!r}",
        exchange=last,
        hint=hint,
        deviation=deviation,
    )


@check(
    "CHAT-DETERMINISTIC",
    "temperature 0 is repeatable",
    "two identical requests at temperature 0 return the same text",
)
def chat_deterministic(ctx: CheckContext) -> None:
    _expect_repeatable(
        ctx,
        "Name three colours.",
        {"temperature": 0},
        "two temperature-0 answers differ",
        hint="greedy decoding is not greedy here (sampling defaults override temperature, or batching changes numerics)",
    )


@check(
    "CHAT-SEED",
    "seed makes sampling repeatable",
    "two identical requests at temperature 1 with the same seed return the same text",
    requires=("seed",),
)
def chat_seed(ctx: CheckContext) -> None:
    _expect_repeatable(
        ctx,
        "Name three animals.",
        {"temperature": 1.0, "seed": 1234},
        "two seeded answers differ",
        deviation="seed-not-supported",
    )


# Many plausible continuations and a dozen tokens: a real model at temperature 1 gives four
# seeds four texts (equal texts for all four would take a near-deterministic model), a tiny
# random-weight one wildly different ones.
VARIES_PROMPT = "Write one sentence about anything you like, using unusual words."
VARIES_SEEDS = (11, 22, 33, 44)


@check(
    "CHAT-SEED-VARIES",
    "different seeds give different samples",
    f"at temperature 1, {len(VARIES_SEEDS)} requests that differ only in their seed give at least two "
    "different texts (a server that pins every seed to one value answers them all alike)",
    requires=("seed",),
)
def chat_seed_varies(ctx: CheckContext) -> None:
    texts: dict[int, str] = {}
    last: Exchange | None = None
    for seed in VARIES_SEEDS:
        last = ctx.chat(
            VARIES_PROMPT, temperature=1.0, top_p=1.0, seed=seed, **ctx.answer_budget(16)
        )
        texts[seed] = _content(_choices(ctx, ctx.ok_json(last, f"seed {seed}"), last)[0])
    ctx.expect(
        len(set(texts.values())) >= 2,
        f"{len(VARIES_SEEDS)} different seeds gave one and the same text",
        expected="at least two different texts at temperature 1 across seeds "
        + ", ".join(map(str, VARIES_SEEDS)),
        received=f"every seed: {next(iter(texts.values()))!r}",
        exchange=last,
        hint="the request's seed is replaced by a fixed one (a server-wide seed applied to every "
        "request, a gateway cache keyed on the prompt alone): clients that sample several "
        "candidates with different seeds get copies",
    )


@check(
    "CHAT-COMPLETIONS",
    "legacy /v1/completions works",
    "POST /v1/completions with a prompt returns object 'text_completion' with choices[].text and usage",
    requires=("completions",),
)
def chat_completions_legacy(ctx: CheckContext) -> None:
    ex = ctx.post(
        "/completions",
        {"model": ctx.model, "prompt": "Once upon a time", "max_tokens": 6, "temperature": 0},
    )
    data = ctx.ok_json(ex, "legacy completion")
    _choices(ctx, data, ex)
    problems = shape_problems(data, obj="text_completion")
    ctx.expect(
        not problems,
        "the legacy completion departs from the OpenAI text_completion shape",
        expected="object 'text_completion' with choices[].text",
        received="; ".join(problems),
        exchange=ex,
    )


@check(
    "CHAT-LOGPROBS",
    "logprobs are returned when asked",
    "with logprobs=true and top_logprobs=2, choices[0].logprobs.content lists tokens with numeric logprob <= 0",
    requires=("logprobs",),
)
def chat_logprobs(ctx: CheckContext) -> None:
    budget = ctx.answer_budget(4)
    ex = ctx.chat("Say hello.", temperature=0, logprobs=True, top_logprobs=2, **budget)
    data = ctx.ok_json(ex, "chat completion with logprobs")
    choice = _choices(ctx, data, ex)[0]
    ctx.not_judged_if_thinking(choice, "the answer with logprobs", ex)
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(content, list) or not content:
        ctx.fail(
            "no logprobs in the answer",
            expected="choices[0].logprobs.content: [...]",
            received=body_snippet(choice),
            exchange=ex,
        )
    bad = [
        e
        for e in content
        if not (
            isinstance(e, dict)
            and isinstance(e.get("token"), str)
            and isinstance(e.get("logprob"), int | float)
            and e["logprob"] <= 0
        )
    ]
    ctx.expect(
        not bad,
        "logprob entries are malformed",
        expected="{token: str, logprob: number <= 0}",
        received=body_snippet(bad[:3]),
        exchange=ex,
    )


def served_token_ids(ctx: CheckContext, text: str) -> tuple[list[int] | None, Exchange]:
    """The server's own /tokenize ids for ``text`` (no special tokens), or None, and the exchange."""
    # One body for both dialects: vLLM reads prompt (and add_special_tokens), llama.cpp content.
    body = {"model": ctx.model, "prompt": text, "content": text, "add_special_tokens": False}
    ex = ctx.post(ctx.server_root + "/tokenize", body)
    data = ex.json() if ex.ok else None
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if isinstance(tokens, list) and tokens and all(isinstance(t, int) for t in tokens):
        return tokens, ex
    return None, ex


BIAS_PROMPT = "Name three colours."
# Without /tokenize no id is known to be the answer's; id 0 exists in every vocabulary, so a
# bias on it shows whether logit_bias is accepted at all.
ANY_TOKEN = 0


BIAS = -100  # the strongest bias the API takes: "should result in a ban"


def _ids_asked(ctx: CheckContext) -> dict[str, Any]:
    return {"logprobs": True, "top_logprobs": 2} if ctx.capabilities.get("logprobs") else {}


def _lead_nats(ex: Exchange) -> float | None:
    """How far the first token's logprob leads the runner-up's, where the answer shows both."""
    data = ex.json() if ex.ok else None
    try:
        tops = data["choices"][0]["logprobs"]["content"][0]["top_logprobs"]  # type: ignore[index]
        values = sorted((float(t["logprob"]) for t in tops), reverse=True)
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return values[0] - values[1] if len(values) >= 2 else None


def _first_token_id(ex: Exchange) -> int | None:
    """The first generated token's id where the answer's logprobs name it (llama.cpp's ``id``)."""
    data = ex.json() if ex.ok else None
    try:
        entry = data["choices"][0]["logprobs"]["content"][0]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        return None
    value = entry.get("id") if isinstance(entry, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _first_token_text(ctx: CheckContext, ex: Exchange, what: str) -> str:
    return _content(_choices(ctx, ctx.ok_json(ex, what), ex)[0])


@check(
    "CHAT-LOGIT-BIAS",
    "logit_bias -100 bans a token",
    "at temperature 0, the one-token answer's token id (the server's /tokenize of it) biased -100 is not the "
    "first token of the answer any more; without /tokenize only that logit_bias is accepted (200) is checked, "
    "then the check skips (as when the answer does not /tokenize back to one id); a declared /tokenize "
    "that errors is not judged (an error). A refused logit_bias (4xx, 501) fails. Where the answer's "
    "logprobs name the token id (llama.cpp), that id is banned and compared; a first token that leads "
    "the next by more than 100 nats (a wired model) is not judged",
)
def chat_logit_bias(ctx: CheckContext) -> None:
    # One token is the point: never grown, only asked without thinking where the target can.
    # With logprobs the answer may name its token's id (llama.cpp does): the id is then banned
    # and compared, since several ids can spell one text ("\n" as a piece and as a byte).
    budget = {**ctx.answer_budget(1, grow=False), **_ids_asked(ctx)}
    first = ctx.chat(BIAS_PROMPT, temperature=0, **budget)
    token = _first_token_text(ctx, first, "one-token chat completion")
    banned: int | None = _first_token_id(first)
    why_not = "the target declares no tokenize capability"
    if banned is None and ctx.capabilities.get("tokenize"):
        ids, tx = served_token_ids(ctx, token) if token else (None, first)
        if ids is None and token:
            raise CheckError(
                ctx.check_id,
                f"not judged: the declared /tokenize gave no token ids for {token!r}",
                received=tx.describe(300),
                hint="fix /tokenize (it must answer 200 with tokens) or declare tokenize: false",
                exchange=tx,
            )
        if ids is not None and len(ids) == 1:
            banned = ids[0]
        else:
            why_not = (
                f"the one-token answer {token!r} does not /tokenize back to one id "
                f"({ids if ids is not None else tx.describe(160)})"
            )
    bias = {str(ANY_TOKEN if banned is None else banned): BIAS}
    ex = ctx.chat(BIAS_PROMPT, temperature=0, logit_bias=bias, **budget)
    ctx.expect(
        not ex.error and ex.ok,
        "a request with logit_bias was not served",
        expected=f"HTTP 200 for logit_bias {bias}",
        received=ex.describe(300),
        exchange=ex,
        deviation="logit-bias-unsupported",
        hint="clients that suppress tokens (banned words, classifiers that force a label) get an "
        "error for every request; implement logit_bias or answer 400 saying it is unsupported",
    )
    again = _first_token_text(ctx, ex, "chat completion with logit_bias")
    again_id = _first_token_id(ex)
    lead = _lead_nats(first)
    if banned is not None and lead is not None and lead >= -BIAS:
        # A model wired to one token (the tiny reasoning model's "\n" after </think>: every other
        # logprob -3.4e38) keeps it under any bias of -100: the bias cannot be seen there.
        raise CheckSkipped(
            f"CHAT-LOGIT-BIAS: not judged: the first token {token!r} leads the next by "
            f"{lead:.3g} nats, more than a bias of {BIAS} can take away"
        )
    if banned is not None and again_id is not None:
        again = token if again_id == banned else f"{again} (id {again_id})"
    elif banned is not None and not token.strip():
        why_not = (
            f"the one-token answer {token!r} is whitespace, which several token ids spell, and "
            "the answer names no token id (logprobs) to tell them apart"
        )
        banned = None
    if banned is None:
        raise CheckSkipped(
            f"CHAT-LOGIT-BIAS: logit_bias is accepted, but its effect cannot be checked: {why_not}"
        )
    ctx.expect(
        again != token,
        f"the token biased -100 ({banned}, {token!r}) is still the first token at temperature 0",
        expected=f"a first token other than {token!r}",
        received=f"{again!r} with logit_bias {bias}",
        exchange=ex,
        hint="logit_bias is accepted and ignored: apply it to the logits before sampling "
        "(and to the greedy path at temperature 0)",
    )


STOP_SPAN_PROMPT = "List some words about rivers, stones and gardens."
_SPAN_CHARS = re.compile(r"[A-Za-z0-9 ]{4}")


def _streamed_pieces(ctx: CheckContext, ex: Exchange, what: str) -> tuple[list[str], Any]:
    """choice 0's content deltas, in order, and its (last) finish_reason, from a stream."""
    ctx.ok_stream(ex, what)
    pieces, finish = [], None
    for chunk in ex.stream.chunks if ex.stream is not None else []:
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            content = delta.get("content") if isinstance(delta, dict) else None
            pieces += [content] if isinstance(content, str) and content else []
            finish = choice.get("finish_reason") or finish
    return pieces, finish


def spanning_stop(pieces: list[str]) -> str | None:
    """A stop string across a token boundary: the last two characters of one streamed piece and
    the first two of the next, plain text, first found in the answer at that boundary."""
    text, at, found = "".join(pieces), 0, []
    for k in range(len(pieces) - 1):
        at += len(pieces[k])
        stop = pieces[k][-2:] + pieces[k + 1][:2]
        spans = len(pieces[k]) >= 2 and len(pieces[k + 1]) >= 2 and stop.strip() == stop
        if k >= 1 and spans and _SPAN_CHARS.fullmatch(stop) and text.find(stop) == at - 2:
            found.append(stop)
    return found[len(found) // 2] if found else None


@check(
    "CHAT-STOP-BOUNDARY",
    "a stop string across a token boundary is honoured, streamed or not",
    "at temperature 0, a stop string made of the end of one streamed token and the start of the "
    "next (so no single token holds it) never appears in the output, non-streamed or streamed, "
    "and the output ends with finish_reason 'stop'",
    requires=("stop", "streaming"),
)
def chat_stop_boundary(ctx: CheckContext) -> None:
    params: dict[str, Any] = {**ctx.answer_budget(24), "temperature": 0, "seed": 7}
    first = ctx.stream_chat(STOP_SPAN_PROMPT, usage=False, **params)
    pieces, _ = _streamed_pieces(ctx, first, "streamed chat completion")
    stop = spanning_stop(pieces)
    if stop is None:
        raise CheckError(
            ctx.check_id,
            "the unconstrained answer has no token boundary with plain text on both sides",
            received=repr(pieces[:24]),
            hint="a model whose tokens are single characters or junk cannot be asked this",
            exchange=first,
        )
    plain = ctx.chat(STOP_SPAN_PROMPT, stop=[stop], **params)
    choice = _choices(ctx, ctx.ok_json(plain, "chat completion with stop"), plain)[0]
    streamed = ctx.stream_chat(STOP_SPAN_PROMPT, usage=False, stop=[stop], **params)
    s_pieces, s_finish = _streamed_pieces(ctx, streamed, "streamed chat completion with stop")
    answers = [
        ("non-streamed", _content(choice), choice.get("finish_reason"), plain),
        ("streamed", "".join(s_pieces), s_finish, streamed),
    ]
    for how, out, finish, ex in answers:
        ctx.expect(
            stop not in out and finish == "stop",
            f"the {how} output runs through the stop string {stop!r}, which spans two tokens",
            expected=f"output ending before {stop!r} (tokens {stop[:2]!r} | {stop[2:]!r}), "
            "finish_reason 'stop'",
            received=f"{out!r}, finish_reason {finish!r}",
            exchange=ex,
            hint="match stop strings on the detokenized text, across token boundaries (and hold "
            "back a stream's last characters until they cannot begin a stop string), not "
            "token by token",
        )


MIN_TOKENS_MORE = 8  # min_tokens asked: this many past where the stop string ended the answer
MIN_TOKENS_BUDGET = 48  # max_tokens: room for a reasoning model's thinking, then the answer
_EARLY_STOP = re.compile(r"[A-Za-z0-9]{2}")


@check(
    "CHAT-MIN-TOKENS",
    "min_tokens is honoured or refused, never ignored",
    f"at temperature 0 (max_tokens {MIN_TOKENS_BUDGET}), a stop string taken from the start of "
    f"the unconstrained answer ends it after C tokens; with min_tokens C+{MIN_TOKENS_MORE} added "
    "the same request is refused with a 4xx, or answered with at least C+"
    f"{MIN_TOKENS_MORE} completion tokens (vLLM holds stop strings and the end of sequence back "
    "until then; a reasoning model's thinking counts); a 200 that stops sooner ignored min_tokens",
    requires=("min_tokens", "stop"),
)
def chat_min_tokens(ctx: CheckContext) -> None:
    # On a reasoning target the answer's C tokens include the thinking; the budget has room.
    params: dict[str, Any] = {**ctx.answer_budget(MIN_TOKENS_BUDGET), "temperature": 0, "seed": 7}
    budget = int(params.get("max_tokens") or MIN_TOKENS_BUDGET)
    first = ctx.chat(STOP_SPAN_PROMPT, **params)
    text = _content(_choices(ctx, ctx.ok_json(first, "chat completion"), first)[0])
    match = _EARLY_STOP.search(text)
    stop = match.group() if match else ""
    stopped = ctx.chat(STOP_SPAN_PROMPT, stop=[stop], **params) if stop else first
    early = ctx.ok_json(stopped, "chat completion with stop").get("usage") or {}
    count = early.get("completion_tokens")
    floor = count + MIN_TOKENS_MORE if isinstance(count, int) else budget + 1
    if not stop or floor > budget - MIN_TOKENS_MORE:
        raise CheckError(
            ctx.check_id,
            "no stop string from the answer ends it early enough to ask min_tokens past it",
            received=f"answer {text[:120]!r}; with stop {stop!r}: usage {body_snippet(early, 200)}",
            hint="min_tokens is judged where a stop string would end the answer before it",
            exchange=stopped,
        )
    ex = ctx.chat(STOP_SPAN_PROMPT, stop=[stop], min_tokens=floor, **params)
    if ex.status is not None and 400 <= ex.status < 500:
        return  # refused: a client learns that min_tokens is not served
    data = ctx.ok_json(ex, "chat completion with min_tokens")
    choice = _choices(ctx, data, ex)[0]
    got = (data.get("usage") or {}).get("completion_tokens")
    ctx.expect(
        isinstance(got, int) and (got >= floor or choice.get("finish_reason") == "length"),
        "min_tokens was accepted and ignored",
        expected=f"at least {floor} completion tokens (min_tokens {floor}; the stop string "
        f"{stop!r} ended the same request after {count}), or a 4xx",
        received=f"200 with completion_tokens {got}, finish_reason "
        f"{choice.get('finish_reason')!r}: {_content(choice)[:120]!r}",
        exchange=ex,
        hint="apply min_tokens (suppress the end of sequence and stop strings until it is reached), "
        "or refuse the field with a 400; accepting and ignoring it is what clients cannot see",
    )
