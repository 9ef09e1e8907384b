"""The swap probe (``servecheck cutover --swap-under-load``): a steady load on an alias/gateway
target while the model behind it is swapped.

A fixed-rate open loop of small requests (bounded by a duration, a rate and a cap on requests in
flight); every request becomes a :class:`ProbeRecord`.
:func:`servecheck.analysis.cutover.analyse_swap` reads them afterwards. For a swap servecheck does
itself (:mod:`servecheck.probes.swap`) the requests stream (each gets a TTFT: the first event),
are split across models by weight (smooth weighted round robin: every window of requests holds
the weights' shares, the same order every run), and the swap runs in a thread at its time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from servecheck.config.model import Target
from servecheck.load.workload.mix import WeightedCycle
from servecheck.records.record import RecordError, http_error
from servecheck.signals import run_async


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
    ttft: float | None = None  # streamed: the first event's arrival after sending (s)
    model_sent: str | None = None  # the model the request named


@dataclass(slots=True)
class ProbeOptions:
    """What a probe with servecheck's own swap adds: streaming, a weighted model mix, and the
    swap (a blocking call) started in a thread ``at_s`` seconds in; its start and end times (s
    from the probe's start) and its result land in ``swap_times`` / ``swap_result``."""

    stream: bool = False
    mix: Sequence[tuple[str, float]] = ()
    swap: Callable[[], Any] | None = None
    at_s: float = 0.0
    swap_times: list[float] = field(default_factory=list)
    swap_result: Any = None


async def _probe(
    target: Target,
    model: str,
    duration_s: float,
    rate: float,
    max_inflight: int,
    on_tick: Callable[[float, int, int], None] | None,
    opts: ProbeOptions | None = None,
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

    opts = opts or ProbeOptions()
    pick = WeightedCycle(list(opts.mix) or [(model, 1.0)])

    async def one(client: httpx.AsyncClient, due: float, name: str) -> None:
        async with sem:
            sent = time.perf_counter() - t0
            status: int | None = None
            ttft: float | None = None
            try:
                if opts.stream:
                    status, served, ttft = await _streamed(
                        client, target.base_url, {**body, "model": name}, headers
                    )
                    ttft = None if ttft is None else ttft - t0 - sent
                else:
                    r = await client.post(
                        target.base_url + "/chat/completions",
                        json={**body, "model": name},
                        headers=headers,
                    )
                    status, served = r.status_code, _served_model(r)
                ok = status is not None and 200 <= status < 300
                err: RecordError | None = None if ok else http_error(status or 0)
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
                    ttft if ok else None,
                    name,
                )
            )

    async def swap() -> None:
        assert opts.swap is not None
        await asyncio.sleep(max(0.0, opts.at_s - (time.perf_counter() - t0)))
        opts.swap_times.append(time.perf_counter() - t0)
        opts.swap_result = await asyncio.to_thread(opts.swap)
        opts.swap_times.append(time.perf_counter() - t0)

    async with async_client(settings, default_headers=False) as client:
        tasks: set[asyncio.Task[None]] = set()
        swapper = asyncio.create_task(swap()) if opts.swap is not None else None
        n = 0
        while True:
            due = n / rate
            now = time.perf_counter() - t0
            if due >= duration_s:
                break
            if due > now:
                await asyncio.sleep(due - now)
            task = asyncio.create_task(one(client, due, pick.next()))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            n += 1
            if on_tick is not None and n % max(1, int(rate)) == 0:
                on_tick(time.perf_counter() - t0, len(records), sum(1 for r in records if not r.ok))
        if tasks:
            await asyncio.wait(tasks, timeout=min(target.timeout_s, 30.0) + 5.0)
        if swapper is not None:
            await swapper
    records.sort(key=lambda r: r.t_done)
    return records


def _served_model(r: Any) -> str | None:
    if not 200 <= r.status_code < 300:
        return None
    try:
        got = r.json().get("model")
    except (ValueError, AttributeError):
        return None
    return got if isinstance(got, str) else None


async def _streamed(
    client: Any, base_url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, str | None, float | None]:
    """One streamed request: its status, the served model of its first chunk, and the time
    (``perf_counter`` s) its first ``data:`` event arrived; a stream that ends without
    ``[DONE]`` is a transport error."""
    import json

    import httpx

    served: str | None = None
    first: float | None = None
    done = False
    async with client.stream(
        "POST", base_url + "/chat/completions", json={**body, "stream": True}, headers=headers
    ) as r:
        if not 200 <= r.status_code < 300:
            await r.aread()
            return r.status_code, None, None
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            if first is None:
                first = time.perf_counter()
                try:
                    got = json.loads(data).get("model")
                    served = got if isinstance(got, str) else None
                except (ValueError, AttributeError):
                    served = None
    if not done:
        raise httpx.RemoteProtocolError("stream ended without [DONE]")
    return r.status_code, served, first


def run_swap_probe(
    target: Target,
    model: str,
    *,
    duration_s: float,
    rate: float = 10.0,
    max_inflight: int = 64,
    on_tick: Callable[[float, int, int], None] | None = None,
    opts: ProbeOptions | None = None,
) -> tuple[list[ProbeRecord], float]:
    """Send ``rate`` requests/s to ``target`` for ``duration_s``; return the records and the run length."""
    t0 = time.perf_counter()
    records = run_async(_probe(target, model, duration_s, rate, max_inflight, on_tick, opts))
    return records, max(duration_s, time.perf_counter() - t0)


__all__ = ["ProbeOptions", "ProbeRecord", "run_swap_probe"]
