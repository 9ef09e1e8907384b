"""The swap probe (``servecheck cutover --swap-under-load``): a steady load on an alias/gateway
target while the model behind it is swapped.

A fixed-rate open loop of small requests (bounded by a duration, a rate and a cap on requests in
flight); every request becomes a :class:`~servecheck.records.record.RequestRecord` (times in
seconds from the probe's start; ``model`` the model it named, ``served_model`` the one the answer
named), a streamed one read by the load generator's request function.
:func:`servecheck.analysis.cutover.analyse_swap` reads them afterwards. For a swap servecheck does
itself (:mod:`servecheck.probes.swap`) the requests stream (each gets a TTFT: the first token),
are split across models by weight (smooth weighted round robin: every window of requests holds
the weights' shares, the same order every run), and the swap runs in a thread at its time.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from servecheck.config.model import Target
from servecheck.load.generator.request import read_stream
from servecheck.load.generator.wire import WireResult
from servecheck.load.workload.mix import WeightedCycle
from servecheck.records.record import RequestRecord, http_error
from servecheck.signals import run_async


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
) -> list[RequestRecord]:
    import httpx

    from servecheck.client.factory import ClientSettings, async_client

    settings = ClientSettings.for_target(
        target,
        timeout_s=min(target.timeout_s, 30.0),
        connect_timeout_s=min(target.connect_timeout_s, 5.0),
        max_connections=max_inflight,
    )
    headers = {**settings.headers, "content-type": "application/json"}
    records: list[RequestRecord] = []
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

    async def one(client: httpx.AsyncClient, due: float, name: str, seq: int) -> None:
        async with sem:
            rec = RequestRecord(
                target=target.name,
                scenario="swap-probe",
                worker="probe",
                seq=seq,
                t_intended=due,
                t_sent=time.perf_counter() - t0,
                model=name,
            )
            if opts.stream:
                await _streamed(
                    client,
                    target.base_url,
                    {**body, "model": name},
                    headers,
                    rec,
                    clock=lambda: time.perf_counter() - t0,
                    timeout_s=settings.timeout_s,
                )
            else:
                await _posted(client, target.base_url, {**body, "model": name}, headers, rec)
                rec.t_done = time.perf_counter() - t0
            # The probe's own lateness, never negative (a send before its due time is on time).
            rec.t_intended = min(due, rec.t_sent)
            records.append(rec)

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
            task = asyncio.create_task(one(client, due, pick.next(), n))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            n += 1
            if on_tick is not None and n % max(1, int(rate)) == 0:
                on_tick(time.perf_counter() - t0, len(records), sum(1 for r in records if not r.ok))
        if tasks:
            await asyncio.wait(tasks, timeout=min(target.timeout_s, 30.0) + 5.0)
        if swapper is not None:
            await swapper
    records.sort(key=lambda r: r.t_done or 0.0)
    return records


async def _posted(
    client: Any, base_url: str, body: dict[str, Any], headers: dict[str, str], rec: RequestRecord
) -> None:
    """One plain request into ``rec``: its status, and the model a 2xx answer named."""
    import httpx

    try:
        r = await client.post(base_url + "/chat/completions", json=body, headers=headers)
    except httpx.TimeoutException as exc:
        rec.error, rec.error_message = "timeout", f"{type(exc).__name__}: {exc}"
        return
    except httpx.TransportError as exc:
        rec.error, rec.error_message = "connect", f"{type(exc).__name__}: {exc}"
        return
    rec.status = r.status_code
    if 200 <= r.status_code < 300:
        rec.served_model = _served_model(r)
    else:
        rec.error = http_error(r.status_code)


def _served_model(r: Any) -> str | None:
    try:
        got = r.json().get("model")
    except (ValueError, AttributeError):
        return None
    return got if isinstance(got, str) else None


_MODEL = re.compile(rb'"model"\s*:\s*"((?:[^"\\]|\\.)*)"')


async def _streamed(
    client: Any,
    base_url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    rec: RequestRecord,
    *,
    clock: Callable[[], float],
    timeout_s: float,
) -> None:
    """One streamed request, read by the load generator's request function into ``rec`` (TTFT:
    the first token-bearing chunk; a stream that ends without ``[DONE]`` fails as a
    ``stream-error``); the served model is the one its first chunk names."""
    res = WireResult()
    await read_stream(
        client,
        base_url + "/chat/completions",
        {**body, "stream": True},
        headers,
        rec,
        clock=clock,
        timeout_s=timeout_s,
        res=res,
    )
    if rec.status is not None and rec.status != 200:
        rec.error = http_error(rec.status)  # the swap report counts every non-2xx by its status
    if rec.ok:
        m = _MODEL.search(res.first_body)
        rec.served_model = m.group(1).decode("utf-8", "replace") if m else None


def run_swap_probe(
    target: Target,
    model: str,
    *,
    duration_s: float,
    rate: float = 10.0,
    max_inflight: int = 64,
    on_tick: Callable[[float, int, int], None] | None = None,
    opts: ProbeOptions | None = None,
) -> tuple[list[RequestRecord], float]:
    """Send ``rate`` requests/s to ``target`` for ``duration_s``; return the records and the run length."""
    t0 = time.perf_counter()
    records = run_async(_probe(target, model, duration_s, rate, max_inflight, on_tick, opts))
    return records, max(duration_s, time.perf_counter() - t0)


__all__ = ["ProbeOptions", "run_swap_probe"]
