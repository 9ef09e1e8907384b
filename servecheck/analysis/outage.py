"""Outages during a run: the target stops answering, the generator backs off, the report says
how long it was down, what failed, and how many requests were lost.

Why: a generator that keeps firing at full rate at a dead target measures nothing and hammers
it as it comes back (a thundering herd on a restarting engine). So each Locust process keeps a
circuit breaker (:class:`Breaker`) over its own requests, and an :class:`OutageLog` in its
aggregate (so the windows merge across workers):

* ``OPEN_AFTER`` consecutive unanswered requests (refused, connect timeout, reset or closed
  before any response header: :func:`servecheck.analysis.down.connection_level`; or timed out with
  no header at all: :func:`unanswered`) open an outage. It began at the first failure after the last success (streams the dying server broke
  mid-body count in it).
* While it is open the process sends one probe at a time, the first ``PROBE_FIRST_S`` after it
  opened, then with the gap growing by ``PROBE_GROWTH`` up to ``PROBE_MAX_S``: at most one
  request a second, never the full rate. Any other send due then is not sent: open loop, it is
  recorded as ``error: "lost"`` with its intended time; closed loop, the user waits.
* The first success sent after it began ends it (a request in flight through the failure that
  completed says nothing of now; an answer that is an error, e.g. a 503 while the engine loads its
  model, does not): ``recover_s`` is from its start to that success's send, to within the probe
  gap (``resolution_s``).

summary.json's ``outages`` (:func:`section`): the windows (the workers' merged where they
overlap), failures by class, time to recover, and ``lost_requests`` (every request that failed
or was not sent inside a window), which the SLO ``lost_requests<=N`` judges. A run with an outage
is never a silent pass: without that SLO it is INCONCLUSIVE, over it FAIL, and an outage that
had not ended by the run's end FAILs (:func:`verdict_of`).

``--down-after`` (analysis/down.py) still stops a run whose target stays down: the probes' failures
are its consecutive connection errors, the lost sends are not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from servecheck.analysis.down import connection_level
from servecheck.analysis.sections import BreakerSettings, Outages, OutageWindow
from servecheck.analysis.verdict import Status
from servecheck.records.record import LOST, RATE_LIMITED

OPEN_AFTER = 3  # consecutive connection-level failures that open an outage
PROBE_FIRST_S = 1.0  # the first probe's delay after the outage opened: at most 1 request/s
PROBE_GROWTH = 1.5
PROBE_MAX_S = 4.0
HOLD, PROBE, SEND = "hold", "probe", "send"


@dataclass(slots=True)
class Window:
    """One outage seen by one process (wall-clock seconds, the records' clock)."""

    start: float
    last_failure: float
    end: float | None = None  # the first success's send; None: not recovered
    failures: dict[str, int] = field(default_factory=dict)  # by class, ``lost`` included
    workers: int = 1

    def fail(self, error: str, t: float) -> None:
        self.failures[error] = self.failures.get(error, 0) + 1
        if error != LOST:
            self.last_failure = max(self.last_failure, t)

    @property
    def lost(self) -> int:
        return sum(self.failures.values())


def unanswered(error: Any, status: int | None) -> bool:
    """The target did not answer: refused, connect timeout, reset or closed before the headers
    (:func:`~servecheck.analysis.down.connection_level`), or accepted and sent no headers before the
    request timed out."""
    return connection_level(error, status) or (error == "timeout" and status is None)


class OutageLog:
    """A process's outages, from its records in completion order (:meth:`add`); mergeable."""

    __slots__ = ("windows", "open", "streak", "pending", "pending_start")

    def __init__(self) -> None:
        self.windows: list[Window] = []  # ended ones
        self.open: Window | None = None
        self.streak = 0
        self.pending: dict[str, int] = {}  # failures since the last success
        self.pending_start: float | None = None

    def add(self, r: Mapping[str, Any]) -> None:
        err = r.get("error")
        if r.get("cancelled") and not err:
            return  # the client's own doing: says nothing about the server
        sent = float(r.get("t_sent") or 0.0)
        if err is None:
            began = self.open.start if self.open is not None else self.pending_start
            if began is not None and sent < began:
                return  # sent before the failures began, done after: says nothing of now
            if self.open is not None:
                self.open.end = sent
                self.windows.append(self.open)
                self.open = None
            self.streak, self.pending, self.pending_start = 0, {}, None
            return
        t = float(r.get("t_done") or sent)
        if self.open is not None:
            if err != RATE_LIMITED:
                self.open.fail(str(err), t)
            return
        if err in (RATE_LIMITED, LOST):
            self.streak = 0  # a shed request: the server answered
            return
        self.pending[str(err)] = self.pending.get(str(err), 0) + 1
        self.pending_start = t if self.pending_start is None else min(self.pending_start, t)
        self.streak = self.streak + 1 if unanswered(err, r.get("status")) else 0
        if self.streak >= OPEN_AFTER:
            self.open = Window(self.pending_start, t, failures=dict(self.pending))

    def all(self) -> list[Window]:
        return [*self.windows, *([self.open] if self.open is not None else [])]

    def merge(self, other: OutageLog) -> None:
        self.windows += other.all()

    def state(self) -> list[dict[str, Any]]:
        return [asdict(w) for w in self.all()]

    @classmethod
    def from_state(cls, rows: Iterable[Mapping[str, Any]] | None) -> OutageLog:
        log = cls()
        log.windows = [Window(**dict(w)) for w in rows or ()]
        return log


class Breaker:
    """Per process: whether a request may go now (:meth:`admit`), given its outage log."""

    __slots__ = ("log", "seen", "next_probe", "gap", "probing")

    def __init__(self, log: OutageLog) -> None:
        self.log = log
        self.seen: Window | None = None
        self.next_probe = 0.0
        self.gap = PROBE_FIRST_S
        self.probing = False

    def admit(self, now: float) -> str:
        """``send`` (no outage), ``probe`` (the one request that tests the target now) or
        ``hold`` (an outage: not now). ``now`` on ``perf_counter``."""
        window = self.log.open
        if window is None:
            self.probing = False
            return SEND
        if window is not self.seen:  # a new outage: the first probe after PROBE_FIRST_S
            self.seen, self.gap = window, PROBE_FIRST_S
            self.next_probe = now + PROBE_FIRST_S
        if self.probing or now < self.next_probe:
            return HOLD
        self.probing = True
        return PROBE

    def probed(self, now: float) -> None:
        """The probe ended (its record already in the log): the next one after a longer gap."""
        self.probing = False
        if self.log.open is not None:
            self.gap = min(PROBE_MAX_S, self.gap * PROBE_GROWTH)
            self.next_probe = now + self.gap


# ------------------------------------------------------------------ the summary


def _merged(windows: Iterable[Window]) -> list[Window]:
    """The workers' windows, overlapping ones made one (each process sees the same outage)."""
    out: list[Window] = []
    for w in sorted(windows, key=lambda w: w.start):
        last = out[-1] if out else None
        if last is not None and (last.end is None or w.start <= last.end):
            for k, v in w.failures.items():
                last.failures[k] = last.failures.get(k, 0) + v
            last.last_failure = max(last.last_failure, w.last_failure)
            last.end = None if last.end is None or w.end is None else max(last.end, w.end)
            last.workers += w.workers
            continue
        out.append(Window(w.start, w.last_failure, w.end, dict(w.failures), w.workers))
    return out


def section(log: OutageLog, origin: float | None, end: float | None = None) -> Outages:
    """summary.json's ``outages``: the windows (seconds from the run's start), failures by class,
    time to recover, lost requests. ``down_s`` counts a window still open at the run's ``end``
    (wall clock) up to that end: a run stopped by the outage was down from its start to the end."""
    t0 = origin or 0.0
    rows = [
        OutageWindow(
            start_s=round(w.start - t0, 3),
            end_s=None if w.end is None else round(w.end - t0, 3),
            recovered=w.end is not None,
            recover_s=None if w.end is None else round(w.end - w.start, 3),
            resolution_s=None if w.end is None else round(w.end - w.last_failure, 3),
            failures=dict(sorted(w.failures.items())),
            lost_requests=w.lost,
            workers=w.workers,
        )
        for w in _merged(log.all())
    ]
    open_s = [
        max(0.0, end - (t0 + r.start_s)) for r in rows if r.recover_s is None and end is not None
    ]
    return Outages(
        count=len(rows),
        lost_requests=sum(r.lost_requests for r in rows),
        down_s=round(sum(r.recover_s or 0.0 for r in rows) + sum(open_s), 3),
        windows=rows,
        breaker=BreakerSettings(
            open_after=OPEN_AFTER, probe_first_s=PROBE_FIRST_S, probe_max_s=PROBE_MAX_S
        ),
    )


def verdict_of(outages: Outages, judged: bool) -> tuple[Status, list[str]]:
    """``(status, reasons)`` for the run's outages: ``pass`` with none; an outage not over by
    the run's end is ``fail``; else ``inconclusive`` unless an SLO on ``lost_requests`` judged
    them (``judged``: its own verdict then passes or fails the run), never a silent pass."""
    rows = outages.windows
    if not rows:
        return "pass", []
    reasons = [_reason(r) for r in rows]
    if any(not r.recovered for r in rows):
        return "fail", reasons
    if not judged:
        return "inconclusive", [
            *reasons,
            "the run had an outage and no lost_requests SLO judged it (e.g. lost_requests<=50)",
        ]
    return "pass", reasons


def _reason(r: OutageWindow) -> str:
    """One outage window as a verdict reason: data (summary.json's verdict), not console text."""
    failures = ", ".join(f"{n} {k}" for k, n in r.failures.items())
    if not r.recovered:
        return (
            f"target down from t={r.start_s:.1f}s, not recovered by the run's end "
            f"({r.lost_requests} requests lost: {failures})"
        )
    return (
        f"outage t={r.start_s:.1f}s..{r.end_s:.1f}s: recovered after {r.recover_s:.1f} s "
        f"(+/-{r.resolution_s:.1f} s), {r.lost_requests} requests lost ({failures})"
    )


__all__ = [
    "HOLD",
    "OPEN_AFTER",
    "PROBE",
    "PROBE_FIRST_S",
    "PROBE_MAX_S",
    "SEND",
    "Breaker",
    "OutageLog",
    "Window",
    "section",
    "verdict_of",
]
