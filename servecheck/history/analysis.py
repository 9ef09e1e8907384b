"""What a series of nights says: its steps (change points), tonight against the last N nights,
and which check started failing on which night.

Change points: ``ruptures``' binary segmentation over the series with the least-squares (mean
shift) cost, penalised per change by ``2 * sigma^2 * ln(n)`` (BIC for a shift in mean, with
sigma the noise level estimated robustly from the night-to-night differences: their median
absolute deviation / (0.6745 * sqrt 2), so a step itself does not inflate it). A change point
is named only when the step between the two segments' means is also beyond the metric's
``servecheck compare`` threshold (analysis/compare.py), so night-to-night noise is no step.

A step must also be significant (:func:`significant`: Welch's t test between the two levels,
``p < alpha / n``, Bonferroni over the n places the split could have been; with one night
after, the prediction interval below), as compare's regressions are significant and beyond
the threshold.

Tonight against ``rolling:N``: the last N nights' values are a sample; tonight regresses when it
lies outside their Student t prediction interval (``1 - alpha``, two-sided: ``mean +- t * s *
sqrt(1 + 1/N)``, the interval analysis/intervals.py's Student t gives for a new value) on the worse
side *and* the change from their mean is beyond the threshold. The interval stays inside the
metric's domain: latencies and throughputs take it on their logarithms (positive, spread by
factors), shares are clipped to [0, 1]. Fewer than 3 nights cannot say (INCONCLUSIVE); nothing
measured tonight is never a pass, and a night whose load run judged itself INCONCLUSIVE (its
generator fell behind, partial) says nothing of latency or throughput: INCONCLUSIVE, never a
regression.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from servecheck.analysis.compare import Threshold, thresholds
from servecheck.analysis.verdict import FAIL, INCONCLUSIVE, PASS, RunVerdict, compose
from servecheck.records.results import BAD_OUTCOMES, GOOD_OUTCOMES

MIN_NIGHTS = 3
HIGHER_IS_BETTER = ("throughput_rps", "throughput_tps", "goodput")
SHARES = ("error_rate", "goodput")  # in [0, 1]; every other judged metric is positive


@dataclass(slots=True)
class Step:
    """A change point: the first night of the new level and what came with it."""

    metric: str
    index: int  # position in the series of the first night after the step
    night: str
    run_id: str
    engine_version: str | None
    previous_engine_version: str | None
    before: float
    after: float
    worse: bool
    confirmed: bool = True  # False: tonight alone, outside the nights; a later night confirms

    @property
    def change_pct(self) -> float | None:
        return None if self.before == 0 else (self.after - self.before) / abs(self.before) * 100

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "change_pct": self.change_pct}

    def line(self) -> str:
        pct = self.change_pct
        what = "worse" if self.worse else "better"
        came = (
            f"; engine {self.previous_engine_version or '?'} -> {self.engine_version or '?'}"
            if self.engine_version != self.previous_engine_version
            else f"; engine version unchanged ({self.engine_version or 'unknown'})"
        )
        return (
            f"{self.metric}: step on {self.night} (run {self.run_id}) {self.before:.4g} -> "
            f"{self.after:.4g}"
            + (f" ({pct:+.1f}%)" if pct is not None else "")
            + f", {what}{came}"
            + ("" if self.confirmed else " (one night so far: unconfirmed)")
        )


def noise_sigma(values: Sequence[float]) -> float:
    """The series' noise, from the median absolute deviation of successive differences."""
    import numpy as np

    diffs = np.diff(np.asarray(values, dtype=float))
    if diffs.size == 0:
        return 0.0
    mad = float(np.median(np.abs(diffs - np.median(diffs))))
    return mad / (0.6745 * math.sqrt(2.0))


def change_points(values: Sequence[float], *, min_size: int = 2) -> list[int]:
    """Indices where a new level starts (binary segmentation, least squares, BIC penalty)."""
    import numpy as np
    import ruptures

    n = len(values)
    if n < 2 * min_size:
        return []
    signal = np.asarray(values, dtype=float).reshape(-1, 1)
    sigma = noise_sigma(values)
    floor = 1e-9 * max(1.0, float(np.abs(signal).mean()))  # a noiseless series: exact steps
    pen = 2.0 * max(sigma, floor) ** 2 * math.log(n)
    algo = ruptures.Binseg(model="l2", min_size=min_size, jump=1).fit(signal)
    return [int(b) for b in algo.predict(pen=pen) if b < n]


