"""CACHE-*: prompt (prefix) caching as a client sees it.

Users see a prefix cache only through ``usage.prompt_tokens_details.cached_tokens`` (vLLM
reports it with ``--enable-prompt-tokens-details``; it is often null with the cache on,
vllm#16162; gateways that also speak Anthropic's usage, as LiteLLM, may put it in
``usage.cache_read_input_tokens``) and through the engine's own counters on ``/metrics``. These checks need the
target to declare ``capabilities: {prefix_cache: true}``: no profile assumes it.

Each check starts its prompt with a nonce, so a cache warmed by an earlier run or another
check cannot make the first request of the pair a hit, and sizes the shared prefix to about
half the context, so it spans whole KV blocks on engines with large blocks (vLLM's CPU
backend: 128 tokens).
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.registry import check
from servecheck.checks.surfaces.conc import _SAMPLE, _metrics_url
from servecheck.client.http import Exchange

WORDS = ("river", "stone", "light", "garden", "signal", "orbit", "cloud", "kernel", "paper")
# Prefix-cache counters by engine: (hits, queries), both in tokens.
COUNTERS: dict[str, tuple[str, str]] = {
    "vllm": ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    "reference": ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
}
METRICS_WAIT_S = 5.0  # counters are published once the engine's step stats arrive


def _prefix(ctx: CheckContext) -> str:
    """A unique prefix of about 60% of the context in tokens (measured with /tokenize if it can)."""
    context = ctx.info.context_length or 512
    nonce = secrets.token_hex(4)

    def text(words: int) -> str:
        return f"Reference {nonce}. " + " ".join(WORDS[i % len(WORDS)] for i in range(words))

    words = max(32, context // 4)  # a word is one to three tokens in the tokenizers seen
    if ctx.capabilities.get("tokenize"):
        ex = ctx.client.post(
            ctx.server_root + "/tokenize", {"model": ctx.model, "prompt": text(words)}
        )
        data = ex.json() if ex.ok else None
        count = data.get("count") if isinstance(data, dict) else None
        if isinstance(count, int) and count > 0:
            words = max(32, int(words * 0.6 * context / count))
    return text(words)


def _ask(ctx: CheckContext, prefix: str, question: str, *, stream: bool = False) -> Exchange:
    messages = [
        {"role": "system", "content": prefix},
        {"role": "user", "content": question},
    ]
    if stream:
        return ctx.stream_chat(messages, usage=True, max_tokens=4, temperature=0)
    return ctx.chat(messages, max_tokens=4, temperature=0)


def _usage(ctx: CheckContext, ex: Exchange, what: str) -> dict[str, Any]:
    if ex.stream is not None or (ex.request_body or {}).get("stream"):
        ctx.ok_stream(ex, what)
        assert ex.stream is not None
        usage = ex.stream.usage()
    else:
        usage = ctx.ok_json(ex, what).get("usage")
    ctx.expect(
        isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int),
        f"{what}: no usage.prompt_tokens",
        expected="usage with prompt_tokens",
        received=body_snippet(usage),
        exchange=ex,
    )
    assert isinstance(usage, dict)
    return usage


def _cached(usage: dict[str, Any]) -> Any:
    """The cached share: prompt_tokens_details.cached_tokens, else cache_read_input_tokens
    (where gateways that also speak Anthropic's usage, as LiteLLM, report it)."""
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return cached if cached is not None else usage.get("cache_read_input_tokens")


def _warm_pair(ctx: CheckContext) -> tuple[str, Exchange, dict[str, Any]]:
    """Send a long prefix twice (different questions); return the prefix, second exchange, usage."""
    prefix = _prefix(ctx)
    _usage(ctx, _ask(ctx, prefix, "First: what is the river?"), "the first request")
    ex = _ask(ctx, prefix, "Second: what is the stone?")
    return prefix, ex, _usage(ctx, ex, "the repeated-prefix request")


@check(
    "CACHE-HIT",
    "a repeated long prefix is reported as cached",
    "the second of two requests sharing a prefix of about half the context reports "
    "usage.prompt_tokens_details.cached_tokens > 0 (or cache_read_input_tokens > 0, where a gateway "
    "reports it there)",
    requires=("prefix_cache",),
)
def cache_hit(ctx: CheckContext) -> None:
    _, ex, usage = _warm_pair(ctx)
    cached = _cached(usage)
    ctx.expect(
        isinstance(cached, int) and cached > 0,
        "a repeated prefix was not reported as cached",
        expected="usage.prompt_tokens_details.cached_tokens (or cache_read_input_tokens) > 0 "
        "on the second request",
        received=f"usage {body_snippet(usage)}",
        exchange=ex,
        hint="vLLM reports it only with --enable-prompt-tokens-details (and prefix caching on); "
        "without it, clients and load tools cannot see the cache work",
    )


@check(
    "CACHE-BOUNDS",
    "cached_tokens is a count within prompt_tokens, streamed or not",
    "cached_tokens (or cache_read_input_tokens) is an integer with 0 <= cached_tokens <= "
    "prompt_tokens on a hit, in a "
    "non-streamed answer and in a streamed answer's usage chunk",
    requires=("prefix_cache",),
)
def cache_bounds(ctx: CheckContext) -> None:
    prefix, ex, usage = _warm_pair(ctx)
    streamed = _ask(ctx, prefix, "Third: what is the light?", stream=True)
    for what, exchange, u in (
        ("non-streamed", ex, usage),
        ("streamed", streamed, _usage(ctx, streamed, "the streamed repeat")),
    ):
        cached, prompt = _cached(u), u["prompt_tokens"]
        ctx.expect(
            isinstance(cached, int) and not isinstance(cached, bool) and 0 <= cached <= prompt,
            f"{what}: cached_tokens is not a count within prompt_tokens",
            expected=f"0 <= cached_tokens <= prompt_tokens ({prompt})",
            received=f"usage {body_snippet(u)}",
            exchange=exchange,
            hint="cache-hit rates computed from this exceed 100%",
        )


def _counters(ctx: CheckContext, url: str, names: tuple[str, str]) -> tuple[float, float] | None:
    ex = ctx.client.get(url, timeout_s=5)
    if not ex.ok:
        return None
    found = {n: 0.0 for n in names}
    seen = set()
    for m in _SAMPLE.finditer(ex.text):
        if m.group(1) in found:
            found[m.group(1)] += float(m.group(3))
            seen.add(m.group(1))
    return (found[names[0]], found[names[1]]) if len(seen) == 2 else None


@check(
    "CACHE-METRICS",
    "the engine's prefix-cache counters move with reported hits",
    "over a repeated-prefix request, the engine's hit counter (vllm:prefix_cache_hits_total) "
    "grows by at least the cached_tokens reported, and its query counter by at least as much",
    requires=("prefix_cache", "metrics"),
)
def cache_metrics(ctx: CheckContext) -> None:
    names = COUNTERS.get(ctx.target.engine)
    url = _metrics_url(ctx)
    if names is None or url is None:
        raise CheckSkipped(
            f"CACHE-METRICS: no prefix-cache counters known for engine {ctx.target.engine}"
            + ("" if url else " (and no metrics_url)")
        )
    before = _counters(ctx, url, names)
    if before is None:
        ctx.fail(
            "the prefix-cache counters are not on /metrics",
            expected=f"{names[0]} and {names[1]} on {url}",
            received="one or both missing (or /metrics failed)",
        )
    _, ex, usage = _warm_pair(ctx)
    cached = _cached(usage)
    if not isinstance(cached, int) or cached <= 0:
        raise CheckSkipped("CACHE-METRICS: no cached_tokens reported to compare (see CACHE-HIT)")
    deadline = time.monotonic() + METRICS_WAIT_S
    while True:
        after = _counters(ctx, url, names) or before
        hits, queries = after[0] - before[0], after[1] - before[1]
        if hits >= cached and queries >= hits:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.1)  # bounded: waits for the counters, at most METRICS_WAIT_S
    ctx.fail(
        "the prefix-cache counters did not move with the reported hit",
        expected=f"{names[0]} +{cached} or more (cached_tokens reported), {names[1]} at least as much",
        received=f"hits +{hits:g}, queries +{queries:g} within {METRICS_WAIT_S:g} s",
        exchange=ex,
        hint="dashboards built on these counters show no cache use while clients are billed "
        "for cached tokens, or the reverse",
    )
