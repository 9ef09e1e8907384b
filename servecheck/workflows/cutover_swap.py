"""The swap servecheck does itself under the cutover's probe load (``cutover --swap ACTION``):
validation before any traffic, the probe with the swap in it, and the ``swap_impact`` part.

The probe streams (TTFT per request) and splits its traffic across ``probe_models`` by weight;
``swap_at_s`` seconds in, :func:`servecheck.probes.swap.perform` runs the engine's own mechanism
(a runtime LoRA load or unload, an Xinference terminate and relaunch). The part holds when the
swap's own requests succeeded and every ``swap_slos`` bound held; a swap SLO that could not be
measured fails with its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servecheck.analysis.slo import SLO
from servecheck.config.model import Target
from servecheck.errors import SpecError
from servecheck.probes.swap import SwapAction, SwapOutcome, perform, swap_impact, swap_verdicts
from servecheck.probes.swap_probe import ProbeOptions, run_swap_probe
from servecheck.records.record import RequestRecord


def validate(
    swap: SwapAction | None,
    slos: list[SLO],
    mix: list[tuple[str, float]],
    at_s: float,
    duration_s: float,
) -> None:
    """Before any traffic: swap SLOs only with a swap and only swap metrics, the swap inside
    the probe's run, weights that are positive."""
    for slo in slos:
        if not slo.swap:
            raise SpecError(
                "{swap_slos} {slo!r}: not a swap SLO (swap_failed_requests, swap_ttft_spike)",
                slo=slo.text,
            )
    if slos and swap is None:
        raise SpecError("{swap_slos} need {swap} ACTION (the swap they judge)")
    if swap is not None and not 0 <= at_s < duration_s:
        raise SpecError(
            f"{{swap_at_s}} {at_s:g}s: the swap must start inside the probe's {duration_s:g}s"
        )
    for name, weight in mix:
        if not name or weight <= 0:
            raise SpecError(f"{{probe_models}} {name}={weight:g}: a model name and a weight > 0")


def probe_with_swap(
    via: Target,
    model: str,
    swap: SwapAction,
    *,
    duration_s: float,
    rate: float,
    at_s: float,
    mix: list[tuple[str, float]],
    on_tick: Callable[[float, int, int], None] | None = None,
) -> tuple[list[RequestRecord], float, ProbeOptions]:
    """The probe's records and run length, with ``swap`` done ``at_s`` seconds in."""
    opts = ProbeOptions(stream=True, mix=mix, swap=lambda: perform(via, swap), at_s=at_s)
    records, length = run_swap_probe(
        via, model, duration_s=duration_s, rate=rate, on_tick=on_tick, opts=opts
    )
    return records, length, opts


def impact_part(
    records: list[RequestRecord], opts: ProbeOptions, swap: SwapAction, slos: list[SLO]
) -> dict[str, Any]:
    """The ``swap_impact`` part of cutover.json: the swap's outcome, the impact, the verdicts."""
    outcome = opts.swap_result
    if not isinstance(outcome, SwapOutcome):
        outcome = SwapOutcome(False, "the swap never ran (the probe ended first)")
    t0, t1 = (opts.swap_times + [0.0, 0.0])[:2]
    outcome.t_start, outcome.t_end = round(t0, 3), round(t1, 3)
    impact = swap_impact(records, t0)
    verdicts = swap_verdicts(slos, impact)
    reasons = [] if outcome.ok else [f"the swap itself failed: {outcome.detail}"]
    reasons += [v.line() for v in verdicts if not v.passed]
    return {
        "ok": outcome.ok and all(v.passed for v in verdicts),
        "action": swap.text,
        "outcome": outcome.as_dict(),
        "swap_duration_s": round(t1 - t0, 3),
        "failed": impact.failed,
        "failed_after_swap": impact.failed_after_swap,
        "baseline_ttft_p95_ms": impact.baseline_ttft_p95_ms,
        "peak_ttft_p95_ms": impact.peak_ttft_p95_ms,
        "ttft_spike_ms": impact.ttft_spike_ms,
        "settle_s": impact.settle_s,
        "by_model": impact.by_model,
        "slices": impact.slices,
        "slos": [v.as_dict() for v in verdicts],
        "detail": "; ".join(reasons) or None,
    }


__all__ = ["impact_part", "probe_with_swap", "validate"]
