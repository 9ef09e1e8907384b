"""The closed loop's native lane: a C thread sends the requests and reads whole exchanges.

Why: with the reactor (``reactor.py``) every request costs the Locust process's Python about
480 us: the user's greenlet builds and sends it, sleeps, wakes, and the reactor hands each read
over. For a 64-token stream that is as much CPU again as the reads themselves, which are all a C
client pays (``docs/benchmarks.md``, issue 46). In the lane, the native thread (``_lane.c``) keeps
one exchange going per user, and sends the next queued request the moment an answer ends. It
follows each response's framing only to know where it ends and which reads are whole token
chunks; those become arrival times, every other read is kept as it came (bytes and kernel
stamp). At its end an exchange comes back as one bundle, and :meth:`Lane.replay` runs it through
the very parser the reactor uses (:class:`~servecheck.load.generator.wire.ResponseParser` over
the stream's :class:`~servecheck.load.generator.stream.StreamState`), with the reactor's
timeouts and messages. A record from the lane is the record the reactor makes from the same
reads (``tests/load/test_lane.py`` pins it against the reactor on the same servers and faults).
The common answer skips most of that parser: where an exchange came whole and plain (a 200,
chunked, one ``data:`` line an event, no CR), the thread's hand-over already took its framing off
and split its events (``_lane.c``'s ``plain_of``), and :func:`_plain` gives the stream state just
the events and token batches, as the parser would have (issue 46: the parser was a third of the
Python's cost a request).

It serves the common run only: closed loop over plain HTTP, no per-request steps (images, a
model mix, hang-ups, cancels), no multi-turn capture, no back-off after 429s. The controller
(``locust_user.py``) falls back to the reactor for the rest of a run at its first failed
request, so the outage breaker and the error paths stay Python's. ``SERVECHECK_READER=thread``
(the reactor's reader thread) or ``loop`` turns it off; without the C extension (the default wheel)
there is none.
"""

from __future__ import annotations

import errno as errno_mod
import os
import socket
from dataclasses import dataclass
from typing import Any

from servecheck.client.sse import MAX_EVENT_BYTES
from servecheck.load.generator.reactor import ENV_READER
from servecheck.load.generator.stream import StreamState
from servecheck.load.generator.wire import Origin, ResponseParser, WireResult, head_fields

_lane: Any
try:  # the optional C extension (setup.py)
    from servecheck.load.generator import _lane
except ImportError:  # pragma: no cover - depends on the build
    _lane = None

PAUSE_S = 0.0005  # the thread's pause after a pass that read: one wake-up serves several reads
# ... and the longer one it takes while its streams' tokens come more than four of these apart
# (``_lane.c``'s ``pace``): a third of the passes at 256 streams of 10 ms tokens, a sixth of the
# thread's CPU (issue 46). No longer: at 5 ms a read came more than 10 ms late now and then.
LONG_PAUSE_S = 0.002

# How an exchange ended (``_lane.c``'s END_ codes).
END_MORE, END_COMPLETE, END_CLOSED, END_DEADLINE, END_IDLE, END_CONNECT = range(6)
END_SEND, END_SEND_TIMEOUT, END_PARSED, END_DROPPED, END_ABORTED = range(6, 11)
DISAGREE = (
    "the native lane and the response parser disagree on where this response ended "
    f"(a servecheck bug: {ENV_READER}=thread reads with the reactor instead)"
)


def lane_wanted() -> bool:
    """Whether the lane may run: built, and the reader not set to the reactor's (``thread`` or
    ``loop`` in ``SERVECHECK_READER``; ``lane``, the default, lets it run where it fits)."""
    want = os.environ.get(ENV_READER, "").strip().lower() or "lane"
    if want not in ("lane", "thread", "loop"):
        raise ValueError(f"{ENV_READER} must be 'lane', 'thread' or 'loop', not {want!r}")
    return want == "lane" and _lane is not None


def _strerror(code: int) -> str:
    try:
        return os.strerror(code)
    except ValueError:
        return ""


@dataclass(slots=True)
class _Open:
    """An exchange handed to the lane: its stream's state, and its parser once bytes came."""

    st: StreamState
    timeout_s: float
    ex: ResponseParser | None = None


@dataclass(slots=True)
class Ended:
    """One exchange the lane finished: what the reactor's ``post_stream`` would have returned."""

    seq: int
    res: WireResult
    st: StreamState
    t_start: float  # when its slot took it (the closed loop's intended send)


