"""Synthetic prompts of a target token length, made locally (no dataset downloads).

Text is a seeded stream of common English words, so it tokenizes like ordinary prose and the
same seed gives the same prompt. Lengths are hit in one of two ways, and the method is recorded
(``PromptSet.method``) so a report says how much to trust the prompt lengths:

* ``tokenize:vllm`` / ``tokenize:llamacpp`` / ``tokenize:reference``: the target's own
  ``/tokenize`` counts the tokens (vLLM: ``POST {root}/tokenize {"model", "prompt"}`` ->
  ``{"count"}``; llama.cpp: ``POST {root}/tokenize {"content"}`` -> ``{"tokens": [...]}``), and
  the word count is corrected until the count is within 2 % (at most four round trips);
* ``approx:chars-per-token=4.0``: otherwise, about four characters of English per token (the
  usual rule of thumb for BPE tokenizers on English). Expect +-25 % per model.

Prompts are made once per run before any load is sent; the token counts the server reports
(``usage.prompt_tokens``) are recorded per request anyway.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

CHARS_PER_TOKEN = 4.0
APPROX_METHOD = f"approx:chars-per-token={CHARS_PER_TOKEN}"

_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "his",
    "her",
    "an",
    "were",
    "are",
    "which",
    "this",
    "be",
    "or",
    "has",
    "had",
    "not",
    "but",
    "first",
    "one",
    "their",
    "its",
    "new",
    "after",
    "who",
    "they",
    "have",
    "two",
    "been",
    "other",
    "when",
    "there",
    "all",
    "during",
    "into",
    "school",
    "time",
    "may",
    "years",
    "more",
    "most",
    "only",
    "over",
    "city",
    "some",
    "world",
    "would",
    "where",
    "later",
    "up",
    "such",
    "used",
    "many",
    "can",
    "state",
    "about",
    "national",
    "out",
    "known",
    "university",
    "united",
    "then",
    "made",
    "team",
    "season",
    "system",
    "people",
    "also",
    "both",
    "between",
    "under",
    "however",
    "while",
    "being",
    "since",
    "three",
    "through",
    "well",
    "part",
    "group",
    "number",
    "early",
    "several",
    "film",
    "river",
    "north",
    "south",
    "east",
    "west",
    "second",
    "music",
    "series",
    "work",
    "area",
    "history",
    "small",
    "large",
    "water",
    "light",
    "market",
    "report",
    "study",
    "model",
    "server",
    "request",
    "answer",
    "question",
    "table",
    "window",
    "garden",
    "travel",
    "winter",
    "summer",
    "morning",
    "evening",
    "letter",
    "station",
    "engine",
    "signal",
    "value",
]

# (text) -> token count, or None when the target cannot count.
Counter = Callable[[str], int | None]


def words_text(n_words: int, seed: int) -> str:
    """``n_words`` seeded words with light punctuation (deterministic)."""
    rng = random.Random(seed)
    out: list[str] = []
    for i in range(max(1, n_words)):
        w = rng.choice(_WORDS)
        if i % 12 == 0:
            w = w.capitalize()
        out.append(w + ("." if i % 12 == 11 else ""))
    return " ".join(out)


def approx_tokens(text: str) -> int:
    """The chars-per-token estimate (at least 1)."""
    return max(1, round(len(text) / CHARS_PER_TOKEN))


def _avg_word_chars() -> float:
    return sum(len(w) + 1 for w in _WORDS) / len(_WORDS)


def make_prompt(tokens: int, seed: int, count: Counter | None = None) -> tuple[str, int, str]:
    """A prompt of about ``tokens`` tokens: ``(text, counted_tokens, method)``.

    With ``count`` (a /tokenize call) the length is corrected against the real tokenizer;
    without it, or when it fails, the chars-per-token estimate is used.
    """
    n_words = max(1, round(tokens * CHARS_PER_TOKEN / _avg_word_chars()))
    text = words_text(n_words, seed)
    if count is not None:
        got = count(text)
        for _ in range(4):
            if got is None or got <= 0:
                break
            if abs(got - tokens) <= max(1, tokens * 0.02):
                return text, got, "tokenize"
            n_words = max(1, round(n_words * tokens / got))
            text = words_text(n_words, seed)
            got = count(text)
        if got is not None and got > 0:
            return text, got, "tokenize"
    return text, approx_tokens(text), APPROX_METHOD


@dataclass(slots=True)
class PromptSpec:
    """A mix entry: prompt and output lengths in tokens, and a relative weight."""

    prompt_tokens: int
    output_tokens: int
    weight: float = 1.0
    kind: str = "chat"


@dataclass(slots=True)
class Prompt:
    text: str
    prompt_tokens: int
    max_tokens: int
    kind: str = "chat"


@dataclass(slots=True)
class PromptSet:
    """Prompts made for one run, with the method that measured their lengths."""

    prompts: list[Prompt] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    method: str = APPROX_METHOD

    def pick(self, rng: random.Random) -> Prompt:
        return rng.choices(self.prompts, weights=self.weights, k=1)[0]


def build_prompt_set(
    mix: Sequence[PromptSpec],
    seed: int = 0,
    count: Counter | None = None,
    variants: int = 4,
    tokenizer: str = "",
) -> PromptSet:
    """``variants`` distinct prompts per mix entry (distinct text defeats prefix caching)."""
    ps = PromptSet()
    methods: set[str] = set()
    for j, spec in enumerate(mix):
        for v in range(variants):
            text, n, method = make_prompt(spec.prompt_tokens, seed * 7919 + j * 101 + v, count)
            methods.add(method)
            ps.prompts.append(Prompt(text, n, spec.output_tokens, spec.kind))
            ps.weights.append(spec.weight / variants)
    if methods == {"tokenize"}:
        ps.method = f"tokenize:{tokenizer or 'server'}"
    elif "tokenize" in methods:
        ps.method = f"mixed:tokenize:{tokenizer or 'server'}+{APPROX_METHOD}"
    else:
        ps.method = APPROX_METHOD
    return ps


def tokenize_counter(
    server_root: str, model: str, headers: dict[str, str] | None = None, timeout_s: float = 10.0
) -> tuple[Counter | None, str]:
    """Find the target's /tokenize flavour: returns ``(counter, flavour)`` or ``(None, "")``.

    Tries the vLLM body first (``{"model", "prompt"}`` -> ``count``), then llama.cpp's
    (``{"content"}`` -> ``tokens``). Uses a plain httpx client: this runs before the load, once.
    """
    import httpx

    from servecheck.client.factory import ClientSettings, sync_client

    url = server_root.rstrip("/") + "/tokenize"
    # bound_body: a /tokenize that answers 200 and then streams for ever (a server whose every
    # POST is an endless event stream) held the whole load before its first request (issue 41).
    client = sync_client(
        ClientSettings.for_url(url, headers, timeout_s=timeout_s, connect_timeout_s=timeout_s),
        bound_body=True,
    )

    def vllm(text: str) -> int | None:
        r = client.post(url, json={"model": model, "prompt": text})
        body: Any = r.json() if r.status_code == 200 else None
        if isinstance(body, dict):
            if isinstance(body.get("count"), int):
                return int(body["count"])
            if isinstance(body.get("tokens"), list):
                return len(body["tokens"])
        return None

    def llamacpp(text: str) -> int | None:
        r = client.post(url, json={"content": text})
        body: Any = r.json() if r.status_code == 200 else None
        if isinstance(body, dict) and isinstance(body.get("tokens"), list):
            return len(body["tokens"])
        return None

    for flavour, fn in (("vllm", vllm), ("llamacpp", llamacpp)):
        try:
            # llama.cpp answers the vLLM body too, with {"tokens": []} (it ignores "prompt"): a
            # flavour counts only if it finds the tokens of a text that has some.
            if (fn("hello world") or 0) > 0:
                return _safe(fn), flavour
        except httpx.TimeoutException:
            break  # no answer in time: the next flavour would wait as long (issue 24.6)
        except (httpx.HTTPError, ValueError):
            continue
    client.close()
    return None, ""


def _safe(fn: Counter) -> Counter:
    """``fn`` that never raises; after one timeout it is not asked again (a tokenizer that
    stopped answering would make every prompt of the run wait its whole timeout)."""
    gave_up: list[bool] = []

    def wrapped(text: str) -> int | None:
        if gave_up:
            return None
        try:
            return fn(text)
        except Exception as exc:  # noqa: BLE001 - a failing tokenizer falls back to the estimate
            import httpx

            if isinstance(exc, httpx.TimeoutException):
                gave_up.append(True)
            return None

    return wrapped
