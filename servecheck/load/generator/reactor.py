"""The load generator's plain-HTTP reader: one reader for every stream, kernel arrival times.

Why not one blocking read per greenlet (:class:`~servecheck.load.generator.wire.WireClient`): under gevent
each ``recv`` that would block parks the greenlet, and every arriving token then costs a hub
switch and a watcher round trip. That per-token wake-up was most of the generator's CPU
(``docs/benchmarks.md``), and when the one core is busy every token waits its turn, which is
what inflated TTFT at high concurrency.

Here a request's greenlet sends its request and sleeps on an event until the whole response is
in (one switch per request); a single loop (:meth:`StreamReactor._loop`) waits until reads are
ready, then handles all of them in one pass. Each read is timed by the kernel: the sockets have
``SO_TIMESTAMPNS`` set, and ``recvmsg`` returns when the latest segment of that read arrived on
this host. So a token's time is when its bytes reached the machine, not when the busy generator
got round to it; the generator's own delay drops out of TTFT and ITL. (Where the kernel gives no
timestamp, the reader's clock right after the read is used; ``kernel_stamps`` / ``user_stamps``
count which.) Two tokens that arrive before one read share the later one's time; it never makes a
token earlier than it was, and the reader below makes it rare.

Who reads (``kind`` in ``summary.json``'s ``generator.reader``):

- ``thread`` (the default where the optional C extension ``_rxthread`` is built): a native thread
  that only reads. It waits in ``epoll_wait`` without the GIL and takes each socket's bytes and
  stamp within about a millisecond of their arrival, however busy the Python side is; this loop
  then takes the whole batch and parses it. With the Python reader, the pass over a few hundred
  ready sockets plus the parsing ran long enough on a small core (p99 11 ms at 256 streams) for a
  stream's next token to arrive before the last one was read, and the two shared the later stamp
  (TTFT error p99 11-20 ms against under 1 ms with the thread: ``docs/benchmarks.md``). The thread
  also marks each read that is exactly one chunk with one token event (``_rxthread.token_chunk``);
  such a read is counted without parsing (:meth:`ResponseParser.token`) when the stream is between
  chunks, which cut the generator's CPU per token by about a quarter. Once this loop has parsed
  every read of a stream so far and the stream is between chunks and events
  (:meth:`ResponseParser.countable`), it arms the stream in the thread (``Reader.arm``): the
  thread then keeps the arrival times of that stream's token chunks itself and hands them over a
  batch at a time (``ResponseParser.tokens``: at the stream's next other read, or every 100 ms),
  so a streamed token costs this loop no record, no tuple and no call of its own. The first read
  that is not a token chunk disarms the stream and goes after its batch, in order.
- ``loop``: the same reads done by this loop itself with ``epoll`` and ``recvmsg`` (no compiler at
  install time, not Linux, or ``SERVECHECK_READER=loop``).

The loop and the requests' waits use ``select.poll`` and ``threading.Event``: under Locust
(gevent-patched) they are cooperative and the loop is a greenlet; in a plain process the loop is
a thread. The sockets and the epoll object are the unpatched originals and never block.
Plain HTTP only; ``https`` targets use :class:`~servecheck.load.generator.wire.WireClient`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from itertools import count
from typing import Any, Unpack

from servecheck.client.factory import ClientSettings
from servecheck.clock import clock_offset
from servecheck.load.generator.wire import (
    RECV_BYTES,
    REQUEST_ID,
    Origin,
    ResponseParser,
    StreamOptions,
    WireResult,
)
from servecheck.records.record import ErrorClass

_perf = time.perf_counter
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None)
ANC_BYTES = socket.CMSG_SPACE(16)
TICK_S = 0.1  # the loop's longest sleep: how often deadlines and no-data timeouts are checked
# After each pass the loop pauses this long so that the next pass has many reads to parse: one
# wake-up then serves tens of reads. Accuracy does not suffer, since every read carries the
# kernel's arrival stamp. (With the loop reader, a stream's tokens that come closer together than
# this share one read and its later stamp; the native thread reads as the data arrives.)
BATCH_S = 0.001
# The native thread sleeps this long after each pass that read something: one wake-up (and
# context switch) then serves several reads. Only a stream's tokens closer together than this
# share a read and its stamp.
THREAD_PAUSE_S = 0.0005
_TS = struct.Struct("qq")
# who reads: "lane" (the default: the closed loop's native lane where it fits, lane.py), "thread"
# (the reactor's native reader thread, no lane) or "loop" (the pure-Python reader)
ENV_READER = "SERVECHECK_READER"

_rxthread: Any
try:  # the optional C extension (setup.py); absent where it could not be built
    from servecheck.load.generator import _rxthread
except ImportError:  # pragma: no cover - depends on the build
    _rxthread = None

# One read: (key, kernel receive stamp in CLOCK_REALTIME seconds or 0.0, reader's perf_counter
# time after the read, the bytes (b"" at EOF) or an errno when the connection failed, and whether
# the bytes are exactly one chunk with one token event: ``_rxthread.token_chunk``). From the
# thread also: (key, 0.0, time of the last, [arrival times], False), token chunks of an armed
# stream that the thread counted itself.
Read = tuple[int, float, float, "bytes | int | list[float]", bool]


def _gevent_hub() -> Any:
    """gevent's hub when this process is gevent-patched (under Locust), else None. Looked up in
    ``sys.modules`` only: this module never imports gevent itself."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is None or not monkey.is_module_patched("threading"):
        return None
    return sys.modules["gevent"].get_hub()


