"""Confidence intervals over repeated runs (``servecheck load --repeat N``).

One run's p95 is one draw: run the same load again and it moves. N runs of one spec give N
values of each figure; the interval is Student's t over them: ``mean +- t(1 - a/2, N-1) * s /
sqrt(N)`` with ``s`` the sample standard deviation and ``a = 1 - confidence`` (95 % by default).
It treats the runs as independent draws of one distribution of run-level figures (each run its
own process, the same seed: the same prompts), which is what a repeat is for; it says nothing
about the requests within a run (compare's per-request tests do). ``t`` comes from
``scipy.stats.t`` (a core dependency, used by compare and the leak verdicts already). With one
run there is no interval (``None``), never a zero-width one. Every figure here is a latency or a
rate, never below zero: a low end the t interval puts below 0 (three runs far apart) is clipped
to 0, the metric's domain, rather than shown as a negative latency or throughput.

Figures: TTFT / ITL / E2E p50, p95, p99 (ms) from each run's steady window when one applied
(the figures its SLOs judged), else from the whole run, and throughput (successful requests/s,
output tokens/s). Their names are compare's metric names (``ttft_p95``, ``throughput_rps``), so
a comparison of two repeated runs can use them (analysis/compare.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

CONFIDENCE = 0.95
FAMILIES = ("ttft", "itl", "e2e")
STATS = ("p50", "p95", "p99")
METHOD = "Student t over runs"


@dataclass(frozen=True, slots=True)
class Interval:
    """One figure over the runs: mean, the interval's ends (None with one run) and the values."""

    n: int
    mean: float
    low: float | None
    high: float | None
    values: tuple[float, ...]
    confidence: float = CONFIDENCE

    def overlaps(self, other: Interval) -> bool | None:
        """Whether two intervals share a point (None: one of them has no interval)."""
        if None in (self.low, self.high, other.low, other.high):
            return None
        assert self.low is not None and self.high is not None
        assert other.low is not None and other.high is not None
        return self.low <= other.high and other.low <= self.high

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["values"] = list(self.values)
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Interval | None:
        try:
            return cls(
                n=int(d["n"]),
                mean=float(d["mean"]),
                low=None if d.get("low") is None else float(d["low"]),
                high=None if d.get("high") is None else float(d["high"]),
                values=tuple(float(v) for v in d.get("values") or ()),
                confidence=float(d.get("confidence") or CONFIDENCE),
            )
        except (KeyError, TypeError, ValueError):
            return None


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """Student's t interval of the mean of ``values`` (None when there are none), its low end
    clipped to 0: the figures are latencies and rates."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if n == 0:
        return None
    mean = sum(xs) / n
    if n == 1:
        return Interval(1, mean, None, None, tuple(xs), confidence)
    from scipy.stats import t

    s = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(t.ppf(1.0 - (1.0 - confidence) / 2.0, n - 1)) * s / math.sqrt(n)
    return Interval(n, mean, max(mean - half, 0.0), mean + half, tuple(xs), confidence)


def run_figures(summary: Mapping[str, Any]) -> dict[str, float | None]:
    """The figures of one run's summary.json that the intervals are over."""
    steady = summary.get("steady") or {}
    use = (
        steady if steady.get("applied") and (steady.get("requests") or {}).get("total") else summary
    )
    lat = use.get("latency_ms") or {}
    thr = use.get("throughput") or {}
    out: dict[str, float | None] = {
        f"{fam}_{st}": (lat.get(fam) or {}).get(st) for fam in FAMILIES for st in STATS
    }
    out["throughput_rps"] = thr.get("requests_per_s")
    out["throughput_tps"] = thr.get("output_tokens_per_s")
    return out


def repeat_intervals(
    summaries: Sequence[Mapping[str, Any]], confidence: float = CONFIDENCE
) -> dict[str, dict[str, Any]]:
    """``{figure: interval}`` over the runs that sent requests (a run against a target that
    was down measured nothing, not a throughput of 0); a figure no run measured is left out."""
    figures = [
        run_figures(s) for s in summaries if int((s.get("requests") or {}).get("total") or 0)
    ]
    out: dict[str, dict[str, Any]] = {}
    for name in figures[0] if figures else ():
        values = [v for f in figures if (v := f.get(name)) is not None]
        iv = t_interval(values, confidence)
        if iv is not None:
            out[name] = iv.as_dict()
    return out


__all__ = [
    "CONFIDENCE",
    "METHOD",
    "Interval",
    "repeat_intervals",
    "run_figures",
    "t_interval",
]
