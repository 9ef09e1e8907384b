"""The load page's "Cancellation and outages" part: summary.json's ``cancel`` and ``outages``
(load/workload/cancel.py, analysis/outage.py) as tables. Renders only; empty when the run had neither."""

from __future__ import annotations

from typing import Any

from servecheck.analysis.sections import CancelSection, Outages
from servecheck.report.server_html import table


def _s(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}"


def faults_html(cancel: CancelSection | None, outages: Outages | None) -> str:
    """summary.json's ``cancel`` (the rule and its drain verdict) and ``outages`` (one row per
    window)."""
    parts: list[str] = []
    if cancel:
        drain = cancel.drain or {}  # drain.json as the telemetry wrote it
        rows = [
            ("rule", cancel.rule),
            ("cancelled", cancel.cancelled),
            ("drain", drain.get("status", "no telemetry")),
            ("", drain.get("message", "")),
        ]
        parts.append("<h4>Cancelled requests</h4>" + table(("", ""), rows))
    windows = [] if outages is None else outages.windows
    if windows:
        lines = [
            (
                _s(w.start_s),
                _s(w.end_s),
                "yes" if w.recovered else "NO",
                _s(w.recover_s),
                _s(w.resolution_s),
                ", ".join(f"{n} {k}" for k, n in w.failures.items()),
                w.lost_requests,
            )
            for w in windows
        ]
        head = ("start s", "end s", "recovered", "recover s", "+/- s", "failures", "lost")
        parts.append("<h4>Outages</h4>" + table(head, lines, numeric=(0, 1, 3, 4, 6)))
    return "<h3>Cancellation and outages</h3>" + "".join(parts) if parts else ""


__all__ = ["faults_html"]
