"""CONC-*: concurrency and robustness.

These checks load the server on purpose (N concurrent long prompts, dropped streams). Every
request is bounded by the target's timeout and every burst by a wall-clock cap, so a server that
hangs makes the check fail, not the run stall.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import Counter
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx

from servecheck.checks.context import CheckContext
from servecheck.checks.health import probe_health
from servecheck.checks.preconditions import classify
from servecheck.checks.registry import check
from servecheck.client.factory import async_client
from servecheck.client.http import Exchange

T = TypeVar("T")

FILLER = (
    "river",
    "stone",
    "garden",
    "light",
    "water",
    "tree",
    "cloud",
    "bird",
    "field",
    "road",
    "house",
    "window",
    "morning",
    "evening",
    "green",
    "quiet",
    "small",
    "old",
    "bright",
    "cold",
    "warm",
    "long",
    "story",
    "music",
    "table",
    "chair",
    "paper",
    "letter",
    "city",
    "market",
    "bread",
    "apple",
    "winter",
    "summer",
    "forest",
    "mountain",
    "valley",
    "bridge",
    "harbour",
    "boat",
    "lamp",
)
PROMPT_FRACTION = (
    0.82  # ~420 prompt tokens at a 512 context: the mix that crashes vLLM CPU with chunked prefill
)
TEMPLATE_ROOM = 24  # tokens a chat template adds around the words, when usage cannot tell
DEFAULT_WORD_TOKENS = (
    4.0  # tokens per filler word when usage cannot tell (the worst seen: a tiny test tokenizer)
)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous check code (in a thread if a loop is running here)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="servecheck-check-loop", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _words(n: int, tag: int) -> str:
    # Distinct per request (tag first) so prefix caching cannot fold the prompts into one.
    return f"Request {tag}: " + " ".join(FILLER[(tag * 7 + k) % len(FILLER)] for k in range(n))


def _prompt_tokens(ctx: CheckContext, text: str) -> int | None:
    ex = ctx.chat(text, max_tokens=1, temperature=0)
    data = ex.json() if ex.ok else None
    usage = data.get("usage") if isinstance(data, dict) else None
    count = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def calibrate_words(ctx: CheckContext) -> tuple[int, float]:
    """Template overhead and tokens per filler word, measured from two requests' usage.prompt_tokens.

    Every OpenAI-compatible server reports usage, so this works where /tokenize does not exist;
    tiny test tokenizers cost 3-4 tokens a word, BPE vocabularies about 1.3.
    """
    words = len(FILLER)
    short = _prompt_tokens(ctx, _words(0, 0))
    sample = _prompt_tokens(ctx, _words(words, 0))
    if short is None or sample is None or sample <= short:
        return TEMPLATE_ROOM, DEFAULT_WORD_TOKENS
    return short, max(0.5, (sample - short) / words)


def long_prompt_words(ctx: CheckContext, fraction: float = PROMPT_FRACTION) -> int:
    """How many filler words make a prompt of about ``fraction`` of the context (200 if unknown)."""
    context = ctx.info.context_length or ctx.target.context_length
    if not context:
        return 200
    overhead, per_word = calibrate_words(ctx)
    return max(16, int((int(context * fraction) - overhead) / per_word))


def _summary(results: list[Exchange]) -> tuple[str, Exchange | None]:
    counts = Counter((f"HTTP {ex.status}" if not ex.error else ex.error) for ex in results)
    first_bad = next((ex for ex in results if not ex.served), None)
    text = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))
    if first_bad is not None:
        text += f"; first error: {first_bad.describe(300)}"
    return text, first_bad


async def _burst(
    ctx: CheckContext, bodies: list[dict[str, Any]], timeout_s: float
) -> list[Exchange]:
    async with ctx.async_client() as client:
        return await asyncio.gather(
            *(client.post("/chat/completions", b, timeout_s=timeout_s) for b in bodies)
        )


@check(
    "CONC-SEEDED",
    "concurrent seeded long-prompt requests all succeed and the server survives",
    "N concurrent chat requests (N = `concurrency`, default 16; most with a seed, most with a prompt of ~80% of "
    "the context) all get 200, and afterwards health is ready and one more request succeeds",
)
def conc_seeded(ctx: CheckContext) -> None:
    n = ctx.target.concurrency
    words = long_prompt_words(ctx)
    bodies = []
    for i in range(n):
        long = i % 4 != 2
        params: dict[str, Any] = {"max_tokens": 8, "temperature": 0.7}
        if i % 4 != 3:
            params["seed"] = 1000 + i
        prompt = _words(words, i) if long else f"Request {i}: name a colour."
        bodies.append(ctx.chat_body(prompt, **params))
    per_request = ctx.target.timeout_s
    cap = per_request + 30
    t0 = time.monotonic()
    try:
        results = run_async(asyncio.wait_for(_burst(ctx, bodies, per_request), cap))
    except TimeoutError:
        results = []
    elapsed = time.monotonic() - t0
    ctx.exchanges.extend(results)
    seeded = sum(1 for b in bodies if "seed" in b)
    context = ctx.info.context_length or ctx.target.context_length
    size = f"~{PROMPT_FRACTION:.0%} of the {context}-token context" if context else "200 words"
    mix = f"{n} concurrent requests ({seeded} seeded, {sum(1 for i in range(n) if i % 4 != 2)} with {words}-word prompts, {size})"
    burst_text, first_bad = (
        _summary(results) if results else (f"no answers within {cap:.0f} s", None)
    )

    health = probe_health(ctx.client, ctx.target, timeout_s=5.0)
    if health.exchange is not None:
        ctx.exchanges.append(health.exchange)
    follow = ctx.chat("Say OK.", max_tokens=1, temperature=0)
    seen = classify(follow, "one more request", "choices", ctx.target.base_url)
    if seen is not None and seen.cause not in ("down", "server-error"):
        # It answers, but not with completions (an HTML page, 401, 404): nothing died; say what
        # was seen, not a crash hint.
        ctx.fail(
            f"the server does not serve chat completions ({seen.summary})",
            expected=f"all of {mix} answered 200, then health ready and one more request 200",
            received=f"burst: {burst_text}; afterwards health: {health.detail}; one more request: {follow.describe(200)}",
            exchange=follow,
            hint=seen.hint,
        )
    if health.state != "ready" or not follow.served:
        vllm = ctx.target.engine == "vllm"
        ctx.fail(
            "the server died under concurrent seeded requests"
            + (
                ": on vLLM CPU, disable chunked prefill (--no-enable-chunked-prefill)"
                if vllm
                else ""
            ),
            expected=f"all of {mix} answered 200, then health ready and one more request 200",
            received=f"burst: {burst_text}; afterwards health: {health.detail}; one more request: {follow.describe(200)}",
            exchange=first_bad or follow,
            hint=(
                "vLLM's CPU build raises 'RuntimeError: CPU Generator does not use offset' when a "
                "seeded request meets chunked prefill, and the engine core exits; elsewhere, "
                if vllm
                else ""
            )
            + "read the server log for the crash and restart it (a supervisor with restarts "
            "hides, not fixes, this). The curl below is one of the "
            f"{n} requests: send {n} such requests at once to reproduce",
        )
    ctx.expect(
        bool(results),
        f"{mix} did not finish within {cap:.0f} s",
        expected="every request answered within the timeout",
        received=burst_text,
        exchange=follow,
        hint="requests queue without bound or deadlock under concurrency; check max_num_seqs / -np slots",
    )
    bad = [ex for ex in results if not ex.served]
    ctx.expect(
        not bad,
        f"{len(bad)} of {mix} failed (in {elapsed:.1f} s)",
        expected="every request answered 200 with a JSON chat completion",
        received=burst_text,
        exchange=first_bad,
        hint="a server that queues excess requests is fine; one that fails them under ordinary concurrency is not "
        "(lower `concurrency` in targets.yaml only if the limit is intended, e.g. a gateway rate limit)",
    )


# ---- CONC-DISCONNECT -------------------------------------------------------------------------

# Gauges that must return to their earlier level once dropped requests are cleaned up.
GAUGES: dict[str, tuple[str, ...]] = {
    "running requests": (
        "vllm:num_requests_running",
        "llamacpp:requests_processing",
        "sglang:num_running_reqs",
    ),
    "KV-cache usage": ("vllm:kv_cache_usage_perc", "sglang:token_usage"),
}
GAUGE_TOLERANCE = {"running requests": 0.0, "KV-cache usage": 0.005}
_SAMPLE = re.compile(
    r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfINFaN]+)", re.MULTILINE
)
DRAIN_BOUND_S = 3.0


def _metrics_url(ctx: CheckContext) -> str | None:
    if ctx.target.metrics_url:
        return ctx.target.metrics_url
    return ctx.server_root + "/metrics" if ctx.capabilities.get("metrics") else None


def engine_gauges(ctx: CheckContext, url: str) -> tuple[dict[str, float], Exchange]:
    """The engine's running-requests and KV-usage gauges (summed over label sets); absent ones are left out."""
    ex = ctx.client.get(url, timeout_s=5)
    found: dict[str, float] = {}
    if ex.ok:
        for m in _SAMPLE.finditer(ex.text):
            for label, names in GAUGES.items():
                if m.group(1) in names:
                    found[label] = found.get(label, 0.0) + float(m.group(3))
    return found, ex


