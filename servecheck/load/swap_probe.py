"""The swap probe (``servecheck cutover --swap-under-load``): a steady load on an alias/gateway
target while the model behind it is swapped.

A fixed-rate open loop of small non-streaming requests (bounded by a duration, a rate and a cap
on requests in flight); every request becomes a :class:`ProbeRecord`.
:func:`servecheck.report.cutover.analyse_swap` reads them afterwards.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from servecheck.config.model import Target
from servecheck.load.records import RecordError, http_error


@dataclass(slots=True)
class ProbeRecord:
    """One probe request: times relative to the probe start (s)."""

    t_sent: float
    t_done: float
    ok: bool
    status: int | None
    error: str | None
    model: str | None
    lag: float = 0.0  # how late the probe sent it (s): the probe's own health


async def _probe(
    target: Target,
    model: str,
    duration_s: float,
    rate: float,
    max_inflight: int,
    on_tick: Callable[[float, int, int], None] | None,
) -> list[ProbeRecord]:
    import httpx

    from servecheck.client.factory import ClientSettings, async_client

    settings = ClientSettings.for_target(
        target,
        timeout_s=min(target.timeout_s, 30.0),
        connect_timeout_s=min(target.connect_timeout_s, 5.0),
        max_connections=max_inflight,
    )
    headers = {**settings.headers, "content-type": "application/json"}
    records: list[ProbeRecord] = []
    sem = asyncio.Semaphore(max_inflight)
    t0 = time.perf_counter()
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Reply with one word."}],
        "max_tokens": 4,
        "temperature": 0,
    }

    async def one(client: httpx.AsyncClient, due: float) -> None:
        async with sem:
            sent = time.perf_counter() - t0
            status: int | None = None
            try:
                r = await client.post(
                    target.base_url + "/chat/completions", json=body, headers=headers
                )
                status = r.status_code
                served = None
                if 200 <= r.status_code < 300:
                    try:
                        served = r.json().get("model")
                    except ValueError:
                        served = None
                ok = 200 <= r.status_code < 300
                err: RecordError | None = None if ok else http_error(r.status_code)
            except httpx.TimeoutException:
                ok, err, served = False, "timeout", None
            except httpx.TransportError:
                ok, err, served = False, "connect", None
            records.append(
                ProbeRecord(
                    sent,
                    time.perf_counter() - t0,
                    ok,
                    status,
                    err,
                    served if ok else None,
                    max(0.0, sent - due),
                )
            )

    async with async_client(settings, default_headers=False) as client:
        tasks: set[asyncio.Task[None]] = set()
        n = 0
        while True:
            due = n / rate
            now = time.perf_counter() - t0
            if due >= duration_s:
                break
            if due > now:
                await asyncio.sleep(due - now)
            task = asyncio.create_task(one(client, due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            n += 1
            if on_tick is not None and n % max(1, int(rate)) == 0:
                on_tick(time.perf_counter() - t0, len(records), sum(1 for r in records if not r.ok))
        if tasks:
            await asyncio.wait(tasks, timeout=min(target.timeout_s, 30.0) + 5.0)
    records.sort(key=lambda r: r.t_done)
    return records


def run_swap_probe(
    target: Target,
    model: str,
    *,
    duration_s: float,
    rate: float = 10.0,
    max_inflight: int = 64,
    on_tick: Callable[[float, int, int], None] | None = None,
) -> tuple[list[ProbeRecord], float]:
    """Send ``rate`` requests/s to ``target`` for ``duration_s``; return the records and the run length."""
    t0 = time.perf_counter()
    records = asyncio.run(_probe(target, model, duration_s, rate, max_inflight, on_tick))
    return records, max(duration_s, time.perf_counter() - t0)


__all__ = ["ProbeRecord", "run_swap_probe"]
