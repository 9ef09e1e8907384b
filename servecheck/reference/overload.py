"""Admission control for the reference server: shedding load the way a good engine or gateway does.

With ``ServerConfig.max_inflight`` set, a generation request that arrives while that many are in
flight is answered at once with 429, an OpenAI error object and ``Retry-After`` (what LiteLLM's
and OpenAI's rate limiters send), instead of queueing. The ``overload-*`` faults turn that answer
into the defects users meet under bursts: a reset connection, a 500, a bare 429, no Retry-After,
or a server that is wedged after the burst. ``overload-queue-unbounded`` is the other way to
fail under load: nothing is shed, every request above the limit waits in a queue that grows
without bound (``vllm:num_requests_waiting`` counts it), latency climbs with the load, and
``/health`` answers 200 all along: a capacity sweep must see saturation from what it measures,
not from the health probe. A fault that needs a limit brings one
(:data:`FAULT_LIMIT`) when the config sets none, so ``servecheck reference-server --fault
overload-500`` shows the defect as it is.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from servecheck.reference.http import STATE

GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses"})
FAULT_LIMIT = 4
RETRY_AFTER_S = 1
OVERLOAD_FAULTS = frozenset(
    {
        "overload-reset",
        "overload-500",
        "overload-429-bare",
        "overload-no-retry-after",
        "overload-wedged",
        "overload-stream-error-in-200",
        "overload-stream-cut",
        "overload-queue-unbounded",
    }
)


@dataclass(slots=True)
class Admission:
    """Requests in flight on the generation routes, and how many were shed."""

    inflight: int = 0
    shed: int = 0
    queued: int = 0  # overload-queue-unbounded: requests that waited for a slot
    gate: asyncio.Semaphore | None = None


ADMISSION = web.AppKey("admission", Admission)


def _limit(max_inflight: int, faults: frozenset[str]) -> int:
    if max_inflight:
        return max_inflight
    return FAULT_LIMIT if faults & OVERLOAD_FAULTS else 0


def _shed_answer(request: web.Request, faults: frozenset[str], limit: int) -> web.StreamResponse:
    if "overload-reset" in faults:
        # An accept queue overflowing or a worker killed mid-request: the client sees a reset.
        if request.transport is not None:
            request.transport.abort()
        raise ConnectionResetError("overload-reset")
    if "overload-500" in faults:
        return web.Response(
            status=500,
            text="Internal Server Error: worker crashed (out of memory)",
            content_type="text/plain",
        )
    if "overload-429-bare" in faults:
        return web.Response(status=429, text="Too Many Requests", content_type="text/plain")
    headers = {} if "overload-no-retry-after" in faults else {"Retry-After": str(RETRY_AFTER_S)}
    body: dict[str, Any] = {
        "error": {
            "message": f"the server is at capacity ({limit} requests in flight); retry later",
            "type": "rate_limit_error",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    return web.json_response(body, status=429, headers=headers)


async def _streamed(request: web.Request) -> bool:
    try:
        body = await request.json()  # aiohttp keeps the bytes: a handler could still read them
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("stream") is True


async def _in_band_refusal(request: web.Request, limit: int) -> web.StreamResponse:
    """The overload-stream-error-in-200 defect: the stream starts (200) before admission says no,
    so the refusal can only travel as an error event inside it."""
    response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    error = {
        "error": {
            "message": f"the server is at capacity ({limit} requests in flight)",
            "type": "rate_limit_error",
            "param": None,
            "code": 429,
        }
    }
    await response.write(f"data: {json.dumps(error)}\n\ndata: [DONE]\n\n".encode())
    await response.write_eof()
    return response


async def _cut_stream(request: web.Request) -> web.StreamResponse:
    """The overload-stream-cut defect: a request above capacity gets a 200 stream with its role
    chunk, then the stream ends with no finish_reason and no [DONE] (the request was dropped)."""
    response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    chunk = {
        "id": "chatcmpl-shed",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "shed",
        "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}],
    }
    await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    await response.write_eof()
    return response


async def _queued(
    request: web.Request, handler: Any, state: Admission, limit: int
) -> web.StreamResponse:
    """The overload-queue-unbounded defect: wait for one of ``limit`` slots, however long the
    queue (shown as the engine's waiting gauge); never a 429, never a sign on /health."""
    if state.gate is None:
        state.gate = asyncio.Semaphore(limit)
    engine = request.app[STATE]
    waits = state.gate.locked()
    if waits:
        state.queued += 1
        engine.waiting += 1
    try:
        await state.gate.acquire()
    finally:
        if waits:
            engine.waiting -= 1
    state.inflight += 1
    try:
        return await handler(request)
    finally:
        state.inflight -= 1
        state.gate.release()


def middleware(max_inflight: int, faults: frozenset[str], on_wedged: Any) -> Any:
    """An aiohttp middleware that sheds generation requests above the limit.

    ``on_wedged`` is called once, when a burst that shed requests has drained, under the
    ``overload-wedged`` fault (the server then stays broken, as an engine whose scheduler died).
    """
    limit = _limit(max_inflight, faults)

    @web.middleware
    async def admission(request: web.Request, handler: Any) -> web.StreamResponse:
        if not limit or request.path not in GENERATION_PATHS:
            return await handler(request)
        state = request.app[ADMISSION]
        if "overload-queue-unbounded" in faults:
            return await _queued(request, handler, state, limit)
        if state.inflight >= limit:
            state.shed += 1
            if "overload-stream-error-in-200" in faults and await _streamed(request):
                return await _in_band_refusal(request, limit)
            if "overload-stream-cut" in faults and await _streamed(request):
                return await _cut_stream(request)
            return _shed_answer(request, faults, limit)
        state.inflight += 1
        try:
            return await handler(request)
        finally:
            state.inflight -= 1
            if "overload-wedged" in faults and state.shed and not state.inflight:
                on_wedged()

    return admission


def install(
    app: web.Application, max_inflight: int, faults: frozenset[str], on_wedged: Any
) -> None:
    """Add admission control to ``app`` (before it starts): its state and its middleware."""
    app[ADMISSION] = Admission()
    app.middlewares.append(middleware(max_inflight, faults, on_wedged))
