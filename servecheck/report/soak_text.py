"""The console lines of a soak run: each cycle's line as the run goes and each verdict's line at
its end (moved here from :mod:`servecheck.load.soak`, which only runs and measures; issue 40:
what a person reads is formatted in report/ and commands/).

``load/soak.py``'s ``run_soak`` imports :func:`cycle_line` inside the function, as
``load/summary.py`` does summary.txt's text (ARCHITECTURE.md, "Layers"); ``servecheck soak``
prints :func:`verdict_line`. The verdicts' messages themselves are data (``soak.json``) and stay
with the verdicts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servecheck.load.soak import CycleStats, SoakPlan


def cycle_line(plan: SoakPlan, stats: CycleStats) -> str:
    """One finished cycle: its requests, what failed or was dropped, or that the target went
    down in it and the soak stopped."""
    head = f"cycle {stats.index}/{plan.cycles}"
    if stats.down is not None:
        return f"{head}: {stats.down}: soak stopped"
    return (
        f"{head}: {stats.requests} requests, {stats.ok} ok, {stats.failed} failed"
        + (f", {stats.abandoned} dropped" if plan.abandon else "")
        + (f" (first error {stats.first_error})" if stats.first_error else "")
    )


def verdict_line(name: str, status: str, message: str) -> str:
    """``name: STATUS: numbers``; messages that already start with their status keep one."""
    word = status.replace("_", " ").upper()
    return (
        f"{name}: {message}" if message.upper().startswith(word) else f"{name}: {word}: {message}"
    )


__all__ = ["cycle_line", "verdict_line"]