def significant(before: Sequence[float], after: Sequence[float], alpha: float = 0.01) -> bool:
    """Whether the two levels differ beyond noise: Welch's t test (``p < alpha``); one night
    after: outside the before nights' Student t prediction interval (``1 - alpha``)."""
    from scipy.stats import t, ttest_ind

    n = len(before)
    mb = sum(before) / n
    sb = math.sqrt(sum((x - mb) ** 2 for x in before) / (n - 1)) if n > 1 else 0.0
    if len(after) == 1 or sb == 0.0:
        ma = sum(after) / len(after)
        if sb == 0.0:
            return ma != mb
        half = float(t.ppf(1 - alpha / 2, n - 1)) * sb * math.sqrt(1 + 1 / n)
        return abs(ma - mb) > half
    p = float(ttest_ind(list(before), list(after), equal_var=False).pvalue)
    return math.isnan(p) or p < alpha  # nan: both levels exact and different


def steps(
    rows: Sequence[dict[str, Any]],
    metric: str,
    threshold: Threshold | None = None,
    alpha: float = 0.01,
) -> list[Step]:
    """The steps of ``metric`` over the runs ``rows`` (time order), beyond its threshold."""
    pts = [(i, r) for i, r in enumerate(rows) if r["metrics"].get(metric) is not None]
    values = [float(r["metrics"][metric]) for _, r in pts]
    th = threshold or thresholds().get(metric)
    better_up = metric in HIGHER_IS_BETTER
    cuts = change_points(values)
    bounds = [0, *cuts, len(values)]
    out: list[Step] = []
    for k, cut in enumerate(cuts):
        before = values[bounds[k] : cut]
        segment = values[cut : bounds[k + 2]]
        b = sum(before) / len(before)
        up = sum(segment) / len(segment) > b
        # The detector's segments are at least two nights long, so one bad last night drags the
        # cut a night early: the step starts at the segment's first night that is itself beyond.
        first = next((i for i, v in enumerate(segment) if _beyond(th, b, v, up, better_up)), None)
        if first is None:
            continue  # a real but small shift: inside what compare lets pass
        after = segment[first:]
        a = sum(after) / len(after)
        # Judged on the detector's whole segments (trimming to the first night beyond would pick
        # the noise that agrees), with alpha shared by the n places a split could have been
        # (Bonferroni: the detector chose the best of them).
        whole = sum(segment) / len(segment)
        if not _beyond(th, b, whole, up, better_up):
            continue  # one night beyond, the new level not: noise
        if not significant(before, segment, alpha / len(values)):
            continue  # a level the nights' noise explains
        at = cut + first
        row, prev = pts[at][1], pts[at - 1][1]
        out.append(
            Step(
                metric,
                pts[at][0],
                str(row["started_at"])[:10],
                str(row["run_id"]),
                row.get("engine_version"),
                prev.get("engine_version"),
                b,
                a,
                (a < b) if better_up else (a > b),
                confirmed=len(after) >= 2,
            )
        )
    return out


def _beyond(th: Threshold | None, base: float, value: float, up: bool, better_up: bool) -> bool:
    """``value`` moved from ``base`` in direction ``up`` by more than the threshold allows."""
    if (value > base) != up or value == base:
        return False
    if th is None:
        return True
    worse = up != better_up
    return th.beyond(base, value, better_up) if worse else th.beyond(value, base, better_up)


@dataclass(slots=True)
class MetricJudgement:
    """Tonight's value of one metric against the last nights'."""

    metric: str
    tonight: float | None
    nights: int
    mean: float | None
    low: float | None  # the prediction interval
    high: float | None
    regression: bool = False
    improvement: bool = False
    note: str = ""


def prediction_interval(metric: str, xs: Sequence[float], alpha: float) -> tuple[float, float, str]:
    """The nights' Student t prediction interval for a new night, inside the metric's domain:
    latencies and throughputs are positive and spread multiplicatively, so the interval is taken
    on their logarithms (three nights of 100, 300 and 50 req/s then never admit a negative
    throughput); shares (error rate, goodput) are clipped to [0, 1], and a positive metric with
    a zero night to [0, inf), the note saying so."""
    from scipy.stats import t

    n = len(xs)
    k = float(t.ppf(1 - alpha / 2, n - 1)) * math.sqrt(1 + 1 / n)
    positive = metric not in SHARES
    if positive and all(x > 0 for x in xs):
        logs = [math.log(x) for x in xs]
        m = sum(logs) / n
        s = math.sqrt(sum((x - m) ** 2 for x in logs) / (n - 1))
        return math.exp(m - k * s), math.exp(m + k * s), ""
    mean = sum(xs) / n
    half = k * math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    low, high = mean - half, mean + half
    top = 1.0 if not positive else math.inf
    if low < 0 or high > top:
        return max(low, 0.0), min(high, top), "interval clipped to the metric's domain"
    return low, high, ""


