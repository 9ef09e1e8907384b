"""OVERLOAD-*: a bounded burst above the target's declared capacity.

A deployment may queue the excess (2xx, later) or shed it (429 or 503), but a shed answer must be
one a client can act on: an OpenAI error object, and ``Retry-After`` where the engine's profile
says it sends one (the openai SDK honours it when it retries). A reset connection, a 500 or a bare
429 is a crash as far as a client can tell. Afterwards the server must be healthy again.

The burst is ``capacity + min(2 * capacity, 64)`` short non-streamed chat requests at once, each
bounded by the target's timeout, the whole burst by that timeout plus 30 s; OVERLOAD-STREAM sends
``capacity + min(capacity, 4)`` streamed ones, whose refusal must come as a status before the
stream, not as an error event inside a 200. Without a declared
``capacity`` the checks skip: "above capacity" means nothing without it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.health import probe_health
from servecheck.checks.registry import check
from servecheck.checks.surfaces.conc import run_async
from servecheck.client.http import AsyncServeClient, Exchange

SHED_STATUSES = (429, 503)
RECOVERY_S = 30.0  # how long a server may take to report healthy after the burst
MAX_EXTRA = 64


@dataclass(slots=True)
class Burst:
    """What a burst got back, classified."""

    size: int
    capacity: int
    results: list[Exchange] = field(default_factory=list)

    def tally(self) -> str:
        counts = Counter(f"HTTP {ex.status}" if not ex.error else ex.error for ex in self.results)
        return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) or "no answers"

    @property
    def shed(self) -> list[Exchange]:
        return [ex for ex in self.results if not ex.error and ex.status in SHED_STATUSES]


def burst_size(capacity: int) -> int:
    return capacity + min(2 * capacity, MAX_EXTRA)


def declared_capacity(ctx: CheckContext) -> int:
    capacity = ctx.target.capacity
    if capacity is None:
        raise CheckSkipped(
            f"{ctx.check_id}: {ctx.target.name} declares no capacity (targets.yaml 'capacity': the "
            "requests it serves at once, e.g. vLLM --max-num-seqs); a burst 'above capacity' needs it"
        )
    return capacity


def run_burst(ctx: CheckContext) -> Burst:
    """Send the burst, all at once, and collect every answer (bounded in time)."""
    capacity = declared_capacity(ctx)
    burst = Burst(burst_size(capacity), capacity)
    bodies = [
        ctx.chat_body(f"Burst request {i}: name a colour.", max_tokens=16, temperature=0)
        for i in range(burst.size)
    ]
    burst.results = _send_all(ctx, bodies)
    return burst


def _send_all(
    ctx: CheckContext, bodies: list[dict[str, Any]], *, stream: bool = False
) -> list[Exchange]:
    """POST every body at once and collect each answer (bounded in time); [] if all timed out."""
    per_request = ctx.target.timeout_s
    # The client pool holds the whole burst, or the client itself would queue it.
    settings = dataclasses.replace(ctx.client.settings, max_connections=len(bodies))

    async def send() -> list[Exchange]:
        async with AsyncServeClient(settings) as client:
            return await asyncio.gather(
                *(
                    client.post("/chat/completions", b, timeout_s=per_request, stream=stream)
                    for b in bodies
                )
            )

    try:
        results = run_async(asyncio.wait_for(send(), per_request + 30))
    except TimeoutError:
        results = []
    ctx.exchanges.extend(results)
    return results


def _problem(ex: Exchange, want_retry_after: bool) -> str | None:
    """What is wrong with one answer of the burst, or None."""
    if ex.error:
        return f"{ex.error} ({ex.error_message[:120]})"
    status = ex.status or 0
    if 200 <= status < 300:
        return None
    if status not in SHED_STATUSES:
        return f"HTTP {status} (only 2xx, 429 or 503 are answers to load)"
    data = ex.json()
    err = data.get("error") if isinstance(data, dict) else None
    if not (isinstance(err, dict) and isinstance(err.get("message"), str)):
        return f"HTTP {status} without an OpenAI error object: {ex.describe(160)}"
    if want_retry_after and "retry-after" not in ex.response_headers:
        return f"HTTP {status} without Retry-After"
    return None


@check(
    "OVERLOAD-BURST",
    "a burst above capacity is served or shed cleanly",
    "capacity + min(2 x capacity, 64) concurrent chat requests each get 2xx, or 429/503 with an "
    "OpenAI error object (and Retry-After where the engine profile says it sends one); no "
    "connection reset, timeout or other 5xx",
)
def overload_burst(ctx: CheckContext) -> None:
    burst = run_burst(ctx)
    want_retry_after = ctx.profile.retry_after
    problems = [(ex, p) for ex in burst.results if (p := _problem(ex, want_retry_after))]
    ctx.expect(
        bool(burst.results),
        "the burst got no answers in time",
        expected=f"{burst.size} answers within {ctx.target.timeout_s + 30:.0f} s",
        received="the burst timed out as a whole",
        hint="the server hangs under load instead of queueing or shedding",
    )
    first = problems[0] if problems else None
    ctx.expect(
        first is None,
        f"{len(problems)} of {burst.size} requests in a burst above capacity "
        f"({burst.capacity}) got no usable answer",
        expected="2xx, or 429/503 with {error: {message, ...}}"
        + (" and Retry-After" if want_retry_after else ""),
        received=f"{burst.tally()}; first: {first[1] if first else ''}",
        exchange=first[0] if first else None,
        hint="shed excess load with 429/503 and an error object (a gateway's rate limit, vLLM "
        "behind a queue limit); clients retry those and give up on resets and 500s",
    )


def _recovered(ctx: CheckContext) -> tuple[bool, str, Exchange | None]:
    deadline = time.monotonic() + RECOVERY_S
    delay = 0.2
    while True:
        health = probe_health(ctx.client, ctx.target, timeout_s=5.0)
        follow = ctx.chat("Say OK.", max_tokens=4, temperature=0)
        if health.state == "ready" and follow.ok:
            return True, "", follow
        if time.monotonic() + delay > deadline:
            return False, f"health {health.detail}; a chat request: {follow.describe(200)}", follow
        time.sleep(delay)  # bounded back-off while the server drains the burst
        delay = min(delay * 2, 4.0)


@check(
    "OVERLOAD-RECOVERS",
    "the server is healthy after a burst above capacity",
    f"after the burst, health is ready and a chat request gets 200 within {RECOVERY_S:.0f} s",
)
def overload_recovers(ctx: CheckContext) -> None:
    burst = run_burst(ctx)
    ok, detail, ex = _recovered(ctx)
    ctx.expect(
        ok,
        f"the server did not recover within {RECOVERY_S:.0f} s after a burst of {burst.size}",
        expected="health ready and a chat request 200",
        received=f"burst: {burst.tally()}; afterwards: {detail}",
        exchange=ex,
        hint="an engine that dies or wedges under a burst needs a queue or admission limit in "
        "front of it (--max-num-seqs, a gateway rate limit)",
    )


# ---- OVERLOAD-STREAM --------------------------------------------------------------------------

STREAM_EXTRA = 4  # a few streams over capacity: enough to be shed, few enough to stay seconds


def _stream_problem(ex: Exchange, want_retry_after: bool) -> str | None:
    """What is wrong with one streamed answer of the burst, or None."""
    if ex.error or not (ex.status and 200 <= ex.status < 300):
        return _problem(ex, want_retry_after)
    stream = ex.stream
    if stream is None:
        return f"HTTP {ex.status} without an event stream: {ex.describe(160)}"
    if stream.error_obj is not None:
        served = any(
            isinstance(c, dict) and c.get("choices") for c in stream.chunks if "error" not in c
        )
        return (
            f"HTTP {ex.status} whose stream carries an error ({body_snippet(stream.error_obj, 160)})"
            + (" after content" if served else " and nothing else")
        )
    if not any(isinstance(c, dict) and c.get("choices") for c in stream.chunks):
        return f"HTTP {ex.status} whose stream carries no chunk with choices"
    finished = any(
        isinstance(choice, dict) and choice.get("finish_reason")
        for c in stream.chunks
        for choice in (c.get("choices") or [] if isinstance(c, dict) else [])
    )
    if not (stream.done or finished):
        return (
            f"HTTP {ex.status} whose stream ended after {len(stream.chunks)} chunk(s) with no "
            "finish_reason and no [DONE]"
        )
    return None


@check(
    "OVERLOAD-STREAM",
    "streamed requests over capacity are shed before their stream starts",
    f"capacity + min(capacity, {STREAM_EXTRA}) concurrent streamed chat requests each get a 200 "
    "stream of chunks that ends with a finish_reason or [DONE], or 429/503 with an OpenAI error "
    "object (and Retry-After where the engine profile says it sends one) before any stream; never "
    "a 200 whose stream carries an error or breaks off",
    requires=("streaming", "route-accepts:/chat/completions"),
)
def overload_stream(ctx: CheckContext) -> None:
    capacity = declared_capacity(ctx)
    size = capacity + min(capacity, STREAM_EXTRA)
    bodies = [
        ctx.chat_body(f"Burst stream {i}: name a colour.", max_tokens=8, temperature=0, stream=True)
        for i in range(size)
    ]
    results = _send_all(ctx, bodies, stream=True)
    tally = Burst(size, capacity, results).tally()
    ctx.expect(
        bool(results),
        "the streamed burst got no answers in time",
        expected=f"{size} answers within {ctx.target.timeout_s + 30:.0f} s",
        received="the burst timed out as a whole",
        hint="the server hangs under load instead of queueing or shedding",
    )
    want_retry_after = ctx.profile.retry_after
    problems = [(ex, p) for ex in results if (p := _stream_problem(ex, want_retry_after))]
    first = problems[0] if problems else None
    ctx.expect(
        first is None,
        f"{len(problems)} of {size} streamed requests in a burst above capacity ({capacity}) "
        "got no usable answer",
        expected="a 200 stream of chunks ending with a finish_reason or [DONE], or 429/503 with {error: {message, ...}} before the stream"
        + (" and Retry-After" if want_retry_after else ""),
        received=f"{tally}; first: {first[1] if first else ''}",
        exchange=first[0] if first else None,
        hint="decide admission before sending the 200 and the first event (vLLM's admission "
        "rejection escapes before the response starts): an error inside a 200 stream is not "
        "retried by the openai SDK, whose retries read the status only",
    )
