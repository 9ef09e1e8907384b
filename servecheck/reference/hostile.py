"""A catalogue of hostile servers: named loopback servers that break HTTP the way broken
deployments do, for the self-tests of verdicts, bounds and timeouts.

The reference server (``server.py`` + ``faults.py``) is a correct OpenAI-compatible server with
one switch per *protocol* defect a check must catch. These are different: they do not speak the
API at all, or stop speaking it half way (a socket that accepts and never answers, a body that
never ends, one SSE line of hundreds of megabytes). They exist so that a test can prove that
servecheck never gives a green verdict, never hangs and never grows without bound against them.

Each server is a plain-socket thread on 127.0.0.1 (stdlib only, like the rest of
``reference/``): ``with hostile("endless-sse") as srv: ... srv.base_url``. ``/v1/models`` and
``/health`` answer normally on the servers whose fault is in the completion endpoints, so that
discovery gets as far as the request that misbehaves. Every send loop ends when the client hangs
up, when the server is stopped, or after ``max_s`` seconds (bounded, even if a test forgets it).
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

MODEL = "hostile-tiny"
_MAX_REQUEST_BYTES = 1024 * 1024


@dataclass(slots=True)
class Hostile:
    """One catalogue entry: what it does and which paths misbehave."""

    name: str
    description: str
    handler: Callable[[socket.socket, HostileServer, str], None]
    api_paths_only: bool = True  # False: every path (models, health) misbehaves too


def _head(status: str, ctype: str, extra: str = "", length: int | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Type: {ctype}", "Connection: close"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if extra:
        lines.append(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _send_json(conn: socket.socket, status: str, obj: object, extra: str = "") -> None:
    body = json.dumps(obj).encode()
    conn.sendall(_head(status, "application/json", extra, len(body)) + body)


def _chunk(text: str) -> str:
    return json.dumps(
        {
            "id": "chatcmpl-hostile",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
        }
    )


def _never_answers(conn: socket.socket, srv: HostileServer, path: str) -> None:
    srv.wait()


def _headers_then_stall(conn: socket.socket, srv: HostileServer, path: str) -> None:
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    srv.wait()


def _close_mid_chunk(conn: socket.socket, srv: HostileServer, path: str) -> None:
    event = f"data: {_chunk('hi')}\n\n".encode()
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(event) + 100:x}\r\n".encode()  # promises 100 bytes more than it sends
        + event
    )


_HTML = (
    b"<!doctype html><html><head><title>Sign in</title></head>"
    b"<body><form action='/login'><input name='user'></form></body></html>"
)


def _html_login_page(conn: socket.socket, srv: HostileServer, path: str) -> None:
    conn.sendall(_head("200 OK", "text/html; charset=utf-8", length=len(_HTML)) + _HTML)


def _always_429(conn: socket.socket, srv: HostileServer, path: str) -> None:
    err = {"error": {"message": "rate limited", "type": "rate_limit_error", "code": 429}}
    _send_json(conn, "429 Too Many Requests", err, "Retry-After: 1")


def _always(
    status: str, message: str, kind: str
) -> Callable[[socket.socket, HostileServer, str], None]:
    """A handler that answers ``status`` with an OpenAI error object on every path: a wrong
    API key (401), a base_url without /v1 (404), a broken backend behind a gateway (500)."""

    def handler(conn: socket.socket, srv: HostileServer, path: str) -> None:
        code = int(status.split()[0])
        _send_json(conn, status, {"error": {"message": message, "type": kind, "code": code}})

    return handler


def _endless_sse(conn: socket.socket, srv: HostileServer, path: str) -> None:
    conn.sendall(_head("200 OK", "text/event-stream"))
    event = f"data: {_chunk('la')}\n\n".encode()
    while srv.alive():
        conn.sendall(event)
        srv.sent_bytes += len(event)
        time.sleep(0.005)


def _send_filler(conn: socket.socket, srv: HostileServer, byte: bytes) -> bool:
    """Send ``srv.giant_bytes`` of ``byte`` in 64 KiB blocks, counted in ``sent_bytes``.

    False as soon as the server is stopped, True when all of it went out.
    """
    block = byte * 65536
    for _ in range(srv.giant_bytes // len(block)):
        if not srv.alive():
            return False
        conn.sendall(block)
        srv.sent_bytes += len(block)
    return True


def _every_other_500(conn: socket.socket, srv: HostileServer, path: str) -> None:
    with srv.lock:
        srv.api_requests += 1
        n = srv.api_requests
    if n % 2 == 0:
        err = {"error": {"message": "internal error", "type": "server_error", "code": 500}}
        _send_json(conn, "500 Internal Server Error", err)
        return
    done = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10},
    }
    events = [_chunk("hi"), _chunk(" there"), json.dumps(done), "[DONE]"]
    conn.sendall(_head("200 OK", "text/event-stream"))
    conn.sendall("".join(f"data: {e}\n\n" for e in events).encode())


def _giant_line(conn: socket.socket, srv: HostileServer, path: str) -> None:
    conn.sendall(_head("200 OK", "text/event-stream") + b'data: {"choices":[{"delta":{"content":"')
    if _send_filler(conn, srv, b"x"):
        srv.wait()  # never ends the line


def _huge_body(conn: socket.socket, srv: HostileServer, path: str) -> None:
    conn.sendall(_head("200 OK", "application/json", length=srv.giant_bytes))
    _send_filler(conn, srv, b" ")


def _first_answered(conn: socket.socket, srv: HostileServer, path: str) -> bool:
    """Answer the first request to each path properly (discovery's, then a check's precondition
    probe: one good request, non-streamed), so that what follows reaches the check's own
    requests. True when this one was answered."""
    with srv.lock:
        srv.api_requests += 1
        first = path not in srv.answered_paths
        srv.answered_paths.add(path)
    if first:
        message = {"role": "assistant", "content": "OK"}
        answer = {
            "id": "cmpl-hostile",
            "object": "chat.completion",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "message": message, "text": "OK", "finish_reason": "stop"}],
            "output": [{"type": "message", "role": "assistant", "content": []}],
            "data": [],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        }
        _send_json(conn, "200 OK", answer)
    return first


def _drops_first(conn: socket.socket, srv: HostileServer, path: str) -> None:
    """Reset the first connection to each path without a byte of answer (a kept-alive
    connection the server closed as the request went out), then answer every request properly."""
    with srv.lock:
        first = ("dropped", path) not in srv.dropped
        srv.dropped.add(("dropped", path))
    if first:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return  # closed by _serve: with linger 0, a reset
    if _is_plain(path):
        _plain(conn, path)
        return
    with srv.lock:
        srv.answered_paths.discard(path)
    _first_answered(conn, srv, path)


def _refuses_streams(conn: socket.socket, srv: HostileServer, path: str) -> None:
    """Serve a non-streamed request as _first_answered does; refuse every ``stream: true`` one
    with a clean 400 and an OpenAI error object (a gateway that cannot stream)."""
    try:
        body = json.loads(srv.request_body() or b"{}")
    except ValueError:
        body = {}
    if isinstance(body, dict) and body.get("stream") is True:
        err = {"error": {"message": "streaming is not supported", "type": "invalid_request_error"}}
        _send_json(conn, "400 Bad Request", err)
        return
    with srv.lock:
        srv.answered_paths.discard(path)  # answer every non-streamed request
    _first_answered(conn, srv, path)


def _refusals_stall(conn: socket.socket, srv: HostileServer, path: str) -> None:
    if not _first_answered(conn, srv, path):
        conn.sendall(_head("400 Bad Request", "application/json", length=4096))
        srv.wait()  # the error body never comes


def _refusals_huge(conn: socket.socket, srv: HostileServer, path: str) -> None:
    if not _first_answered(conn, srv, path):
        conn.sendall(_head("400 Bad Request", "application/json", length=srv.giant_bytes))
        conn.sendall(b'{"error": {"message": "')
        _send_filler(conn, srv, b"x")


CATALOGUE: dict[str, Hostile] = {
    h.name: h
    for h in (
        Hostile(
            "accepts-never-answers",
            "accepts the connection, reads, never answers",
            _never_answers,
            False,
        ),
        Hostile(
            "headers-then-stall",
            "sends 200 event-stream headers, then nothing",
            _headers_then_stall,
        ),
        Hostile(
            "close-mid-chunk", "one SSE chunk shorter than its size, then closes", _close_mid_chunk
        ),
        Hostile(
            "html-login-page",
            "answers 200 with an HTML sign-in page on every path",
            _html_login_page,
            False,
        ),
        Hostile("always-429", "answers 429 (rate limited) on every path", _always_429, False),
        Hostile(
            "always-401",
            "answers 401 with an OpenAI error object on every path (a wrong API key)",
            _always("401 Unauthorized", "Incorrect API key provided", "invalid_request_error"),
            False,
        ),
        Hostile(
            "always-404",
            "answers 404 with an OpenAI error object on every path (a base_url without /v1)",
            _always("404 Not Found", "Not Found", "not_found_error"),
            False,
        ),
        Hostile(
            "always-500",
            "answers 500 with an OpenAI error object on every path (a broken backend)",
            _always("500 Internal Server Error", "Internal Server Error", "server_error"),
            False,
        ),
        Hostile(
            "every-other-500",
            "every second API request answers 500; the others stream a short valid reply",
            _every_other_500,
        ),
        Hostile("endless-sse", "a valid token stream that never sends data: [DONE]", _endless_sse),
        Hostile("giant-line", "one SSE data line of giant_bytes that never ends", _giant_line),
        Hostile("huge-body", "a 200 application/json body of giant_bytes spaces", _huge_body),
        Hostile(
            "refusals-stall",
            "answers the first API request properly, then 400 headers and never the body",
            _refusals_stall,
        ),
        Hostile(
            "refuses-streams",
            "answers non-streamed API requests properly and every stream: true one with a 400",
            _refuses_streams,
        ),
        Hostile(
            "drops-first",
            "resets the first connection to each path (models and health too) before answering, "
            "then answers every request properly",
            _drops_first,
            False,
        ),
        Hostile(
            "refusals-huge",
            "answers the first API request properly, then a 400 error body of giant_bytes",
            _refusals_huge,
        ),
    )
}


@dataclass(slots=True)
class HostileServer:
    """A running catalogue server; ``base_url`` ends in ``/v1`` like a target's."""

    kind: Hostile
    giant_bytes: int = 200 * 1024 * 1024
    max_s: float = 120.0
    host: str = "127.0.0.1"
    port: int = 0
    requests: int = 0
    sent_bytes: int = 0  # body bytes the completion handlers handed to the kernel
    api_requests: int = 0  # requests that reached the handler (not models, health, metrics)
    answered_paths: set[str] = field(default_factory=set)  # refusals-*: paths answered once
    dropped: set[tuple[str, str]] = field(default_factory=set)  # drops-first: paths reset once
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _local: threading.local = field(default_factory=threading.local, repr=False)
    _sock: socket.socket | None = field(default=None, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _t0: float = 0.0

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def alive(self) -> bool:
        return not self._stop.is_set() and time.monotonic() - self._t0 < self.max_s

    def wait(self) -> None:
        """Hold the connection open until stopped (or ``max_s``)."""
        self._stop.wait(max(0.0, self.max_s - (time.monotonic() - self._t0)))

    def start(self) -> HostileServer:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(128)
        sock.settimeout(0.2)
        self._sock, self.port, self._t0 = sock, sock.getsockname()[1], time.monotonic()
        threading.Thread(target=self._accept, name=f"hostile-{self.kind.name}", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            self._sock.close()

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def request_body(self) -> bytes:
        """The body of the request this connection's thread is serving."""
        return bytes(getattr(self._local, "body", b""))

    def _accept(self) -> None:
        assert self._sock is not None  # noqa: S101 - set by start()
        while self.alive():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.closing(conn):
            conn.settimeout(self.max_s)
            request = _read_request(conn)
            if request is None:
                return
            path, self._local.body = request
            self.requests += 1
            try:
                if self.kind.api_paths_only and _is_plain(path):
                    _plain(conn, path)
                else:
                    self.kind.handler(conn, self, path)
            except OSError:
                pass  # the client hung up: what a bounded client does


def _read_request(conn: socket.socket) -> tuple[str, bytes] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            part = conn.recv(65536)
        except OSError:
            return None
        if not part or len(data) > _MAX_REQUEST_BYTES:
            return None
        data += part
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = 0
    for line in lines[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == "content-length":
            length = min(int(v.strip() or 0), _MAX_REQUEST_BYTES)
    while len(rest) < length:
        part = conn.recv(65536)
        if not part:
            return None
        rest += part
    parts = lines[0].split(" ")
    return (parts[1] if len(parts) > 1 else "/"), rest[:length]


def _is_plain(path: str) -> bool:
    return path.split("?")[0].rstrip("/") in ("/v1/models", "/health", "/v1/health", "/metrics")


def _plain(conn: socket.socket, path: str) -> None:
    if path.startswith("/v1/models"):
        models = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "x"}]}
        _send_json(conn, "200 OK", models)
    elif path.startswith("/metrics"):
        conn.sendall(_head("404 Not Found", "text/plain", length=0))
    else:
        _send_json(conn, "200 OK", {"status": "ok"})


def closed_port() -> int:
    """A loopback port with nothing listening: a target that is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def hostile(name: str, **options: object) -> Iterator[HostileServer]:
    """Start the catalogue server ``name`` for the ``with`` block."""
    server = HostileServer(CATALOGUE[name], **options).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


__all__ = ["CATALOGUE", "MODEL", "Hostile", "HostileServer", "closed_port", "hostile"]