def judge_metric(
    metric: str, tonight: float | None, past: Sequence[float], th: Threshold | None, alpha: float
) -> MetricJudgement:
    """Tonight outside the nights' prediction interval on the worse side and beyond threshold."""
    xs = [float(v) for v in past if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if tonight is None:
        return MetricJudgement(metric, None, n, None, None, None, note="not measured tonight")
    if n < MIN_NIGHTS:
        return MetricJudgement(
            metric, tonight, n, None, None, None, note=f"{n} nights (need {MIN_NIGHTS})"
        )
    mean = sum(xs) / n
    low, high, clipped = prediction_interval(metric, xs, alpha)
    j = MetricJudgement(metric, tonight, n, mean, low, high, note=clipped)
    better_up = metric in HIGHER_IS_BETTER
    outside_worse = tonight < low if better_up else tonight > high
    outside_better = tonight > high if better_up else tonight < low
    beyond = th.beyond(mean, tonight, better_up) if th else True
    j.regression = outside_worse and beyond
    j.improvement = outside_better and (th.beyond(tonight, mean, better_up) if th else True)
    if outside_worse and not beyond:
        j.note = "; ".join(
            x
            for x in (
                clipped,
                f"outside the nights' spread but within {th.text if th else 'threshold'}",
            )
            if x
        )
    return j


@dataclass(slots=True)
class CheckChange:
    """A check that failed tonight (or on ``night``) after passing on the nights before."""

    check: str
    model: str | None
    night: str
    run_id: str
    outcome: str
    engine_version: str | None
    last_good_night: str | None


def first_failures(rows: Sequence[dict[str, Any]]) -> list[CheckChange]:
    """For each check failing on the last run: the night its current failing streak began."""
    if not rows:
        return []
    last = {(c, m): o for c, m, o in rows[-1]["checks"]}
    out: list[CheckChange] = []
    for (check, model), outcome in sorted(last.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        if outcome not in BAD_OUTCOMES:
            continue
        start, good = len(rows) - 1, None
        for i in range(len(rows) - 2, -1, -1):
            seen = {(c, m): o for c, m, o in rows[i]["checks"]}.get((check, model))
            if seen in BAD_OUTCOMES:
                start = i
                continue
            if seen in GOOD_OUTCOMES:
                good = str(rows[i]["started_at"])[:10]
            break
        r = rows[start]
        out.append(
            CheckChange(
                check,
                model,
                str(r["started_at"])[:10],
                str(r["run_id"]),
                outcome,
                r.get("engine_version"),
                good,
            )
        )
    return out


@dataclass(slots=True)
class RollingJudgement:
    """Tonight against the last N nights: per-metric judgements, steps, new check failures."""

    target: str
    kind: str
    nights: list[str]
    tonight: dict[str, Any]
    metrics: list[MetricJudgement] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    new_failures: list[CheckChange] = field(default_factory=list)
    verdict: RunVerdict = field(default_factory=lambda: RunVerdict(INCONCLUSIVE))

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "kind": self.kind,
            "nights": self.nights,
            "tonight": {k: self.tonight.get(k) for k in ("run_id", "started_at", "engine_version")},
            "metrics": [asdict(m) for m in self.metrics],
            "steps": [s.as_dict() for s in self.steps],
            "new_failures": [asdict(c) for c in self.new_failures],
            "verdict": self.verdict.status,
            "reasons": self.verdict.reasons,
        }

    def format_text(self) -> str:
        """The console table: a line a metric, the steps, the new failures, the verdict."""
        lines = [
            f"{self.target}: tonight {self.tonight.get('run_id')} vs {len(self.nights)} nights"
        ]
        for m in self.metrics:
            if m.mean is None or m.low is None or m.high is None:
                lines.append(f"  {m.metric:<16} {m.note}")
                continue
            flag = "REGRESSION" if m.regression else "improved" if m.improvement else "ok"
            lines.append(
                f"  {m.metric:<16} {m.tonight:>10.4g}  nights {m.mean:.4g} "
                f"[{m.low:.4g}, {m.high:.4g}]  {flag}" + (f" ({m.note})" if m.note else "")
            )
        lines += ["  " + s.line() for s in self.steps]
        lines += [
            f"  {c.check} [{c.model or '-'}]: newly {c.outcome} on {c.night}"
            for c in self.new_failures
        ]
        why = "; ".join(self.verdict.reasons)
        lines.append(f"verdict: {self.verdict.status.upper()}" + (f" ({why})" if why else ""))
        return "\n".join(lines)


def _judge_load(
    out: RollingJudgement,
    past: Sequence[dict[str, Any]],
    tonight: dict[str, Any],
    ths: dict[str, Threshold],
    alpha: float,
) -> list[RunVerdict]:
    """Each metric against the nights; a worse step whose new level tonight still holds fails
    too (the second night of a regression is as bad as its first, though the nights' spread
    now includes the first)."""
    stages: list[RunVerdict] = []
    series = [*past, tonight]
    names = [m for m in ths if m in tonight["metrics"] or any(m in r["metrics"] for r in past)]
    doubted = tonight.get("verdict") == INCONCLUSIVE and bool(tonight["metrics"])
    if doubted:
        stages.append(
            RunVerdict(
                INCONCLUSIVE,
                [
                    "tonight's load run judged itself INCONCLUSIVE: latency and throughput not judged"
                ],
            )
        )
    for name in names:
        if doubted and name not in SHARES:
            out.metrics.append(
                MetricJudgement(
                    name,
                    tonight["metrics"].get(name),
                    len(past),
                    None,
                    None,
                    None,
                    note="not judged: tonight's run doubted its own measurement",
                )
            )
            continue
        j = judge_metric(
            name,
            tonight["metrics"].get(name),
            [r["metrics"].get(name) for r in past],
            ths.get(name),
            alpha,
        )
        out.metrics.append(j)
        found = steps(series, name, ths.get(name), alpha)
        last = found[-1] if found else None
        if last is not None and last.worse:
            stages.append(RunVerdict(FAIL, [f"{name} stepped: {last.line()}"]))
        elif j.regression:
            prev = past[-1] if past else {}
            last = Step(
                name,
                len(series) - 1,
                str(tonight["started_at"])[:10],
                str(tonight["run_id"]),
                tonight.get("engine_version"),
                prev.get("engine_version"),
                float(j.mean or 0.0),
                float(j.tonight or 0.0),
                True,
                confirmed=False,
            )
            found.append(last)
            stages.append(
                RunVerdict(
                    FAIL,
                    [f"{name} {j.tonight:.4g} regressed vs {j.nights} nights (mean {j.mean:.4g})"],
                )
            )
        out.steps += [s for s in found if s.worse]
    if not tonight["metrics"]:
        stages.append(RunVerdict(INCONCLUSIVE, ["nothing was measured tonight"]))
    elif not doubted and all(j.mean is None for j in out.metrics):
        stages.append(
            RunVerdict(INCONCLUSIVE, [f"{len(past)} nights of history (need {MIN_NIGHTS})"])
        )
    return stages


def judge_rolling(
    past: Sequence[dict[str, Any]],
    tonight: dict[str, Any],
    *,
    overrides: Sequence[str] = (),
    alpha: float = 0.01,
) -> RollingJudgement:
    """Judge ``tonight`` (a run row) against ``past`` (the last N nights' rows, time order)."""
    ths = thresholds(overrides)
    out = RollingJudgement(
        str(tonight["target"]),
        str(tonight["kind"]),
        [str(r["started_at"])[:10] for r in past],
        tonight,
    )
    stages: list[RunVerdict] = []
    series = [*past, tonight]
    if tonight["kind"] == "load":
        stages += _judge_load(out, past, tonight, ths, alpha)
    else:
        out.new_failures = [c for c in first_failures(series) if c.run_id == tonight["run_id"]]
        for c in out.new_failures:
            stages.append(
                RunVerdict(FAIL, [f"{c.check} newly {c.outcome} (passed {c.last_good_night})"])
            )
        if not tonight["checks"]:
            stages.append(RunVerdict(INCONCLUSIVE, ["no check ran tonight"]))
        elif not past:
            stages.append(RunVerdict(INCONCLUSIVE, ["no earlier night to compare with"]))
    out.verdict = compose(stages or [RunVerdict(PASS)])
    return out
