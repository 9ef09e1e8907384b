"""The timing HTTP client (httpx), shared by conformance checks and load tests.

Every request becomes an :class:`Exchange`: what was sent, what came back, when each part
arrived, and a transport error class when something broke. Nothing here raises for a bad
server: hanging, oversized, malformed or disconnecting responses are recorded as data
(``error`` = connect | timeout | read | too-large | protocol), so the caller decides.

Bounds: ``timeout_s`` caps both every single read and the whole exchange (a server that trickles
a byte a second is cut off at the deadline), and ``max_body_bytes`` caps what is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

import httpcore
import httpx

from servecheck.client.curl import curl_command
from servecheck.client.factory import ClientSettings, async_client, sync_client
from servecheck.client.sse import (
    DONE,
    MAX_EVENT_BYTES,
    SSEEvent,
    SSEParser,
    StreamProblem,
    classify_data,
)
from servecheck.client.stalls import NOT_SENT
from servecheck.client.timing import Timing
from servecheck.config.model import Target
from servecheck.redact import redact, redact_headers

_now = time.perf_counter


@dataclass(slots=True)
class StreamResult:
    """A parsed SSE body: events, JSON chunks with arrival times, and what was wrong with it."""

    events: list[SSEEvent] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    chunk_times: list[float] = field(default_factory=list)
    done: bool = False
    problems: list[StreamProblem] = field(default_factory=list)
    error_obj: dict[str, Any] | None = None

    def text(self, index: int = 0) -> str:
        """Concatenated ``delta.content`` (or ``text`` for /v1/completions) of one choice."""
        out: list[str] = []
        for chunk in self.chunks:
            for choice in chunk.get("choices") or []:
                if not isinstance(choice, dict) or choice.get("index", 0) != index:
                    continue
                delta = choice.get("delta")
                if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                    out.append(delta["content"])
                elif isinstance(choice.get("text"), str):
                    out.append(choice["text"])
        return "".join(out)

    def usage(self) -> dict[str, Any] | None:
        found = [c["usage"] for c in self.chunks if isinstance(c.get("usage"), dict)]
        return found[-1] if found else None

    def content_chunk_count(self) -> int:
        return sum(1 for c in self.chunks if carries_token(c))


def carries_token(chunk: dict[str, Any]) -> bool:
    """True when a chunk holds generated output: content, a tool-call delta, reasoning or text."""
    return token_phase(chunk) is not None


REASONING_FIELDS = ("reasoning_content", "reasoning")


def token_phase(chunk: dict[str, Any]) -> str | None:
    """Which phase a chunk's token belongs to: ``"answer"`` (content, a tool-call delta or
    ``text``; a chunk with both answer and reasoning counts as answer), ``"reasoning"``
    (``reasoning_content`` / ``reasoning`` only) or None (no generated output)."""
    phase = None
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if delta.get("content") or delta.get("tool_calls"):
                return "answer"
            if delta.get("reasoning_content") or delta.get("reasoning"):
                phase = "reasoning"
        elif choice.get("text"):
            return "answer"
    return phase


@dataclass(slots=True)
class Exchange:
    """One request and its response, with timings; secrets are masked on the way out."""

    method: str
    url: str
    request_headers: dict[str, str]
    request_body: Any
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    timing: Timing = field(default_factory=Timing)
    error: str | None = None
    error_message: str = ""
    stream: StreamResult | None = None
    _json: Any = field(default=None, repr=False)
    _json_done: bool = field(default=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None and self.status is not None and 200 <= self.status < 300

    @property
    def served(self) -> bool:
        """A 2xx that is a JSON completion (an object with a ``choices`` list), not just any 2xx:
        a proxy's HTML sign-in page answers 200 too."""
        data = self.json() if self.ok else None
        return isinstance(data, dict) and isinstance(data.get("choices"), list)

    @property
    def content_type(self) -> str:
        return self.response_headers.get("content-type", "")

    def json(self) -> Any:
        """The body parsed as JSON, or None when it is not JSON."""
        if not self._json_done:
            self._json_done = True
            try:
                self._json = json.loads(self.body) if self.body else None
            except ValueError:
                self._json = None
        return self._json

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def curl(self) -> str:
        return curl_command(
            self.method,
            self.url,
            self.request_headers,
            self.request_body,
            stream=self.stream is not None,
        )

    def describe(self, limit: int = 1500) -> str:
        """A short, redacted account of what came back (for failure messages)."""
        if self.error:
            return redact(f"{self.error}: {self.error_message}")
        body = self.text
        if len(body) > limit:
            body = body[:limit] + f"... ({len(self.body)} bytes)"
        ctype = self.content_type.split(";")[0] or "no content-type"
        return redact(f"HTTP {self.status} {ctype}: {body}")

    def request_record(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "url": self.url,
            "headers": redact_headers(self.request_headers),
            "body": self.request_body
            if not isinstance(self.request_body, bytes)
            else self.request_body.decode("utf-8", "replace"),
        }