def _not_back(before: dict[str, float], now: dict[str, float]) -> dict[str, str]:
    """Gauge label -> 'X before, Y after' for every gauge still above its earlier level."""
    return {
        label: f"{label} {before[label]:g} before the drop, {now.get(label)} {DRAIN_BOUND_S:g} s after"
        for label in before
        if now.get(label) is None or now[label] > before[label] + GAUGE_TOLERANCE[label]
    }


def _notes_text(notes: list[str]) -> str:
    """'8 streams: dropped after 2 event(s)' instead of eight lines that differ only in their number."""
    counts = Counter(n.split(": ", 1)[1] for n in notes)
    return "; ".join(f"{c} stream{'s' if c > 1 else ''}: {what}" for what, c in counts.items())


async def _open_and_drop(ctx: CheckContext, k: int, max_tokens: int, timeout_s: float) -> list[str]:
    """Open ``k`` streams, read until each has sent content, then drop the connections. Returns per-stream notes.

    A plain httpx client (from the client factory) on purpose: the servecheck client always
    reads a response to its end (that is its job), and this check needs the opposite, a client
    that walks away mid-stream.
    """
    settings = ctx.client.settings
    url = settings.base_url + "/chat/completions"
    notes: list[str] = []
    own = settings.with_(
        timeout_s=timeout_s, connect_timeout_s=timeout_s, max_connections=k, keepalive=False
    )
    async with async_client(own, default_headers=False) as client:

        async def one(i: int) -> None:
            body = ctx.chat_body(
                f"Stream {i}: write a long story about a river.",
                stream=True,
                max_tokens=max_tokens,
                temperature=0.7,
            )
            try:
                async with client.stream(
                    "POST", url, json=body, headers=settings.headers
                ) as response:
                    if response.status_code != 200:
                        await response.aread()
                        notes.append(f"stream {i}: HTTP {response.status_code}")
                        return
                    seen = 0
                    async for raw in response.aiter_raw():
                        seen += raw.count(b"data:")
                        if seen >= 2:  # role chunk + one token: generation is under way
                            break
                    notes.append(f"stream {i}: dropped after {seen} event(s)")
            except httpx.HTTPError as exc:
                notes.append(f"stream {i}: {type(exc).__name__}")

        await asyncio.gather(*(one(i) for i in range(k)))
    return notes


