"""Capacity planning: the sweep's stop rule, the highest load meeting the SLOs, the knee, replicas.

Pure functions over :class:`Step` results, so the decisions are tested without running load.

* **Stop rule** (:func:`should_stop`): stop after the second step that did not pass (an SLO
  breached, or the run inconclusive because the generator lagged; one
  breach can be a blip; two say the target is past its limit), or when throughput fell by more
  than ``drop`` (default 10 %) below the best seen so far (a saturated server that starts
  thrashing delivers less, not more).
* **Best load** (:func:`best_step`): the highest load level whose step passed (every SLO held,
  no errors beyond the SLOs, no generator lag).
* **Knee** (:func:`knee`): Kneedle-style. Take the latency-vs-throughput points of the steps up
  to the one with the highest throughput (past it the curve folds back), normalise both axes to
  [0, 1], draw the chord from the first to the last point, and pick the point farthest *below*
  the chord (largest perpendicular distance). That is where latency stops being flat and starts
  climbing: more load buys little throughput and costs much latency. No knee when there are
  fewer than three points or none lies below the chord (a straight or concave curve).
* **Replicas** (:func:`replicas_for`): ``ceil(target_rate / (best throughput x headroom))``.
* **Production-like levels** (:func:`level_breakdown`): for multi-turn, shared-prefix, trace and
  dataset steps, what the step's summary says about turns and the prefix cache (the sections of
  :mod:`servecheck.analysis.breakdown`), cut to what a planner compares across levels: TTFT of the
  first request of a conversation or prefix group against the later ones, TTFT p50 by turn, the
  hit rate from ``cached_tokens`` and from the engine's own counters, TTFT with and without a
  cached prefix. A plain chat step has none (``None``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from servecheck.analysis.verdict import FAIL, INCONCLUSIVE, PASS, as_status


@dataclass(slots=True)
class Step:
    """One load level of the sweep and what it measured."""

    level: float  # users (closed loop), requests/s (open loop) or a trace's speed factor
    mode: str  # users | rate | speed
    passed: bool
    requests_per_s: float  # successful requests per second
    tokens_per_s: float
    error_rate: float
    goodput: float | None
    latency_ms: dict[str, dict[str, float | None]] = field(default_factory=dict)
    slo: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    run_id: str = ""
    total: int = 0
    breakdown: dict[str, Any] | None = None  # turns and prefix cache (level_breakdown)
    # The engine's own view (summary.json's server section, when the run sampled /metrics):
    waiting_max: float | None = None  # requests_waiting's highest sample
    preemptions: float | None = None  # the preemptions counter's rise over the step
    judged_on: str = "whole run"  # or "steady window a-b s" (analysis/steady.py)
    # pass | fail | inconclusive: a step that could not measure (a generator behind on a busy
    # machine, a partial run) is neither a level that met the SLOs nor one that broke them.
    status: str = ""  # "": as ``passed`` says

    def __post_init__(self) -> None:
        if not self.status:
            self.status = _word(self.passed)

    @classmethod
    def from_summary(cls, level: float, mode: str, summary: dict[str, Any], passed: bool) -> Step:
        steady = summary.get("steady") or {}
        applied = bool(steady.get("applied")) and bool((steady.get("requests") or {}).get("total"))
        # The steady window's latencies when one applied (what the SLOs judged), else the run's.
        lat = (steady.get("latency_ms") if applied else None) or summary.get("latency_ms") or {}
        thr = (steady.get("throughput") if applied else None) or summary.get("throughput") or {}
        error_rate = float((summary.get("requests") or {}).get("error_rate") or 0.0)
        # Successful requests only: a server that fails fast would otherwise look like a fast one.
        return cls(
            level=level,
            mode=mode,
            passed=passed,
            requests_per_s=float(thr.get("requests_per_s") or 0.0) * (1.0 - error_rate),
            tokens_per_s=float(thr.get("output_tokens_per_s") or 0.0),
            error_rate=error_rate,
            goodput=summary.get("goodput"),
            latency_ms={
                k: {p: (lat.get(k) or {}).get(p) for p in ("p50", "p90", "p95", "p99")}
                for k in ("ttft", "itl", "e2e", "tpot", "ttfa", "ttfr")  # ttfa/ttfr: reasoning
            },
            slo=list(summary.get("slo") or []),
            reasons=list(summary.get("reasons") or []),
            run_id=str(summary.get("run_id") or ""),
            total=int((summary.get("requests") or {}).get("total") or 0),
            breakdown=level_breakdown(summary),
            waiting_max=server_figure(summary, "gauges", "requests_waiting", "max"),
            preemptions=server_figure(summary, "counters", "preemptions_total", "delta"),
            judged_on=f"steady window {steady.get('start_s')}-{steady.get('end_s')} s"
            if applied
            else "whole run",
            status=as_status(summary.get("verdict")) if summary.get("verdict") else "",
        )

    def metric(self, name: str) -> float | None:
        """``e2e_p95`` -> the step's value (ms)."""
        fam, _, stat = name.partition("_")
        return (self.latency_ms.get(fam) or {}).get(stat)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def server_figure(summary: dict[str, Any], kind: str, name: str, stat: str) -> float | None:
    """One figure of a step's engine metrics, or None where the run has none.

    The only reader of summary.json's ``server`` section here (it is written by the run's
    /metrics sampler; older runs and targets without /metrics have none). The keys read:
    ``summary["server"]["gauges"][name]["max"]`` (e.g. ``requests_waiting``) and
    ``summary["server"]["counters"][name]["delta"]`` (e.g. ``preemptions_total``); the names
    are telemetry/prometheus.py's canonical ones (written by analysis/server_gauges.py)."""
    server = summary.get("server")
    section = server.get(kind) if isinstance(server, dict) else None
    entry = section.get(name) if isinstance(section, dict) else None
    value = entry.get(stat) if isinstance(entry, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)


