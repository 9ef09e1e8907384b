"""The reference server's clean drain (servecheck/reference/drain.py) for a connection the event
loop accepted just before SIGTERM closed the listener: its request is answered 503 at once, or
its connection is closed, never held open unanswered until the shutdown timeout.

That hang made tests/load/test_drain.py::test_hook_command_drains_a_server_servecheck_did_not_launch
flaky (1 CI run in 6: a new-request probe unanswered for 5 s). It needs the accept to land in
the few loop turns before the drain closes the connections, which a test over TCP hits only by
chance; here the accepted socket is handed to the server by ``loop.connect_accepted_socket``
(the path the loop's own accept takes), at a chosen turn after the drain began."""

from __future__ import annotations

import asyncio
import json
import re
import socket

import pytest
from aiohttp import web

from servecheck.reference import drain as refdrain
from servecheck.reference.http import ServerConfig
from servecheck.reference.server import build_app

HELD_S = 600.0  # the runner's shutdown timeout: a connection held open is held this long
GUARD_S = 60.0  # a bound on the wait, not a speed claim: the answer comes in milliseconds
BODY = json.dumps(
    {"model": "ref-tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
).encode()
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)
) + BODY


async def _read_answer(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    """One HTTP answer (its head and Content-Length bytes of body), or what came before the
    connection closed (b"": closed with no answer)."""
    got = b""
    while chunk := await loop.sock_recv(sock, 65536):
        got += chunk
        head, sep, body = got.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        if sep and length and len(body) >= int(length.group(1)):
            break
    return got


async def _accepted_as_the_drain_begins(turns: int) -> tuple[bytes | None, bool]:
    """What a client gets on a connection handed to the server ``turns`` loop turns after the
    drain began (None: nothing within :data:`GUARD_S`, the connection held open), and whether
    the drain then ended within it."""
    app = build_app(ServerConfig())
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=HELD_S)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    server, loop = runner.server, asyncio.get_running_loop()
    assert server is not None
    client, accepted = socket.socketpair()
    client.setblocking(False)
    drain = asyncio.create_task(refdrain.drain(app, runner, frozenset()))
    answer: bytes | None = None
    try:
        for _ in range(turns):
            await asyncio.sleep(0)
        await loop.connect_accepted_socket(server, accepted)
        await loop.sock_sendall(client, REQUEST)
        try:
            answer = await asyncio.wait_for(_read_answer(loop, client), GUARD_S)
        except ConnectionResetError:
            answer = b""  # closed with no answer: a client retries it as a refused connection
        await asyncio.wait_for(drain, GUARD_S)
        return answer, True
    except TimeoutError:
        return answer, False
    finally:
        drain.cancel()
        client.close()


@pytest.mark.parametrize("turns", [pytest.param(n, id=f"turn-{n}") for n in range(4)])
def test_a_connection_accepted_as_the_drain_begins_is_answered(turns: int) -> None:
    answer, drained = asyncio.run(_accepted_as_the_drain_begins(turns))
    assert answer is not None, (
        f"no answer within {GUARD_S:g} s: the connection was held open until the shutdown timeout"
    )
    head = answer.split(b"\r\n", 1)[0]
    assert answer == b"" or head == b"HTTP/1.1 503 Service Unavailable", (
        f"Received: {answer[:200]!r}\nExpected: a 503 or the connection closed with no answer"
    )
    if answer:
        assert b'"code": "service_unavailable"' in answer and b"Retry-After: 1" in answer, answer
    assert drained, f"the drain did not end within {GUARD_S:g} s of the answer"