class Lane:
    """The Python face of ``_lane.Lane`` for one plain-HTTP origin: queue requests, take and
    replay the finished exchanges."""

    def __init__(
        self,
        origin: Origin,
        connect_timeout_s: float,
        read_timeout_s: float,
        items_too: bool = False,  # the tests: a plain answer's reads come too, to replay both ways
    ) -> None:
        if _lane is None:
            raise RuntimeError("the native lane is not built")
        info = socket.getaddrinfo(origin.host, origin.port, type=socket.SOCK_STREAM)[0]
        family, addr = info[0], info[4]
        self.origin = origin
        self.read_timeout_s = read_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._c = _lane.Lane(
            int(family),
            str(addr[0]),
            int(origin.port),
            not origin.close,
            connect_timeout_s,
            read_timeout_s,
            PAUSE_S,
            MAX_EVENT_BYTES,
            LONG_PAUSE_S,
            items_too,
        )
        self._open: dict[int, _Open] = {}
        self.slots = 0
        self.put_count = 0

    def fileno(self) -> int:
        return int(self._c.fileno())

    def put(self, seq: int, request: bytes, timeout_s: float, st: StreamState) -> None:
        self._open[seq] = _Open(st, timeout_s)
        self._c.put(seq, request, timeout_s)
        self.put_count += 1

    def set_slots(self, n: int, drop: bool = True) -> None:
        """Run ``n`` exchanges at once. Fewer than before: the exchanges beyond ``n`` are dropped
        (no record: a user killed), or with ``drop=False`` end as usual first (a user stopping
        after its request, as Locust stops one gracefully)."""
        self.slots = max(0, n)
        self._c.slots(self.slots, drop)

    def stop_at(self, t: float) -> None:
        """Start no request after ``t`` (perf_counter); the queue goes once it passes."""
        self._c.stop_at(t)

    def queued(self) -> int:
        """Requests put and not yet started (before a stop withdrew them)."""
        return self.put_count - self._c.started()

    def open(self) -> tuple[int, float, int]:
        """(exchanges open now, the oldest's start, their reads so far)."""
        n, oldest, reads = self._c.open()
        return int(n), float(oldest), int(reads)

    def take(self) -> tuple[list[Ended | int], bool]:
        """The exchanges that ended since the last take (a dropped one as its bare seq: no
        record, as a request whose user was stopped), and whether the lane is idle."""
        bundles, idle = self._c.take()
        out: list[Ended | int] = []
        for b in bundles:
            done = self.replay(b)
            if done is not None:
                out.append(done)
        return out, bool(idle)

    def unsent(self) -> list[int]:
        """The seqs put that the thread never started (it starts them in the order put; the
        rest were withdrawn at the stop, or were still queued when it closed)."""
        never = self.put_count - self._c.started()
        # the last ones put, still open (a dict keeps the order of insertion)
        seqs = list(self._open)[-never:] if never > 0 else []
        for seq in seqs:
            del self._open[seq]
        return seqs

    def replay(self, b: tuple[Any, ...]) -> Ended | int | None:
        """Run one bundle through the reactor's parser; the ended exchange, a dropped one's
        seq, or None while it goes on."""
        seq, end, err, new_conn, connect_s, t_start, t_sent, t_written, t_end, items, plain = b
        o = self._open.get(seq)
        if o is None:
            return None  # ended here already (the parser stopped it first)
        if plain is not None:
            del self._open[seq]
            return Ended(seq, _plain(o.st, plain, b), o.st, t_start)
        if end == END_DROPPED:
            del self._open[seq]
            return int(seq)
        if end == END_CONNECT:
            del self._open[seq]
            return Ended(seq, self._connect_failed(err, t_end), o.st, t_start)
        ex = o.ex or self._parser(o, new_conn, connect_s, t_start, t_sent, t_written)
        _feed(ex, items)
        if not ex.done:
            if end == END_MORE:
                return None
            self._end(ex, end, err, t_end)
        del self._open[seq]
        if end == END_MORE:
            self._c.abort(seq)  # the parser ended it (a size bound): stop reading it
        return Ended(seq, ex.res, o.st, t_start)

    def _parser(
        self,
        o: _Open,
        new_conn: int,
        connect_s: float,
        t_start: float,
        t_sent: float,
        t_written: float,
    ) -> ResponseParser:
        """The reactor's parser for an exchange's first bundle, with its send's stamps."""
        ex = o.ex = ResponseParser(
            o.st.feed, t_start + o.timeout_s, now=t_sent, tokens=o.st if o.st.fast else None
        )
        res = ex.res
        res.new_conn, res.connect_s = bool(new_conn), connect_s
        res.t_sent, res.t_written = t_sent, t_written
        return ex

    def _end(self, ex: ResponseParser, end: int, err: int, t: float) -> None:
        """An exchange the lane ended while the parser had not: the reactor's own words."""
        if end == END_DEADLINE:
            ex.fail("timeout", "the response did not complete before the deadline", t)
        elif end == END_IDLE:
            ex.fail("timeout", f"no data for {self.read_timeout_s:g} s", t)
        elif end == END_SEND:
            ex.broken(OSError(err, _strerror(err)), t)
        elif end == END_SEND_TIMEOUT:
            ex.broken(
                TimeoutError(f"could not send the request within {self.read_timeout_s:g} s"), t
            )
        elif end == END_ABORTED:
            ex.fail("stream-error", "the load generator is shutting down", t)
        else:
            ex.fail("stream-error", DISAGREE, t)

    def _connect_failed(self, err: int, t: float) -> WireResult:
        host, port = self.origin.host, self.origin.port
        if err < 0:
            message = (
                f"connect timeout to {host}:{port}: no answer within {self.connect_timeout_s:g} s"
            )
        else:
            message = (
                f"cannot connect to {host}:{port}: "
                f"[Errno {err}] {errno_mod.errorcode.get(err, '')} {_strerror(err)}"
            ).replace("  ", " ")
        return WireResult(error="connect", error_message=message, t_end=t)

    def stats(self) -> dict[str, Any]:
        """The thread's counters, in the reader thread's shape (summary.json's reader)."""
        reads, passes, cpu_s, slice_ns, late, counted, kernel, user, started, held, busy, long = (
            self._c.stats()
        )
        return {
            "reads": int(reads),
            "passes": int(passes),
            "cpu_s": round(float(cpu_s), 4),
            "slice_us": round(slice_ns / 1000, 1) if slice_ns else None,
            "late_reads": int(late),
            "counted": int(counted),
            "kernel_stamps": int(kernel),
            "user_stamps": int(user),
            "started": int(started),
            # slot time spent waiting for a queued request (the generator held its user back),
            # and spent in exchanges: their ratio judges a closed loop the lane fell behind on
            "held_s": round(float(held), 4),
            "busy_s": round(float(busy), 4),
            # passes that took the long pause (the streams' tokens came far enough apart)
            "long_passes": int(long),
        }

    def close(self) -> None:
        self._c.close()