class _Collector:
    """Turns raw body bytes into an Exchange: timing, SSE events, size bound, deadline."""

    def __init__(self, ex: Exchange, stream: bool, limit_s: float, max_bytes: int) -> None:
        self.ex = ex
        self.limit_s = limit_s
        self.deadline = ex.timing.t_start + limit_s
        self.max_bytes = max_bytes
        self.parser = SSEParser() if stream else None
        self.buf = bytearray()
        if stream:
            ex.stream = StreamResult()

    def headers(self, response: httpx.Response) -> None:
        self.ex.timing.t_headers = _now()
        self.ex.status = response.status_code
        self.ex.response_headers = {k.lower(): v for k, v in response.headers.items()}
        ctype = self.ex.response_headers.get("content-type", "")
        if self.parser is not None and (
            response.status_code >= 400 or "text/event-stream" not in ctype
        ):
            # An error answer to a stream request is a plain body; keep it as such.
            self.parser = None
            self.ex.stream = StreamResult() if response.status_code < 400 else None
            if self.ex.stream is not None:
                self.ex.stream.problems.append(
                    StreamProblem(
                        "not-event-stream",
                        f"stream requested but content-type is {ctype or 'missing'!r}",
                    )
                )

    def data(self, raw: bytes) -> bool:
        """Take one read; return False when the exchange must stop (too large or past deadline)."""
        t = _now()
        timing = self.ex.timing
        if timing.t_first_byte is None:
            timing.t_first_byte = t
        if len(self.buf) + len(raw) > self.max_bytes:
            self.ex.error, self.ex.error_message = (
                "too-large",
                f"response exceeded {self.max_bytes} bytes",
            )
            return False
        self.buf += raw
        if self.parser is not None:
            for event in self.parser.feed(raw, t):
                self._event(event)
            if self.parser.pending_bytes > MAX_EVENT_BYTES:
                self.ex.error, self.ex.error_message = (
                    "too-large",
                    f"an SSE event exceeded {MAX_EVENT_BYTES} bytes without ending (one giant line?)",
                )
                return False
        if t > self.deadline:
            self.timed_out()
            return False
        return True

    def timed_out(self) -> None:
        """The response missed its deadline: one message for the run to learn from."""
        self.ex.error = "timeout"
        self.ex.error_message = (
            f"the response did not complete within {self.limit_s:g} s (the deadline for a "
            f"whole response; {len(self.buf)} bytes received)"
        )

    def _event(self, event: SSEEvent) -> None:
        result = self.ex.stream
        assert result is not None  # noqa: S101 - set together with the parser
        index = len(result.events)
        result.events.append(event)
        if result.done:
            result.problems.append(
                StreamProblem("data-after-done", f"event after [DONE]: {event.data[:120]!r}", index)
            )
            return
        parsed = classify_data(event.data)
        if parsed.kind == "done":
            result.done = True
        elif parsed.kind == "non-json":
            result.problems.append(
                StreamProblem("non-json", f"data is not a JSON object: {event.data[:120]!r}", index)
            )
        elif parsed.kind == "error":
            result.error_obj = parsed.obj
            result.problems.append(
                StreamProblem(
                    "error-object",
                    f"error object inside the stream: {redact(event.data[:300])}",
                    index,
                )
            )
        else:
            assert parsed.obj is not None  # noqa: S101
            result.chunks.append(parsed.obj)
            result.chunk_times.append(event.t)
            if carries_token(parsed.obj):
                if self.ex.timing.t_first_token is None:
                    self.ex.timing.t_first_token = event.t
                self.ex.timing.token_times.append(event.t)

    def finish(self) -> Exchange:
        ex = self.ex
        ex.timing.t_end = _now()
        ex.body = bytes(self.buf)
        if self.parser is not None and ex.stream is not None:
            for event in self.parser.close(ex.timing.t_end):
                self._event(event)
            ex.stream.problems[:0] = self.parser.problems
            if not ex.stream.done and ex.error is None:
                ex.stream.problems.append(
                    StreamProblem("missing-done", "the stream ended without data: [DONE]")
                )
        return ex


