"""httpx transports with a size and a time bound on every response, for code servecheck does not
own (the official ``openai`` SDK in the CLIENT-* checks).

httpx's timeout is per read: a server that streams forever (never ``data: [DONE]``) or sends one
SSE line of hundreds of megabytes never trips it, and the SDK's decoder keeps the whole line. The
transports here wrap each response's byte stream: past ``timeout_s`` since the request was sent,
or past ``max_bytes`` received, the next read raises (``ReadTimeout`` / ``ReadError`` saying
"servecheck's bound"), which the SDK reports as a failure of the call, in time and with bounded
memory. Same bounds as :class:`~servecheck.client.http.ServeClient`'s own reads.

A request to a route the run has judged never to complete (``guard``, client/stalls.py) is not
sent: the transport raises ``ReadTimeout`` saying so at once.

The SDK may bring its own httpx (recent ``openai`` releases use the ``httpx2`` fork), so the
classes are built for whichever module is given: :func:`bounded_transports`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import Any

from servecheck.client.stalls import StallGuard

# The size bound of every body a client of servecheck reads (client/factory.py's ClientSettings
# default too): here, below the factory, which wraps its transports in these bounds.
MAX_BODY_BYTES = 32 * 1024 * 1024

TOO_LARGE = "the response exceeded {max_bytes} bytes (servecheck's size bound)"
TOO_SLOW = "the response did not complete within timeout_s={timeout_s:g} s (servecheck's bound)"


@functools.cache
def bounded_transports(mod: ModuleType) -> tuple[type[Any], type[Any]]:
    """``(BoundedTransport, AsyncBoundedTransport)`` for the httpx-like module ``mod``; each is
    built as ``Transport(inner, timeout_s, max_bytes=MAX_BODY_BYTES)``."""

    def check(received: int, deadline: float, timeout_s: float, max_bytes: int) -> None:
        if received > max_bytes:
            raise mod.ReadError(TOO_LARGE.format(max_bytes=max_bytes))
        if time.monotonic() > deadline:
            raise mod.ReadTimeout(TOO_SLOW.format(timeout_s=timeout_s))

    class BoundedStream(mod.SyncByteStream):  # type: ignore[name-defined]
        def __init__(self, inner: Any, timeout_s: float, max_bytes: int) -> None:
            self._inner, self._timeout_s, self._max = inner, timeout_s, max_bytes
            self._deadline = time.monotonic() + timeout_s

        def __iter__(self) -> Iterator[bytes]:
            received = 0
            for chunk in self._inner:
                received += len(chunk)
                check(received, self._deadline, self._timeout_s, self._max)
                yield chunk

        def close(self) -> None:
            self._inner.close()

    class AsyncBoundedStream(mod.AsyncByteStream):  # type: ignore[name-defined]
        def __init__(self, inner: Any, timeout_s: float, max_bytes: int) -> None:
            self._inner, self._timeout_s, self._max = inner, timeout_s, max_bytes
            self._deadline = time.monotonic() + timeout_s

        async def __aiter__(self) -> AsyncIterator[bytes]:
            received = 0
            async for chunk in self._inner:
                received += len(chunk)
                check(received, self._deadline, self._timeout_s, self._max)
                yield chunk

        async def aclose(self) -> None:
            await self._inner.aclose()

    def refuse(guard: StallGuard | None, request: Any) -> None:
        verdict = guard.refuse(request.method, str(request.url)) if guard is not None else None
        if verdict is not None:
            raise mod.ReadTimeout(f"not sent: {verdict.message()}", request=request)

    class BoundedTransport(mod.BaseTransport):  # type: ignore[name-defined]
        """Wraps a transport: every response ends within ``timeout_s`` and ``max_bytes``."""

        def __init__(
            self,
            inner: Any,
            timeout_s: float,
            max_bytes: int = MAX_BODY_BYTES,
            guard: StallGuard | None = None,
        ) -> None:
            self._inner, self._timeout_s, self._max = inner, timeout_s, max_bytes
            self._guard = guard

        def handle_request(self, request: Any) -> Any:
            refuse(self._guard, request)
            response = self._inner.handle_request(request)
            response.stream = BoundedStream(response.stream, self._timeout_s, self._max)
            return response

        def close(self) -> None:
            self._inner.close()

    class AsyncBoundedTransport(mod.AsyncBaseTransport):  # type: ignore[name-defined]
        """The asynchronous twin of ``BoundedTransport``."""

        def __init__(
            self,
            inner: Any,
            timeout_s: float,
            max_bytes: int = MAX_BODY_BYTES,
            guard: StallGuard | None = None,
        ) -> None:
            self._inner, self._timeout_s, self._max = inner, timeout_s, max_bytes
            self._guard = guard

        async def handle_async_request(self, request: Any) -> Any:
            refuse(self._guard, request)
            response = await self._inner.handle_async_request(request)
            response.stream = AsyncBoundedStream(response.stream, self._timeout_s, self._max)
            return response

        async def aclose(self) -> None:
            await self._inner.aclose()

    return BoundedTransport, AsyncBoundedTransport


def bounded_transport(
    mod: ModuleType, timeout_s: float, verify: bool = True, guard: StallGuard | None = None
) -> Any:
    """A plain ``mod.HTTPTransport`` (TLS verification as the target says) with the bounds;
    ``guard``: the run's verdicts on routes that never complete (not sent)."""
    sync, _ = bounded_transports(mod)
    return sync(mod.HTTPTransport(verify=verify), timeout_s, guard=guard)


def async_bounded_transport(
    mod: ModuleType, timeout_s: float, verify: bool = True, guard: StallGuard | None = None
) -> Any:
    """The asynchronous twin of :func:`bounded_transport`."""
    _, asynchronous = bounded_transports(mod)
    return asynchronous(mod.AsyncHTTPTransport(verify=verify), timeout_s, guard=guard)


__all__ = ["async_bounded_transport", "bounded_transport", "bounded_transports"]
