"""``servecheck_stats.csv``: the run's LLM metrics in Locust's ``*_stats.csv`` layout.

Locust's own ``locust_stats.csv`` (``--csv``) holds what the Locust user fired at it: TTFT and
E2E per scenario, in Locust's rounded buckets, merged by its master. This file has the header of
that one (:data:`LOCUST_STATS_HEADER`, the same as ``locust.stats.StatsCSV``'s
``requests_csv_columns`` with Locust's default percentiles; ``tests/load/test_stats_csv.py`` holds
them side by side) and one row per metric of the endpoint the run spoke (TTFT, TTFA, ITL, E2E),
made from the merged aggregate's HDR histograms: the same values as ``summary.json``'s
``latency_ms``, exact across workers, for scripts written around Locust's file.

Columns, per row (docs/load.md): ``Type`` the metric, ``Name`` the endpoint; ``Request Count``
the values behind the row (requests for TTFT / TTFA / E2E, inter-token gaps for ITL);
``Failure Count`` the failed requests (each gave no value to any row); times in ms as
``summary.json`` has them (floats, not Locust's rounded integers); ``Average Content Size`` the
output tokens per successful request (what the Locust user reports as the response length);
``Requests/s`` and ``Failures/s`` over the run's window. No ``Aggregated`` row: TTFT and ITL do
not add up. A metric with no value has ``N/A`` in its time columns, never a 0.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from servecheck.analysis.stats import Histogram, Tally
from servecheck.load.generator.apis import API_PATHS

STATS_CSV = "servecheck_stats.csv"
# Locust's default percentiles (locust.stats.PERCENTILES_TO_REPORT) and their column names.
LOCUST_PERCENTILES: tuple[tuple[str, float], ...] = (
    ("50%", 50.0),
    ("66%", 66.0),
    ("75%", 75.0),
    ("80%", 80.0),
    ("90%", 90.0),
    ("95%", 95.0),
    ("98%", 98.0),
    ("99%", 99.0),
    ("99.9%", 99.9),
    ("99.99%", 99.99),
    ("100%", 100.0),
)
LOCUST_STATS_HEADER: tuple[str, ...] = (
    "Type",
    "Name",
    "Request Count",
    "Failure Count",
    "Median Response Time",
    "Average Response Time",
    "Min Response Time",
    "Max Response Time",
    "Average Content Size",
    "Requests/s",
    "Failures/s",
    *(name for name, _ in LOCUST_PERCENTILES),
)
# Row type -> the tally's histogram (the names summary.json's latency_ms uses).
CSV_METRICS: tuple[tuple[str, str], ...] = (
    ("TTFT", "ttft"),
    ("TTFA", "ttfa"),
    ("ITL", "itl"),
    ("E2E", "e2e"),
)
NA = "N/A"  # what Locust writes for a percentile of an entry with no request


def stats_rows(tally: Tally, api: str, window_s: float) -> list[list[str | int | float]]:
    """The CSV's rows (header first) for ``tally`` (the merged aggregate's whole-run tally),
    ``api`` (``chat`` or ``messages``) and the run's window in seconds."""
    c = tally.counts
    failed = c["total"] - c["ok"] - c["rate_limited"]
    content = round(c["output_tokens_ok"] / c["ok"], 3) if c["ok"] else 0
    endpoint = API_PATHS.get(api, api)
    rows: list[list[str | int | float]] = [list(LOCUST_STATS_HEADER)]
    for kind, metric in CSV_METRICS:
        h = tally.hist[metric]
        rows.append(
            [
                kind,
                endpoint,
                h.count,
                failed,
                *_times(h),
                content,
                _per_s(h.count, window_s),
                _per_s(failed, window_s),
                *_percentile_cells(h),
            ]
        )
    return rows


def _times(h: Histogram) -> list[str | float]:
    """Median, average, min and max in ms (summary.json's p50, mean, min, max)."""
    if not h.count:
        return [NA] * 4
    d = h.summary()
    return [d.percentiles["p50"], d.mean or 0.0, d.min or 0.0, d.max or 0.0]


def _percentile_cells(h: Histogram) -> list[str | float]:
    got = h.percentiles(LOCUST_PERCENTILES)
    return [got.get(name, NA) for name, _ in LOCUST_PERCENTILES]


def _per_s(n: int, window_s: float) -> float:
    return round(n / window_s, 6) if window_s > 0 else 0.0


def write_stats_csv(
    run_dir: str | os.PathLike[str], tally: Tally, api: str, window_s: float
) -> Path:
    """Write :data:`STATS_CSV` into ``run_dir`` (see :func:`stats_rows`)."""
    path = Path(run_dir) / STATS_CSV
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(stats_rows(tally, api, window_s))
    return path


__all__ = [
    "CSV_METRICS",
    "LOCUST_PERCENTILES",
    "LOCUST_STATS_HEADER",
    "STATS_CSV",
    "stats_rows",
    "write_stats_csv",
]
