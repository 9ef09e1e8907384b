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

Errors are data: :class:`WireResult` carries ``error`` = connect | timeout | stream-error
(the connection broke mid-body) and a message; it never raises for server behaviour.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

_perf = time.perf_counter
MAX_HEADER_BYTES = 64 * 1024
RECV_BYTES = 65536


@dataclass(slots=True)
class WireResult:
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body_prefix: bytes = b""  # first bytes of a non-200 body
    error: str | None = None
    error_message: str = ""
    t_end: float = 0.0


class _Conn:
    __slots__ = ("sock", "buf")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

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
        buf = self.pending + data if self.pending else data
        self.pending = b""
        out: list[bytes] = []
        pos, n = 0, len(buf)
        while pos < n and not self.done:
            st = self.state
            if st == 1:
                take = min(self.left, n - pos)
                out.append(buf[pos:pos + take])
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
    """Streams POST responses from one origin. Not thread-safe; fine for gevent (one pool, no
    connection is shared by two greenlets at once)."""

    def __init__(self, base_url: str, headers: dict[str, str], connect_timeout_s: float = 10.0,
                 read_timeout_s: float = 60.0, verify_tls: bool = True) -> None:
        parts = urlsplit(base_url)
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        self.headers = headers
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.pool: list[_Conn] = []
        self._ctx: ssl.SSLContext | None = None
        if self.tls:
            self._ctx = ssl.create_default_context()
            if not verify_tls:
                self._ctx.check_hostname = False
                self._ctx.verify_mode = ssl.CERT_NONE
        host_hdr = self.host if self.port in (80, 443) else f"{self.host}:{self.port}"
        self._head_tail = "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k.lower() not in ("host", "content-length"))
        self._host_hdr = host_hdr

    def close(self) -> None:
        while self.pool:
            self.pool.pop().close()

    def _connect(self) -> _Conn:
        sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._ctx is not None:
            sock = self._ctx.wrap_socket(sock, server_hostname=self.host)
        sock.settimeout(self.read_timeout_s)
        return _Conn(sock)

    def post_stream(self, path: str, body: bytes, on_data: Callable[[bytes, float], None],
                    deadline: float | None = None) -> WireResult:
        """POST ``body``; call ``on_data(payload_bytes, arrival_time)`` per socket read of the body."""
        head = (f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self._host_hdr}\r\nContent-Length: {len(body)}\r\n"
                f"{self._head_tail}\r\n").encode("latin-1")
        request = head + body
        for attempt in (0, 1):
            reused = bool(self.pool)
            try:
                conn = self.pool.pop() if reused else self._connect()
            except TimeoutError as exc:
                return WireResult(error="connect", error_message=f"connect timeout to {self.host}:{self.port}: {exc}", t_end=_perf())
            except OSError as exc:
                return WireResult(error="connect", error_message=f"cannot connect to {self.host}:{self.port}: {exc}", t_end=_perf())
            result, retry = self._exchange(conn, request, on_data, deadline, reused and attempt == 0)
            if not retry:
                return result
        return result  # pragma: no cover - the second attempt never asks for a retry

    def _exchange(self, conn: _Conn, request: bytes, on_data: Callable[[bytes, float], None],
                  deadline: float | None, may_retry: bool) -> tuple[WireResult, bool]:
        res = WireResult()
        sock = conn.sock
        got_any = False
        try:
            sock.sendall(request)
            buf = conn.buf
            while True:
                end = buf.find(b"\r\n\r\n")
                if end >= 0:
                    break
                if len(buf) > MAX_HEADER_BYTES:
                    conn.close()
                    return WireResult(error="stream-error", error_message="response headers larger than 64 KiB", t_end=_perf()), False
                data = sock.recv(RECV_BYTES)
                if not data:
                    conn.close()
                    if may_retry and not buf:
                        return res, True  # a stale keep-alive connection: try a fresh one
                    return WireResult(error="stream-error", error_message="connection closed before the response headers",
                                      t_end=_perf()), False
                got_any = True
                buf += data
            head, rest = buf[:end], buf[end + 4:]
            lines = head.decode("latin-1").split("\r\n")
            status_parts = lines[0].split(" ", 2)
            res.status = int(status_parts[1])
            headers: dict[str, str] = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            res.headers = headers
            chunked = "chunked" in headers.get("transfer-encoding", "").lower()
            length = int(headers["content-length"]) if "content-length" in headers and not chunked else None
            keep = headers.get("connection", "").lower() != "close" and (chunked or length is not None)
            dech = _Dechunker() if chunked else None
            received = 0
            limit = 2000 if res.status != 200 else None
            prefix: list[bytes] = []
            data = rest
            while True:
                if data:
                    t = _perf()
                    payload = dech.feed(data) if dech is not None else data
                    if length is not None:
                        received += len(payload)
                    if payload:
                        if limit is None:
                            on_data(payload, t)
                        elif sum(map(len, prefix)) < limit:
                            prefix.append(payload)
                    if (dech is not None and dech.done) or (length is not None and received >= length):
                        conn.buf = b""
                        break
                    if limit is not None and sum(map(len, prefix)) >= limit:
                        keep = False
                        break
                    if deadline is not None and t > deadline:
                        res.error, res.error_message = "timeout", "the response did not complete before the deadline"
                        keep = False
                        break
                data = sock.recv(RECV_BYTES)
                if not data:
                    keep = False
                    if dech is not None or (length is not None and received < length):
                        res.error, res.error_message = "stream-error", "the server closed the connection mid-body"
                    break
            res.body_prefix = b"".join(prefix)[:2000]
        except TimeoutError:
            conn.close()
            res.error, res.error_message = "timeout", f"no data for {self.read_timeout_s:g} s"
            res.t_end = _perf()
            return res, False
        except OSError as exc:
            conn.close()
            if may_retry and not got_any and res.status is None:
                return res, True
            res.error, res.error_message = "stream-error", f"{type(exc).__name__}: {exc}"
            res.t_end = _perf()
            return res, False
        except (ValueError, IndexError) as exc:
            conn.close()
            res.error, res.error_message = "stream-error", f"malformed HTTP response: {exc}"
            res.t_end = _perf()
            return res, False
        res.t_end = _perf()
        if keep and res.error is None:
            self.pool.append(conn)
        else:
            conn.close()
        return res, False
