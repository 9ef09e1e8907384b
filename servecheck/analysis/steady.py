"""Steady state and time slices: a load run judged on the part where the load was what was asked.

**Steady window.** A closed-loop run starts its users over its first second (Locust's spawn
rate is the user count per second) and, at its stop, lets the requests in flight drain while no
new ones start: neither part is the load the SLOs are about. the steady window (``servecheck load``'s option of that name, a load plan's ``steady_window``)
says which part
of the run the SLO verdicts judge:

* ``auto`` (default): from the moment the ramp-up ended to the stop. Closed loop: the later of
  the first send + the spawn time (``users / spawn rate`` = 1 s) and the send of the
  ``users``-th request (every user has started). Open loop (fixed, poisson): the rate is reached
  with the first send, so the window opens there. It closes at the stop (the first send + the
  duration; with only ``max_requests``, the last send). A shape or a trace is not one steady
  load: ``auto`` judges it whole and says so. A run whose window would be shorter than
  :data:`MIN_WINDOW_S` or keep less than :data:`MIN_SHARE` of its span is judged whole too, with
  that reason (too short to have a steady state).
* ``START:END``: seconds from the first measured send (after a warm-up), e.g. ``10s:50s``;
  ``10s:`` runs to the stop.
* ``none``: the whole run.

A request is in the window when it was sent at or after its start and finished (failed ones:
were sent) at or before its end: it ran its whole life under the steady load. Requests that
straddle the stop are out (they ran while the load fell); a window shorter than a few E2E
latencies therefore leans toward the shorter requests, which is why the window must be long.
The whole run's figures stay in summary.json (``requests``, ``latency_ms`` ...); the window's
are its ``steady`` section, and every SLO but the error budget is judged on them (an error
during the ramp is still an error: the budget counts the whole run).

**Time slices.** summary.json's ``slices``: the measured run cut into ``slice_s`` pieces by when
each request finished (failed ones: when sent), each with its count, errors (``rate_limited``: those of them the server shed), TTFT / ITL / E2E
p50/p95/p99, requests and output tokens per second, the mean number of requests in flight, and
its three HDR histograms in HDR's portable encoding (``hdr``: they merge exactly, so a plot or a
later tool can join slices). Slices are aligned to the epoch, so the scans of several workers add
up slice by slice; the rows start at the first send (the first one is shortened to it). At most
:data:`MAX_SLICES` slices (a longer run doubles the slice width, merging neighbours, until it
fits). Each worker keeps its scan as it records (``analysis/aggregate.py``), and the window's own
figures too: :func:`window_bounds` then places the window on the merged scan.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from servecheck.analysis.stats import Histogram, Prepared, RunStats, prepare
from servecheck.errors import SpecError, UsageError
from servecheck.records.record import RATE_LIMITED

MIN_WINDOW_S = 2.0
MIN_SHARE = 0.5
DEFAULT_SLICE_S = 5.0
MAX_SLICES = 120
_SLICE_METRICS = ("ttft", "itl", "e2e")
_STATS = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0))


@dataclass(frozen=True, slots=True)
class SteadyWindow:
    """How to cut the run: ``auto``, ``range`` (``start_s``..``end_s``, None: the stop) or ``none``."""

    mode: str = "auto"
    start_s: float = 0.0
    end_s: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("auto", "range", "none"):
            raise SpecError(f"{{steady_window}} {self.mode!r}: auto, START:END or none")
        if self.start_s < 0 or (self.end_s is not None and self.end_s <= self.start_s):
            raise SpecError(
                f"{{steady_window}} {self.start_s:g}:{'' if self.end_s is None else f'{self.end_s:g}'}: "
                "START >= 0 and END after START"
            )

    @property
    def text(self) -> str:
        if self.mode != "range":
            return self.mode
        return f"{self.start_s:g}s:" + ("" if self.end_s is None else f"{self.end_s:g}s")


def parse_steady_window(text: str | None) -> SteadyWindow:
    """``auto`` | ``none`` | ``START:END`` (durations, END optional) -> :class:`SteadyWindow`."""
    from servecheck.load.workload.schedule import parse_duration

    s = (text or "auto").strip().lower()
    if s in ("auto", "none"):
        return SteadyWindow(s)
    start, sep, end = s.partition(":")
    if not sep:
        raise SpecError(
            "{steady_window} {text!r}: auto, none or START:END (e.g. 10s:50s)", text=text
        )
    try:
        a = 0.0 if start.strip() in ("", "0") else parse_duration(start)
        b = parse_duration(end) if end.strip() else None
    except UsageError as exc:
        raise SpecError("{steady_window} {text!r}: {why}", text=text, why=str(exc)) from None
    return SteadyWindow("range", a, b)


def parse_slice_s(text: str | float | None) -> float:
    """A slice width: a duration of at least 0.1 s (default :data:`DEFAULT_SLICE_S`)."""
    from servecheck.load.workload.schedule import parse_duration

    if text is None:
        return DEFAULT_SLICE_S
    value = parse_duration(text)
    if value < 0.1:
        raise SpecError("{slice_s} {text!r}: at least 100ms", text=str(text))
    return value


@dataclass(slots=True)
class _Slice:
    count: int = 0
    errors: int = 0
    tokens: int = 0
    busy_s: float = 0.0  # request-seconds in flight within the slice
    shed: int = 0  # of the errors, those the server shed (429, 503 + Retry-After)
    hist: dict[str, Histogram] = field(
        default_factory=lambda: {m: Histogram() for m in _SLICE_METRICS}
    )

    def merge(self, other: _Slice) -> None:
        self.count += other.count
        self.errors += other.errors
        self.tokens += other.tokens
        self.busy_s += other.busy_s
        self.shed += other.shed
        for m in _SLICE_METRICS:
            self.hist[m].add(other.hist[m])

    def state(self) -> list[Any]:
        return [
            self.count,
            self.errors,
            self.tokens,
            round(self.busy_s, 6),
            {m: h.state() for m, h in self.hist.items() if h.count},
            self.shed,
        ]

    @classmethod
    def from_state(cls, st: list[Any]) -> _Slice:
        sl = cls(int(st[0]), int(st[1]), int(st[2]), float(st[3]), int(st[5]) if len(st) > 5 else 0)
        for m, h in st[4].items():
            sl.hist[m] = Histogram.from_state(h)
        return sl


@dataclass(slots=True)
class Scan:
    """What one pass over the measured records learns: first/last send, the ``nth`` send (the
    ramp's end in a closed loop) and the time slices.

    Slices are aligned to the epoch (slice ``i`` holds ``[i * slice_s, (i + 1) * slice_s)``), so
    the scans of several workers merge slice by slice (:meth:`merge`); the rows start at the
    run's first send, the first one shortened to it."""

    slice_s: float = DEFAULT_SLICE_S
    nth: int = 0
    first_sent: float | None = None
    last_sent: float | None = None
    nth_sent: float | None = None
    seen: int = 0
    slices: dict[int, _Slice] = field(default_factory=dict)
    # The lowest slice index (None: not known; every change of ``slices`` but an insert clears it)
    _lo: int | None = field(default=None, init=False, repr=False, compare=False)

    def add(self, r: Mapping[str, Any], itls: Prepared | None = None) -> None:
        sent = float(r.get("t_sent") or 0.0)
        if self.first_sent is None or sent < self.first_sent:
            self.first_sent = sent
        self.last_sent = sent if self.last_sent is None else max(self.last_sent, sent)
        self.seen += 1
        if self.seen == self.nth:
            self.nth_sent = sent
        done = r.get("t_done")
        end = float(done) if done is not None else sent
        sl = self._slice(end)
        sl.count += 1
        err = r.get("error")
        if err:
            sl.errors += 1
            sl.shed += err == RATE_LIMITED
        else:
            sl.tokens += int(r.get("output_tokens") or r.get("output_tokens_client") or 0)
            if r.get("ttft") is not None:
                sl.hist["ttft"].record(float(r["ttft"]))
            if r.get("e2e") is not None and not r.get("abandoned"):
                sl.hist["e2e"].record(float(r["e2e"]))
            sl.hist["itl"].record_prepared(prepare(r.get("itls") or ()) if itls is None else itls)
        self._busy(sent, end)

    def add_plain(self, r: Mapping[str, Any], sent: float) -> _Slice:
        """:meth:`add` of a plain record (no error, not abandoned: ``Aggregate.add_plain``) sent
        at ``sent``, but its ITLs; returns its slice, whose ITL histogram the caller records them
        into with the others (issue 46)."""
        if self.first_sent is None or sent < self.first_sent:
            self.first_sent = sent
        last = self.last_sent
        self.last_sent = sent if last is None or sent > last else last
        self.seen += 1
        if self.seen == self.nth:
            self.nth_sent = sent
        done = r.get("t_done")
        end = float(done) if done is not None else sent
        sl = self._slice(end)
        sl.count += 1
        sl.tokens += int(r.get("output_tokens") or r.get("output_tokens_client") or 0)
        ttft, e2e = r.get("ttft"), r.get("e2e")
        if ttft is not None:
            sl.hist["ttft"].record(float(ttft))
        if e2e is not None:
            sl.hist["e2e"].record(float(e2e))
        if end > sent:
            w = self.slice_s
            i = int(math.floor(sent / w))
            if i == int(math.floor(end / w)):  # sent and done in one slice: _busy's one step
                overlap = min((i + 1) * w, end) - max(i * w, sent)
                if overlap > 0:
                    sl.busy_s += overlap
            else:
                self._busy(sent, end)
        return sl

    def _index(self, t: float) -> int:
        return int(math.floor(t / self.slice_s))

    def _first(self) -> int:
        return self._index(float(self.first_sent or 0.0))

    def _slice(self, t: float) -> _Slice:
        i = self._index(t)
        while i - min(self._first(), self._low(i)) >= MAX_SLICES:
            self._coarsen()  # too long a run: double the width, merging neighbours
            i = self._index(t)
        return self._at(i)

    def _low(self, default: int) -> int:
        if self._lo is None and self.slices:
            self._lo = min(self.slices)
        return default if self._lo is None else self._lo

    def _at(self, i: int) -> _Slice:
        """Slice ``i``, made when it is not there yet (a slice holds a histogram per metric: made
        only when needed, since this runs a few times for every request)."""
        sl = self.slices.get(i)
        if sl is None:
            sl = self.slices[i] = _Slice()
            if self._lo is not None and i < self._lo:
                self._lo = i
        return sl

    def _coarsen(self) -> None:
        merged: dict[int, _Slice] = {}
        for i, sl in sorted(self.slices.items()):
            into = merged.setdefault(i // 2, _Slice())
            into.merge(sl)
        self.slices = merged
        self._lo = None
        self.slice_s *= 2

    def _busy(self, sent: float, end: float) -> None:
        """Spread the request's time in flight over the slices it spans (mean in-flight)."""
        if end <= sent:
            return
        self._slice(end)  # widen first, so every index below fits
        i, last = self._index(sent), self._index(end)
        while i <= last:
            lo, hi = i * self.slice_s, (i + 1) * self.slice_s
            overlap = min(hi, end) - max(lo, sent)
            if overlap > 0:
                self._at(i).busy_s += overlap
            i += 1

    def merge(self, other: Scan) -> None:
        """Add another worker's scan (the ``nth`` send: the later of the two, when every user of
        both had started)."""
        if other.first_sent is None:
            return
        while self.slice_s < other.slice_s:
            self._coarsen()
        theirs = dict(other.slices)
        width = other.slice_s
        while width < self.slice_s:
            halved: dict[int, _Slice] = {}
            for i, sl in theirs.items():
                halved.setdefault(i // 2, _Slice()).merge(sl)
            theirs, width = halved, width * 2
        for i, sl in theirs.items():
            self._at(i).merge(sl)
        self.first_sent = min(self.first_sent or other.first_sent, other.first_sent)
        self.last_sent = max(self.last_sent or 0.0, other.last_sent or 0.0)
        if other.nth_sent is not None:
            self.nth_sent = max(self.nth_sent or other.nth_sent, other.nth_sent)
        self.seen += other.seen
        while self.slices and max(self.slices) - min(self._first(), min(self.slices)) >= MAX_SLICES:
            self._coarsen()

    def state(self) -> dict[str, Any]:
        return {
            "slice_s": self.slice_s,
            "nth": self.nth,
            "first_sent": self.first_sent,
            "last_sent": self.last_sent,
            "nth_sent": self.nth_sent,
            "seen": self.seen,
            "slices": {str(i): sl.state() for i, sl in self.slices.items()},
        }

    @classmethod
    def from_state(cls, d: Mapping[str, Any]) -> Scan:
        sc = cls(float(d["slice_s"]), int(d["nth"]), d["first_sent"], d["last_sent"])
        sc.nth_sent, sc.seen = d["nth_sent"], int(d["seen"])
        sc.slices = {int(i): _Slice.from_state(st) for i, st in d["slices"].items()}
        return sc

    def as_list(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not self.slices or self.first_sent is None:
            return out
        t0, width = float(self.first_sent), self.slice_s
        for i in range(self._first(), max(self.slices) + 1):
            sl = self.slices.get(i, _Slice())
            start, end = max(0.0, i * width - t0), (i + 1) * width - t0
            span = max(end - start, 1e-9)  # the first slice starts at the first send
            row: dict[str, Any] = {
                "start_s": round(start, 3),
                "end_s": round(end, 3),
                "count": sl.count,
                "errors": sl.errors,
                "rate_limited": sl.shed,
                "requests_per_s": round((sl.count - sl.errors) / span, 4),
                "output_tokens_per_s": round(sl.tokens / span, 3),
                "in_flight": round(sl.busy_s / span, 3),
            }
            for m in _SLICE_METRICS:
                d = sl.hist[m].summary()
                row[f"{m}_ms"] = {k: d.get(k) for k, _ in _STATS}
            row["hdr"] = {m: sl.hist[m].encode() for m in _SLICE_METRICS if sl.hist[m].count}
            out.append(row)
        return out


def scan(records: Iterable[Mapping[str, Any]], slice_s: float, nth: int) -> Scan:
    sc = Scan(slice_s=slice_s, nth=nth)
    for r in records:
        sc.add(r)
    return sc


@dataclass(frozen=True, slots=True)
class Bounds:
    """The window in absolute send-clock seconds (``applied`` False: the whole run), and why."""

    applied: bool
    start: float
    end: float
    how: str

    def holds(self, r: Mapping[str, Any]) -> bool:
        sent = float(r.get("t_sent") or 0.0)
        done = r.get("t_done")
        end = float(done) if done is not None and not r.get("error") else sent
        return sent >= self.start and end <= self.end


def window_bounds(
    window: SteadyWindow,
    sc: Scan,
    *,
    mode: str,
    users: int | None,
    run_start: float | None,
    duration_s: float | None,
) -> Bounds:
    """Where the steady window lies for this run (see the module's rules)."""
    first, last = sc.first_sent, sc.last_sent
    if first is None or last is None:
        return Bounds(False, 0.0, 0.0, "no request was sent")
    origin = run_start if run_start is not None else first
    stop = origin + duration_s if duration_s else last + 1e-6
    if window.mode == "none":
        return Bounds(False, first, stop, "none: the whole run is judged")
    if window.mode == "range":
        end = stop if window.end_s is None else first + window.end_s
        return Bounds(True, first + window.start_s, end, f"{window.text} as asked")
    if mode in ("shape", "trace", "profile"):
        return Bounds(
            False, first, stop, f"auto: a {mode} run is not one steady load, judged whole"
        )
    start = first
    how = "auto: open loop reaches its rate with the first send"
    if mode == "closed":
        spawned = origin + (users or 1) / max(1, users or 1)
        start = max(first, spawned, sc.nth_sent if sc.nth_sent is not None else first)
        how = f"auto: after all {users} users started"
    span = max(stop, last) - first
    if stop - start < MIN_WINDOW_S or (span > 0 and (stop - start) / span < MIN_SHARE):
        return Bounds(
            False,
            first,
            stop,
            f"auto: the run ({span:.1f} s) is too short for a steady window; judged whole",
        )
    return Bounds(True, start, stop, how + ", to the stop")


def steady_section(
    window: SteadyWindow,
    bounds: Bounds,
    first_sent: float | None,
    stats_dict: dict[str, Any] | None,
) -> dict[str, Any]:
    """summary.json's ``steady``: the window asked, where it lay, why, and its figures."""
    t0 = first_sent or 0.0
    out: dict[str, Any] = {
        "asked": window.text,
        "applied": bounds.applied,
        "start_s": round(bounds.start - t0, 3) if bounds.applied else None,
        "end_s": round(bounds.end - t0, 3) if bounds.applied else None,
        "how": bounds.how,
    }
    if stats_dict is not None:
        for key in ("requests", "window_s", "throughput", "latency_ms", "goodput"):
            out[key] = stats_dict.get(key)
    return out


@dataclass(slots=True)
class Measured:
    """The steady window's bounds, its statistics (None: not applied) and the slices."""

    bounds: Bounds
    scan: Scan
    stats: RunStats | None

    @property
    def empty(self) -> bool:
        """The window was applied and held no request: its SLOs measure nothing."""
        return self.stats is not None and self.stats.total == 0


__all__ = [
    "DEFAULT_SLICE_S",
    "MAX_SLICES",
    "Bounds",
    "Measured",
    "Scan",
    "SteadyWindow",
    "parse_slice_s",
    "parse_steady_window",
    "scan",
    "steady_section",
    "window_bounds",
]
