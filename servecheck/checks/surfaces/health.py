"""HEALTH-*: the health endpoint and readiness, also while the server is busy."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import httpx

from servecheck.checks.context import CheckContext, CheckSkipped
from servecheck.checks.health import health_url, probe_health
from servecheck.checks.preconditions import CheckError
from servecheck.checks.registry import check
from servecheck.checks.surfaces.chat import LONG_PROMPT
from servecheck.checks.surfaces.conc import run_async
from servecheck.client.factory import async_client
from servecheck.client.http import AsyncServeClient, Exchange
from servecheck.client.sse import SSEParser


@check(
    "HEALTH-READY",
    "the health endpoint says ready",
    "GET /health (or the engine's readiness path) answers 2xx; 503 is reported as 'loading', no answer as 'down'",
)
def health_ready(ctx: CheckContext) -> None:
    state = probe_health(ctx.client, ctx.target, timeout_s=min(10.0, ctx.target.timeout_s))
    if state.exchange is not None:
        ctx.exchanges.append(state.exchange)
    hints = {
        "loading": "the engine is still loading weights; run `servecheck wait-ready --target NAME` before checks",
        "down": "start the server or fix base_url/health_url in targets.yaml",
        "unhealthy": "read the server log: the engine reports itself unhealthy",
    }
    ctx.expect(
        state.state == "ready",
        f"the target is {state.state}",
        expected="a 2xx answer from the health endpoint",
        received=state.detail,
        exchange=state.exchange,
        hint=hints.get(state.state, ""),
    )


@check(
    "HEALTH-SERVES",
    "a ready server actually generates",
    "after a 2xx health answer, a 1-token chat completion succeeds (health must not report ready before the model can serve)",
)
def health_serves(ctx: CheckContext) -> None:
    state = probe_health(ctx.client, ctx.target)
    ctx.expect(
        state.state == "ready",
        "the health endpoint is not ready, so serving cannot be judged",
        expected="a 2xx health answer",
        received=state.detail,
        exchange=state.exchange,
    )
    ex = ctx.chat("Say OK.", max_tokens=1, temperature=0)
    ctx.expect(
        ex.served,
        "health says ready but a minimal completion fails",
        expected="HTTP 200 with a JSON chat completion for a 1-token request",
        received=ex.describe(),
        exchange=ex,
        hint="the health route answers before the model is loaded or after it died; make readiness depend on the engine",
    )


# ---- HEALTH-UNDER-LOAD ------------------------------------------------------------------------

LOAD_STREAMS = 2  # a few long generations: enough to occupy a loop, far below any capacity
HEALTH_BOUND_S = 2.0  # load balancers probe with 1-5 s timeouts; 2 s keeps a busy server in
# Engines whose chat completions take ignore_eos (vLLM's and llama.cpp's extension), so the
# load streams run to max_tokens rather than to a small model's first EOS.
LONG_ANSWER_ENGINES = frozenset({"vllm", "llamacpp"})


@dataclass(slots=True)
class _Load:
    """The long streams' state: which are generating now, and what became of each."""

    live: set[int] = field(default_factory=set)
    notes: dict[int, str] = field(default_factory=dict)
    # Set when a stream starts generating, or every stream is over: health is asked then. It
    # once waited for every stream to start, and on an engine whose tiny model stops early the
    # first had ended by then: in a full run nothing was generating when health was asked.
    settled: asyncio.Event = field(default_factory=asyncio.Event)


async def _long_stream(
    ctx: CheckContext, client: httpx.AsyncClient, i: int, max_tokens: int, load: _Load, k: int
) -> None:
    """Stream one long answer; it counts as live from its first token until it ends."""
    settings = ctx.client.settings
    body = ctx.chat_body(
        f"Stream {i}: {LONG_PROMPT}", stream=True, max_tokens=max_tokens, temperature=0.7
    )
    if ctx.target.engine in LONG_ANSWER_ENGINES:  # a tiny model's early EOS is no long answer
        body["ignore_eos"] = True
    try:
        async with client.stream(
            "POST", settings.base_url + "/chat/completions", json=body, headers=settings.headers
        ) as response:
            if response.status_code != 200:
                await response.aread()
                load.notes[i] = f"HTTP {response.status_code}"
                return
            parser, seen = SSEParser(), 0
            async for raw in response.aiter_raw():
                events = parser.feed(raw)
                seen += sum(1 for e in events if e.data and e.data != "[DONE]")
                if seen >= 2 and i not in load.notes:  # role chunk + one token: under way
                    load.live.add(i)
                    load.notes[i] = "generating"
                    load.settled.set()
                if any(e.data == "[DONE]" for e in events):
                    break
            load.notes[i] = "ended"
    except httpx.HTTPError as exc:
        load.notes[i] = type(exc).__name__
    finally:
        load.live.discard(i)
        load.notes.setdefault(i, "ended")
        if len(load.notes) == k:
            load.settled.set()


