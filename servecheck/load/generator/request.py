"""One streamed request over httpx, read as the load generator reads its streams: one record.

The Locust user reads its streams with its own socket client (:mod:`wire`); everything else that
sends a streamed chat completion and times it (the soak's cycles, the abandoned-stream probe,
cold start, the swap probe, drain's in-flight streams) goes through this module instead of a reader
of its own. Like vLLM's benchmark library (one request function, one ``RequestFuncOutput`` for
every backend), there is one path: the bytes go through the generator's
:class:`~servecheck.load.generator.stream.StreamState`, the exchange is a
:class:`~servecheck.load.generator.wire.WireResult`, :func:`~servecheck.load.generator.stream.classify`
names its error and :func:`~servecheck.load.generator.stream.record_from_stream` derives the
measurements of the :class:`~servecheck.records.record.RequestRecord` it returns. So TTFT, the
error classes and the "no ``[DONE]``" rule are the load run's, wherever a stream is read.

:func:`read_stream` (asyncio) and :func:`read_stream_sync` (a thread) differ only in their I/O.
Neither raises for the server's behaviour: errors are the record's ``error`` (connect, timeout,
stream-error, http-<status>, rate-limited, invalid-sse, too-large). ``until``, asked after every
read, hangs up mid-stream on purpose (the record's ``abandoned``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from servecheck.load.generator.stream import StreamState, classify, record_from_stream
from servecheck.load.generator.wire import WireResult
from servecheck.records.record import RequestRecord
from servecheck.redact import redact

_perf = time.perf_counter
ERROR_BODY_BYTES = 2000  # of a non-200 answer: enough for its message, bounded
FIRST_BODY_BYTES = 512  # of the first body read: the chunk's id and model (as the wire keeps)

Until = Callable[[StreamState], bool]


def _headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The caller's headers with this request's own body type and accept (one of each, whatever
    case the caller wrote them in)."""
    own = {"content-type", "accept"}
    kept = {k: v for k, v in headers.items() if k.lower() not in own}
    return {**kept, "Content-Type": "application/json", "Accept": "text/event-stream"}


def _head(res: WireResult, response: httpx.Response) -> bool:
    """Take the status and headers; True when the body is a stream to read."""
    res.status = response.status_code
    res.headers = {k.lower(): v for k, v in response.headers.items()}
    return response.status_code == 200


def _prefix(res: WireResult, raw: bytes) -> bool:
    """Keep a non-200 body's first bytes; True once there are enough."""
    res.body_prefix += raw
    return len(res.body_prefix) > ERROR_BODY_BYTES


def _feed(res: WireResult, st: StreamState, raw: bytes, until: Until | None) -> bool:
    """One read of a 200 body; True when the reading must stop (too large, or hung up)."""
    t = _perf()
    if not res.t_body:
        res.t_body, res.first_body = t, raw[:FIRST_BODY_BYTES]
    too_large = st.feed(raw, t)
    if too_large:
        res.error, res.error_message = "too-large", too_large
        return True
    if until is not None and until(st):
        res.hung_up = True  # leaving the block closes the half-read connection: the hang-up
        return True
    return False


def _transport_error(res: WireResult, exc: httpx.HTTPError, url: str) -> None:
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        res.error, res.error_message = "connect", f"cannot connect to {url}: {exc}"
    elif isinstance(exc, httpx.TimeoutException):
        res.error, res.error_message = "timeout", f"{type(exc).__name__}: {exc}"
    else:
        res.error, res.error_message = "stream-error", f"{type(exc).__name__}: {exc}"


def _finish(rec: RequestRecord, res: WireResult, st: StreamState, t0: float) -> RequestRecord:
    """Classify the exchange and fill ``rec``'s outcome and measurements (send at ``t0``)."""
    t_end = res.t_end = _perf()
    if not res.hung_up and res.error is None:
        st.close(t_end)
    rec.status = res.status
    error, message = classify(res, st)
    rec.error, rec.error_message = error, redact(message[:300])
    rec.abandoned = res.hung_up and error is None
    rec.t_done = rec.t_sent + (t_end - t0)
    return record_from_stream(
        rec,
        ttft=None if st.t_first is None else st.t_first - t0,
        e2e=t_end - t0,
        token_times=st.token_times,
        usage=st.usage,
    )


async def read_stream(
    client: httpx.AsyncClient,
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    rec: RequestRecord,
    *,
    until: Until | None = None,
    timeout_s: float = 60.0,
    clock: Callable[[], float] = time.time,
    state: StreamState | None = None,
    res: WireResult | None = None,
) -> RequestRecord:
    """POST ``body`` to ``url`` as a stream and read it to the end (or until ``until``, or
    ``timeout_s`` for the whole exchange) into ``rec``; returns ``rec``.

    ``rec.t_sent`` is ``clock()`` when the request leaves (wall-clock epoch seconds unless the
    caller counts from elsewhere); a caller that wants the reader's state or the exchange's
    stamps and first bytes passes its own ``state`` / ``res``."""
    st = state if state is not None else StreamState()
    res = res if res is not None else WireResult()
    content = json.dumps(body).encode()
    rec.t_sent = clock()
    t0 = res.t_sent = _perf()
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream(
                "POST", url, content=content, headers=_headers(headers)
            ) as response:
                if _head(res, response):
                    async for raw in response.aiter_raw():
                        if _feed(res, st, raw, until):
                            break
                else:
                    async for raw in response.aiter_raw():
                        if _prefix(res, raw):
                            break
    except TimeoutError:
        res.error = "timeout"
        res.error_message = f"the stream did not finish within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        _transport_error(res, exc, url)
    return _finish(rec, res, st, t0)


def read_stream_sync(
    client: httpx.Client,
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    rec: RequestRecord,
    *,
    until: Until | None = None,
    timeout_s: float | None = None,
    clock: Callable[[], float] = time.time,
    state: StreamState | None = None,
    res: WireResult | None = None,
) -> RequestRecord:
    """:func:`read_stream` for a blocking client (a thread). ``timeout_s`` bounds the whole
    exchange (None: the client's read timeout does): httpx's own timeout is per read, and a
    stream that sends a token every few ms and never ``[DONE]`` never trips it."""
    st = state if state is not None else StreamState()
    res = res if res is not None else WireResult()
    bound = timeout_s if timeout_s is not None else _read_timeout(client)
    content = json.dumps(body).encode()
    rec.t_sent = clock()
    t0 = res.t_sent = _perf()
    deadline = t0 + bound
    try:
        with client.stream("POST", url, content=content, headers=_headers(headers)) as response:
            ok = _head(res, response)
            for raw in response.iter_raw():
                if _feed(res, st, raw, until) if ok else _prefix(res, raw):
                    break
                if _perf() > deadline:
                    res.error = "timeout"
                    res.error_message = f"the stream did not finish within {bound:g} s"
                    break
    except httpx.HTTPError as exc:
        _transport_error(res, exc, url)
    return _finish(rec, res, st, t0)


def _read_timeout(client: httpx.Client) -> float:
    """The client's read timeout as a whole-exchange bound (60 s when it has none)."""
    read = client.timeout.read
    return float(read) if read is not None else 60.0


__all__ = ["Until", "read_stream", "read_stream_sync"]
