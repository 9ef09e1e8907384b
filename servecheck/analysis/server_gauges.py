"""summary.json's ``server.gauges`` and ``server.counters``: the engine's state over a load run.

* **gauges** (``kv_usage``, ``requests_running``, ``requests_waiting``, ``busy_slots``): every
  sample the telemetry recorder took inside the run window (``telemetry/prometheus.jsonl``),
  reduced to min, max, mean, last and the number of samples. The scrapes before and after the
  run are left out: they see an idle engine and would only pull the mean down.
* **counters** (every canonical ``*_total``, e.g. ``preemptions_total``): the rise over the
  window, from the scrape before the run and the settled scrape after it (the figures the
  reconciliation uses), else from the first and last sample of the series in the window.

The keys are the canonical names of ``telemetry/prometheus.py``; capacity's
``server_figure`` reads ``gauges.requests_waiting.max`` and ``counters.preemptions_total.delta``.
Definitions: docs/metrics.md ("Engine gauges and counters"). Telemetry is imported inside
functions (layering: load/ stays importable without pandas).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

GAUGES = ("kv_usage", "requests_running", "requests_waiting", "busy_slots")
SERIES_FILE = "prometheus.jsonl"


def _counters_canonical() -> list[str]:
    from servecheck.telemetry.prometheus import CANONICAL, HISTOGRAMS

    return [c for c in CANONICAL if c.endswith("_total") and c not in HISTOGRAMS]


def window_rows(
    run_dir: Path, start: float, end: float
) -> dict[str, list[tuple[float, float, str]]]:
    """The series' samples inside [start, end]: metric -> [(t, value, source metric)]."""
    path = run_dir / "telemetry" / SERIES_FILE
    out: dict[str, list[tuple[float, float, str]]] = {}
    if not path.exists():
        return out
    from servecheck.telemetry.series import read_samples

    for t, _, metric, value, labels in read_samples(path):
        if start <= t <= end and not math.isnan(value):
            out.setdefault(metric, []).append((t, value, str(labels.get("from", ""))))
    return out


def gauges(rows: Mapping[str, list[tuple[float, float, str]]]) -> dict[str, dict[str, Any]]:
    """Per canonical gauge seen in the window: min, max, mean, last, samples, source_metric."""
    out: dict[str, dict[str, Any]] = {}
    for name in GAUGES:
        got = sorted(rows.get(name) or [])
        if not got:
            continue
        values = [v for _, v, _ in got]
        out[name] = {
            "min": round(min(values), 6),
            "max": round(max(values), 6),
            "mean": round(math.fsum(values) / len(values), 6),
            "last": round(values[-1], 6),
            "samples": len(values),
            "source_metric": got[-1][2] or None,
        }
    return out


def counters(
    before: Any,
    after: Any,
    engine: str,
    user_map: Mapping[str, str] | None,
    rows: Mapping[str, list[tuple[float, float, str]]],
) -> dict[str, dict[str, Any]]:
    """Per canonical counter the engine exposes: ``delta`` over the window (None and a note
    when it went down: the engine restarted), with where it came from."""
    from servecheck.telemetry.prometheus import MetricMap, find_counter

    mapping = MetricMap.for_engine(engine, user_map)
    out: dict[str, dict[str, Any]] = {}
    for name in _counters_canonical():
        a = find_counter(after.samples, mapping, name) if after is not None else None
        b = find_counter(before.samples, mapping, name) if before is not None else None
        if a is not None and b is not None:
            entry: dict[str, Any] = {
                "before": b.value,
                "after": a.value,
                "source_metric": a.source_metric,
                "from": "scrapes",
            }
        else:
            got = sorted(rows.get(name) or [])
            if len(got) < 2:
                continue
            entry = {
                "before": got[0][1],
                "after": got[-1][1],
                "source_metric": got[-1][2] or None,
                "from": "series",
            }
        delta = entry["after"] - entry["before"]
        entry["delta"] = round(delta, 6) if delta >= 0 else None
        if delta < 0:
            entry["note"] = "the counter went down: the engine restarted during the run"
        out[name] = entry
    return out


def add_to(
    section: dict[str, Any], run_dir: Path, before: Any, after: Any, user_map: Any = None
) -> dict[str, Any]:
    """``section`` (an available server section) with ``gauges`` and ``counters`` added."""
    window = section.get("window") or {}
    if not section.get("available") or "start" not in window:
        return section
    rows = window_rows(run_dir, float(window["start"]), float(window["end"]))
    section["gauges"] = gauges(rows)
    section["counters"] = counters(before, after, str(section.get("engine")), user_map, rows)
    return section
