"""Reasoning phases in load summaries: how the phase rows of summary.txt read.

A reasoning model's stream has two phases: reasoning deltas, then the answer. Each record keeps
``ttfr`` (first reasoning token), ``ttfa`` (first answer token) and the ITLs of each phase
(servecheck/load/generator/stream.py fills them; docs/metrics.md defines them); TTFT stays the first token
of any kind. Runs whose streams carried no reasoning print none of this.
"""

from __future__ import annotations

from typing import Any

PHASE_ROWS = ("ttfr", "ttfa", "itl_reasoning", "itl_answer")
_COLUMNS = ("p50", "p90", "p95", "p99", "p99.9", "max")


def phase_lines(latency_ms: dict[str, Any]) -> list[str]:
    """Rows for the summary's latency table (same columns), one per phase metric measured."""
    lines = []
    for name in PHASE_ROWS:
        d = latency_ms.get(name) or {}
        if not d.get("count"):
            continue
        cells = "".join(f"{'-' if d.get(k) is None else format(d[k], '.1f'):>9}" for k in _COLUMNS)
        lines.append(f"{name:<20}{cells}")
    return lines
