"""Leak analysis over repeated identical load cycles, and the drain check.

Why cycles and a trend test: engines preallocate GPU memory, so VRAM stays flat while the KV
cache fills; prefix caching keeps blocks after requests end; and a single post-load reading
is noisy. What separates a leak from all that is a post-drain level that *keeps rising* from
one identical cycle to the next. So each cycle's post-drain level (median over its drain
window) is compared with the idle baseline (median over the baseline window), and the levels
are tested for an upward trend: Theil-Sen slope with its 95% confidence interval
(``scipy.stats.theilslopes``) and Mann-Kendall (``scipy.stats.kendalltau`` against the cycle
index, one-sided ``greater``).

Verdicts (:class:`LeakVerdict.status`):

- ``leak``: Mann-Kendall p < ``alpha``, the slope's CI excludes 0, and the fitted rise over the
  run (slope x (cycles - 1)) exceeds ``tolerance`` (from ``SETTLE_MIN_CYCLES`` cycles on, still
  rising in the later half of them).
- ``leak`` also: the same significant trend with a rise below ``tolerance`` but above the
  series' noise floor (:func:`rise_floor`: a few robust standard deviations of the baseline
  window, 1 % of the baseline, a small per-metric minimum), when the rise did not flatten in the
  later half of the cycles: a fixed tolerance must not hide a sustained leak that is small
  against it (+90 MiB of RSS against 256 MiB on a small model).
- ``growth``: that significant rise above the floor, but flattening in the later cycles (a
  warm-up, a cache filling to its bound, allocator growth that plateaus): not a leak, not a
  pass; more cycles tell them apart. A rise beyond ``tolerance`` is judged so too, but only
  from ``SETTLE_MIN_CYCLES`` cycles on (fewer cannot tell a warm-up from a leak: a leak).
- ``leak`` also: the median post-drain level is within ``tolerance`` of the metric's ceiling
  (1.0 for ``kv_usage``): the cache is full with nothing running; a leak that saturated early
  has no trend left to test.
- ``retention``: not a leak, but the median post-drain level is above baseline +
  ``tolerance``: a plateau, e.g. prefix/radix cache blocks kept on purpose. Only where a prefix
  cache may hold them: given ``prefix_cache`` (:func:`prefix_cache_evidence`) that says the
  target has none (declared none, or no prefix-cache counter on /metrics, or counters that
  stayed 0), the same plateau is a ``leak``: nothing is meant to keep those blocks.
- ``ok``: no such trend and the median post-drain level is within baseline + ``tolerance``.
- ``inconclusive``: no trend and back to baseline, but no cycle's load peak moved the metric
  beyond baseline + ``tolerance``: the run did not exercise what it measures, so a leak could not
  show (a load whose every request failed, or a metric that does not follow the load).
- ``inconclusive`` also, for the engine's gauges (:data:`ENGINE_GAUGES`): the load moved the
  gauge in under :data:`MIN_MOVED_SHARE` of the samples taken under load, or in under half the
  cycles. vLLM sets ``num_requests_running`` and ``kv_cache_usage_perc`` from the scheduler's
  stats after each engine step, so a scrape reads the batch as it was at the last step; short
  requests on a busy host leave the batch empty between them, and a few one-sample spikes are
  too few to say the load exercised what a clean drain would show (docs/engines.md, 2026-12-06).
- ``insufficient_data``: no baseline (fewer than ``min_samples`` samples in its window) or
  fewer than ``min_cycles`` cycles with ``min_samples`` samples in their drain window.

The functions are pure: a DataFrame and phase markers in, a verdict out.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

STATUSES = ("ok", "leak", "retention", "inconclusive", "insufficient_data")
_FRACTIONS = frozenset({"kv_usage"})
DRAIN_STATUSES = ("ok", "not_drained", "insufficient_data")


@dataclass(slots=True)
class Cycle:
    """One load cycle: load runs ``[start, end]``, then the server is left idle until
    ``drain_end``. The post-drain level is measured over ``[drain_start, drain_end]``;
    ``drain_start`` defaults to ``end`` (set it later to let queues empty first)."""

    start: float
    end: float
    drain_end: float
    drain_start: float | None = None

    @property
    def measure_start(self) -> float:
        return self.end if self.drain_start is None else self.drain_start


@dataclass(slots=True)
class Phases:
    """Phase markers, in the clock of the frame's time column (wall-clock ``t`` by default)."""

    baseline: tuple[float, float]
    cycles: list[Cycle] = field(default_factory=list)

    @classmethod
    def from_schedule(
        cls,
        t0: float,
        *,
        baseline_s: float,
        load_s: float,
        drain_s: float,
        cycles: int,
        settle_s: float | None = None,
    ) -> Phases:
        """Markers for a fixed schedule starting at ``t0``: idle baseline, then ``cycles`` x
        (load ``load_s``, idle ``drain_s``). Each drain is measured from ``settle_s`` after the
        load ends (default: half the drain) to its end."""
        settle = drain_s / 2 if settle_s is None else settle_s
        if not 0 <= settle < drain_s:
            raise ValueError(f"settle_s must be in [0, drain_s), got {settle}")
        out: list[Cycle] = []
        t = t0 + baseline_s
        for _ in range(cycles):
            out.append(Cycle(t, t + load_s, t + load_s + drain_s, t + load_s + settle))
            t += load_s + drain_s
        return cls((t0, t0 + baseline_s), out)

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": list(self.baseline), "cycles": [asdict(c) for c in self.cycles]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Phases:
        start, end = data["baseline"]
        return cls((float(start), float(end)), [Cycle(**c) for c in data.get("cycles", [])])


