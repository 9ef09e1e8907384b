"""The reference server's shutdown path: a clean drain on SIGTERM, and the drain faults.

Clean: the listening socket closes at once (new connections are refused), a request that still
reaches a handler after SIGTERM (its connection was accepted just before the listener closed) is
answered 503 at once, requests in flight (streams among them) run to their end for up to
:data:`GRACE_S`, then what is left is cut and the process exits. The faults
(``servecheck.reference.faults``), each a defect the drain verdict (``servecheck.probes.drain``)
catches:

* ``drain-cut-streams``: in-flight streams are dropped at once, without a finish reason;
* ``drain-hang``: the server keeps listening for :data:`GRACE_S`, accepts new requests and
  never answers them;
* ``drain-html-500``: the server keeps listening for :data:`GRACE_S` and answers new requests
  with an HTML 500 page (a proxy's error page in front of a dying engine).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from servecheck.reference.http import ApiError, error_body

GRACE_S = 10.0  # in-flight requests get this long to finish after SIGTERM
DRAINING = web.AppKey("draining", asyncio.Event)
KEEP_LISTENING = frozenset({"drain-hang", "drain-html-500"})
# Loop turns between closing the listener and closing the connections. The event loop hands a
# socket it accepted to aiohttp over three turns (the accept task, connection_made, the
# handler's first wait for bytes); aiohttp's cleanup closes every connection it knows, and one
# whose handler has not begun waiting then drops its request unread and is held open until the
# shutdown timeout: a client left hanging for GRACE_S (a flaky drain self-test). After these
# turns every accepted connection is waiting or answering, so the close is an answer.
SETTLE_TURNS = 8


def shutdown_timeout(faults: frozenset[str]) -> float:
    """How long aiohttp lets in-flight handlers finish when the runner is cleaned up."""
    return 0.01 if "drain-cut-streams" in faults else GRACE_S  # 0 would mean no limit


def install(app: web.Application, faults: frozenset[str]) -> None:
    """The middleware that answers requests arriving once the drain began."""
    app[DRAINING] = asyncio.Event()
    app.middlewares.append(_draining_middleware(faults))


def _draining_middleware(faults: frozenset[str]) -> Any:
    @web.middleware
    async def draining(request: web.Request, handler: Any) -> web.StreamResponse:
        if not request.app[DRAINING].is_set():
            return await handler(request)
        if "drain-hang" in faults:
            await asyncio.Event().wait()  # accepted, never answered (cut when the process ends)
        if "drain-html-500" in faults:
            return web.Response(
                status=500,
                text="<html><body><h1>500 Internal Server Error</h1></body></html>",
                content_type="text/html",
            )
        # Clean: what a load balancer needs to send the request elsewhere, at once.
        err = ApiError(
            503, "the server is shutting down", "server_error", code="service_unavailable"
        )
        resp = web.json_response(error_body(err), status=503, headers={"Retry-After": "1"})
        resp.force_close()
        return resp

    return draining


async def drain(app: web.Application, runner: web.AppRunner, faults: frozenset[str]) -> None:
    """What the server does on SIGTERM: see the module docstring."""
    app[DRAINING].set()
    if faults & KEEP_LISTENING:
        await asyncio.sleep(GRACE_S)  # still listening: new requests meet the fault
    for site in list(runner.sites):
        await site.stop()  # the listener closes: the kernel refuses new connections
    for _ in range(SETTLE_TURNS):
        await asyncio.sleep(0)  # connections accepted before the close reach their handler
    await runner.cleanup()


__all__ = ["DRAINING", "GRACE_S", "SETTLE_TURNS", "drain", "install", "shutdown_timeout"]