def _original(module: str, name: str) -> Any:
    """The unpatched ``module.name`` when gevent has patched the module, else the module's own."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched(module):
        return monkey.get_original(module, name)
    return getattr(sys.modules[module], name)


class _Live:
    __slots__ = ("sock", "fd", "ex", "event", "seen")

    def __init__(self, sock: socket.socket, ex: ResponseParser, event: threading.Event) -> None:
        self.sock, self.fd, self.ex, self.event = sock, sock.fileno(), ex, event
        self.seen = 0  # records of this exchange parsed so far (``Reader.arm`` checks the count)


class _LoopReads:
    """Reads done by the loop itself: ``epoll`` plus one ``recvmsg`` per ready socket."""

    kind = "loop"
    arm: Any = None  # only the thread counts token chunks itself

    def __init__(self) -> None:
        self._ep = _original("select", "epoll")()
        self._wake = os.pipe()  # wake() writes here
        os.set_blocking(self._wake[0], False)
        self._ep.register(self._wake[0], select.EPOLLIN)
        self._socks: dict[int, tuple[int, socket.socket]] = {}

    def fileno(self) -> int:
        return self._ep.fileno()

    def add(self, sock: socket.socket, key: int) -> None:
        fd = sock.fileno()
        self._socks[fd] = (key, sock)
        self._ep.register(fd, select.EPOLLIN)

    def remove(self, fd: int) -> None:
        self._socks.pop(fd, None)
        with contextlib.suppress(OSError, ValueError):
            self._ep.unregister(fd)

    def take(self) -> list[Read]:
        try:
            events = self._ep.poll(0)
        except (OSError, ValueError):
            return []
        out: list[Read] = []
        socks = self._socks
        for fd, _ev in events:
            entry = socks.get(fd)
            if entry is None:
                if fd == self._wake[0]:
                    with contextlib.suppress(OSError):
                        os.read(fd, 64)
                continue
            key, sock = entry
            try:
                data, anc, _flags, _addr = sock.recvmsg(RECV_BYTES, ANC_BYTES)
            except BlockingIOError:
                continue
            except OSError as exc:
                out.append((key, 0.0, _perf(), exc.errno or errno.EIO, False))
                continue
            t_read = _perf()  # after the read: data that came in during this pass is not early
            stamp = 0.0
            if anc:
                sec, nsec = _TS.unpack_from(anc[0][2])
                stamp = sec + nsec * 1e-9
            out.append((key, stamp, t_read, data, False))
        return out

    def wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake[1], b"x")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._ep.close()
        for fd in self._wake:
            with contextlib.suppress(OSError):
                os.close(fd)


class _ThreadReads:
    """Reads done by the native reader thread (``_rxthread.Reader``); ``take`` collects them."""

    kind = "thread"

    def __init__(self) -> None:
        assert _rxthread is not None
        self._rx = _rxthread.Reader(THREAD_PAUSE_S)
        self.arm: Any = self._rx.arm  # arm(fd, key, records seen) -> bool; bound once, called often

    def fileno(self) -> int:
        return int(self._rx.fileno())

    def add(self, sock: socket.socket, key: int) -> None:
        self._rx.add(sock.fileno(), key)

    def remove(self, fd: int) -> None:
        self._rx.remove(fd)

    def take(self) -> list[Read]:
        reads: list[Read] = self._rx.take()
        return reads

    def counted(self) -> tuple[int, int, int]:
        """(token chunks counted in the thread, of them timed by the kernel, by the thread)."""
        tokens, kernel, user = self._rx.counted()
        return int(tokens), int(kernel), int(user)

    def stats(self) -> dict[str, Any]:
        reads, passes, cpu_s, slice_ns, late = self._rx.stats()
        # slice_us: the short scheduler slice the thread got (the kernel's default where None);
        # late: reads taken more than 10 ms after their bytes arrived (the thread fell behind)
        slice_us = round(slice_ns / 1000, 1) if slice_ns else None
        return {
            "reads": reads,
            "passes": passes,
            "cpu_s": round(cpu_s, 4),
            "slice_us": slice_us,
            "late_reads": late,
        }

    def wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._rx.fileno(), (1).to_bytes(8, sys.byteorder))

    def close(self) -> None:
        self._rx.close()  # stops and joins the thread; its descriptors go with the object


def reader_kind(preferred: str | None = None) -> str:
    """``thread`` when the native reader is built and not turned off, else ``loop``. (``lane``,
    the default, is the closed loop's native lane, lane.py; the reactor under it reads with the
    thread.)"""
    want = preferred or os.environ.get(ENV_READER, "").strip().lower() or "thread"
    if want not in ("lane", "thread", "loop"):
        raise ValueError(f"{ENV_READER} must be 'lane', 'thread' or 'loop', not {want!r}")
    return "thread" if want != "loop" and _rxthread is not None else "loop"


class StreamReactor:
    """Streams POST responses from one plain-HTTP origin; many requests in flight at once.

    ``post_stream`` has :class:`~servecheck.load.generator.wire.WireClient`'s signature and result; it may
    be called from many greenlets (or threads) concurrently. Call :meth:`close` at the end.
    """

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 60.0,
        reader: str | None = None,
        request_id_header: str | None = REQUEST_ID,
    ) -> None:
        self.origin = Origin(base_url, headers, request_id_header)
        if self.origin.tls:
            raise ValueError("StreamReactor reads plain HTTP; use WireClient for https")
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._socket_cls = _original("socket", "socket")
        self._src: _LoopReads | _ThreadReads = (
            _ThreadReads() if reader_kind(reader) == "thread" else _LoopReads()
        )
        self.kind = self._src.kind
        self._keys = count(1)
        self._stamps_on = _stamps_keeper()
        self._offset = clock_offset()  # realtime - perf_counter, for the kernel's stamps
        self._live: dict[int, _Live] = {}  # by key
        self.pool: list[socket.socket] = []
        self._addr: tuple[Any, ...] | None = None
        self._family = socket.AF_INET
        self._loop_thread: threading.Thread | None = None
        self._loop_lock = threading.Lock()
        self._running = False  # the loop is running (set before it starts, cleared as it ends)
        self._closed = False
        self.wakes = 0  # loop passes that found data
        self._reads = 0  # reads this loop was handed (the thread's counted ones are apart)
        self._kernel = 0
        self._user = 0

    @classmethod
    def from_settings(
        cls,
        settings: ClientSettings,
        reader: str | None = None,
        request_id_header: str | None = REQUEST_ID,
    ) -> StreamReactor:
        """A reader for the run's :class:`~servecheck.client.factory.ClientSettings` (its
        headers and auth, timeouts); plain HTTP only."""
        return cls(
            settings.base_url,
            settings.headers,
            settings.connect_timeout_s,
            settings.timeout_s,
            reader=reader,
            request_id_header=request_id_header,
        )

    # -- requests (called from the users' greenlets) ---------------------------------------

    def post_stream(
        self,
        path: str,
        body: bytes,
        on_data: Callable[[bytes, float], str | None],
        deadline: float | None = None,
        **options: Unpack[StreamOptions],
    ) -> WireResult:
        """POST ``body``; ``on_data(payload, arrival_time)`` per read of the body. Never raises.
        :class:`~servecheck.load.generator.wire.StreamOptions` for the rest."""
        request = self.origin.request(path, body, options.get("request_id"))
        on_token, until, tokens = (
            options.get("on_token"),
            options.get("until"),
            options.get("tokens"),
        )
        ex = ResponseParser(on_data, deadline, on_token=on_token, until=until, tokens=tokens)
        for attempt in (0, 1):
            # A retry always takes a fresh connection: the server that closed one idle connection
            # has likely closed the other pooled ones too.
            reused = bool(self.pool) and attempt == 0
            connect_s = 0.0
            if reused:
                sock = self.pool.pop()
            else:
                t_connect = _perf()
                sock_or_err = self._connect()
                if isinstance(sock_or_err, WireResult):
                    return sock_or_err
                sock = sock_or_err
                connect_s = _perf() - t_connect
            ex = ResponseParser(
                on_data,
                deadline,
                may_retry=reused,
                now=_perf(),
                on_token=on_token,
                until=until,
                tokens=tokens,
            )
            res = ex.res
            res.new_conn, res.connect_s = not reused, connect_s
            try:
                res.t_sent = _perf()
                self._sendall(sock, request)
                res.t_written = _perf()
            except OSError as exc:
                ex.broken(exc, _perf())
            if not ex.done:
                self._wait(sock, ex)
            if not ex.retry:
                if ex.keep and ex.res.error is None and not self._closed and not self.origin.close:
                    self.pool.append(sock)
                else:
                    self._discard(sock)
                return ex.res
            self._discard(sock)
        return ex.res  # pragma: no cover - the second attempt never asks for a retry

    def _connect(self) -> socket.socket | WireResult:
        host, port = self.origin.host, self.origin.port
        try:
            if self._addr is None:
                info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
                self._family, self._addr = info[0], info[4]
            sock = self._socket_cls(self._family, socket.SOCK_STREAM)
        except OSError as exc:
            return WireResult(
                error="connect",
                error_message=f"cannot connect to {host}:{port}: {exc}",
                t_end=_perf(),
            )
        sock.setblocking(False)
        try:
            rc = sock.connect_ex(self._addr)
            if rc in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
                if not _ready(sock.fileno(), select.POLLOUT, self.connect_timeout_s):
                    sock.close()
                    return WireResult(
                        error="connect",
                        error_message=f"connect timeout to {host}:{port}: "
                        f"no answer within {self.connect_timeout_s:g} s",
                        t_end=_perf(),
                    )
                rc = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if rc:
                sock.close()
                return WireResult(
                    error="connect",
                    error_message=f"cannot connect to {host}:{port}: "
                    f"[Errno {rc}] {errno.errorcode.get(rc, '')} {_strerror(rc)}".replace(
                        "  ", " "
                    ),
                    t_end=_perf(),
                )
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if SO_TIMESTAMPNS is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError as exc:
            sock.close()
            return WireResult(
                error="connect",
                error_message=f"cannot connect to {host}:{port}: {exc}",
                t_end=_perf(),
            )
        return sock

    def _sendall(self, sock: socket.socket, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = sock.send(view)
            except BlockingIOError:
                if not _ready(sock.fileno(), select.POLLOUT, self.read_timeout_s):
                    raise TimeoutError(
                        f"could not send the request within {self.read_timeout_s:g} s"
                    ) from None
                continue
            view = view[n:]

    def _wait(self, sock: socket.socket, ex: ResponseParser) -> None:
        event = threading.Event()
        key = next(self._keys)
        self._live[key] = _Live(sock, ex, event)
        self._src.add(sock, key)
        if not self._running:
            self._ensure_loop()
        # The loop ends every exchange (data, close, deadline or the no-data timeout), and on its
        # way out, however it ends, it fails the ones still open (:meth:`_loop`): so this wait
        # ends with no timeout of its own (a timed wait cost a timer per request).
        try:
            event.wait()
        except BaseException:
            # The caller was cancelled (Locust stopping a user kills its greenlet): forget the
            # exchange and drop its connection, whose response would otherwise still be arriving.
            self._finish(key, "fail", "stream-error", "the request was cancelled")
            self._discard(sock)
            raise

    def thread_stats(self) -> dict[str, Any] | None:
        """The native reader thread's reads, passes and own CPU seconds (None for the loop)."""
        return self._src.stats() if isinstance(self._src, _ThreadReads) else None

    def _counted(self) -> tuple[int, int, int]:
        src = self._src
        return src.counted() if isinstance(src, _ThreadReads) else (0, 0, 0)

    @property
    def reads(self) -> int:
        """Reads of response bytes, the token chunks the thread counted itself included."""
        return self._reads + self._counted()[0]

    @property
    def kernel_stamps(self) -> int:
        """Reads timed by the kernel's receive stamp."""
        return self._kernel + self._counted()[1]

    @property
    def user_stamps(self) -> int:
        """Reads timed by the reader's clock (no plausible kernel stamp)."""
        return self._user + self._counted()[2]

    def _discard(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.close()

    def close(self) -> None:
        self._closed = True
        if self._stamps_on is not None:
            self._stamps_on.close()
        for key in list(self._live):
            self._finish(key, "fail", "stream-error", "the load generator is shutting down")
        while self.pool:
            self._discard(self.pool.pop())
        # The loop closes the read source on its way out: closing a descriptor that gevent's hub
        # is still watching breaks the hub (and with it Locust's messaging to the master).
        if self._loop_thread is None or not self._loop_thread.is_alive():
            self._src.close()
        else:
            self._src.wake()  # wake the loop so it sees _closed

    # -- the loop ----------------------------------------------------------------------------

    def _ensure_loop(self) -> None:
        with self._loop_lock:
            if not self._running:
                self._running = True
                self._loop_thread = threading.Thread(
                    target=self._loop, name="servecheck-stream-reactor", daemon=True
                )
                self._loop_thread.start()

    def _loop(self) -> None:
        hub = _gevent_hub()
        try:
            if hub is not None:
                self._run_gevent(hub)
            else:
                self._run_poll()
        finally:
            # First say the loop is gone (a request that comes after starts a new one), then fail
            # what is still open: its waiter would otherwise wait for a loop that is not there.
            self._running = False
            for key in list(self._live):
                self._finish(
                    key, "fail", "stream-error", "the load generator's reader loop stopped"
                )
            if self._closed:
                self._src.close()

    def _run_poll(self) -> None:
        """Plain threads: wait with ``poll`` (woken by data, ``close`` or the tick)."""
        epfd = self._src.fileno()
        next_check = _perf() + TICK_S
        while not self._closed:
            try:
                ready = _ready(epfd, select.POLLIN, TICK_S)
            except (OSError, ValueError):
                return  # closed under us
            if ready:
                self._drain()
                time.sleep(BATCH_S)
            now = _perf()
            if now >= next_check:
                next_check = now + TICK_S
                self._tick()

    def _run_gevent(self, hub: Any) -> None:
        """Under gevent: one io watcher on the epoll descriptor, kept for the whole run, and a
        repeating timer for deadlines. (``select.poll`` would build and tear down watchers and
        a timeout on every wake-up: at one read per wake-up that cost more than the read.)"""
        watcher = hub.loop.io(self._src.fileno(), 1)
        timer = hub.loop.timer(TICK_S, TICK_S)
        timer.start(self._tick)
        try:
            while not self._closed:
                hub.wait(watcher)
                self._drain()
                time.sleep(BATCH_S)  # gevent-patched: other greenlets run meanwhile
        finally:
            timer.stop()
            timer.close()
            watcher.close()

    def _tick(self) -> None:
        self._offset = clock_offset()
        self._expire(_perf())

    def _drain(self) -> None:
        """Parse every read taken since the last pass; time each by its kernel receive stamp."""
        src = self._src
        reads = src.take()
        if reads:
            self.wakes += 1
        live, offset, arm = self._live, self._offset, src.arm
        for key, stamp, t_read, data, token in reads:
            item = live.get(key)
            if item is None:
                continue
            item.seen += 1
            ex = item.ex
            if data.__class__ is list:
                ex.tokens(data)  # counted by the thread (an armed stream)
            elif isinstance(data, int):
                ex.broken(OSError(data, _strerror(data)), t_read)
            elif not data:
                ex.eof(t_read)  # a close carries no receive timestamp
            else:
                self._reads += 1
                t = t_read
                k = stamp - offset
                if stamp and t_read - 30.0 < k <= t_read + 0.0005:
                    t = min(k, t_read)
                    self._kernel += 1
                else:
                    self._user += 1
                if not (token and ex.token(t)):
                    ex.feed(data, t)  # type: ignore[arg-type]
                # A record of bytes means the thread is not counting this stream's tokens (any
                # more): arm it (again) where every read so far is parsed and it is between events.
                if arm is not None and not ex.done and ex.countable():
                    arm(item.fd, key, item.seen)
            if ex.done:
                self._done(key, item)

    def _expire(self, now: float) -> None:
        for key, item in list(self._live.items()):
            ex = item.ex
            if ex.deadline is not None and now > ex.deadline:
                self._finish(
                    key, "fail", "timeout", "the response did not complete before the deadline"
                )
            elif now - ex.last > self.read_timeout_s:
                self._finish(key, "fail", "timeout", f"no data for {self.read_timeout_s:g} s")
            elif ex.until is not None and ex.in_body and ex.limit is None and ex.until():
                ex.hang_up(now)  # a silent stream cancelled at its time (load/workload/cancel.py)
                self._done(key, item)

    def _finish(self, key: int, how: str, kind: ErrorClass, message: str) -> None:
        item = self._live.get(key)
        if item is None:
            return
        if how == "fail":
            item.ex.fail(kind, message, _perf())
        self._done(key, item)

    def _done(self, key: int, item: _Live) -> None:
        self._live.pop(key, None)
        self._src.remove(item.fd)
        item.event.set()


def _stamps_keeper() -> socket.socket | None:
    """An idle socket with receive timestamps on, kept for the reactor's life. Linux switches
    timestamping on system-wide when the first socket asks (deferred to a work queue) and off when
    the last one closes; a segment that arrives in between carries no stamp and is timed by the
    reader's clock instead. Holding one on keeps stamps on across connection churn."""
    if SO_TIMESTAMPNS is None:
        return None
    try:
        keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        return None
    try:
        keeper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        keeper.close()
        return None
    return keeper


def _ready(fd: int, events: int, timeout_s: float) -> bool:
    """Wait until ``fd`` is ready for ``events`` (``POLLIN``/``POLLOUT``), at most ``timeout_s``.
    ``poll``, not ``select``: select refuses descriptors from 1024 (FD_SETSIZE) up, which a run of
    a thousand streams reaches. (Cooperative under gevent, which patches ``select.poll``.)"""
    p = select.poll()
    p.register(fd, events)
    return bool(p.poll(timeout_s * 1000.0))


def _strerror(code: int) -> str:
    try:
        return os.strerror(code)
    except ValueError:
        return ""
