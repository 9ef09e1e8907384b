"""The reference server's request-phase histograms and token counters, under vLLM's names, and
the faults that make them lie (the load run's server section proves it catches each).

Phases of one request, on the server's monotonic clock: *arrival* (the handler has the request,
after any gateway delay), *scheduled* (it holds a running slot), *first token*, *done*. The
histograms are vLLM's: queue = scheduled - arrival, prefill = first token - scheduled,
TTFT = first token - arrival, decode = done - first token, e2e = done - arrival.

Faults (``reference/faults.py``):

* ``metrics-undercount-generation``: ``vllm:generation_tokens_total`` counts three quarters of
  the tokens the usage fields report (an engine that forgets some, or a wrong counter);
* ``metrics-no-ttft-histogram``: ``vllm:time_to_first_token_seconds`` is not exposed;
* ``gateway-first-byte-delay``: every generation request waits :data:`GATEWAY_DELAY_S` before
  the engine sees it, as behind a gateway that holds it: the client's TTFT grows, the engine's
  histograms do not.

Imports only core modules (never client/ or checks/).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any

BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
GATEWAY_DELAY_S = 0.2
UNDERCOUNT = 0.75
HISTOGRAMS = (
    ("queue", "vllm:request_queue_time_seconds", "Histogram of time spent in the queue."),
    ("prefill", "vllm:request_prefill_time_seconds", "Histogram of time spent in prefill."),
    ("ttft", "vllm:time_to_first_token_seconds", "Histogram of time to first token."),
    ("decode", "vllm:request_decode_time_seconds", "Histogram of time spent in decode."),
    ("e2e", "vllm:e2e_request_latency_seconds", "Histogram of end to end request latency."),
)


@dataclass(slots=True)
class _Hist:
    counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    total: float = 0.0
    n: int = 0

    def observe(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.total += seconds
        self.n += 1
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1
                break


@dataclass(slots=True)
class EngineMetrics:
    hists: dict[str, _Hist] = field(default_factory=lambda: {k: _Hist() for k, *_ in HISTOGRAMS})


def _of(state: Any) -> EngineMetrics:
    if state.engine_metrics is None:
        state.engine_metrics = EngineMetrics()
    return state.engine_metrics


async def arrive(state: Any) -> float:
    """The request's arrival (monotonic), after the gateway-first-byte-delay fault held it."""
    if "gateway-first-byte-delay" in state.faults:
        await asyncio.sleep(GATEWAY_DELAY_S)
    return time.monotonic()


def finished(state: Any, arrival: float, scheduled: float, first_token: float | None) -> None:
    """Record one successful request's phases (monotonic seconds; done is now). A non-streamed
    answer (``first_token`` None) had its first token one TTFT after it was scheduled."""
    done = time.monotonic()
    if first_token is None:
        first_token = scheduled + state.config.ttft_ms / 1000
    first_token = min(max(first_token, scheduled), done)
    m = _of(state)
    for key, seconds in (
        ("queue", scheduled - arrival),
        ("prefill", first_token - scheduled),
        ("ttft", first_token - arrival),
        ("decode", done - first_token),
        ("e2e", done - arrival),
    ):
        m.hists[key].observe(seconds)


def generation_tokens(state: Any) -> int:
    """What ``vllm:generation_tokens_total`` says (under-counted by its fault)."""
    if "metrics-undercount-generation" in state.faults:
        return math.floor(state.generation_tokens * UNDERCOUNT)
    return int(state.generation_tokens)


def metric_lines(state: Any) -> list[str]:
    """The phase histograms in exposition text (the TTFT one left out by its fault)."""
    m = _of(state)
    name = state.config.models[0]
    labels = f'engine="0",model_name="{name}"'
    out: list[str] = []
    for key, family, doc in HISTOGRAMS:
        if key == "ttft" and "metrics-no-ttft-histogram" in state.faults:
            continue
        h = m.hists[key]
        out += [f"# HELP {family} {doc}", f"# TYPE {family} histogram"]
        running = 0
        for bound, n in zip(BUCKETS, h.counts, strict=True):
            running += n
            out.append(f'{family}_bucket{{{labels},le="{bound}"}} {running}')
        out += [
            f'{family}_bucket{{{labels},le="+Inf"}} {h.n}',
            f"{family}_sum{{{labels}}} {h.total:.6f}",
            f"{family}_count{{{labels}}} {h.n}",
        ]
    return out