@dataclass(slots=True, frozen=True)
class PrefixCache:
    """Whether the target has a prefix cache that may keep KV blocks after a drain, and why we
    think so (:func:`prefix_cache_evidence`)."""

    present: bool
    why: str


PREFIX_COUNTERS = ("prefix_cache_queries_total", "prefix_cache_hits_total")


def prefix_cache_evidence(frame: pd.DataFrame, declared: bool | str | None) -> PrefixCache:
    """A prefix cache as the target declares it (``capabilities.prefix_cache``: true / false),
    else as its telemetry shows it (``auto``, None): the prefix-cache counters of /metrics
    (``prefix_cache_queries_total`` / ``_hits_total``, canonical names) above 0."""
    if declared is True:
        return PrefixCache(True, "the target declares a prefix cache (capabilities.prefix_cache)")
    if declared is False:
        return PrefixCache(
            False, "the target declares no prefix cache (capabilities.prefix_cache: false)"
        )
    counters = [series_of(frame, name) for name in PREFIX_COUNTERS]
    seen = [s for s in counters if len(s)]
    if not seen:
        return PrefixCache(False, "the target reports no prefix cache (no counters on /metrics)")
    top = max(float(s.max()) for s in seen)
    if top <= 0:
        return PrefixCache(False, "the target's prefix-cache counters stayed 0")
    return PrefixCache(True, f"the target's prefix cache was used ({top:g} tokens counted)")


# Device memory series (telemetry/device.py), judged by these names: they sit at the engine's
# preallocation (tens of GB), where 1 % of the baseline would hide a leak of hundreds of MiB,
# so their floor and tolerance scale with the baseline ten times less.
DEVICE_SERIES_NAMES = (
    "nvml_used_bytes",
    "nvml_engine_bytes",
    "dcgm_fb_used_bytes",
    "amdgpu_vram_used_bytes",
    "amdgpu_gtt_used_bytes",
)
# The noise floor of a trend's rise, per metric (in its unit): a significant Mann-Kendall order
# with a rise below it is rounding; above it a sustained rise is a leak whatever the tolerance.
RISE_FLOOR_ABS: dict[str, float] = {
    "kv_usage": 0.005,
    "requests_running": 0.25,
    "rss_tree_bytes": 8 * 2**20,
    **dict.fromkeys(DEVICE_SERIES_NAMES, 16 * 2**20),
}
RISE_FLOOR_REL = 0.01  # of the baseline level
RISE_FLOOR_REL_OF: dict[str, float] = dict.fromkeys(DEVICE_SERIES_NAMES, 0.001)
NOISE_SIGMAS = 4.0  # robust standard deviations of the baseline window
# The fewest cycles whose later half can show a rise beyond the tolerance stopped (5 late
# cycles, 10 slopes between them); a 24-cycle vLLM CPU soak's worker grew 167 MiB, flattening.
SETTLE_MIN_CYCLES = 10
# Where no tolerance is given (tolerance None): one that scales with the series, for metrics
# whose size depends on the model and engine (RSS: 70 MiB for a small server, GBs for vLLM).
AUTO_TOLERANCE_ABS: dict[str, float] = {
    "rss_tree_bytes": 32 * 2**20,
    **dict.fromkeys(DEVICE_SERIES_NAMES, 64 * 2**20),
}
AUTO_TOLERANCE_REL = 0.05
# The engine's own gauges, read from /metrics between its updates: an "ok" on one of them needs
# the load to show in a fair share of the samples under load, not in a few spikes.
ENGINE_GAUGES = frozenset({"kv_usage", "requests_running"})
MIN_MOVED_SHARE = 0.10
AUTO_TOLERANCE_REL_OF: dict[str, float] = dict.fromkeys(DEVICE_SERIES_NAMES, 0.005)