@check(
    "CONC-DISCONNECT",
    "dropped streams are cleaned up",
    "after K streaming requests are dropped mid-generation, the server still serves, and (where it has a metrics "
    f"endpoint) its running-requests and KV-usage gauges return to their earlier level within {DRAIN_BOUND_S:.0f} s",
    requires=("streaming", "route-accepts:/chat/completions"),
)
def conc_disconnect(ctx: CheckContext) -> None:
    k = min(8, ctx.target.concurrency)
    context = ctx.info.context_length or ctx.target.context_length or 512
    max_tokens = max(16, min(256, context // 2))
    url = _metrics_url(ctx)
    before: dict[str, float] = engine_gauges(ctx, url)[0] if url is not None else {}
    notes = run_async(
        asyncio.wait_for(
            _open_and_drop(ctx, k, max_tokens, ctx.target.timeout_s), ctx.target.timeout_s + 15
        )
    )
    if not any("dropped" in n for n in notes):
        probe = ctx.stream_chat("Stream: write a long story about a river.", max_tokens=4)
        ctx.fail(
            f"none of {k} streaming requests could be opened",
            expected="HTTP 200 event streams to drop",
            received=_notes_text(notes),
            exchange=probe,
            hint="streaming is refused; see the STREAM-* checks",
        )
    gauge_text = "no engine gauges" if url is None or not before else ""
    if url is not None and before:
        deadline = time.monotonic() + DRAIN_BOUND_S
        now, ex = engine_gauges(ctx, url)
        while _not_back(before, now) and time.monotonic() < deadline:
            time.sleep(0.1)
            now, ex = engine_gauges(ctx, url)
        ctx.exchanges.append(ex)
        stuck = _not_back(before, now)
        gauge_text = "; ".join(stuck.values()) or ", ".join(
            f"{label} back to {value:g}" for label, value in now.items()
        )
        ctx.expect(
            not stuck,
            f"dropped streams are not cleaned up: {' and '.join(stuck)} did not come back down",
            expected=f"{' and '.join(before)} back to the earlier level within {DRAIN_BOUND_S:.0f} s of dropping {k} streams",
            received=f"{gauge_text} ({_notes_text(notes)})",
            exchange=ex,
            hint="the server does not notice client disconnects, or does not release what they held: aborted "
            "requests keep a running slot or their KV blocks, and capacity leaks with every dropped client",
        )
    follow = ctx.chat("Say OK.", max_tokens=1, temperature=0)
    ctx.expect(
        follow.ok,
        "the server does not serve after streams were dropped",
        expected="HTTP 200",
        received=f"{follow.describe(300)} ({gauge_text}; {_notes_text(notes)})",
        exchange=follow,
        hint="a client disconnect broke the server; read its log around the disconnects",
    )
