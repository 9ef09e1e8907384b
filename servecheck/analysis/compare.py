"""Compare a run with a baseline run: per-metric change, significance and a regression verdict.

A metric *regresses* only when the change is both **significant** and **beyond its threshold**
in the worse direction. Noise (two runs of one distribution) must not trip it; a real shift must.
A change beyond the threshold whose evidence is too thin for the sample size (the p99 of 300
requests has three requests above it) is **inconclusive**, with the number of requests that would
decide it, never a regression.

Significance, per metric:

* latency percentiles (TTFT, ITL, E2E, TPOT; per-request samples: the run's reservoirs in
  ``samples.json``, or an older run's ``records.jsonl``): each run's percentile gets its
  distribution-free order-statistic confidence interval (``1 - alpha``): the ranks that a
  binomial(n, q) count of samples below the true quantile brackets (scipy's ``binom``). The
  change is significant when the two intervals are apart; an interval whose rank falls beyond
  the sample is unbounded on that side (the p99 of fewer than ~530 requests at alpha 0.01), so
  it never is. n counts requests, not tokens: the ITLs of one stream rise and fall together,
  so an ITL percentile's interval is taken at the run's number of successful streams. For the
  median the two-sided Mann-Whitney U test on the samples must also give ``p < alpha``;
* throughput (requests/s, output tokens/s): per-second completion counts of the two runs
  (first and last partial seconds dropped), Mann-Whitney U plus a bootstrap interval of the mean;
* error rate and goodput: Fisher's exact test on the 2x2 table of counts;
* repeated runs (``servecheck load --repeat N``, a folder whose summary.json is ``kind:
  repeat``): the per-request tests above run on its first run's records, and then, for every
  metric both sides have a confidence interval over their runs for (TTFT / ITL / E2E p50, p95,
  p99 and throughput; Student t, analysis/intervals.py), a change whose intervals overlap is not
  significant (no regression, no improvement; the row says so). The intervals only ever
  withdraw a significance: a change within the run-to-run spread is noise, however many
  requests a single run had;
* conformance: a check that passed (or was skipped, non-strict or a known failure) in the
  baseline and now fails, errors or unexpectedly passes is *newly failing*; that is always a
  regression (no statistics: checks are deterministic).

A run that doubted its own measurement (summary.json's verdict INCONCLUSIVE: the generator fell
behind, a partial run, lost records; or no verdict at all) cannot say what the server's latency
or throughput was: those metrics are inconclusive and the comparison is INCONCLUSIVE, never a
regression on them (error rate, goodput and conformance are counts and are still judged).

Thresholds (``--threshold ttft_p95=+10%``): ``+N%`` relative, ``+Nms`` absolute for latencies,
``+Npp`` percentage points for rates. A family name (``ttft=+15%``) sets every percentile of it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from servecheck.analysis.aggregate import SAMPLES_NAME
from servecheck.errors import SpecError, UsageError, did_you_mean
from servecheck.records.parquet import read_run_records, records_file
from servecheck.records.record import worker_files
from servecheck.records.results import BAD_OUTCOMES, GOOD_OUTCOMES, read_json, read_jsonl

LATENCY_FAMILIES = ("ttft", "itl", "e2e", "tpot", "ttfa", "ttfr")  # ttfa/ttfr: reasoning phases
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0))
RATE_METRICS = ("error_rate", "goodput")
THROUGHPUT_METRICS = ("throughput_rps", "throughput_tps")
MAX_SAMPLES = 2000


@dataclass(slots=True)
class Threshold:
    """How much worse a metric may get: ``value`` in ``unit`` (``%`` relative, ``ms`` or ``pp``)."""

    value: float
    unit: str  # % | ms | pp
    text: str

    def beyond(self, baseline: float, current: float, higher_is_better: bool) -> bool:
        """True when the change from baseline to current is worse than the threshold allows."""
        worse = (baseline - current) if higher_is_better else (current - baseline)
        if self.unit == "%":
            if baseline == 0:
                return worse > 0
            return worse / abs(baseline) * 100.0 > abs(self.value)
        if self.unit == "pp":
            return worse * 100.0 > abs(self.value)
        return worse > abs(self.value)


DEFAULT_THRESHOLDS: dict[str, str] = {
    **{f"{fam}_{p}": "+10%" for fam in LATENCY_FAMILIES for p, _ in PERCENTILES},
    "throughput_rps": "-10%",
    "throughput_tps": "-10%",
    "error_rate": "+1pp",
    "goodput": "-5pp",
}
_THRESHOLD_RE = re.compile(r"^\s*([a-z0-9_.]+)\s*=\s*([+-]?)(\d+(?:\.\d+)?)\s*(%|ms|s|pp)\s*$")


def metric_names() -> list[str]:
    return list(DEFAULT_THRESHOLDS)


def parse_threshold(text: str) -> tuple[list[str], Threshold]:
    """``ttft_p95=+10%`` -> (["ttft_p95"], Threshold). Raises :class:`UsageError` with a suggestion."""
    m = _THRESHOLD_RE.match(text)
    if not m:
        raise SpecError(
            "{thresholds} {text!r}: expected METRIC=+N% (or +Nms, +Npp), e.g. ttft_p95=+10%",
            text=text,
        )
    name, sign, number, unit = m.groups()
    value = float(number) * (1000.0 if unit == "s" else 1.0)
    unit = "ms" if unit == "s" else unit
    names = (
        [name]
        if name in DEFAULT_THRESHOLDS
        else [n for n in DEFAULT_THRESHOLDS if n.startswith(name + "_")]
        if name in LATENCY_FAMILIES
        else []
    )
    if not names:
        raise SpecError(
            "{thresholds} {text!r}: unknown metric {name!r}{hint}",
            text=text,
            name=name,
            hint=did_you_mean(name, [*DEFAULT_THRESHOLDS, *LATENCY_FAMILIES]),
        )
    if unit == "ms" and names[0].split("_")[0] not in LATENCY_FAMILIES:
        raise SpecError(
            "{thresholds} {text!r}: ms applies to latencies only; use % or pp for {name}",
            text=text,
            name=name,
        )
    del sign  # the direction is the metric's own (latency up, throughput down is worse)
    return names, Threshold(value, unit, text.split("=", 1)[1].strip())


def thresholds(overrides: Iterable[str] = ()) -> dict[str, Threshold]:
    """The default thresholds with ``overrides`` applied (later ones win)."""
    out: dict[str, Threshold] = {}
    for name, spec in DEFAULT_THRESHOLDS.items():
        out.update(
            dict.fromkeys(
                parse_threshold(f"{name}={spec}")[0], parse_threshold(f"{name}={spec}")[1]
            )
        )
    for text in overrides:
        names, th = parse_threshold(text)
        out.update(dict.fromkeys(names, th))
    return out


@dataclass(slots=True)
class MetricDelta:
    """One compared metric. ``regression``: significant and beyond the threshold in the worse
    direction. ``status``: regression | improvement | inconclusive (beyond the threshold the
    worse way without the evidence, or a run that doubted its own measurement) | ok."""

    name: str
    unit: str
    baseline: float | None
    current: float | None
    change: float | None = None
    change_pct: float | None = None
    p_value: float | None = None
    test: str = ""
    ci_low: float | None = None
    ci_high: float | None = None
    significant: bool = False
    threshold: str = ""
    beyond: bool = False
    regression: bool = False
    improvement: bool = False
    note: str = ""
    n_baseline: int = 0
    n_current: int = 0
    status: str = "ok"
    # Each run's own confidence interval of a latency percentile ([low, high]; None: unbounded).
    interval_baseline: list[float | None] | None = None
    interval_current: list[float | None] | None = None

    def as_dict(self) -> dict[str, Any]:
        def rounded(v: Any) -> Any:
            if isinstance(v, list):
                return [rounded(x) for x in v]
            return round(v, 6) if isinstance(v, float) and math.isfinite(v) else v

        return {k: rounded(v) for k, v in asdict(self).items()}


@dataclass(slots=True)
class RunParts:
    """Where a run folder keeps its parts (a plain check/load run, or accept's sub-folders)."""

    path: Path
    conformance: Path | None = None
    load: Path | None = None
    version: str | None = None
    target: str | None = None
    intervals: dict[str, Any] | None = (
        None  # a repeated run's, over its runs (analysis/intervals.py)
    )


def _repeat_part(root: Path, parts: RunParts) -> None:
    """A repeat folder: its first run is the load part, its intervals come along."""
    summary = read_json(root / "summary.json")
    if summary.get("kind") != "repeat":
        return
    runs = sorted(p for p in root.glob("run-*") if (p / "summary.json").exists())
    if runs:
        parts.load = runs[0]
        iv = summary.get("intervals")
        parts.intervals = iv if isinstance(iv, dict) else None


def locate(run_dir: Path | str) -> RunParts:
    """Find the conformance and load parts of a run folder; raises :class:`UsageError` if it has neither."""
    root = Path(run_dir)
    if not root.is_dir():
        raise UsageError(f"{root}: no such run folder")
    parts = RunParts(root)
    _repeat_part(root, parts)
    for cand in (root / "conformance", root):
        if (cand / "results.jsonl").exists():
            parts.conformance = cand
            break
    for cand in (root / "load", root):
        if parts.load is not None:
            break
        if (
            records_file(cand) is not None  # records.parquet, or an older run's records.jsonl
            or worker_files(cand)  # a killed run: its per-worker records are all there is
            or "requests" in read_json(cand / "summary.json")
        ):
            parts.load = cand
            break
    if parts.conformance is None and parts.load is None:
        raise UsageError(
            f"{root}: neither results.jsonl (conformance) nor records*.jsonl/summary.json (load) found"
        )
    if parts.conformance is not None:
        targets = read_json(parts.conformance / "summary.json").get("targets") or {}
        for name, info in targets.items():
            parts.target = parts.target or name
            if isinstance(info, dict) and info.get("version"):
                parts.version = str(info["version"])
                break
    if parts.load is not None:
        s = read_json(parts.load / "summary.json")
        parts.target = parts.target or s.get("target")
        parts.version = parts.version or s.get("engine_version")
    return parts


def _kinds(parts: RunParts) -> str:
    kinds = [k for k, v in (("conformance", parts.conformance), ("load", parts.load)) if v]
    return " and ".join(kinds) + " results only" if kinds else "no results"


@dataclass(slots=True)
class LoadData:
    """What compare reads of a load part: per-request latency samples (ms) per family and the
    successful completions (and their output tokens) per whole second. ``streams``: successful
    requests (the independent draws behind the ITL samples; 0: unknown)."""

    latency: dict[str, np.ndarray]
    ok_per_s: np.ndarray
    tokens_per_s: np.ndarray
    reasoned: bool
    streams: int = 0

    @classmethod
    def of_records(cls, records: list[dict[str, Any]]) -> LoadData:
        return cls(
            {fam: _latency_samples(records, fam) for fam in LATENCY_FAMILIES},
            _per_second(records, tokens=False),
            _per_second(records, tokens=True),
            any("ttfr" in r for r in records),
            sum(1 for r in records if not r.get("error")),
        )

    @classmethod
    def of_samples(cls, doc: dict[str, Any]) -> LoadData:
        """From ``samples.json`` (analysis/aggregate.py): the run's reservoirs and its per-second
        completions, first and last (partial) seconds dropped as for records."""
        samples = doc.get("samples") or {}
        per_s = doc.get("per_second") or {}

        def whole(key: str) -> np.ndarray:
            bins = np.asarray(per_s.get(key) or [], dtype=float)
            return bins[1:-1] if bins.size > 3 else bins

        return cls(
            {
                fam: np.asarray((samples.get(fam) or {}).get("values") or [], dtype=float) * 1000.0
                for fam in LATENCY_FAMILIES
            },
            whole("ok"),
            whole("tokens"),
            bool(doc.get("reasoned")),
        )


def load_part(folder: Path, notes: list[str], which: str) -> tuple[dict[str, Any], LoadData]:
    """The summary and samples of a load part: ``samples.json`` (the run's reservoirs), else the
    records of an older run folder. A run killed before it summarised has only its
    ``records-<worker>.jsonl``: they are read as they are and summarised here (noted)."""
    summary = read_json(folder / "summary.json")
    samples = read_json(folder / SAMPLES_NAME)
    if samples.get("samples"):
        data = LoadData.of_samples(samples)
        data.streams = int((summary.get("requests") or {}).get("ok") or 0)
        return summary, data
    if records_file(folder) is not None:  # an older run folder: its records
        return summary, LoadData.of_records(list(read_run_records(folder)))
    records = [r for f in worker_files(folder) for r in read_jsonl(f) if "t_sent" in r]
    if "requests" not in summary:
        from servecheck.analysis.stats import compute_stats

        summary = {**summary, **compute_stats(records).as_dict()}
        notes.append(
            f"{which} {folder} was not summarised (killed?): compared from its "
            f"{len(records)} per-worker records"
        )
    return summary, LoadData.of_records(records)


# ------------------------------------------------------------------ statistics


def _subsample(values: np.ndarray, rng: np.random.Generator, cap: int = MAX_SAMPLES) -> np.ndarray:
    if values.size <= cap:
        return values
    return rng.choice(values, size=cap, replace=False)


def bootstrap_diff(
    a: np.ndarray,
    b: np.ndarray,
    qs: Sequence[float] | None,
    *,
    seed: int,
    n_boot: int = 1000,
    alpha: float = 0.01,
) -> list[tuple[float, float]]:
    """Percentile-bootstrap CIs of ``stat(b) - stat(a)`` for each percentile in ``qs`` (None: the mean).

    A resample of a sorted sample is a matrix of indices into it; the resample's k-th order
    statistic is the sample at the k-th smallest index, which ``np.partition`` finds without a sort.
    """
    rng = np.random.default_rng(seed)

    def stats(x: np.ndarray) -> np.ndarray:
        xs = np.sort(x)
        idx = rng.integers(0, xs.size, size=(n_boot, xs.size))
        if qs is None:
            return xs[idx].mean(axis=1)[None, :]
        ks = [min(xs.size, max(1, int(np.ceil(q / 100.0 * xs.size)))) - 1 for q in qs]
        part = np.partition(idx, sorted(set(ks)), axis=1)
        return np.stack([xs[part[:, k]] for k in ks])

    diffs = stats(b) - stats(a)
    lo, hi = 100 * alpha / 2, 100 * (1 - alpha / 2)
    return [(float(np.percentile(d, lo)), float(np.percentile(d, hi))) for d in diffs]


def mann_whitney(a: np.ndarray, b: np.ndarray) -> float | None:
    from scipy.stats import mannwhitneyu

    if a.size < 2 or b.size < 2:
        return None
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def fisher(bad_a: int, n_a: int, bad_b: int, n_b: int) -> float | None:
    from scipy.stats import fisher_exact

    if n_a == 0 or n_b == 0:
        return None
    return float(fisher_exact([[bad_a, n_a - bad_a], [bad_b, n_b - bad_b]]).pvalue)


def _finish(d: MetricDelta, th: Threshold | None, higher_is_better: bool) -> MetricDelta:
    if d.baseline is not None and d.current is not None:
        d.change = d.current - d.baseline
        d.change_pct = (d.change / abs(d.baseline) * 100.0) if d.baseline else None
        if th is not None:
            d.threshold = th.text
            d.beyond = th.beyond(d.baseline, d.current, higher_is_better)
            better = th.beyond(
                d.current, d.baseline, higher_is_better
            )  # the same size of change, the good way
            d.regression = d.significant and d.beyond
            d.improvement = d.significant and better
    d.status = (
        "regression"
        if d.regression
        else "inconclusive"  # worse beyond the threshold, and the data cannot tell it from noise
        if d.beyond
        else "improvement"
        if d.improvement
        else "ok"
    )
    return d


@dataclass(slots=True)
class QuantileInterval:
    """One run's percentile and its distribution-free ``1 - alpha`` confidence interval: the
    order statistics whose ranks a binomial(n, q) count of samples below the true quantile
    brackets. A rank beyond the sample leaves that side unbounded (None)."""

    value: float
    low: float | None
    high: float | None
    n: int

    def bounds(self) -> list[float | None]:
        return [self.low, self.high]

    def text(self, digits: int = 3) -> str:
        lo = "0" if self.low is None else f"{self.low:.{digits}g}"
        hi = "unbounded" if self.high is None else f"{self.high:.{digits}g}"
        return f"[{lo}, {hi}]"


def quantile_interval(sample: np.ndarray, q: float, n: int, alpha: float) -> QuantileInterval:
    """The ``q``-th percentile of ``sample`` with its order-statistic interval for ``n``
    independent draws (n may be below the sample's size: ITLs, several a stream)."""
    from scipy.stats import binom

    xs = np.sort(sample)
    p = q / 100.0
    lo_rank = int(binom.ppf(alpha / 2, n, p))  # P(fewer than lo_rank below) <= alpha / 2
    hi_rank = int(binom.ppf(1 - alpha / 2, n, p)) + 1  # P(hi_rank or more below) <= alpha / 2

    def at(rank: int) -> float:
        return float(np.quantile(xs, rank / n, method="inverted_cdf"))

    return QuantileInterval(
        float(np.percentile(xs, q)),
        at(lo_rank) if lo_rank >= 1 else None,
        at(hi_rank) if hi_rank <= n else None,
        n,
    )


def _apart(a: QuantileInterval, b: QuantileInterval) -> int:
    """+1 when ``b``'s interval lies wholly above ``a``'s, -1 wholly below, 0 when they overlap."""
    if a.high is not None and b.low is not None and b.low > a.high:
        return 1
    if b.high is not None and a.low is not None and b.high < a.low:
        return -1
    return 0


def requests_needed(a: QuantileInterval, b: QuantileInterval, q: float, alpha: float) -> int:
    """About how many requests a run would need for intervals of this spread to tell apart the
    observed change (interval widths shrink as 1/sqrt(n)); at least as many as an interval needs
    to be bounded at all (``q^n <= alpha / 2``)."""
    p = q / 100.0
    bounded = math.ceil(math.log(alpha / 2) / math.log(p)) if 0 < p < 1 else 1
    change = b.value - a.value
    if a.high is None or b.low is None or change <= 0:
        return max(bounded, a.n, b.n)
    gap = (a.high - a.value) + (b.value - b.low)
    return max(bounded, math.ceil(min(a.n, b.n) * (gap / change) ** 2))


def _round2(n: int) -> str:
    """1234 -> "1,200": the estimate is rough, its digits should say so."""
    digits = max(0, len(str(n)) - 2)
    return f"{round(n, -digits):,}"


def _latency_samples(records: list[dict[str, Any]], family: str) -> np.ndarray:
    if family == "itl":
        vals = [
            x
            for r in records
            if not r.get("error")
            for x in (r.get("itls") or [])
            if isinstance(x, (int, float))
        ]
    else:
        vals = [
            r[family]
            for r in records
            if not r.get("error") and isinstance(r.get(family), (int, float))
        ]
    return np.asarray(vals, dtype=float) * 1000.0


def _draws(data: LoadData, fam: str, sample: np.ndarray) -> int:
    """The independent draws behind a family's sample: its size, but for ITL (several a
    stream, which rise and fall together) no more than the run's successful streams."""
    if fam == "itl" and data.streams:
        return min(int(sample.size), data.streams)
    return int(sample.size)


def _latency_delta(
    fam: str,
    label: str,
    q: float,
    ivs: tuple[QuantileInterval, QuantileInterval],
    p: float | None,
    alpha: float,
    th: Threshold | None,
) -> MetricDelta:
    """One percentile: significant when the runs' intervals are apart (and, for the median,
    Mann-Whitney agrees); beyond the threshold without that, inconclusive with what it needs."""
    a, b = ivs
    tail = q >= 90
    side = _apart(a, b)
    d = MetricDelta(
        f"{fam}_{label}",
        "ms",
        a.value,
        b.value,
        # A tail percentile is judged by its own intervals alone; the Mann-Whitney p is about
        # the whole distributions (the median), so it is not shown.
        p_value=None if tail else p,
        test="order-statistic CI" if tail else "mann-whitney-u + order-statistic CI",
        # The difference's interval from the two runs' (it excludes 0 when they are apart).
        ci_low=None if a.high is None else (b.low or 0.0) - a.high,
        ci_high=None if b.high is None else b.high - (a.low or 0.0),
        significant=side != 0 and (tail or (p is not None and p < alpha)),
        n_baseline=a.n,
        n_current=b.n,
        interval_baseline=a.bounds(),
        interval_current=b.bounds(),
    )
    _finish(d, th, higher_is_better=False)
    if d.status == "inconclusive":
        d.note = (
            f"{label} from {b.n} requests: interval {b.text()} ms overlaps the baseline's "
            f"{a.text()} ms ({a.n} requests); needs ~{_round2(requests_needed(a, b, q, alpha))} "
            "requests a run"
        )
    return d


def compare_latency(
    base: LoadData,
    cur: LoadData,
    ths: dict[str, Threshold],
    *,
    seed: int = 0,
    alpha: float = 0.01,
) -> list[MetricDelta]:
    """Percentile deltas for every latency family present: each run's order-statistic interval
    (all of its reservoir), and Mann-Whitney U on the medians."""
    out: list[MetricDelta] = []
    rng = np.random.default_rng(seed)
    reasoned = base.reasoned or cur.reasoned
    for fam in LATENCY_FAMILIES:
        if fam == "ttfa" and not reasoned:
            continue  # without reasoning TTFA is TTFT: one row says it
        a, b = base.latency[fam], cur.latency[fam]
        if a.size < 5 or b.size < 5:
            continue
        p = mann_whitney(_subsample(a, rng), _subsample(b, rng))
        na, nb = _draws(base, fam, a), _draws(cur, fam, b)
        for label, q in PERCENTILES:
            ivs = (quantile_interval(a, q, na, alpha), quantile_interval(b, q, nb, alpha))
            out.append(_latency_delta(fam, label, q, ivs, p, alpha, ths.get(f"{fam}_{label}")))
    return out


def _per_second(records: list[dict[str, Any]], tokens: bool) -> np.ndarray:
    done = [r for r in records if not r.get("error") and isinstance(r.get("t_done"), (int, float))]
    if len(done) < 2:
        return np.asarray([], dtype=float)
    t0 = min(float(r.get("t_sent") or r["t_done"]) for r in done)
    n = int((max(float(r["t_done"]) for r in done) - t0) // 1.0) + 1
    bins = np.zeros(n)
    for r in done:
        bins[int((float(r["t_done"]) - t0) // 1.0)] += (
            float(r.get("output_tokens") or r.get("output_tokens_client") or 0) if tokens else 1.0
        )
    return bins[1:-1] if n > 3 else bins


def compare_throughput(
    base_sum: dict[str, Any],
    cur_sum: dict[str, Any],
    base: LoadData,
    cur: LoadData,
    ths: dict[str, Threshold],
    *,
    seed: int = 0,
    alpha: float = 0.01,
    n_boot: int = 1000,
) -> list[MetricDelta]:
    out: list[MetricDelta] = []
    for name, key, tokens in (
        ("throughput_rps", "requests_per_s", False),
        ("throughput_tps", "output_tokens_per_s", True),
    ):
        bv = (base_sum.get("throughput") or {}).get(key)
        cv = (cur_sum.get("throughput") or {}).get(key)
        if bv is None or cv is None:
            continue
        a, b = (x.tokens_per_s if tokens else x.ok_per_s for x in (base, cur))
        d = MetricDelta(
            name,
            "req/s" if not tokens else "tok/s",
            float(bv),
            float(cv),
            n_baseline=int(a.size),
            n_current=int(b.size),
        )
        if a.size >= 3 and b.size >= 3:
            d.p_value = mann_whitney(a, b)
            ((lo, hi),) = bootstrap_diff(a, b, None, seed=seed, n_boot=n_boot, alpha=alpha)
            d.ci_low, d.ci_high, d.test = lo, hi, "mann-whitney-u + bootstrap (per-second counts)"
            d.significant = (lo > 0 or hi < 0) and d.p_value is not None and d.p_value < alpha
        else:
            d.note = (
                "too few whole seconds of samples for a test (a longer run gives one); not judged"
            )
        out.append(_finish(d, ths.get(name), higher_is_better=True))
    return out


def compare_rates(
    base_sum: dict[str, Any],
    cur_sum: dict[str, Any],
    ths: dict[str, Threshold],
    *,
    alpha: float = 0.01,
) -> list[MetricDelta]:
    out: list[MetricDelta] = []
    rb, rc = base_sum.get("requests") or {}, cur_sum.get("requests") or {}
    na, nb = int(rb.get("total") or 0), int(rc.get("total") or 0)
    if na and nb:
        fa, fb = int(rb.get("failed") or 0), int(rc.get("failed") or 0)
        d = MetricDelta(
            "error_rate",
            "fraction",
            fa / na,
            fb / nb,
            p_value=fisher(fa, na, fb, nb),
            test="fisher-exact",
            n_baseline=na,
            n_current=nb,
        )
        d.significant = d.p_value is not None and d.p_value < alpha
        out.append(_finish(d, ths.get("error_rate"), higher_is_better=False))
    ga, gb = base_sum.get("goodput"), cur_sum.get("goodput")
    if ga is not None and gb is not None and na and nb:
        good_a, good_b = round(float(ga) * na), round(float(gb) * nb)
        d = MetricDelta(
            "goodput",
            "fraction",
            float(ga),
            float(gb),
            p_value=fisher(na - good_a, na, nb - good_b, nb),
            test="fisher-exact",
            n_baseline=na,
            n_current=nb,
        )
        d.significant = d.p_value is not None and d.p_value < alpha
        out.append(_finish(d, ths.get("goodput"), higher_is_better=True))
    return out


@dataclass(slots=True)
class ConformanceDelta:
    """Checks whose outcome changed; ``newly_failing`` are regressions."""

    newly_failing: list[dict[str, Any]] = field(default_factory=list)
    fixed: list[dict[str, Any]] = field(default_factory=list)
    new_checks: list[str] = field(default_factory=list)
    missing_checks: list[str] = field(default_factory=list)
    baseline_counts: dict[str, int] = field(default_factory=dict)
    current_counts: dict[str, int] = field(default_factory=dict)


def compare_conformance(base_dir: Path, cur_dir: Path) -> ConformanceDelta:
    """Outcome changes per check (keyed by check id when each run has one target/model)."""
    a = [r for r in read_jsonl(base_dir / "results.jsonl") if r.get("check")]
    b = [r for r in read_jsonl(cur_dir / "results.jsonl") if r.get("check")]
    single = (
        len({(r.get("target"), r.get("model")) for r in a}) <= 1
        and len({(r.get("target"), r.get("model")) for r in b}) <= 1
    )

    def key(r: dict[str, Any]) -> str:
        return str(r["check"]) if single else f"{r.get('target')}/{r.get('model')}/{r['check']}"

    ka, kb = {key(r): r for r in a}, {key(r): r for r in b}
    delta = ConformanceDelta()
    for r in a:
        delta.baseline_counts[r["outcome"]] = delta.baseline_counts.get(r["outcome"], 0) + 1
    for r in b:
        delta.current_counts[r["outcome"]] = delta.current_counts.get(r["outcome"], 0) + 1
    for k, rb in sorted(kb.items()):
        ra = ka.get(k)
        if ra is None:
            delta.new_checks.append(k)
            if rb["outcome"] in BAD_OUTCOMES:
                delta.newly_failing.append(
                    {
                        "check": k,
                        "baseline": None,
                        "current": rb["outcome"],
                        "message": rb.get("message", ""),
                    }
                )
            continue
        if ra["outcome"] in GOOD_OUTCOMES and rb["outcome"] in BAD_OUTCOMES:
            delta.newly_failing.append(
                {
                    "check": k,
                    "baseline": ra["outcome"],
                    "current": rb["outcome"],
                    "message": rb.get("message", ""),
                }
            )
        elif ra["outcome"] in BAD_OUTCOMES and rb["outcome"] in GOOD_OUTCOMES:
            delta.fixed.append({"check": k, "baseline": ra["outcome"], "current": rb["outcome"]})
    delta.missing_checks = sorted(set(ka) - set(kb))
    return delta


@dataclass(slots=True)
class Comparison:
    """The whole comparison; ``regressed`` decides the exit code."""

    baseline: RunParts
    current: RunParts
    metrics: list[MetricDelta] = field(default_factory=list)
    conformance: ConformanceDelta | None = None
    notes: list[str] = field(default_factory=list)
    alpha: float = 0.01
    seed: int = 0
    doubts: list[str] = field(default_factory=list)  # a run's own measurement in doubt

    @property
    def regressions(self) -> list[str]:
        out = [m.name for m in self.metrics if m.regression]
        if self.conformance is not None:
            out += [f"conformance:{c['check']}" for c in self.conformance.newly_failing]
        return out

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)

    @property
    def inconclusive(self) -> list[str]:
        """The metrics that could not be judged (thin evidence, or a run in doubt)."""
        return [m.name for m in self.metrics if m.status == "inconclusive"]

    @property
    def verdict(self) -> str:
        """regression | inconclusive (a run doubted its own measurement, nothing regressed) |
        ok. A metric that is inconclusive only for want of samples does not make the whole
        comparison so: its row says how many requests would decide it."""
        if self.regressed:
            return "regression"
        return "inconclusive" if self.doubts else "ok"

    @property
    def exit_code(self) -> int:
        """0 ok; 1 regression or INCONCLUSIVE (as every verdict: only a pass exits 0)."""
        return 0 if self.verdict == "ok" else 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": "compare",
            "baseline": {
                "path": str(self.baseline.path),
                "target": self.baseline.target,
                "version": self.baseline.version,
            },
            "current": {
                "path": str(self.current.path),
                "target": self.current.target,
                "version": self.current.version,
            },
            "alpha": self.alpha,
            "seed": self.seed,
            "verdict": self.verdict,
            "regressions": self.regressions,
            "inconclusive": self.inconclusive,
            "doubts": self.doubts,
            "metrics": [m.as_dict() for m in self.metrics],
            "conformance": None if self.conformance is None else asdict(self.conformance),
            "notes": self.notes,
        }


def apply_intervals(
    metrics: list[MetricDelta],
    base: dict[str, Any] | None,
    cur: dict[str, Any] | None,
    notes: list[str],
) -> None:
    """Withdraw the significance of a change that lies within both runs' repeat intervals."""
    from servecheck.analysis.intervals import Interval

    if base is None and cur is None:
        return
    if base is None or cur is None:
        notes.append(
            "only one of the runs was repeated: judged by the per-request tests of one run each"
        )
        return
    for d in metrics:
        a, b = base.get(d.name), cur.get(d.name)
        ia = Interval.from_dict(a) if isinstance(a, dict) else None
        ib = Interval.from_dict(b) if isinstance(b, dict) else None
        if ia is None or ib is None:
            continue
        overlap = ia.overlaps(ib)
        if overlap is None:
            continue
        span = (
            f"repeat intervals [{ia.low:.3g}, {ia.high:.3g}] (n={ia.n}) and "
            f"[{ib.low:.3g}, {ib.high:.3g}] (n={ib.n})"
        )
        if overlap and d.significant:
            d.significant = d.regression = d.improvement = False
            d.status = "inconclusive" if d.beyond else "ok"
            d.note = (d.note + "; " if d.note else "") + f"{span} overlap: within run-to-run spread"
        elif not overlap:
            d.note = (d.note + "; " if d.note else "") + f"{span} apart"


def measurement_doubts(summary: dict[str, Any], which: str) -> list[str]:
    """Why a load part's own figures cannot be trusted, from its summary.json: the run judged
    itself INCONCLUSIVE (the generator fell behind, a partial run, lost records ...), wrote no
    verdict (killed before it summarised, unreadable), was partial, or lagged under
    ``--allow-lag``. Empty: it measured what it claims."""
    from servecheck.analysis.verdict import INCONCLUSIVE, as_status

    schedule = summary.get("schedule") or {}
    if "verdict" not in summary:
        return [f"the {which} run has no verdict (killed before it summarised, or unreadable)"]
    if as_status(summary.get("verdict")) == INCONCLUSIVE:
        why = "; ".join(str(r) for r in summary.get("reasons") or []) or "no reason given"
        return [f"the {which} run judged itself INCONCLUSIVE: {why}"]
    if summary.get("partial"):
        return [f"the {which} run is partial: {summary['partial']}"]
    if isinstance(schedule, dict) and schedule.get("behind"):
        why = "; ".join(str(r) for r in schedule.get("reasons") or []) or "behind its schedule"
        return [f"the {which} run's generator fell behind (judged with its lag allowed): {why}"]
    return []


# The machine's CPUs in one run against the other (summary.json's generator.host, from each
# Locust process's readings of the machine's CPU times): a run made while a neighbour held the
# cores is slower for reasons that are not the server's. Measured: on a shared 2-core runner,
# 6 of 20 pairs of identical reference runs differed by a whole-run slowdown; on the same
# machine alone, 0 of 20 (docs/workflows.md).
BUSY_SATURATED = 0.85  # the busier run's share of the machine's CPU time
BUSY_GAP = 0.25  # how much busier it was than the other run
STEAL_GAP = 0.10  # hypervisor steal, likewise


def machine_doubts(sa: dict[str, Any], sb: dict[str, Any]) -> list[str]:
    """Why the two runs' latencies are not like for like: the machine was near saturation in one
    run and markedly less busy in the other (or a hypervisor stole markedly more). Runs that
    recorded no machine figures (before issue 42) raise no doubt."""
    ha = (sa.get("generator") or {}).get("host") or {}
    hb = (sb.get("generator") or {}).get("host") or {}
    if not ha or not hb:
        return []
    busy_a, busy_b = float(ha.get("busy") or 0.0), float(hb.get("busy") or 0.0)
    steal_a, steal_b = float(ha.get("steal") or 0.0), float(hb.get("steal") or 0.0)
    cores = ha.get("cores") or hb.get("cores")
    if max(busy_a, busy_b) >= BUSY_SATURATED and abs(busy_a - busy_b) >= BUSY_GAP:
        busier = "current" if busy_b > busy_a else "baseline"
        return [
            f"the machine was busier during the {busier} run ({busy_a:.0%} of {cores} cores busy "
            f"in the baseline, {busy_b:.0%} in the current; the generator used "
            f"{float(ha.get('generator_cores') or 0):.2f} and "
            f"{float(hb.get('generator_cores') or 0):.2f} cores): another load on the machine "
            "and a slower server cannot be told apart; compare runs made on a quiet runner, or "
            "compare repeated runs or rolling:N"
        ]
    if abs(steal_a - steal_b) >= STEAL_GAP:
        return [
            f"the hypervisor stole {steal_a:.0%} of the CPU time in the baseline run and "
            f"{steal_b:.0%} in the current: the two runs did not have the same machine"
        ]
    return []


def _timed(d: MetricDelta) -> bool:
    """A latency or throughput row: what a run's machine can move."""
    return d.name in THROUGHPUT_METRICS or d.name.split("_")[0] in LATENCY_FAMILIES


def withhold(metrics: list[MetricDelta], doubts: list[str]) -> None:
    """A run that doubts its own measurement says nothing about the server's latency or
    throughput: those rows are inconclusive, neither a regression nor an improvement."""
    if not doubts:
        return
    for d in metrics:
        if _timed(d):
            d.significant = d.regression = d.improvement = False
            d.status = "inconclusive"
            d.note = "not judged: a run doubted its own measurement" + (
                f"; {d.note}" if d.note else ""
            )


def compare_runs(
    baseline: Path | str,
    current: Path | str,
    *,
    threshold_overrides: Iterable[str] = (),
    alpha: float = 0.01,
    seed: int = 0,
    n_boot: int = 1000,
) -> Comparison:
    """Compare two run folders (load, conformance or accept runs). Raises :class:`UsageError` on bad input."""
    ths = thresholds(threshold_overrides)
    a, b = locate(baseline), locate(current)
    cmp = Comparison(a, b, alpha=alpha, seed=seed)
    if a.version and b.version and a.version != b.version:
        cmp.notes.append(f"engine version changed: {a.version} -> {b.version}")
    if a.target and b.target and a.target != b.target:
        cmp.notes.append(
            f"different targets: {a.target} vs {b.target} (baselines are meant per target)"
        )
    if (a.load is None or b.load is None) and (a.conformance is None or b.conformance is None):
        raise UsageError(
            f"nothing to compare: baseline {a.path} has {_kinds(a)}, current {b.path} has "
            f"{_kinds(b)}; compare a load run with a load run or a check run with a check run"
        )
    if a.load is not None and b.load is not None:
        sa, ra = load_part(a.load, cmp.notes, "baseline")
        sb, rb = load_part(b.load, cmp.notes, "current")
        for key in ("scenario", "api", "mode", "users", "rate"):
            # a summary from before the messages API has no "api": it ran chat
            va, vb = (x.get(key, "chat" if key == "api" else None) for x in (sa, sb))
            if va != vb:
                cmp.notes.append(
                    f"load {key} differs: {va} vs {vb} (the comparison may not be like for like)"
                )
        cmp.metrics += compare_latency(ra, rb, ths, seed=seed, alpha=alpha)
        cmp.metrics += compare_throughput(
            sa, sb, ra, rb, ths, seed=seed, alpha=alpha, n_boot=n_boot
        )
        cmp.metrics += compare_rates(sa, sb, ths, alpha=alpha)
        apply_intervals(cmp.metrics, a.intervals, b.intervals, cmp.notes)
        cmp.doubts = [*measurement_doubts(sa, "baseline"), *measurement_doubts(sb, "current")]
        machine = machine_doubts(sa, sb)
        if machine and any(m.regression or m.improvement for m in cmp.metrics if _timed(m)):
            cmp.doubts += machine  # it would have decided a latency or throughput row
        elif machine:
            cmp.notes.append(
                f"{machine[0]} (no latency or throughput row moved, so it did not matter)"
            )
        withhold(cmp.metrics, cmp.doubts)
    elif a.load is not None or b.load is not None:
        cmp.notes.append("only one of the runs has a load part: load metrics not compared")
    if a.conformance is not None and b.conformance is not None:
        cmp.conformance = compare_conformance(a.conformance, b.conformance)
    elif a.conformance is not None or b.conformance is not None:
        cmp.notes.append("only one of the runs has a conformance part: outcomes not compared")
    return cmp


__all__ = [
    "Comparison",
    "ConformanceDelta",
    "MetricDelta",
    "RunParts",
    "Threshold",
    "apply_intervals",
    "bootstrap_diff",
    "compare_conformance",
    "compare_latency",
    "compare_runs",
    "locate",
    "machine_doubts",
    "measurement_doubts",
    "parse_threshold",
    "quantile_interval",
    "thresholds",
]