def _stale_connection(exc: Exception, ex: Exchange) -> bool:
    """A pooled keep-alive connection the server had already closed: nothing was answered.

    Servers close idle connections on their own schedule (llama.cpp after a few seconds); a
    request that lands on one fails before any byte comes back. Retrying once on a fresh
    connection is what urllib3 and browsers do; it is not a server defect.
    """
    return (
        isinstance(exc, httpx.RemoteProtocolError | httpcore.RemoteProtocolError)
        and ex.status is None
        and ex.timing.t_first_byte is None
        and "without sending a response" in str(exc)
    )


# Every exception a transport can raise while a request is sent or its response read or closed.
# httpx maps httpcore's exceptions only inside its own calls: one raised while a response stream
# is closed (a read timing out as the connection is released) escaped as httpcore.ReadTimeout
# and ended discovery with a traceback. OSError: a socket failing outside both libraries' maps.
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    httpx.HTTPError,
    httpx.StreamError,
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
    httpcore.ConnectionNotAvailable,
    OSError,
)


def _error_class(exc: Exception) -> str:
    if isinstance(
        exc,
        httpx.ConnectTimeout | httpx.ConnectError | httpcore.ConnectTimeout | httpcore.ConnectError,
    ):
        return "connect"
    if isinstance(exc, httpx.TimeoutException | httpcore.TimeoutException | TimeoutError):
        return "timeout"
    if isinstance(
        exc, httpx.RemoteProtocolError | httpx.LocalProtocolError | httpcore.ProtocolError
    ):
        return "protocol"
    return "read"


def _error_message(exc: Exception, url: str) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError | httpcore.ConnectError | ConnectionRefusedError):
        return f"cannot connect to {url}: {text} (is the server up and the base_url right?)"
    if isinstance(exc, httpx.TimeoutException | httpcore.TimeoutException | TimeoutError):
        return f"{type(exc).__name__}: no data within the timeout ({text})"
    if isinstance(exc, httpx.RemoteProtocolError | httpcore.RemoteProtocolError):
        return f"the server broke the HTTP exchange: {text}"
    return f"{type(exc).__name__}: {text}"


def _url(settings: ClientSettings, path: str) -> str:
    if path.startswith(("http://", "https://")):
        return path
    return settings.base_url + (path if path.startswith("/") else "/" + path)


def _prepare(
    settings: ClientSettings,
    method: str,
    path: str,
    body: Any,
    headers: Mapping[str, str] | None,
    auth: bool,
) -> tuple[Exchange, bytes | None, dict[str, str]]:
    url = _url(settings, path)
    merged = (
        dict(settings.headers)
        if auth
        else {
            k: v
            for k, v in settings.headers.items()
            if k.lower() not in ("authorization", "x-api-key", "api-key")
        }
    )
    # Bodies are read raw (iter_raw) so that timings see bytes as they arrive; ask for them
    # uncompressed, or a compressing proxy would hand the SSE parser gzip.
    merged.setdefault("Accept-Encoding", "identity")
    if headers:
        merged.update(headers)
    if body is None:
        content = None
    elif isinstance(body, bytes | str):
        content = body.encode() if isinstance(body, str) else body
        merged.setdefault("Content-Type", "application/json")
    else:
        content = json.dumps(body, ensure_ascii=False).encode()
        merged.setdefault("Content-Type", "application/json")
    return (
        Exchange(method=method, url=url, request_headers=merged, request_body=body),
        content,
        merged,
    )