async def _probe_under_load(
    ctx: CheckContext, k: int, max_tokens: int
) -> tuple[_Load, int, Exchange | None, float]:
    """Open ``k`` long streams; once each is generating (or over), GET health once and time it.

    Returns the streams' state, how many were generating when health was asked, the health
    exchange (None when no stream was generating) and its latency. The streams are dropped after.
    """
    timeout_s = ctx.target.timeout_s
    own = ctx.client.settings.with_(
        timeout_s=timeout_s, connect_timeout_s=timeout_s, max_connections=k, keepalive=False
    )
    load = _Load()
    # The probe's client is ready before the streams start: asking must take no time of its own.
    async with (
        AsyncServeClient(ctx.client.settings) as probe,
        async_client(own, default_headers=False) as client,
    ):
        tasks = [
            asyncio.create_task(_long_stream(ctx, client, i, max_tokens, load, k)) for i in range(k)
        ]
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(load.settled.wait(), timeout_s)
            busy = len(load.live)
            if not busy:
                return load, 0, None, 0.0
            t0 = time.monotonic()
            ex = await probe.get(health_url(ctx.target), timeout_s=HEALTH_BOUND_S + 1.0)
            return load, busy, ex, time.monotonic() - t0
        finally:
            for task in tasks:
                task.cancel()  # walk away from the long answers: the server aborts them
            await asyncio.gather(*tasks, return_exceptions=True)


@check(
    "HEALTH-UNDER-LOAD",
    "the health endpoint answers while long generations run",
    f"with long streamed generations under way (it starts {LOAD_STREAMS}, and asks as soon as "
    f"one generates), GET /health (or the engine's readiness path) answers 2xx within "
    f"{HEALTH_BOUND_S:.0f} s; not judged (an error) when a load stream is refused or breaks, "
    "skipped when every one ended before health was asked",
    requires=("streaming", "route-accepts:/chat/completions"),
)
def health_under_load(ctx: CheckContext) -> None:
    k = min(LOAD_STREAMS, ctx.target.concurrency)
    context = ctx.info.context_length or ctx.target.context_length or 512
    max_tokens = max(16, min(256, context // 2))
    load, busy, ex, elapsed = run_async(
        asyncio.wait_for(_probe_under_load(ctx, k, max_tokens), ctx.target.timeout_s + 15)
    )
    notes = ", ".join(f"stream {i}: {n}" for i, n in sorted(load.notes.items()))
    refused = {i: n for i, n in load.notes.items() if n not in ("ended", "generating")}
    if ex is None and refused:
        # A refused or broken load stream is no load: health was never asked under any.
        raise CheckError(
            ctx.check_id,
            "not judged: the long streams that make the load were refused or broke",
            received=notes,
            hint="serve two streamed chat completions at once (STREAM-* and CONC-* judge why they "
            "failed); health under load can only be asked while they generate",
            exchange=None,
        )
    if ex is None:
        raise CheckSkipped(
            f"{ctx.check_id}: no generation was running when health could be asked ({notes}); "
            "the server's health under load could not be observed"
        )
    ctx.exchanges.append(ex)
    ready = not ex.error and ex.status is not None and 200 <= ex.status < 300
    ctx.expect(
        ready and elapsed <= HEALTH_BOUND_S,
        "the health endpoint does not answer promptly while generations run",
        expected=f"2xx from {health_url(ctx.target)} within {HEALTH_BOUND_S:.0f} s, "
        f"with {busy} stream(s) generating",
        received=f"{ex.describe(200)} after {elapsed:.2f} s",
        exchange=ex,
        hint="serve the health route apart from request processing (its own thread or an "
        "event loop that generation never blocks; sglang's ping while preprocessing is stuck): "
        "a health check that times out under load makes a load balancer evict a busy, healthy "
        "server",
    )