def robust_sd(values: pd.Series) -> float:
    """1.4826 x the median absolute deviation: a standard deviation that one spike cannot move."""
    if len(values) == 0:
        return 0.0
    x = values.to_numpy(dtype=float)
    return float(1.4826 * np.median(np.abs(x - np.median(x))))


def rise_floor(metric: str, baseline: float, noise: float) -> float:
    """The smallest rise over the run that is more than noise: the largest of NOISE_SIGMAS x the
    baseline's robust sd, RISE_FLOOR_REL of the baseline and the metric's minimum."""
    rel = RISE_FLOOR_REL_OF.get(metric, RISE_FLOOR_REL)
    return max(NOISE_SIGMAS * noise, rel * abs(baseline), RISE_FLOOR_ABS.get(metric, 0.0))


def auto_tolerance(metric: str, baseline: float, noise: float) -> float:
    """The tolerance used where none was given: AUTO_TOLERANCE_REL of the baseline, at least
    twice the noise floor and the metric's minimum."""
    return max(
        AUTO_TOLERANCE_ABS.get(metric, 0.0),
        AUTO_TOLERANCE_REL_OF.get(metric, AUTO_TOLERANCE_REL) * abs(baseline),
        2 * rise_floor(metric, baseline, noise),
    )


def _sustained(levels: Sequence[float], slope: float) -> bool:
    """True when the later half of the cycles still rises at half the run's slope or more (a
    leak keeps going; a warm-up or a cache filling to its bound flattens)."""
    late = np.asarray(levels[len(levels) // 2 :], dtype=float)
    if len(late) < 2:
        return True
    pairs = [
        (late[j] - late[i]) / (j - i) for i in range(len(late)) for j in range(i + 1, len(late))
    ]
    return float(np.median(pairs)) >= 0.5 * slope


def _flattened(levels: Sequence[float], slope: float) -> bool:
    """A rise beyond the tolerance that stopped: enough cycles (SETTLE_MIN_CYCLES) for the later
    half to be judged on its own, and that half rising at under half the run's slope. Fewer
    cycles cannot tell a warm-up from a leak, so a large rise there stays a leak."""
    return len(levels) >= SETTLE_MIN_CYCLES and not _sustained(levels, slope)


def unjudged(verdicts: Mapping[str, LeakVerdict], skip: str = "") -> list[str]:
    """A reason for each series that was sampled but could not be judged (insufficient data):
    the run gave no verdict on it, so it must not pass (``skip``: a metric the caller reports
    itself)."""
    out = []
    for metric, v in verdicts.items():
        if metric != skip and v.status == "insufficient_data":
            detail = v.message.removeprefix("INSUFFICIENT DATA: ").removeprefix(f"{metric}: ")
            out.append(f"{metric}: inconclusive: insufficient data, no verdict ({detail})")
    return out


@dataclass(slots=True)
class LeakVerdict:
    """The outcome of :func:`analyse_leak`, with every number behind it."""

    status: str
    metric: str
    message: str
    tolerance: float
    baseline: float | None = None
    floor: float | None = None  # the rise that is more than noise (rise_floor)
    tolerance_auto: bool = False  # tolerance derived from the series (none was given)
    cycles_total: int = 0
    cycles_used: int = 0
    returned: int = 0
    post_drain: list[float] = field(default_factory=list)
    peaks: list[float] = field(default_factory=list)
    slope: float | None = None
    slope_ci: tuple[float, float] | None = None
    rise: float | None = None
    mk_tau: float | None = None
    mk_p: float | None = None
    drain_s: float | None = None
    gaps: int = 0
    load_samples: int = 0  # samples inside the load windows of the usable cycles
    moved_samples: int = 0  # of them, beyond baseline + tolerance
    cycles_moved: int = 0  # usable cycles with at least one such sample
    cycles_loaded: int = 0  # usable cycles whose load was counted (a soak mix's error path is not)

    @property
    def passed(self) -> bool:
        """True for ``ok``; ``retention`` and ``insufficient_data`` are for the caller to judge."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(asdict(self))


@dataclass(slots=True)
class DrainVerdict:
    """The outcome of :func:`check_drain`. Times are seconds after ``since``."""

    status: str
    message: str
    since: float
    bound_s: float
    tolerance: float
    baseline: float | None = None
    running_zero_after_s: float | None = None
    kv_baseline_after_s: float | None = None
    drained_after_s: float | None = None
    last_running: float | None = None
    last_kv: float | None = None

    @property
    def passed(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(asdict(self))


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    return obj


def fmt_value(value: float | None, metric: str) -> str:
    """A value of ``metric`` as the verdict messages write it (MiB for bytes, 3 places else)."""
    if value is None or not math.isfinite(value):
        return "n/a"
    value = value + 0.0  # no "-0.000"
    if abs(value) < 5e-4 and not metric.endswith("_bytes"):
        value = 0.0
    if metric.endswith("_bytes"):
        return f"{value / 2**20:.1f} MiB"
    if abs(value) < 10:
        return f"{value:.3f}"
    return f"{value:.4g}"


def series_of(
    frame: pd.DataFrame,
    metric: str,
    *,
    source: str | None = None,
    labels: Mapping[str, str] | None = None,
    time_col: str = "t",
    agg: str = "sum",
) -> pd.Series:
    """One metric as a time-indexed Series; rows sharing a timestamp are combined with ``agg``.

    ``frame`` is a :func:`load_series` frame, or any frame with ``time_col`` and ``value``
    columns (then ``metric``/``source``/``labels`` filters apply only to columns it has).
    """
    mask = pd.Series(True, index=frame.index)
    if "kind" in frame.columns:
        mask &= frame["kind"].fillna("sample") == "sample"
    if "metric" in frame.columns:
        mask &= frame["metric"] == metric
    if source is not None and "source" in frame.columns:
        mask &= frame["source"] == source
    rows = frame[mask]
    if labels and "labels" in rows.columns:
        keep = [
            isinstance(lab, dict) and all(lab.get(k) == v for k, v in labels.items())
            for lab in rows["labels"]
        ]
        rows = rows[keep]
    rows = rows[[time_col, "value"]].dropna()
    if rows.empty:
        return pd.Series(dtype=float)
    return rows.groupby(time_col)["value"].agg(agg).sort_index().astype(float)


def _gap_times(frame: pd.DataFrame, metric: str, source: str | None, time_col: str) -> np.ndarray:
    if "kind" not in frame.columns:
        return np.array([], dtype=float)
    gaps = frame[frame["kind"] == "gap"]
    if source is not None:
        gaps = gaps[gaps["source"] == source]
    elif "metric" in frame.columns and "source" in frame.columns:
        sources = set(frame.loc[frame["metric"] == metric, "source"])
        gaps = gaps[gaps["source"].isin(sources)] if sources else gaps.iloc[0:0]
    return gaps[time_col].to_numpy(dtype=float)


def _window(series: pd.Series, start: float, end: float) -> pd.Series:
    return series[(series.index >= start) & (series.index <= end)]


def _trend(levels: Sequence[float]) -> tuple[float, float, float, float, float]:
    """Theil-Sen slope, its 95% CI, Kendall tau and one-sided Mann-Kendall p."""
    from scipy import stats  # ~1.5 s to import: only when a verdict needs it

    idx = np.arange(len(levels), dtype=float)
    y = np.asarray(levels, dtype=float)
    if np.ptp(y) == 0:
        return 0.0, 0.0, 0.0, 0.0, 1.0
    ts = stats.theilslopes(y, idx, alpha=0.95)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kt = stats.kendalltau(idx, y, alternative="greater")
    tau = float(kt.statistic) if np.isfinite(kt.statistic) else 0.0
    p = float(kt.pvalue) if np.isfinite(kt.pvalue) else 1.0
    return float(ts.slope), float(ts.low_slope), float(ts.high_slope), tau, p


def _cycle_levels(
    series: pd.Series, phases: Phases, gap_t: np.ndarray, min_samples: int
) -> tuple[list[float], list[float], list[float], list[str], int]:
    """Per usable cycle: the post-drain median, the load peak and the drain time (s); why the
    other cycles are unusable; and the gap records inside drain windows."""
    levels: list[float] = []
    peaks: list[float] = []
    drains: list[float] = []
    problems: list[str] = []
    gaps = 0
    for number, cycle in enumerate(phases.cycles, start=1):
        gaps += int(((gap_t >= cycle.measure_start) & (gap_t <= cycle.drain_end)).sum())
        drain = _window(series, cycle.measure_start, cycle.drain_end)
        load = _window(series, cycle.start, cycle.end)
        if len(drain) < min_samples:
            problems.append(f"cycle {number}: {len(drain)} sample(s) in its drain window")
            continue
        levels.append(float(drain.median()))
        peaks.append(float(load.max()) if len(load) else math.nan)
        drains.append(cycle.drain_end - cycle.end)
    return levels, peaks, drains, problems, gaps


def analyse_leak(
    frame: pd.DataFrame,
    phases: Phases,
    metric: str = "kv_usage",
    tolerance: float | None = 0.02,
    *,
    source: str | None = None,
    labels: Mapping[str, str] | None = None,
    time_col: str = "t",
    alpha: float = 0.05,
    min_cycles: int = 5,
    min_samples: int = 3,
    agg: str | None = None,
    ceiling: float | None = None,
    prefix_cache: PrefixCache | None = None,
    expect_flat: bool = False,
    retention_cause: str | None = None,
    unloaded: Collection[int] = (),
) -> LeakVerdict:
    """Decide whether ``metric`` leaks across the load cycles in ``phases``.

    ``frame``: a :func:`~servecheck.telemetry.series.load_series` frame (or any frame with
    ``t``/``value``). ``tolerance`` is absolute, in the metric's unit (0.02 = 2 points of KV
    usage); None derives it from the series (:func:`auto_tolerance`). Samples of one timestamp from several label sets are combined with ``agg`` (default:
    ``max`` for ``kv_usage``, ``sum`` otherwise, as the Prometheus sampler does); pick a label
    set with ``labels``. Gap records of the metric's source inside a cycle's drain window
    are counted in ``gaps``; a cycle is used when its drain window has ``min_samples`` samples.
    ``min_cycles`` defaults to 5, the fewest for which a one-sided Mann-Kendall test can reach
    p < 0.05 (with 4 the exact p is at least 1/24 ~ 0.042 only for a perfect order).
    ``ceiling`` is the metric's maximum (default 1.0 for ``kv_usage``, else none): a median
    post-drain level within ``tolerance`` of it is a leak that has saturated, not retention.
    ``prefix_cache`` (None: unknown) decides whether a plateau is retention or a leak.
    ``expect_flat``: the metric is flat under load by design (device memory at an engine's
    preallocation), so a load that never moved it is the expected shape, not inconclusive;
    ``retention_cause`` names what keeps a plateau where no prefix cache is in question.
    ``unloaded``: the (1-based) cycles whose load is not meant to move the metric (a soak mix's
    error path, refused before it runs), left out of the check that the load moved it.
    See the module docstring for the verdict rules.
    """
    if agg is None:
        agg = "max" if metric in _FRACTIONS else "sum"
    series = series_of(frame, metric, source=source, labels=labels, time_col=time_col, agg=agg)
    top = ceiling if ceiling is not None else (1.0 if metric == "kv_usage" else None)
    gap_t = _gap_times(frame, metric, source, time_col)
    total = len(phases.cycles)
    base = _window(series, *phases.baseline)
    verdict = LeakVerdict(
        "insufficient_data",
        metric,
        "",
        math.nan if tolerance is None else tolerance,
        cycles_total=total,
        tolerance_auto=tolerance is None,
    )
    if len(base) < min_samples:
        verdict.message = (
            f"INSUFFICIENT DATA: {metric}: {len(base)} sample(s) in the baseline window "
            f"[{phases.baseline[0]:.1f}, {phases.baseline[1]:.1f}] (need {min_samples}); "
            f"{len(series)} sample(s) of {metric} in all"
        )
        return verdict
    baseline = float(base.median())
    verdict.baseline = baseline
    noise = robust_sd(base)
    verdict.floor = rise_floor(metric, baseline, noise)
    if tolerance is None:
        verdict.tolerance = auto_tolerance(metric, baseline, noise)
    levels, peaks, drains, problems, gaps = _cycle_levels(series, phases, gap_t, min_samples)
    verdict.gaps = gaps
    _load_coverage(verdict, series, phases, min_samples, unloaded)
    verdict.cycles_used = len(levels)
    verdict.post_drain = levels
    verdict.peaks = peaks
    verdict.drain_s = float(np.median(drains)) if drains else None
    if len(levels) < min_cycles:
        why = "; ".join(problems[:3]) + (" ..." if len(problems) > 3 else "")
        verdict.message = (
            f"INSUFFICIENT DATA: {metric}: {len(levels)} usable cycle(s) of {total} "
            f"(need {min_cycles} for a trend test)"
            + (f": {why}" if why else "")
            + (f"; {gaps} gap record(s) in drain windows" if gaps else "")
        )
        return verdict

    _decide_from_levels(
        verdict,
        levels,
        peaks,
        baseline=baseline,
        alpha=alpha,
        ceiling=top,
        prefix_cache=prefix_cache,
        total=total,
        expect_flat=expect_flat,
        retention_cause=retention_cause,
    )
    return verdict


def _load_coverage(
    verdict: LeakVerdict,
    series: pd.Series,
    phases: Phases,
    min_samples: int,
    unloaded: Collection[int] = (),
) -> None:
    """Count the samples under load, and those beyond baseline + tolerance, over the cycles
    :func:`_cycle_levels` uses (those with ``min_samples`` in their drain window), but the
    ``unloaded`` ones (1-based): cycles whose load is not meant to move the metric."""
    top = (verdict.baseline or 0.0) + verdict.tolerance
    for number, cycle in enumerate(phases.cycles, start=1):
        if len(_window(series, cycle.measure_start, cycle.drain_end)) < min_samples:
            continue
        if number in unloaded:
            continue
        load = _window(series, cycle.start, cycle.end)
        moved = int((load > top).sum())
        verdict.load_samples += len(load)
        verdict.moved_samples += moved
        verdict.cycles_moved += int(moved > 0)
        verdict.cycles_loaded += 1


def _unexercised(
    verdict: LeakVerdict, peaks: list[float], baseline: float, f: Callable[[float], str]
) -> str:
    """Why the load did not exercise the metric (an ``inconclusive`` message), or "" when it
    did: no peak beyond tolerance, or, for an engine gauge, too few samples beyond it."""
    metric, tolerance = verdict.metric, verdict.tolerance
    if peaks and all(not peak > baseline + tolerance for peak in peaks):
        return (
            f"INCONCLUSIVE: load never moved {metric} beyond tolerance {f(tolerance)} (baseline "
            f"{f(baseline)}, highest peak {f(max(peaks))}), so a leak could not show; raise the "
            f"load or check that requests succeed"
        )
    n, moved, total = verdict.cycles_loaded, verdict.moved_samples, verdict.load_samples
    if metric not in ENGINE_GAUGES or total == 0:
        return ""
    if moved >= MIN_MOVED_SHARE * total and 2 * verdict.cycles_moved >= n:
        return ""
    return (
        f"INCONCLUSIVE: the engine's {metric} gauge moved beyond tolerance {f(tolerance)} in only "
        f"{moved} of {total} samples under load ({100 * moved / total:.0f}%, in "
        f"{verdict.cycles_moved} of {n} cycles; need {MIN_MOVED_SHARE:.0%} and half the cycles): "
        f"the engine sets it after each step and most samples found its batch empty, too few "
        f"for a leak verdict; sample more often (a shorter interval) or raise the load (baseline "
        f"{f(baseline)}, highest peak {f(max(peaks))})"
    )


def inconclusive_reason(verdict: LeakVerdict) -> str:
    """Why an ``inconclusive`` verdict could not judge, in a few words for a run's reasons."""
    if verdict.moved_samples and verdict.metric in ENGINE_GAUGES:
        return (
            f"the engine's gauge showed the load in only {verdict.moved_samples} of "
            f"{verdict.load_samples} samples, too coarse for a verdict"
        )
    return "the load never moved it, so a leak could not show"


def _decide_from_levels(
    verdict: LeakVerdict,
    levels: list[float],
    peaks: list[float],
    *,
    baseline: float,
    alpha: float,
    ceiling: float | None,
    prefix_cache: PrefixCache | None,
    total: int,
    expect_flat: bool = False,
    retention_cause: str | None = None,
) -> None:
    """Set ``verdict``'s trend, status and message from enough cycles' post-drain levels."""
    metric, tolerance, gaps, top = verdict.metric, verdict.tolerance, verdict.gaps, ceiling
    excess = [level - baseline for level in levels]
    returned = sum(1 for e in excess if e <= tolerance)
    slope, low, high, tau, p = _trend(levels)
    n = len(levels)
    rise = slope * (n - 1)
    verdict.returned = returned
    verdict.slope, verdict.slope_ci, verdict.rise = slope, (low, high), rise
    verdict.mk_tau, verdict.mk_p = tau, p
    f = lambda v: fmt_value(v, metric)  # noqa: E731
    trend_text = (
        f"Theil-Sen slope {f(slope)}/cycle, 95% CI [{f(low)}, {f(high)}]; Mann-Kendall p={p:.3g}"
    )
    drain_text = f"{verdict.drain_s:.3g} s" if verdict.drain_s is not None else "n/a"
    gap_text = f"; {gaps} gap record(s) in drain windows" if gaps else ""
    unused = f" ({total - n} cycle(s) unusable)" if n < total else ""
    if p < alpha and low > 0 and rise > tolerance and _flattened(levels, slope):
        _sustained_or_growth(verdict, levels, baseline, f, trend_text, unused + gap_text)
    elif p < alpha and low > 0 and rise > tolerance:
        verdict.status = "leak"
        verdict.message = (
            f"LEAK: {metric} post-drain level rose {f(levels[0])} -> {f(levels[-1])} over {n} "
            f"cycles (baseline {f(baseline)}; {trend_text}){unused}{gap_text}"
        )
    elif top is not None and float(np.median(levels)) >= top - tolerance:
        _saturated(verdict, levels, baseline, top, f, unused + gap_text)
    elif p < alpha and low > 0 and rise > (verdict.floor or 0.0):
        _sustained_or_growth(verdict, levels, baseline, f, trend_text, unused + gap_text)
    elif (
        float(np.median(excess)) > tolerance
        and prefix_cache is not None
        and not prefix_cache.present
    ):
        # Kept blocks with no cache to keep them: a leak that stopped growing (the kv-leak
        # fault fills the cache and flattens, seen 0.26 -> 0.45 and flat), not retention.
        verdict.status = "leak"
        verdict.message = (
            f"LEAK: {metric} stayed at {f(float(np.median(levels)))} after drain "
            f"(baseline {f(baseline)}, tolerance {f(tolerance)}) and {prefix_cache.why}, so "
            f"nothing should keep it; levels {', '.join(f(v) for v in levels)} ({trend_text})"
            f"{unused}{gap_text}"
        )
    elif float(np.median(excess)) > tolerance:
        verdict.status = "retention"
        cause = (
            f"retention: {prefix_cache.why}"
            if prefix_cache is not None
            else retention_cause or "possible retention (prefix cache?)"
        )
        verdict.message = (
            f"RETENTION: {metric} stayed at {f(float(np.median(levels)))} after drain "
            f"(baseline {f(baseline)}, tolerance {f(tolerance)}) but flat over {n} cycles "
            f"({trend_text}): {cause}, not a growing leak"
            f"{unused}{gap_text}"
        )
    elif not expect_flat and (unexercised := _unexercised(verdict, peaks, baseline, f)):
        verdict.status = "inconclusive"
        verdict.message = f"{unexercised} ({trend_text}){unused}{gap_text}"
    else:
        verdict.status = "ok"
        note = ""
        if expect_flat and all(abs(e) <= tolerance for e in excess):
            note = "; flat at its preallocation, the expected shape"
        if p < alpha and low > 0:
            note = (
                f"; upward trend below the noise floor {f(verdict.floor or 0.0)} (rise {f(rise)})"
            )
        verdict.message = (
            f"{metric} returned to baseline {f(baseline)} within tolerance {f(tolerance)} after "
            f"drain {drain_text} in {returned}/{n} cycles (max post-drain {f(max(levels))}; "
            f"{trend_text}){note}{unused}{gap_text}"
        )


def _saturated(
    verdict: LeakVerdict,
    levels: list[float],
    baseline: float,
    top: float,
    f: Callable[[float], str],
    tail: str,
) -> None:
    # A full cache with nothing running is no benign plateau: the leak already hit the
    # ceiling (often within the first cycle), which flattens the trend.
    saturated = sum(1 for level in levels if level >= top - verdict.tolerance)
    verdict.status = "leak"
    verdict.message = (
        f"LEAK: {verdict.metric} stays saturated at {f(float(np.median(levels)))} after drain in "
        f"{saturated}/{len(levels)} cycles (baseline {f(baseline)}, ceiling {f(top)}): full with "
        f"no load; levels {', '.join(f(v) for v in levels)}{tail}"
    )


def _sustained_or_growth(
    verdict: LeakVerdict,
    levels: list[float],
    baseline: float,
    f: Callable[[float], str],
    trend_text: str,
    tail: str,
) -> None:
    """A significant rise above the noise floor: a leak when it kept going to the last cycles,
    else growth that flattened (neither a leak nor a pass)."""
    metric, n = verdict.metric, len(levels)
    rise = f"rose {f(levels[0])} -> {f(levels[-1])} over {n} cycles"
    side = "below" if (verdict.rise or 0.0) <= verdict.tolerance else "beyond"
    bounds = (
        f"above the noise floor {f(verdict.floor or 0.0)}, {side} the tolerance "
        f"{f(verdict.tolerance)}; baseline {f(baseline)}; {trend_text}"
    )
    if _sustained(levels, verdict.slope or 0.0):
        verdict.status = "leak"
        verdict.message = (
            f"LEAK: {metric} post-drain level {rise} and kept rising to the last cycle, a "
            f"significant sustained rise ({bounds}){tail}"
        )
    else:
        verdict.status = "growth"
        verdict.message = (
            f"GROWTH: {metric} post-drain level {rise}, a significant rise that flattened in "
            f"the later cycles (a warm-up, a cache filling to its bound, or allocator growth?): "
            f"neither a leak nor a pass; more cycles tell them apart ({bounds}){tail}"
        )


def _settled_after(series: pd.Series, since: float, ok: np.ndarray) -> float | None:
    """Seconds after ``since`` from which every remaining sample is ``ok``; None if the last
    sample is not."""
    if len(ok) == 0 or not ok[-1]:
        return None
    first = len(ok) - 1
    while first > 0 and ok[first - 1]:
        first -= 1
    return max(0.0, float(series.index[first]) - since)


def check_drain(
    frame: pd.DataFrame,
    since: float,
    bound_s: float,
    *,
    baseline: float | None = None,
    baseline_window: tuple[float, float] | None = None,
    kv_metric: str = "kv_usage",
    running_metric: str = "requests_running",
    tolerance: float = 0.02,
    time_col: str = "t",
    source: str | None = None,
) -> DrainVerdict:
    """After an abandoned-stream probe ending at ``since``: did the server drain in time?

    Looks at samples in ``[since, since + bound_s]``. Drained means ``running_metric`` is 0 and
    ``kv_metric`` is within ``tolerance`` of the baseline, from some sample on until the end of
    that window; the verdict gives how long that took. The baseline is ``baseline``, else the
    median over ``baseline_window``, else 0. A server without ``kv_metric`` (llama.cpp) is
    judged on running requests alone, and the message says so. ``insufficient_data`` when
    there are no running-request samples in the window, or when telemetry (samples after the
    window included) ends before 90% of the bound without the server having drained.
    """
    end = since + bound_s
    running_all = series_of(frame, running_metric, source=source, time_col=time_col)
    running = _window(running_all, since, end)
    kv_all = series_of(frame, kv_metric, source=source, time_col=time_col, agg="max")
    kv = _window(kv_all, since, end)
    note = ""
    if baseline is None and baseline_window is not None:
        base = _window(kv_all, *baseline_window)
        baseline = float(base.median()) if len(base) else None
    if baseline is None:
        baseline = 0.0
        note = " (baseline assumed 0)" if len(kv) else ""
    verdict = DrainVerdict("insufficient_data", "", since, bound_s, tolerance, baseline)
    if running.empty:
        verdict.message = (
            f"INSUFFICIENT DATA: no {running_metric} samples in the {bound_s:g} s after the probe"
        )
        return verdict
    verdict.last_running = float(running.iloc[-1])
    run_after = _settled_after(running, since, running.to_numpy() == 0)
    verdict.running_zero_after_s = run_after
    kv_after: float | None
    if kv.empty:
        kv_after = run_after
        note = f"; {kv_metric} not exported, judged on {running_metric} alone"
    else:
        verdict.last_kv = float(kv.iloc[-1])
        kv_after = _settled_after(kv, since, kv.to_numpy() <= baseline + tolerance)
        verdict.kv_baseline_after_s = kv_after
    # How far the telemetry reaches, samples after the window included: with a sample every
    # second the last one inside an 8 s window may be at 7.1 s, and the window is still covered.
    last_t = max(
        float(running_all.index[-1]), float(kv_all.index[-1]) if len(kv_all) else -math.inf
    )
    if run_after is not None and kv_after is not None:
        verdict.status = "ok"
        verdict.drained_after_s = max(run_after, kv_after)
        verdict.message = (
            f"drained {verdict.drained_after_s:.2f} s after the probe (bound {bound_s:g} s): "
            f"{running_metric} 0 after {run_after:.2f} s"
            + (
                f", {kv_metric} at baseline {baseline:.3f} +/- {tolerance:g} after {kv_after:.2f} s"
                if not kv.empty
                else ""
            )
            + note
        )
        return verdict
    state = f"{running_metric}={verdict.last_running:g}" + (
        f", {kv_metric}={verdict.last_kv:.3f} (baseline {baseline:.3f} +/- {tolerance:g})"
        if verdict.last_kv is not None
        else ""
    )
    if last_t < since + 0.9 * bound_s:
        verdict.message = (
            f"INSUFFICIENT DATA: telemetry ends {last_t - since:.2f} s after the probe, before "
            f"the {bound_s:g} s bound, not yet drained: {state}{note}"
        )
        return verdict
    verdict.status = "not_drained"
    verdict.message = f"NOT DRAINED within {bound_s:g} s after the probe: last {state}{note}"
    return verdict
