"""The console lines of a soak run: each cycle's line as the run goes and each verdict's line at
its end (moved here from :mod:`servecheck.load.soak`, which only runs and measures; issue 40:
what a person reads is formatted in report/ and commands/).

``load/soak.py``'s ``run_soak`` imports :func:`cycle_line` inside the function, as
``load/summary.py`` does summary.txt's text (ARCHITECTURE.md, "Layers"); ``servecheck soak``
prints :func:`verdict_line`. The verdicts' messages themselves are data (``soak.json``) and stay
with the verdicts.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servecheck.load.soak import CycleStats, SoakPlan


def cycle_line(plan: SoakPlan, stats: CycleStats) -> str:
    """One finished cycle: its requests, what failed or was dropped, or that the target went
    down in it and the soak stopped."""
    head = f"cycle {stats.index}/{plan.total_cycles}"
    if len(plan.mix) > 1:
        head += f" [{stats.member}]"
    if stats.down is not None:
        return f"{head}: {stats.down}: soak stopped"
    return (
        f"{head}: {stats.requests} requests, {stats.ok} ok, {stats.failed} failed"
        + (f", {stats.refused} refused (4xx, as they must be)" if stats.refused else "")
        + (f", {stats.abandoned} dropped" if plan.abandon or stats.abandoned else "")
        + (f" (first error {stats.first_error})" if stats.first_error else "")
    )


def member_lines(
    members: Sequence[Mapping[str, Any]], metrics: Collection[str] | None = None
) -> list[str]:
    """Each judged metric's share per member of a mix (soak.json's ``members``): ``kv_usage
    LEAK on member `errors`: +0.094 per cycle ...`` for a member whose own cycles leak, ``ok``
    for one whose do not; nothing for a single-member soak. ``metrics``: only these (the
    console shows the members of a metric that leaked; the page and summary.md all)."""
    out = []
    for m in members:
        for metric, share in (m.get("leak") or {}).items():
            if metrics is not None and metric not in metrics:
                continue
            word = {"leak": "LEAK", "ok": "ok"}.get(share["status"], share["status"].upper())
            out.append(f"{metric} {word} on member `{m['member']}`: {share['message']}")
    return out


def verdict_line(name: str, status: str, message: str) -> str:
    """``name: STATUS: numbers``; messages that already start with their status keep one."""
    word = status.replace("_", " ").upper()
    return (
        f"{name}: {message}" if message.upper().startswith(word) else f"{name}: {word}: {message}"
    )


__all__ = ["cycle_line", "member_lines", "verdict_line"]