class RequestOptions(TypedDict, total=False):
    """Per-request options of both clients' ``request``, ``get`` and ``post``.

    ``stream``: parse the body as SSE; ``headers``: added to the target's; ``auth=False``
    leaves the auth headers out; ``timeout_s`` replaces the settings' timeout.
    """

    stream: bool
    headers: Mapping[str, str] | None
    auth: bool
    timeout_s: float | None


@dataclass(slots=True)
class _Call:
    """One attempt at a request: its Exchange, its collector, and the ``client.stream`` arguments."""

    ex: Exchange
    collector: _Collector
    stream_args: dict[str, Any]
    attempt: int
    retry: bool = False

    def failed(self, exc: Exception) -> None:
        """Retry a stale keep-alive connection on the first attempt; else record the error as data."""
        if self.attempt == 0 and _stale_connection(exc, self.ex):
            self.retry = True
            return
        error = _error_class(exc)
        message = _error_message(exc, self.ex.url)
        if error == "timeout":
            # one wording for every way a response misses its deadline (before the headers,
            # a stall after them, the whole-response bound): the cause the run learns from
            message = (
                f"the response did not complete within {self.collector.limit_s:g} s: {message}"
            )
        self.ex.error, self.ex.error_message = error, redact(message)


def _begin(
    settings: ClientSettings,
    method: str,
    path: str,
    body: Any,
    options: RequestOptions,
    attempt: int,
) -> _Call:
    """Everything before the bytes flow, shared by the sync and async clients."""
    limit = options.get("timeout_s") or settings.timeout_s
    ex, content, merged = _prepare(
        settings, method, path, body, options.get("headers"), options.get("auth", True)
    )
    ex.timing.t_start = _now()
    collector = _Collector(ex, options.get("stream", False), limit, settings.max_body_bytes)
    timeout = httpx.Timeout(limit, connect=min(limit, settings.connect_timeout_s))
    args = {"method": method, "url": ex.url, "content": content, "headers": merged}
    return _Call(ex, collector, {**args, "timeout": timeout}, attempt)


def _calls(
    settings: ClientSettings, method: str, path: str, body: Any, options: RequestOptions
) -> Iterator[_Call]:
    """A fresh call per attempt; a second one only when the first met a stale connection."""
    for attempt in (0, 1):
        call = _begin(settings, method, path, body, options, attempt)
        yield call
        if not call.retry:
            return


def _refused(
    settings: ClientSettings, method: str, path: str, body: Any, options: RequestOptions
) -> Exchange | None:
    """An Exchange that was not sent (``error="not-sent"``) when the run has judged that this
    route's responses never complete (client/stalls.py); None: send it."""
    guard = settings.stall_guard
    if guard is None:
        return None
    verdict = guard.refuse(method, _url(settings, path))
    if verdict is None:
        return None
    ex, _, _ = _prepare(settings, method, path, body, options.get("headers"), True)
    ex.timing.t_start = ex.timing.t_end = _now()
    ex.error, ex.error_message = NOT_SENT, f"not sent: {verdict.message()}"
    return ex


@dataclass(slots=True)
class _Cutoff:
    """Cuts a connection at a deadline (perf_counter time). A blocking read waits for the whole
    read timeout, so a server that trickles a byte now and then would outlive the deadline;
    shutting the socket down ends the read at once."""

    timer: threading.Timer | None = None
    fired: bool = False

    @classmethod
    def at(cls, response: httpx.Response, deadline: float) -> _Cutoff:
        cutoff = cls()
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            cutoff.timer = threading.Timer(max(0.0, deadline - _now()), cutoff._cut, (sock,))
            cutoff.timer.daemon = True
            cutoff.timer.start()
        return cutoff

    def _cut(self, sock: socket.socket) -> None:
        self.fired = True
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


