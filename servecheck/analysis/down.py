"""Did the target go down mid-run? A watch over the records as they are written.

:mod:`servecheck.probes.reach` refuses to start a load against a target that is down; this module
stops one whose target goes away while it runs. Without it the generator keeps firing failing
requests at full rate until the run's end and the verdict says only "nothing succeeded" (or, with
some successes before the crash, a mere error rate).

The rule (:class:`DownRule`, option ``--down-after N,WINDOW``, default ``10,5s``): the target is
down when the last ``N`` records in time order all failed at the connection level (refused,
connect timeout, reset or closed before any response header) and they span at least ``WINDOW``
seconds with no success in between. Any answer from the server (a success, an HTTP 5xx, a
timeout after the connection opened, a broken stream after the headers) ends the streak: a server
that answers 503 is up and its errors are measured as failures. A flapping target, down for less
than ``WINDOW`` at a time, keeps its run going and the down spells count as connect errors; one
that stays down for ``WINDOW`` stops the run.

The run then stops early (all workers: the master stops and Locust stops its workers), keeps
every record measured so far, writes a marked partial summary and fails with "target went down
at t=...s (N consecutive connection errors: <error>)".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from servecheck.errors import SpecError, UsageError
from servecheck.redact import redact

DEFAULT_ERRORS = 10
DEFAULT_WINDOW_S = 5.0


def connection_level(error: str | None, status: int | None) -> bool:
    """True for a failure in which the server never answered: refused, connect timeout, or a
    connection reset / closed before the response headers."""
    return error == "connect" or (error == "stream-error" and status is None)


@dataclass(slots=True, frozen=True)
class DownRule:
    """``errors`` consecutive connection-level failures spanning ``window_s`` seconds mean the
    target is down. ``errors == 0`` turns the watch off."""

    errors: int = DEFAULT_ERRORS
    window_s: float = DEFAULT_WINDOW_S

    @property
    def active(self) -> bool:
        return self.errors > 0

    def backstop(self) -> DownRule:
        """A distributed worker's rule: twice the streak over twice the window. The master, which
        sees every worker's records, decides first; with the outage breaker (analysis/outage.py) a
        worker's streak grows by one probe a second, so the same rule on both would let the
        worker quit before its last failures reached the master."""
        return DownRule(self.errors * 2, self.window_s * 2) if self.active else self

    def text(self) -> str:
        return f"{self.errors},{self.window_s:g}s" if self.active else "off"


def parse_down_after(text: str | None) -> DownRule:
    """``--down-after``: ``N,WINDOW`` (``10,5s``), ``N`` (window 5 s) or ``off``."""
    from servecheck.load.workload.schedule import parse_duration

    if text is None or not str(text).strip():
        return DownRule()
    raw = str(text).strip().lower()
    if raw in ("off", "0", "never"):
        return DownRule(0, DEFAULT_WINDOW_S)
    count, _, window = raw.partition(",")
    try:
        n = int(count)
        w = parse_duration(window) if window.strip() else DEFAULT_WINDOW_S
    except (ValueError, UsageError):
        n, w = -1, -1.0
    if n < 1 or w < 0:
        raise SpecError(
            "{down_after} {text!r}: give N,WINDOW (e.g. 10,5s: stop when 10 consecutive requests "
            "failed to connect over 5 s), N alone, or off",
            text=text,
        )
    return DownRule(n, w)


@dataclass(slots=True)
class DownWatch:
    """Feeds on records (dicts as written to ``records-*.jsonl``) and says when the target went
    down. Feed them in time order (:meth:`feed_batch` sorts a batch by send time)."""

    rule: DownRule
    started: float  # the run's start (wall clock), for "t=...s"
    streak: int = 0
    streak_start: float | None = None
    last_fail: float = 0.0
    last_error: str = ""
    down: str | None = None

    def feed(self, rec: Mapping[str, Any]) -> str | None:
        """Take one record; returns the reason once the target counts as down."""
        if self.down is not None or not self.rule.active:
            return self.down
        if rec.get("abandoned") or rec.get("cancelled") or rec.get("error") == "lost":
            return None  # dropped on purpose, or never sent (analysis/outage.py): says nothing
        t = float(rec.get("t_sent") or 0.0)
        if not connection_level(rec.get("error"), rec.get("status")):
            self.streak, self.streak_start = 0, None
            return None
        self.streak += 1
        if self.streak_start is None:
            self.streak_start = t
        self.last_fail = max(self.last_fail, t)
        self.last_error = redact(str(rec.get("error_message") or rec.get("error") or "")[:200])
        if (
            self.streak >= self.rule.errors
            and self.last_fail - self.streak_start >= self.rule.window_s
        ):
            self.down = (
                f"target went down at t={max(0.0, self.streak_start - self.started):.1f}s "
                f"({self.streak} consecutive connection errors: {self.last_error})"
            )
        return self.down

    def feed_batch(self, records: Iterable[Mapping[str, Any]]) -> str | None:
        """Feed records read together (from several workers' files) in send-time order."""
        for rec in sorted(records, key=lambda r: float(r.get("t_sent") or 0.0)):
            if self.feed(rec) is not None:
                break
        return self.down


__all__ = [
    "DEFAULT_ERRORS",
    "DEFAULT_WINDOW_S",
    "DownRule",
    "DownWatch",
    "connection_level",
    "parse_down_after",
]
