"""A tiny loopback server that streams Anthropic Messages events (and chat chunks), for the load
generator's self-tests of ``--api messages`` and ``--images`` until the reference server's own
``/v1/messages`` is there. Not a conformance reference: it answers what the tests need.

* ``GET /v1/models``, ``GET /health``; ``POST /v1/messages`` (checks ``anthropic-version`` and, with ``key`` set,
  ``x-api-key``, answering Anthropic's error shape; streams ``message_start``, ``ping``, a
  thinking block when the body asks for ``thinking``, a text block, ``message_delta`` with
  usage, ``message_stop``); ``POST /v1/chat/completions`` (a plain chat stream with usage).
* Input tokens: the text's 4-characters-a-token estimate (the generator's own, so the tests know
  the text's share) plus, for each image, ``ceil(w/32) * ceil(h/32)`` read from its PNG/JPEG.
* ``mode``: ``ok``; ``error-event`` (an ``error`` event after the first text delta);
  ``no-stop`` (the stream ends after ``message_delta``, without ``message_stop``).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import threading
from typing import Any

from aiohttp import web

from servecheck.load.workload.prompts import approx_tokens

THINK_TOKENS = 3
TEXT_TOKENS = 5


def image_tokens(data: bytes) -> int:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        w, h = im.size
    return math.ceil(w / 32) * math.ceil(h / 32)


def _count(content: Any) -> tuple[int, int]:
    """(text tokens, image tokens) of one message's content (chat parts or Anthropic blocks)."""
    if isinstance(content, str):
        return approx_tokens(content), 0
    text = images = 0
    for part in content or ():
        kind = part.get("type")
        if kind == "text":
            text += approx_tokens(part["text"])
        elif kind == "image":
            images += image_tokens(base64.b64decode(part["source"]["data"]))
        elif kind == "image_url":
            url = part["image_url"]["url"]
            images += image_tokens(base64.b64decode(url.partition(",")[2]))
    return text, images


def input_tokens(body: dict[str, Any]) -> int:
    total = approx_tokens(body["system"]) if body.get("system") else 0
    for m in body.get("messages") or ():
        text, images = _count(m.get("content"))
        total += text + images
    return total


def _event(name: str, obj: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(obj)}\n\n".encode()


class StubServer:
    """Start with :meth:`start` (a thread with its own event loop), stop with :meth:`stop`."""

    def __init__(self, key: str | None = None, mode: str = "ok", itl_s: float = 0.002) -> None:
        self.key, self.mode, self.itl_s = key, mode, itl_s
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> StubServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)  # what capacity's readiness probe asks
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    def _error(self, status: int, kind: str, message: str) -> web.Response:
        body = {"type": "error", "error": {"type": kind, "message": message}}
        return web.json_response(body, status=status)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        self.headers.append(dict(request.headers))
        if "anthropic-version" not in request.headers:
            return self._error(400, "invalid_request_error", "anthropic-version header missing")
        if self.key is not None and request.headers.get("x-api-key") != self.key:
            return self._error(401, "authentication_error", "invalid x-api-key")
        body = await request.json()
        self.bodies.append(body)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n_in = input_tokens(body)
        out = min(int(body["max_tokens"]), TEXT_TOKENS)
        await resp.write(
            _event(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_stub",
                        "type": "message",
                        "role": "assistant",
                        "content": [],
                        "model": body["model"],
                        "usage": {"input_tokens": n_in, "output_tokens": 1},
                    },
                },
            )
        )
        await resp.write(_event("ping", {"type": "ping"}))
        index = 0
        thinking = THINK_TOKENS if body.get("thinking") else 0
        if thinking:
            await self._block(resp, index, "thinking", "thinking_delta", "thinking", thinking)
            index += 1
        await self._block(resp, index, "text", "text_delta", "text", out)
        if self.mode == "no-stop":
            return resp
        delta = {"stop_reason": "end_turn", "stop_sequence": None}
        usage = {"output_tokens": out + thinking}
        await resp.write(
            _event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage})
        )
        await resp.write(_event("message_stop", {"type": "message_stop"}))
        return resp

    async def _block(
        self, resp: web.StreamResponse, index: int, kind: str, delta: str, key: str, n: int
    ) -> None:
        start = {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": kind, key: ""},
        }
        await resp.write(_event("content_block_start", start))
        for i in range(n):
            await asyncio.sleep(self.itl_s)
            piece = {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": delta, key: f" w{i}"},
            }
            await resp.write(_event("content_block_delta", piece))
            if self.mode == "error-event" and kind == "text":
                err = {
                    "type": "error",
                    "error": {"type": "overloaded_error", "message": "Overloaded"},
                }
                await resp.write(_event("error", err))
                return
        await resp.write(
            _event("content_block_stop", {"type": "content_block_stop", "index": index})
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        out = min(int(body["max_tokens"]), TEXT_TOKENS)
        for i in range(out):
            await asyncio.sleep(self.itl_s)
            chunk = {
                "id": "c",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"content": f" w{i}"}}],
            }
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {"prompt_tokens": input_tokens(body), "completion_tokens": out}
        last = {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage}
        await resp.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
        return resp
