"""Which member of a soak mix leaks: each cycle's step in a metric's post-drain level, summed
up per member (issue 45 item 3).

Why steps, not each member's own trend: what a cycle leaks stays held through every cycle after
it, so with members taking turns each member's post-drain levels rise alike, the clean member's
too; a trend test over one member's levels would blame them all. What a cycle adds is its
*step*: its post-drain level minus the level before its load (the previous cycle's post-drain
level, or the idle baseline before the first). A leaking member's steps are positive cycle
after cycle; a clean member's are noise around zero. A member leaks when the run's verdict on
the metric is a leak (or growth) and its own steps are (a) significantly above zero, one-sided
Wilcoxon signed-rank p < ``alpha`` (with 5 steps all positive the exact p is 1/32), and (b) add
up to more than the metric's noise floor (:func:`~servecheck.telemetry.leak.rise_floor`).

The functions are pure: a frame, phase markers, the member of each cycle and the run's verdict
in; one :class:`MemberLeak` a member out.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from servecheck.telemetry.leak import LeakVerdict, Phases

ATTRIBUTED = ("leak", "growth")  # the run's statuses whose cause is looked for among the members


@dataclass(slots=True)
class MemberLeak:
    """One member's share of a metric's drift: its cycles' steps and what they say."""

    member: str
    metric: str
    status: str  # leak | ok | insufficient_data
    cycles: list[int] = field(default_factory=list)  # the member's cycles (1-based) with a step
    steps: list[float] = field(default_factory=list)
    per_cycle: float | None = None  # the median step
    total: float | None = None  # the sum of the steps
    p: float | None = None  # one-sided Wilcoxon signed-rank: the steps above zero
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("per_cycle", "total", "p"):
            value = out[key]
            out[key] = value if value is None or math.isfinite(value) else None
        return out


def cycle_steps(
    frame: pd.DataFrame, phases: Phases, metric: str, *, agg: str, min_samples: int = 3
) -> list[float | None]:
    """Each cycle's step in ``metric``'s post-drain level (its drain window's median minus the
    level before its load); None where this cycle's or the level before it could not be read
    (fewer than ``min_samples`` samples in the window)."""
    from servecheck.telemetry.leak import series_of

    series = series_of(frame, metric, agg=agg)

    def median(start: float, end: float) -> float | None:
        window = series[(series.index >= start) & (series.index <= end)]
        return float(window.median()) if len(window) >= min_samples else None

    before = median(*phases.baseline)
    steps: list[float | None] = []
    for cycle in phases.cycles:
        after = median(cycle.measure_start, cycle.drain_end)
        steps.append(None if after is None or before is None else after - before)
        before = after
    return steps


def _wilcoxon_greater(steps: Sequence[float]) -> float:
    """One-sided Wilcoxon signed-rank p that the steps sit above zero (1.0 when all are zero)."""
    from scipy import stats  # only when a mix is attributed

    if not any(steps):
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            p = float(stats.wilcoxon(steps, alternative="greater").pvalue)
        except ValueError:
            return 1.0
    return p if math.isfinite(p) else 1.0


def attribute(
    frame: pd.DataFrame,
    phases: Phases,
    verdict: LeakVerdict,
    members: Sequence[str],
    *,
    alpha: float = 0.05,
    min_cycles: int = 5,
) -> list[MemberLeak]:
    """One :class:`MemberLeak` a member (in the order they first ran) for the run's ``verdict``
    on its metric; ``members[i]`` ran cycle ``i + 1`` of ``phases``."""
    from servecheck.telemetry.leak import fmt_value

    agg = "max" if verdict.metric == "kv_usage" else "sum"  # as analyse_leak combines label sets
    steps = cycle_steps(frame, phases, verdict.metric, agg=agg)
    floor = verdict.floor or 0.0
    out: list[MemberLeak] = []
    for member in dict.fromkeys(members):
        own = [
            (i + 1, s) for i, (m, s) in enumerate(zip(members, steps, strict=False)) if m == member
        ]
        share = MemberLeak(member, verdict.metric, "ok", [c for c, s in own if s is not None])
        share.steps = [s for _, s in own if s is not None]
        f = lambda v, m=verdict.metric: fmt_value(v, m)  # noqa: E731
        if len(share.steps) < min_cycles:
            share.status = "insufficient_data"
            share.message = (
                f"{len(share.steps)} cycle(s) of `{member}` with a step (need {min_cycles})"
            )
            out.append(share)
            continue
        share.per_cycle = float(np.median(share.steps))
        share.total = float(sum(share.steps))
        share.p = _wilcoxon_greater(share.steps)
        numbers = (
            f"{'+' if share.per_cycle >= 0 else ''}{f(share.per_cycle)} per cycle over its "
            f"{len(share.steps)} cycles (total {f(share.total)}, noise floor {f(floor)}; "
            f"Wilcoxon p={share.p:.3g})"
        )
        if verdict.status in ATTRIBUTED and share.p < alpha and share.total > floor:
            share.status = "leak"
        share.message = numbers
        out.append(share)
    return out


def leaking(shares: Sequence[MemberLeak]) -> list[str]:
    """The members whose own cycles leak."""
    return [s.member for s in shares if s.status == "leak"]


__all__ = ["ATTRIBUTED", "MemberLeak", "attribute", "cycle_steps", "leaking"]