MAX_TURN_COLUMNS = 8  # turns past this are in the step's own report


def level_breakdown(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The turns / prefix-cache figures of one step's summary, for the per-level table."""
    turns, pc = summary.get("turns"), summary.get("prefix_cache")
    if not turns and not pc:
        return None

    def brief(d: Any) -> dict[str, Any]:
        d = d or {}
        return {k: d.get(k) for k in ("count", "p50", "p90", "p99")}

    out: dict[str, Any] = {}
    if turns:
        out["conversations"] = turns.get("conversations")
        out["by_turn"] = {
            t: {
                "count": g.get("count"),
                "ttft_p50": (g.get("ttft_ms") or {}).get("p50"),
                "ttft_p90": (g.get("ttft_ms") or {}).get("p90"),
                "cache_hit_rate": g.get("cache_hit_rate"),
                "history_tokens_mean": g.get("history_tokens_mean"),
            }
            for t, g in list((turns.get("by_turn") or {}).items())[:MAX_TURN_COLUMNS]
        }
    if pc:
        eng = pc.get("engine") or {}
        out.update(
            {
                # First request of a conversation / prefix group (nothing to reuse) vs the rest.
                "ttft_first_ms": brief(pc.get("ttft_first_of_group_ms")),
                "ttft_later_ms": brief(pc.get("ttft_later_in_group_ms")),
                "ttft_cached_ms": brief(pc.get("ttft_cached_ms")),
                "ttft_uncached_ms": brief(pc.get("ttft_uncached_ms")),
                "hit_rate": pc.get("hit_rate"),
                "requests_reporting": pc.get("requests_reporting"),
                "requests_hit": pc.get("requests_hit"),
                "engine_hit_rate": eng.get("hit_rate"),
                "engine_source": eng.get("source"),
                "engine_note": eng.get("note"),
            }
        )
    return out


@dataclass(frozen=True, slots=True)
class StopRules:
    """The sweep's early stops beyond the SLOs: ``max_error_rate`` (a level failing more
    requests than this ends it; None: off) and ``saturation_margin`` (achieved below what the
    load asked for by more than this share, two levels running, while latency or the engine's
    queue grew: over-saturated)."""

    drop: float = 0.10
    max_error_rate: float | None = 0.05
    saturation_margin: float = 0.10
    knee_metric: str = "e2e_p95"


def should_stop(
    steps: Sequence[Step], drop: float = 0.10, rules: StopRules | None = None
) -> str | None:
    """Why the sweep should stop after the last step, or None to go on."""
    rules = rules or StopRules(drop=drop)
    dead = [s for s in steps if s.total and s.requests_per_s == 0 and s.error_rate >= 1.0]
    if dead:
        # Every request failed at a level: that is a broken target, not a saturated one.
        return f"nothing succeeded at {_fmt_level(dead[0])} (every request failed): the target is broken, not saturated"
    last = steps[-1] if steps else None
    if (
        last is not None
        and rules.max_error_rate is not None
        and last.error_rate > rules.max_error_rate
    ):
        return (
            f"error rate {last.error_rate:.1%} at {_fmt_level(last)} is above the bound "
            f"{rules.max_error_rate:.1%}: stopped"
        )
    breaches = [s for s in steps if s.status == FAIL]
    if len(breaches) >= 2:
        return f"SLOs not met at two load levels ({', '.join(_fmt_level(s) for s in breaches[:2])}): past saturation"
    unmeasured = [s for s in steps if s.status == INCONCLUSIVE]
    if len(unmeasured) >= 2:
        # Not saturation: the steps could not measure (the next would not either).
        why = unmeasured[-1].reasons[0] if unmeasured[-1].reasons else "see the step's report"
        return (
            f"two load levels could not be measured ({', '.join(_fmt_level(s) for s in unmeasured[:2])}): "
            f"{why}"
        )
    if len(steps) >= 2:
        best = max(s.requests_per_s for s in steps[:-1])
        got = steps[-1].requests_per_s
        if best > 0 and got < (1.0 - rules.drop) * best:
            return (
                f"throughput dropped to {got:.2f} req/s at {_fmt_level(steps[-1])}, "
                f"{(1 - got / best) * 100:.0f}% below the best {best:.2f} req/s: past saturation"
            )
    return over_saturated(steps, rules.saturation_margin, rules.knee_metric)


def _grew(prev: Step, step: Step, metric: str) -> bool:
    """Latency (the knee's metric) or the engine's waiting queue rose from ``prev`` to ``step``."""
    a, b = prev.metric(metric), step.metric(metric)
    if a is not None and b is not None and b > a:
        return True
    return (step.waiting_max or 0.0) > (prev.waiting_max or 0.0)


def over_saturated(steps: Sequence[Step], margin: float, metric: str) -> str | None:
    """Over-saturation, at each of the last two steps, while latency (``metric``) or the
    engine's waiting queue grew (None: not so). Open loop asks a rate: the achieved rate stayed
    more than ``margin`` below it. A closed loop (or a trace's speed) asks "more": its
    throughput grew by less than ``margin`` over the step before though the load grew (extra
    users only queue: Little's law), which takes three steps to see twice."""
    if len(steps) < 2:
        return None
    prev, last = steps[-2], steps[-1]
    if last.mode == "rate":
        hit = all(s.requests_per_s < (1.0 - margin) * s.level for s in (prev, last))
        hit = hit and _grew(prev, last, metric)
        said = (
            f"the achieved rate stayed more than {margin:.0%} below the offered "
            f"({last.requests_per_s:.2f} of {last.level:g} req/s at the last)"
        )
    elif len(steps) >= 3:
        pairs = ((steps[-3], prev), (prev, last))
        hit = all(
            b.level > a.level and b.requests_per_s < (1.0 + margin) * a.requests_per_s
            for a, b in pairs
        ) and all(_grew(a, b, metric) for a, b in pairs)
        said = (
            f"throughput grew by less than {margin:.0%} a level ({steps[-3].requests_per_s:.2f}, "
            f"{prev.requests_per_s:.2f}, {last.requests_per_s:.2f} req/s) as the load grew"
        )
    else:
        return None
    if not hit:
        return None
    queue = (
        f", the engine's queue up to {last.waiting_max:g}" if last.waiting_max is not None else ""
    )
    return (
        f"over-saturated: at {_fmt_level(prev)} and {_fmt_level(last)} {said} "
        f"while {metric}{queue} grew"
    )


def _fmt_level(s: Step) -> str:
    return f"{s.level:g} {UNITS.get(s.mode, s.mode)}"


# How a level is written: users, requests/s, or the speed factor of a replayed trace.
UNITS = {"users": "users", "rate": "req/s", "speed": "x trace speed"}


def _word(passed: bool) -> str:
    return PASS if passed else FAIL


def best_step(steps: Sequence[Step]) -> Step | None:
    """The highest load level that passed."""
    ok = [s for s in steps if s.passed]
    return max(ok, key=lambda s: s.level) if ok else None


@dataclass(slots=True)
class Knee:
    index: int
    level: float
    throughput: float
    latency_ms: float
    distance: float
    metric: str


def knee(xs: Sequence[float], ys: Sequence[float]) -> tuple[int, float] | None:
    """Index of the point farthest below the chord (normalised axes) and its distance, or None."""
    pts = [(float(x), float(y)) for x, y in zip(xs, ys, strict=True)]
    if len(pts) < 3:
        return None
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    if x1 == x0 or y1 == y0:
        return None
    norm = [((x - x0) / (x1 - x0), (y - y0) / (y1 - y0)) for x, y in pts]
    (ax, ay), (bx, by) = norm[0], norm[-1]
    length = math.hypot(bx - ax, by - ay)
    if length == 0:
        return None
    best: tuple[int, float] | None = None
    for i, (px, py) in enumerate(norm[1:-1], start=1):
        # Signed distance: positive when the point lies below/right of the chord (a convex bend).
        d = ((bx - ax) * (ay - py) - (ax - px) * (by - ay)) / length
        if d > 1e-9 and (best is None or d > best[1]):
            best = (i, d)
    return best


def sweep_knee(steps: Sequence[Step], metric: str = "e2e_p95") -> Knee | None:
    """The knee of latency (``metric``) vs throughput over the steps up to peak throughput."""
    if not steps:
        return None
    peak = max(range(len(steps)), key=lambda i: steps[i].requests_per_s)
    usable = [(i, s) for i, s in enumerate(steps[: peak + 1]) if s.metric(metric) is not None]
    # Also keep the first point past the peak when it is the latency blow-up (it closes the chord).
    if peak + 1 < len(steps) and steps[peak + 1].metric(metric) is not None:
        usable.append((peak + 1, steps[peak + 1]))
    found = knee(
        [s.requests_per_s for _, s in usable], [float(s.metric(metric) or 0.0) for _, s in usable]
    )
    if found is None:
        return None
    i, dist = found
    idx, s = usable[i]
    return Knee(
        idx, s.level, s.requests_per_s, float(s.metric(metric) or 0.0), round(dist, 4), metric
    )


def replicas_for(target_rate: float, per_replica_rate: float, headroom: float = 1.0) -> int | None:
    """Replicas needed to serve ``target_rate`` req/s when one sustains ``per_replica_rate`` within SLOs."""
    if per_replica_rate <= 0 or headroom <= 0:
        return None
    return max(1, math.ceil(target_rate / (per_replica_rate * headroom) - 1e-9))


def engine_knee(steps: Sequence[Step]) -> tuple[int, str] | None:
    """The first level at which the engine itself says it is saturated: requests waited in its
    queue, or it preempted running ones (None: no such level, or no engine metrics)."""
    for i, s in enumerate(steps):
        if s.preemptions is not None and s.preemptions > 0:
            return i, f"the engine preempted {s.preemptions:g} requests"
        if s.waiting_max is not None and s.waiting_max >= 1:
            return i, f"requests waited in the engine's queue (up to {s.waiting_max:g})"
    return None


__all__ = [
    "UNITS",
    "Knee",
    "Step",
    "StopRules",
    "engine_knee",
    "over_saturated",
    "server_figure",
    "best_step",
    "knee",
    "level_breakdown",
    "replicas_for",
    "should_stop",
    "sweep_knee",
]
