"""The reference server's shutdown path: a clean drain on SIGTERM, and the drain faults.

Clean: the listening socket closes at once (new connections are refused), requests in flight
(streams among them) run to their end for up to :data:`GRACE_S`, then what is left is cut and
the process exits. The faults (``servecheck.reference.faults``), each a defect the drain verdict
(``servecheck.probes.drain``) catches:

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

GRACE_S = 10.0  # in-flight requests get this long to finish after SIGTERM
DRAINING = web.AppKey("draining", asyncio.Event)
KEEP_LISTENING = frozenset({"drain-hang", "drain-html-500"})


def shutdown_timeout(faults: frozenset[str]) -> float:
    """How long aiohttp lets in-flight handlers finish when the runner is cleaned up."""
    return 0.01 if "drain-cut-streams" in faults else GRACE_S  # 0 would mean no limit


def install(app: web.Application, faults: frozenset[str]) -> None:
    """The middleware that answers requests arriving during a faulty drain."""
    app[DRAINING] = asyncio.Event()
    if faults & KEEP_LISTENING:
        app.middlewares.append(_draining_middleware(faults))


def _draining_middleware(faults: frozenset[str]) -> Any:
    @web.middleware
    async def draining(request: web.Request, handler: Any) -> web.StreamResponse:
        if not request.app[DRAINING].is_set():
            return await handler(request)
        if "drain-hang" in faults:
            await asyncio.Event().wait()  # accepted, never answered (cut when the process ends)
        return web.Response(
            status=500,
            text="<html><body><h1>500 Internal Server Error</h1></body></html>",
            content_type="text/html",
        )

    return draining


async def drain(app: web.Application, runner: web.AppRunner, faults: frozenset[str]) -> None:
    """What the server does on SIGTERM: see the module docstring."""
    app[DRAINING].set()
    if faults & KEEP_LISTENING:
        await asyncio.sleep(GRACE_S)  # still listening: new requests meet the fault
    await runner.cleanup()


__all__ = ["DRAINING", "GRACE_S", "drain", "install", "shutdown_timeout"]
