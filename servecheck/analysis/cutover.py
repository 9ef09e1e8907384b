"""What a client of an alias saw while the model behind it was swapped (``servecheck cutover
--swap-under-load``), from the records of :mod:`servecheck.probes.swap_probe` (each a
:class:`~servecheck.records.record.RequestRecord`, times from the probe's start).

:func:`analyse_swap` reports the failed requests by error class, the longest stretch of time
with no successful response (measured between completions, including the start and end of the
run) and every change of the ``model`` field of successful answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from servecheck.records.record import RequestRecord


@dataclass(slots=True)
class ModelChange:
    t: float
    old: str | None
    new: str | None


@dataclass(slots=True)
class SwapReport:
    """What a client of the alias saw during the swap."""

    duration_s: float
    requests: int
    ok: int
    failed: int
    errors: dict[str, int]
    longest_gap_s: float
    gap_start_s: float
    gap_end_s: float
    models_seen: list[str]
    model_changes: list[ModelChange]
    first_failure_s: float | None = None
    last_failure_s: float | None = None
    probe_lag_max_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _done(r: RequestRecord) -> float:
    """When a probe request ended (s from the probe's start; the probe sets it on every record)."""
    return r.t_sent if r.t_done is None else r.t_done


def analyse_swap(records: Sequence[RequestRecord], duration_s: float) -> SwapReport:
    """Failures, the longest time without a successful completion, and served-model changes."""
    recs = sorted(records, key=_done)
    ok = [r for r in recs if r.ok]
    bad = [r for r in recs if not r.ok]
    errors: dict[str, int] = {}
    for r in bad:
        errors[r.error or "?"] = errors.get(r.error or "?", 0) + 1
    end = max(duration_s, _done(recs[-1]) if recs else 0.0)
    marks = [0.0, *(_done(r) for r in ok), end]
    gap, gs, ge = 0.0, 0.0, end
    for a, b in zip(marks, marks[1:], strict=False):
        if b - a > gap:
            gap, gs, ge = b - a, a, b
    changes: list[ModelChange] = []
    seen: list[str] = []
    last: str | None = None
    for r in ok:
        if r.served_model not in seen and r.served_model is not None:
            seen.append(r.served_model)
        if last is not None and r.served_model != last:
            changes.append(ModelChange(round(_done(r), 3), last, r.served_model))
        last = r.served_model
    return SwapReport(
        duration_s=round(end, 3),
        requests=len(recs),
        ok=len(ok),
        failed=len(bad),
        errors=errors,
        longest_gap_s=round(gap, 3),
        gap_start_s=round(gs, 3),
        gap_end_s=round(ge, 3),
        models_seen=seen,
        model_changes=changes,
        first_failure_s=round(bad[0].t_sent, 3) if bad else None,
        last_failure_s=round(_done(bad[-1]), 3) if bad else None,
        probe_lag_max_s=round(max((r.lag for r in recs), default=0.0), 3),
    )


def swap_timeline(
    records: Sequence[RequestRecord], bin_s: float = 0.5
) -> tuple[list[float], list[float], list[float]]:
    """(t, ok/s, failed/s) in bins of completion time, for the plot."""
    if not records:
        return [], [], []
    n = int(max(_done(r) for r in records) // bin_s) + 1
    ok, bad = [0.0] * n, [0.0] * n
    for r in records:
        (ok if r.ok else bad)[int(_done(r) // bin_s)] += 1 / bin_s
    return [(i + 0.5) * bin_s for i in range(n)], ok, bad


__all__ = ["ModelChange", "SwapReport", "analyse_swap", "swap_timeline"]
