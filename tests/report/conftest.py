"""Fixtures for the workflow tests: a targets file over in-process servers, a switching proxy."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import ClientSession, web

from servecheck.reference.inprocess import RunningServer


@dataclass(slots=True)
class SwitchingProxy:
    """A loopback gateway: forwards to ``first`` until the first request plus ``switch_after_s``,
    then answers 502 for ``gap_s`` (the swap), then forwards to ``second``. The ``model`` of a
    forwarded body is rewritten to the upstream's model (what a gateway alias does)."""

    first: RunningServer
    second: RunningServer
    switch_after_s: float
    gap_s: float
    host: str = "127.0.0.1"
    port: int = 0
    started_at: float | None = None
    served_502: int = 0
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def _upstream(self) -> RunningServer | None:
        now = time.monotonic()
        if self.started_at is None:
            self.started_at = now
        t = now - self.started_at
        if t < self.switch_after_s:
            return self.first
        if t < self.switch_after_s + self.gap_s:
            return None
        return self.second

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        upstream = self._upstream()
        if upstream is None:
            self.served_502 += 1
            return web.json_response(
                {"error": {"message": "upstream is being swapped", "type": "bad_gateway"}},
                status=502,
            )
        body = await request.json() if request.can_read_body else None
        if isinstance(body, dict) and "model" in body:
            body["model"] = upstream.config.models[0]
        async with (
            ClientSession() as s,
            s.request(request.method, upstream.root + request.path, json=body) as r,
        ):
            return web.Response(body=await r.read(), status=r.status, content_type=r.content_type)

    def start(self) -> SwitchingProxy:
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._handle)
            runner = web.AppRunner(app, access_log=None, handle_signals=False)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, self.host, 0)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=main, name="switching-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise TimeoutError("the switching proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)


@pytest.fixture
def make_proxy() -> Iterator[Callable[..., SwitchingProxy]]:
    made: list[SwitchingProxy] = []

    def factory(
        first: RunningServer, second: RunningServer, *, seed: int, gap_s: float = 1.5
    ) -> SwitchingProxy:
        switch_after = (
            1.0 + random.Random(seed).random()
        )  # seeded: the swap starts 1-2 s into the run
        proxy = SwitchingProxy(first, second, switch_after, gap_s).start()
        made.append(proxy)
        return proxy

    yield factory
    for p in made:
        p.stop()


def write_targets(path: Path, **urls: tuple[str, list[str]]) -> Path:
    """A targets.yaml naming each in-process server (name -> (base_url, models))."""
    lines = ["targets:"]
    for name, (url, models) in urls.items():
        lines += [
            f"  - name: {name}",
            f"    base_url: {url}",
            "    engine: reference",
            f"    models: [{', '.join(models)}]",
            "    timeout_s: 10",
        ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