def _plain(st: StreamState, plain: tuple[Any, ...], b: tuple[Any, ...]) -> WireResult:
    """A plain answer the lane read whole (``_lane.c``'s ``plain_of``: a 200, chunked, one
    ``data:`` line an event, no CR): the result and stream state the reactor's parser would make
    of its reads, its framing already taken off. ``tests/load/test_lane.py`` holds the two equal."""
    head, t_headers, t_body, first_body, events = plain
    _, _, _, new_conn, connect_s, _, t_sent, t_written, t_end, _, _ = b
    status, headers = head_fields(head)  # the lane parsed a 200 out of the same bytes
    res = WireResult(
        status=status,
        headers=headers,
        t_end=t_end,
        t_sent=t_sent,
        new_conn=bool(new_conn),
        connect_s=connect_s,
        t_written=t_written,
        t_headers=t_headers,
        t_body=t_body,
        first_body=first_body,
    )
    for t, data in events:
        if data.__class__ is list:
            st.tokens(data)  # token chunks the lane counted
        else:
            st.event(data, t)
    return res


def _feed(ex: ResponseParser, items: list[tuple[float, Any]]) -> None:
    """An exchange's reads as the reactor's loop hands them to its parser (``reactor._drain``)."""
    for t, payload in items:
        if ex.done:
            return
        if payload.__class__ is list:
            ex.tokens(payload)  # token chunks the lane counted
        elif payload.__class__ is int:
            ex.broken(OSError(payload, _strerror(payload)), t)
        elif not payload:
            ex.eof(t)
        else:
            ex.feed(payload, t)


def with_lane(info: dict[str, Any], lane: dict[str, Any]) -> dict[str, Any]:
    """A Locust process's reader info (``reactor_info``) with the lane's reads added: kind
    ``lane``, the reads and stamps of both, and one thread entry for both native threads (the
    reactor's reader thread counts only where it read anything: after a hand-back)."""
    keys = ("reads", "passes", "cpu_s", "slice_us", "late_reads", "held_s", "busy_s", "long_passes")
    thread = {k: lane[k] for k in keys}
    theirs = info.get("thread") or {}
    if int(theirs.get("reads") or 0) > 0:
        for key in ("reads", "passes", "late_reads"):
            thread[key] += int(theirs.get(key) or 0)
        thread["cpu_s"] = round(thread["cpu_s"] + float(theirs.get("cpu_s") or 0.0), 4)
        if theirs.get("slice_us") != lane["slice_us"]:
            thread["slice_us"] = None  # one of them ran on the kernel's default slice
    return {
        **info,
        "kind": "lane",
        "reads": int(info.get("reads") or 0) + lane["reads"],
        "kernel_stamps": int(info.get("kernel_stamps") or 0) + lane["kernel_stamps"],
        "user_stamps": int(info.get("user_stamps") or 0) + lane["user_stamps"],
        "thread": thread,
    }
