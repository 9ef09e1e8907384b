"""Every transport exception becomes the client's own error (data), never an escaping traceback.

httpx maps httpcore's exceptions only inside its own calls; one raised while a response stream is
read past that map or closed (a read timing out as the connection is released) escaped
``ServeClient.request`` as ``httpcore.ReadTimeout`` and ended discovery with a traceback. The
transports below raise each kind at the two places it was seen: while the body is read and
while the response is closed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpcore
import httpx
import pytest

from servecheck.client.http import AsyncServeClient, ClientSettings, Exchange, ServeClient

RAISED = [
    pytest.param(httpcore.ReadTimeout("timed out"), "timeout", id="httpcore-read-timeout"),
    pytest.param(httpcore.ReadError("reset"), "read", id="httpcore-read-error"),
    pytest.param(httpcore.RemoteProtocolError("peer closed"), "protocol", id="httpcore-protocol"),
    pytest.param(httpcore.ConnectError("refused"), "connect", id="httpcore-connect"),
    pytest.param(ConnectionResetError(104, "reset by peer"), "read", id="os-reset"),
    pytest.param(httpx.StreamClosed(), "read", id="httpx-stream-closed"),
]


class _Body(httpx.SyncByteStream, httpx.AsyncByteStream):
    def __init__(self, exc: Exception, on_close: bool) -> None:
        self.exc, self.on_close = exc, on_close

    def __iter__(self) -> Iterator[bytes]:
        yield b'{"object": "list", "data": []}'
        if not self.on_close:
            raise self.exc

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b'{"object": "list", "data": []}'
        if not self.on_close:
            raise self.exc

    def close(self) -> None:
        if self.on_close:
            raise self.exc

    async def aclose(self) -> None:
        if self.on_close:
            raise self.exc


class _Raising(httpx.BaseTransport, httpx.AsyncBaseTransport):
    def __init__(self, exc: Exception, on_close: bool) -> None:
        self.exc, self.on_close = exc, on_close

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_Body(self.exc, self.on_close))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_Body(self.exc, self.on_close))


SETTINGS = ClientSettings(base_url="http://127.0.0.1:9/v1", headers={}, timeout_s=2)


@pytest.mark.parametrize("on_close", [False, True], ids=["while-reading", "while-closing"])
@pytest.mark.parametrize(("exc", "error"), RAISED)
def test_a_transport_exception_is_the_clients_error(
    exc: Exception, error: str, on_close: bool
) -> None:
    with ServeClient(SETTINGS, transport=_Raising(exc, on_close)) as client:
        ex = client.get("/models")
    assert ex.error == error, (ex.error, ex.error_message)
    assert ex.error_message, "the error says what happened"


@pytest.mark.parametrize(("exc", "error"), RAISED[:2])
def test_the_async_client_too(exc: Exception, error: str) -> None:
    async def get() -> Exchange:
        client = AsyncServeClient(SETTINGS)
        client._client = httpx.AsyncClient(transport=_Raising(exc, False))
        async with client:
            return await client.get("/models")

    ex = asyncio.run(get())
    assert ex.error == error, (ex.error, ex.error_message)