class ServeClient:
    """Synchronous client. Use as a context manager; one connection pool per client."""

    def __init__(
        self, settings: ClientSettings, transport: httpx.BaseTransport | None = None
    ) -> None:
        """``transport``: an httpx transport of your own (a client certificate for mTLS, a
        proxy); by default one with TCP_NODELAY and the settings' TLS verification."""
        self.settings = settings
        # Headers are merged per request (``auth=False`` leaves the auth headers out).
        self._client = sync_client(settings, transport=transport, default_headers=False)

    @classmethod
    def for_target(
        cls, target: Target, transport: httpx.BaseTransport | None = None, **overrides: Any
    ) -> ServeClient:
        """A client for ``target``; ``overrides`` replace :class:`ClientSettings` fields (e.g.
        ``headers``), ``transport`` as in :meth:`__init__`."""
        return cls(ClientSettings.for_target(target, **overrides), transport)

    def __enter__(self) -> ServeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def request(
        self, method: str, path: str, body: Any = None, **options: Unpack[RequestOptions]
    ) -> Exchange:
        """Send one request and collect the whole response within its deadline (``timeout_s``,
        headers to last byte). Never raises for server behaviour."""
        refused = _refused(self.settings, method, path, body, options)
        if refused is not None:
            return refused
        for call in _calls(self.settings, method, path, body, options):
            cutoff = _Cutoff()
            try:
                with self._client.stream(**call.stream_args) as response:
                    call.collector.headers(response)
                    cutoff = _Cutoff.at(response, call.collector.deadline)
                    for raw in response.iter_raw():
                        if not call.collector.data(raw):
                            break
            except TRANSPORT_ERRORS as exc:
                call.failed(exc)
            finally:
                cutoff.cancel()
            if cutoff.fired:  # the read ended because the deadline cut it, whatever it raised
                call.collector.timed_out()
        ex = call.collector.finish()
        guard = self.settings.stall_guard
        if guard is not None and ex.error == "timeout":
            # only this client's single requests teach the run (client/stalls.py)
            guard.note(method, ex.url, call.collector.limit_s)
        return ex

    def get(self, path: str, **kw: Unpack[RequestOptions]) -> Exchange:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Unpack[RequestOptions]) -> Exchange:
        return self.request("POST", path, body, **kw)


class AsyncServeClient:
    """Asynchronous twin of :class:`ServeClient` for concurrency checks and load work."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._client = async_client(settings, default_headers=False)

    @classmethod
    def for_target(cls, target: Target, **overrides: Any) -> AsyncServeClient:
        return cls(ClientSettings.for_target(target, **overrides))

    async def __aenter__(self) -> AsyncServeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def request(
        self, method: str, path: str, body: Any = None, **options: Unpack[RequestOptions]
    ) -> Exchange:
        """As :meth:`ServeClient.request`; the deadline covers the whole exchange (asyncio's
        timeout cancels a read the moment it passes)."""
        refused = _refused(self.settings, method, path, body, options)
        if refused is not None:
            return refused
        for call in _calls(self.settings, method, path, body, options):
            try:
                async with asyncio.timeout(call.collector.limit_s):
                    async with self._client.stream(**call.stream_args) as response:
                        call.collector.headers(response)
                        async for raw in response.aiter_raw():
                            if not call.collector.data(raw):
                                break
            except TRANSPORT_ERRORS as exc:  # TimeoutError (the deadline) is an OSError
                call.failed(exc)
        return call.collector.finish()

    async def post(self, path: str, body: Any = None, **kw: Unpack[RequestOptions]) -> Exchange:
        return await self.request("POST", path, body, **kw)

    async def get(self, path: str, **kw: Unpack[RequestOptions]) -> Exchange:
        return await self.request("GET", path, **kw)


__all__ = [
    "DONE",
    "AsyncServeClient",
    "ClientSettings",
    "Exchange",
    "ServeClient",
    "StreamResult",
    "carries_token",
]
