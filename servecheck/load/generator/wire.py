"""A minimal HTTP/1.1 client for streamed POSTs: the load generator's hot path.

Why not requests/urllib3: on a small VM core one ``urllib3`` ``read1`` costs ~140 us (240 us
under gevent) and that is paid once per streamed token; the whole per-token budget is 30 us
(0.3 CPU-s per 10k tokens). This client does one ``recv`` per arrival, de-chunks the body
itself and hands the bytes on with their arrival time. Nothing is buffered beyond what the
socket returned, so a token is timed when its bytes arrive.

It uses the standard ``socket``/``ssl`` modules: under Locust they are gevent-patched and
cooperative; in tests they are plain blocking sockets. Keep-alive connections are pooled per
client; a pooled connection the server closed meanwhile is retried once on a fresh one (only
when nothing of the response was received). TCP_NODELAY is set on every connection.

Errors are data: :class:`WireResult` carries ``error`` = connect | timeout | too-large (``on_data``
returned why it must stop: the reader's size bound) | stream-error
(the connection broke mid-body) and a message; it never raises for server behaviour.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypedDict, Unpack
from urllib.parse import urlsplit

from servecheck.client.factory import ClientSettings, ssl_context
from servecheck.records.record import REQUEST_ID, ErrorClass

_perf = time.perf_counter
MAX_HEADER_BYTES = 64 * 1024
RECV_BYTES = 65536


class TokenSink(Protocol):
    """Where a response's recognised token chunks are counted without parsing their bytes
    (:class:`~servecheck.load.generator.stream.StreamState` is one)."""

    def token(self, t: float) -> bool:
        """One token chunk that arrived at ``t``; False: not between events, parse it instead."""
        ...

    def tokens(self, times: list[float]) -> None:
        """Token chunks counted by the reader thread, one arrival time each, in order."""
        ...

    def between_events(self) -> bool:
        """Whether a token chunk arriving now would be counted by :meth:`token`."""
        ...


@dataclass(slots=True)
class WireResult:
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body_prefix: bytes = b""  # first bytes of a non-200 body
    error: ErrorClass | None = None
    error_message: str = ""
    t_end: float = 0.0
    t_sent: float = 0.0  # just before the request's first byte was handed to the socket
    hung_up: bool = False  # the client closed the connection on purpose (``until``), mid-response
    # Per-request stamps on the reader's clock (analysis/timings.py turns them into the record's
    # ``stamps``; 0.0: not reached). ``connect_s`` / ``tls_s`` are durations of a new
    # connection's TCP connect and TLS handshake, before ``t_sent``; a reused keep-alive
    # connection has neither (``new_conn`` False).
    new_conn: bool = False
    connect_s: float = 0.0
    tls_s: float = 0.0
    t_written: float = 0.0  # the whole request handed to the kernel
    t_headers: float = 0.0  # arrival of the read that completed the response headers
    t_body: float = 0.0  # arrival of the first 200 body bytes that went through ``feed``
    first_body: bytes = b""  # the first such payload (its first 512 bytes): the body's ``id``


class StreamOptions(TypedDict, total=False):
    """The options of ``post_stream``, one set for :class:`WireClient` and
    :class:`~servecheck.load.generator.reactor.StreamReactor`.

    ``request_id`` goes out as ``X-Request-Id`` (servers log it; vLLM takes it as its own id);
    ``until()`` true hangs up mid-response (an abandoned stream, ``res.hung_up``).
    ``on_token(arrival_time)``, when given, is offered each read that the reader thread found to
    be exactly one chunk with one token event (:meth:`ResponseParser.token`); it returns False to
    have the bytes go to ``on_data`` as usual. Saves parsing the common read. ``tokens`` (a
    :class:`TokenSink`, e.g. the stream's ``StreamState``) does that and more: with the reader
    thread, the thread counts the token chunks of a stream that is between chunks and events
    itself and hands them over in batches (``sink.tokens``).
    """

    on_token: Callable[[float], bool] | None
    request_id: str | None
    until: Callable[[], bool] | None
    tokens: TokenSink | None


class ResponseParser:
    """One HTTP/1.1 response parsed incrementally from raw reads: status line, headers, then the
    body (chunked, Content-Length or until close), whose payload goes to ``on_data(bytes, t)``.

    Both readers drive it: :class:`WireClient` with blocking ``recv`` and
    :class:`~servecheck.load.generator.reactor.StreamReactor` from its epoll loop. ``feed`` is called with
    each read and its arrival time; ``eof``/``fail`` end it. When ``done`` is set, ``res`` is the
    result, ``keep`` says whether the connection can be reused, and ``retry`` asks the caller to
    resend on a fresh connection (a stale pooled keep-alive connection, nothing received).
    ``until()``, when given, is asked once a 200's headers are in and after each read of its
    body (the reactor also asks at its tick); once it is true the client hangs up
    (``res.hung_up``, the connection is not reused): an abandoned or cancelled stream.
    """

    __slots__ = (
        "on_data",
        "on_token",
        "sink",
        "until",
        "deadline",
        "may_retry",
        "res",
        "buf",
        "dech",
        "length",
        "received",
        "keep",
        "limit",
        "prefix",
        "prefix_len",
        "done",
        "retry",
        "got_any",
        "in_body",
        "last",
        "data_sink",
    )

    def __init__(
        self,
        on_data: Callable[[bytes, float], str | None],
        deadline: float | None = None,
        may_retry: bool = False,
        now: float = 0.0,
        on_token: Callable[[float], bool] | None = None,
        until: Callable[[], bool] | None = None,
        tokens: TokenSink | None = None,
    ) -> None:
        self.on_data = on_data
        self.on_token = on_token if on_token is not None or tokens is None else tokens.token
        self.sink = tokens
        self.until = until
        self.deadline = deadline
        self.may_retry = may_retry
        self.res = WireResult()
        self.buf = b""
        self.dech: _Dechunker | None = None
        self.length: int | None = None
        self.received = 0
        self.keep = False
        self.limit: int | None = None
        self.prefix: list[bytes] = []
        self.prefix_len = 0
        self.done = False
        self.retry = False
        self.got_any = False
        self.in_body = False
        self.last = now  # time of the last read (for the no-data timeout)
        self.data_sink = on_data

    def feed(self, data: bytes, t: float) -> None:
        self.got_any = True
        self.last = t
        if not self.in_body:
            buf = self.buf + data if self.buf else data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEADER_BYTES:
                    self.fail("stream-error", "response headers larger than 64 KiB", t)
                else:
                    self.buf = buf
                return
            self.buf = b""
            try:
                self._head(buf[:end])
            except (ValueError, IndexError) as exc:
                self.fail("stream-error", f"malformed HTTP response: {exc}", t)
                return
            self.res.t_headers = t
            if self.until is not None and self.limit is None and self.until():
                self.hang_up(t)  # cancelled at the headers (load/workload/cancel.py)
                return
            data = buf[end + 4 :]
            if not data:
                if self.length == 0:
                    self._complete(t)
                return
        try:
            payload = self.dech.feed(data) if self.dech is not None else data
        except (ValueError, IndexError) as exc:
            self.fail("stream-error", f"malformed HTTP response: {exc}", t)
            return
        if self.length is not None:
            self.received += len(payload)
        if payload:
            if self.limit is None:
                stop = self.on_data(payload, t)
                if stop:  # the reader's size bound: end here, in time, with bounded memory
                    self.fail("too-large", stop, t)
                    return
            elif self.prefix_len < self.limit:
                self.prefix.append(payload)
                self.prefix_len += len(payload)
        if (self.dech is not None and self.dech.done) or (
            self.length is not None and self.received >= self.length
        ):
            self._complete(t)
        elif self.limit is not None and self.prefix_len >= self.limit:
            self.keep = False
            self._complete(t)
        elif self.deadline is not None and t > self.deadline:
            self.fail("timeout", "the response did not complete before the deadline", t)
        elif self.until is not None and self.limit is None and self.until():
            self.hang_up(t)

    def hang_up(self, t: float) -> None:
        """End the exchange here on purpose: the caller closes the connection mid-response."""
        if self.done:
            return
        self.res.hung_up = True
        self.keep = False
        self._complete(t)

    def token(self, t: float) -> bool:
        """Count a read that the reader thread recognised (``_rxthread.token_chunk``) as exactly one
        chunk holding one token event, without parsing it: only between two chunks of a 200
        response and when ``on_token`` takes it. False means: ``feed`` the bytes instead."""
        dech = self.dech
        if dech is None or dech.state or dech.pending or self.limit is not None or self.done:
            return False
        on_token = self.on_token
        if on_token is None or not on_token(t):
            return False
        self.got_any = True
        self.last = t
        if self.deadline is not None and t > self.deadline:
            self.fail("timeout", "the response did not complete before the deadline", t)
        elif self.until is not None and self.until():
            self.hang_up(t)
        return True

    def countable(self) -> bool:
        """Whether the reader thread may count this response's token chunks itself from now on
        (``_rxthread.Reader.arm``): a 200 chunked body, between chunks, with a token sink that is
        between events, and no per-token check to make (``until``)."""
        dech, sink = self.dech, self.sink
        return (
            sink is not None
            and dech is not None
            and not dech.state
            and not dech.pending
            and self.limit is None
            and self.until is None
            and not self.done
            and sink.between_events()
        )

    def tokens(self, times: list[float]) -> None:
        """Token chunks the reader thread counted while :meth:`countable` held (which they do
        not change), one arrival time each: what :meth:`token` would have done for each, the
        deadline included (the tokens up to the first one past it count, then it fails there)."""
        sink = self.sink
        if self.done or sink is None or not times:
            return
        self.got_any = True
        deadline = self.deadline
        if deadline is not None and times[-1] > deadline:
            i = next(k for k, t in enumerate(times) if t > deadline)
            sink.tokens(times[: i + 1])
            self.last = times[i]
            self.fail("timeout", "the response did not complete before the deadline", times[i])
            return
        sink.tokens(times)
        self.last = times[-1]

    def _head(self, head: bytes) -> None:
        res = self.res
        res.status, headers = head_fields(head)
        res.headers = headers
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self.length = (
            int(headers["content-length"]) if "content-length" in headers and not chunked else None
        )
        self.keep = headers.get("connection", "").lower() != "close" and (
            chunked or self.length is not None
        )
        self.dech = _Dechunker() if chunked else None
        self.limit = 2000 if res.status != 200 else None
        self.in_body = True
        if self.limit is None:
            # The first payload is stamped by a one-shot wrapper, so no read after it pays a
            # check. (Reads counted without parsing, ``token``/``tokens``, are token chunks: a body
            # that starts with one has its first byte at its first token, analysis/timings.py.)
            self.on_data = self._first_body

    def _first_body(self, payload: bytes, t: float) -> str | None:
        """The first payload of a 200 body: stamp it, keep its head, then hand on as usual."""
        sink = self.on_data = self.data_sink
        self.res.t_body = t
        self.res.first_body = payload[:512]
        return sink(payload, t)

    def eof(self, t: float) -> None:
        """The server closed the connection."""
        if self.done:
            return
        if not self.got_any and self.may_retry:
            self.retry, self.done = True, True  # a stale keep-alive connection: try a fresh one
            return
        if not self.in_body:
            self.fail("stream-error", "connection closed before the response headers", t)
            return
        self.keep = False
        if self.dech is not None or (self.length is not None and self.received < self.length):
            self.fail("stream-error", "the server closed the connection mid-body", t)
            return
        self._complete(t)

    def broken(self, exc: OSError, t: float) -> None:
        """The connection failed (reset, refused mid-way)."""
        if not self.got_any and self.may_retry and self.res.status is None:
            self.retry, self.done = True, True
            return
        self.fail("stream-error", f"{type(exc).__name__}: {exc}", t)

    def fail(self, kind: ErrorClass, message: str, t: float) -> None:
        if self.done:
            return
        self.res.error, self.res.error_message = kind, message
        self.keep = False
        self._complete(t)

    def _complete(self, t: float) -> None:
        self.res.body_prefix = b"".join(self.prefix)[:2000]
        self.res.t_end = t
        self.done = True


def head_fields(head: bytes) -> tuple[int, dict[str, str]]:
    """A response head's status and headers (names in lower case, values stripped), from its
    bytes up to the blank line; ValueError or IndexError where the status line has no code."""
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers


def request_bytes(host_hdr: str, prefix: str, head_tail: str, path: str, body: bytes) -> bytes:
    head = (
        f"POST {prefix}{path} HTTP/1.1\r\nHost: {host_hdr}\r\nContent-Length: {len(body)}\r\n"
        f"{head_tail}\r\n"
    ).encode("latin-1")
    return head + body


class Origin:
    """Where requests go and the fixed part of their head, parsed once from the base URL."""

    __slots__ = ("tls", "host", "port", "prefix", "host_hdr", "head_tail", "rid_header", "close")

    def __init__(
        self, base_url: str, headers: dict[str, str], request_id_header: str | None = REQUEST_ID
    ) -> None:
        parts = urlsplit(base_url)
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        self.host_hdr = self.host if self.port in (80, 443) else f"{self.host}:{self.port}"
        self.head_tail = "".join(
            f"{k}: {v}\r\n"
            for k, v in headers.items()
            if k.lower() not in ("host", "content-length")
        )
        self.rid_header = request_id_header or None  # None: no request id header is sent
        # Connection: close sent (a churn profile): never pool the connection, whatever the
        # server answers, so every request opens its own.
        self.close = any(
            k.lower() == "connection" and v.strip().lower() == "close" for k, v in headers.items()
        )

    def request(self, path: str, body: bytes, request_id: str | None = None) -> bytes:
        tail = (
            self.head_tail
            if request_id is None or self.rid_header is None
            else f"{self.head_tail}{self.rid_header}: {request_id}\r\n"
        )
        return request_bytes(self.host_hdr, self.prefix, tail, path, body)


class _Conn:
    __slots__ = ("sock", "buf", "connect_s", "tls_s")

    def __init__(self, sock: socket.socket, connect_s: float = 0.0, tls_s: float = 0.0) -> None:
        self.sock = sock
        self.buf = b""
        self.connect_s, self.tls_s = connect_s, tls_s  # how long it took to open

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class _Dechunker:
    """Incremental chunked transfer-decoding; ``feed`` returns the payload bytes it completed."""

    __slots__ = ("pending", "left", "state", "done")

    def __init__(self) -> None:
        self.pending = b""
        self.left = 0
        self.state = 0  # 0: size line, 1: data, 2: CRLF after data, 3: trailers
        self.done = False

    def feed(self, data: bytes) -> bytes:
        if self.state == 0 and not self.pending:
            # The common read: exactly one whole chunk (one server write of one SSE event).
            eol = data.find(b"\r\n")
            if 0 < eol <= 8 and data[-2:] == b"\r\n":
                try:
                    size = int(data[:eol], 16)
                except ValueError:
                    size = -1
                if size > 0 and len(data) == eol + 4 + size:
                    return data[eol + 2 : -2]
            # Several whole chunks (writes that arrived together: the last token, the finish and
            # usage chunks, [DONE]): taken with locals, the rest by the state machine below.
            whole: list[bytes] = []
            pos, n = 0, len(data)
            while True:
                eol = data.find(b"\r\n", pos)
                if eol < 0 or eol - pos > 8:
                    break
                try:
                    size = int(data[pos:eol], 16)
                except ValueError:
                    break
                end = eol + 2 + size
                if size <= 0 or end + 2 > n or data[end : end + 2] != b"\r\n":
                    break
                whole.append(data[eol + 2 : end])
                pos = end + 2
            if whole:
                if pos < n:
                    whole.append(self._states(data[pos:]))
                return b"".join(whole)
        return self._states(self.pending + data if self.pending else data)

    def _states(self, buf: bytes) -> bytes:
        """The general case: any bytes, from whatever state the last read left."""
        self.pending = b""
        out: list[bytes] = []
        pos, n = 0, len(buf)
        while pos < n and not self.done:
            st = self.state
            if st == 1:
                take = min(self.left, n - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self.left -= take
                if self.left == 0:
                    self.state = 2
            elif st == 0:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    self.pending = buf[pos:]
                    break
                size = int(buf[pos:eol].split(b";", 1)[0].strip() or b"0", 16)
                pos = eol + 2
                if size == 0:
                    self.state = 3
                else:
                    self.left, self.state = size, 1
            elif st == 2:
                if n - pos < 2:
                    self.pending = buf[pos:]
                    break
                pos += 2
                self.state = 0
            else:  # trailers end with an empty line
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    self.pending = buf[pos:]
                    break
                if eol == pos:
                    self.done = True
                pos = eol + 2
        return out[0] if len(out) == 1 else b"".join(out)


class WireClient:
    """Streams POST responses from one origin with blocking reads (any scheme, TLS included).
    Not thread-safe; fine for gevent (one pool, no connection is shared by two greenlets at once).
    Plain-HTTP load runs use :class:`~servecheck.load.generator.reactor.StreamReactor` instead."""

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 60.0,
        verify_tls: bool = True,
        request_id_header: str | None = REQUEST_ID,
    ) -> None:
        self.origin = Origin(base_url, headers, request_id_header)
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.pool: list[_Conn] = []
        # The process's shared context (client/factory.py): the trust every httpx client has,
        # built once, not a second one per reader.
        self._ctx: ssl.SSLContext | None = ssl_context(verify_tls) if self.origin.tls else None

    @classmethod
    def from_settings(
        cls, settings: ClientSettings, request_id_header: str | None = REQUEST_ID
    ) -> WireClient:
        """A reader for the run's :class:`~servecheck.client.factory.ClientSettings`: its
        headers and auth, timeouts, and TLS (the process's shared context, as httpx's)."""
        return cls(
            settings.base_url,
            settings.headers,
            settings.connect_timeout_s,
            settings.timeout_s,
            settings.verify_tls,
            request_id_header,
        )

    def close(self) -> None:
        while self.pool:
            self.pool.pop().close()

    def _connect(self) -> _Conn:
        host, port = self.origin.host, self.origin.port
        t0 = _perf()
        sock = socket.create_connection((host, port), timeout=self.connect_timeout_s)
        t1 = _perf()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._ctx is not None:
            sock = self._ctx.wrap_socket(sock, server_hostname=host)
        sock.settimeout(self.read_timeout_s)
        return _Conn(sock, t1 - t0, _perf() - t1 if self._ctx is not None else 0.0)

    def post_stream(
        self,
        path: str,
        body: bytes,
        on_data: Callable[[bytes, float], str | None],
        deadline: float | None = None,
        **options: Unpack[StreamOptions],
    ) -> WireResult:
        """POST ``body``; call ``on_data(payload_bytes, arrival_time)`` per socket read of the body
        (:class:`StreamOptions` for the rest; this reader ignores ``on_token`` and ``tokens`` and
        parses every read)."""
        request = self.origin.request(path, body, options.get("request_id"))
        where = f"{self.origin.host}:{self.origin.port}"
        for attempt in (0, 1):
            # A retry always takes a fresh connection: the server that closed one idle connection
            # has likely closed the other pooled ones too.
            reused = bool(self.pool) and attempt == 0
            try:
                conn = self.pool.pop() if reused else self._connect()
            except TimeoutError as exc:
                return WireResult(
                    error="connect",
                    error_message=f"connect timeout to {where}: {exc}",
                    t_end=_perf(),
                )
            except OSError as exc:
                return WireResult(
                    error="connect",
                    error_message=f"cannot connect to {where}: {exc}",
                    t_end=_perf(),
                )
            ex = ResponseParser(on_data, deadline, may_retry=reused, until=options.get("until"))
            if not reused:
                res = ex.res
                res.new_conn, res.connect_s, res.tls_s = True, conn.connect_s, conn.tls_s
            self._exchange(conn, request, ex)
            if not ex.retry:
                if ex.keep and ex.res.error is None and not self.origin.close:
                    self.pool.append(conn)
                else:
                    conn.close()
                return ex.res
            conn.close()
        return ex.res  # pragma: no cover - the second attempt never asks for a retry

    def _exchange(self, conn: _Conn, request: bytes, ex: ResponseParser) -> None:
        sock = conn.sock
        try:
            ex.res.t_sent = _perf()
            sock.sendall(request)
            ex.res.t_written = _perf()
            while not ex.done:
                data = sock.recv(RECV_BYTES)
                t = _perf()
                if data:
                    ex.feed(data, t)
                else:
                    ex.eof(t)
        except TimeoutError:
            ex.fail("timeout", f"no data for {self.read_timeout_s:g} s", _perf())
        except OSError as exc:
            ex.broken(exc, _perf())
