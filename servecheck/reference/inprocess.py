"""Run the reference server inside the current process, on its own thread and event loop.

Self-tests start dozens of servers (one per fault); a thread costs milliseconds where a
subprocess costs half a second of imports.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field

from aiohttp import web

from servecheck.reference.server import ServerConfig, build_app


@dataclass(slots=True)
class RunningServer:
    config: ServerConfig
    host: str = "127.0.0.1"
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _runner: web.AppRunner | None = field(default=None, repr=False)
    app: web.Application | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def root(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> RunningServer:
        ready = threading.Event()
        errors: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)

            async def boot() -> None:
                self.app = build_app(self.config)
                runner = web.AppRunner(
                    self.app, access_log=None, handle_signals=False, shutdown_timeout=0.5
                )
                await runner.setup()
                site = web.TCPSite(runner, self.host, self.port)
                await site.start()
                server = getattr(site, "_server", None)
                if server is not None and server.sockets:
                    self.port = server.sockets[0].getsockname()[1]
                self._runner = runner

            try:
                loop.run_until_complete(boot())
            except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            if self._runner is not None:
                loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(
            target=main, name=f"reference-server-{id(self)}", daemon=True
        )
        self._thread.start()
        if not ready.wait(timeout_s):
            raise TimeoutError("the in-process reference server did not start")
        if errors:
            raise errors[0]
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and loop.is_running():

            async def shutdown() -> None:
                # Close connections and cancel handlers still running (a stalled stream), so
                # that nothing is left pending when the loop stops.
                if self._runner is not None:
                    await self._runner.cleanup()
                    self._runner = None
                current = asyncio.current_task()
                pending = [t for t in asyncio.all_tasks() if t is not current]
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)

            future = asyncio.run_coroutine_threadsafe(shutdown(), loop)
            with contextlib.suppress(Exception):  # stopping must never fail a test run
                future.result(timeout=5)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> RunningServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
