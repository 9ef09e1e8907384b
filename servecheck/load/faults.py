"""A load run's injected and observed faults in its summary: the ``cancel`` section and its
drain verdict (load/workload/cancel.py), the ``outages`` section and its verdict (analysis/outage.py), folded
into one stage verdict for :func:`servecheck.load.summary.summarise`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servecheck.analysis import outage, server_timings, server_truth
from servecheck.analysis.sections import CancelSection, Outages
from servecheck.analysis.slo import SLO
from servecheck.analysis.stats import RunStats
from servecheck.analysis.verdict import PASS, RunVerdict, as_status, compose
from servecheck.load.workload import cancel

if TYPE_CHECKING:
    from servecheck.analysis.aggregate import Aggregate
    from servecheck.load.spec import LoadSpec


@dataclass(slots=True)
class Faults:
    """summary.json's ``cancel`` (None without --cancel) and ``outages``."""

    cancel: CancelSection | None
    outages: Outages


def fault_sections(
    spec: LoadSpec,
    agg: Aggregate,
    stats: RunStats,
    slos: Sequence[SLO],
    run_dir: Path,
    server: dict[str, Any] | None,
    run: RunVerdict,
    ended: float | None = None,
) -> tuple[Faults, RunVerdict]:
    """summary.json's ``cancel`` (with ``--cancel``) and ``outages`` (always: an empty list is
    the news that the target never went away), and their verdict with the engine's findings
    (``server``, analysis/server_truth.py), which an outage voids: an engine that restarted counts
    from 0 again, so its counters no longer match the client's; all composed with ``run``, the
    run's verdict so far. ``ended``: the run's end (wall clock), where an open outage stops."""
    parts: list[RunVerdict] = []
    section, status, reason = cancel.section(spec.cancel, stats.cancelled, run_dir)
    if section is not None:
        parts.append(RunVerdict(as_status(status), [reason]))
    outages = outage.section(agg.outages, agg.edges.origin, ended)
    judged = any(s.metric == "lost_requests" for s in slos)
    parts.append(RunVerdict(*outage.verdict_of(outages, judged)))
    if not outages.count:
        parts.append(server_truth.verdict_of(server))
    elif server is not None:
        server["voided_by_outage"] = True
        parts.append(RunVerdict(PASS, ["server: counters not reconciled across the outage"]))
    # The engine's per-request timings against the client's record and its own usage.
    parts.append(server_timings.verdict_of(agg.timings.server_section()))
    # a pass keeps what it saw in its reasons (a cancel drained, an outage judged)
    return Faults(cancel=section, outages=outages), compose([run, *parts])


__all__ = ["Faults", "fault_sections"]
