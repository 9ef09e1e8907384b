"""Fixtures for the telemetry tests: exposition texts, a tiny /metrics server, synthetic soaks."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from servecheck.telemetry import Phases

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def exposition() -> Callable[[str], str]:
    """Read ``fixtures/<name>.prom``."""

    def read(name: str) -> str:
        return (FIXTURES / f"{name}.prom").read_text(encoding="utf-8")

    return read


@dataclass
class MetricsServer:
    """A stdlib HTTP server on 127.0.0.1 serving ``body`` with ``status`` at any path."""

    body: str = ""
    status: int = 200
    hits: int = 0
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def start(self) -> MetricsServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                with owner.lock:
                    owner.hits += 1
                    body, status = owner.body.encode(), owner.status
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Take the server down (later scrapes get 'connection refused')."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(2)
            self._server = None


@pytest.fixture
def metrics_server() -> Iterator[MetricsServer]:
    server = MetricsServer().start()
    yield server
    server.stop()


def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0, step_s: float = 0.02) -> bool:
    """Poll ``predicate`` until true or ``timeout_s`` passes (bounded in time and count)."""
    import time

    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / step_s) + 1):
        if predicate():
            return True
        if time.monotonic() >= deadline:
            break
        time.sleep(step_s)
    return predicate()


@pytest.fixture
def wait() -> Callable[..., bool]:
    return wait_for


SoakMaker = Callable[..., tuple[pd.DataFrame, Phases]]


@pytest.fixture
def make_soak() -> SoakMaker:
    """Build a synthetic kv_usage soak: idle baseline, then cycles of load and drain.

    ``post(i)`` is the level the metric settles at after cycle ``i`` drains; ``noise`` is
    Gaussian per sample (seeded); ``baseline`` is the idle level.
    """

    def make(
        post: Callable[[int], float],
        *,
        cycles: int = 6,
        noise: float = 0.0,
        seed: int = 0,
        baseline: float = 0.0,
        peak: float = 0.6,
        dt: float = 0.5,
        metric: str = "kv_usage",
        t0: float = 1_764_000_000.0,
    ) -> tuple[pd.DataFrame, Phases]:
        rng = np.random.default_rng(seed)
        phases = Phases.from_schedule(t0, baseline_s=10, load_s=10, drain_s=10, cycles=cycles)
        end = phases.cycles[-1].drain_end if phases.cycles else phases.baseline[1]
        ts = np.arange(t0, end + 1e-9, dt)
        values = np.full(len(ts), baseline, dtype=float)
        for i, cycle in enumerate(phases.cycles):
            level = baseline + post(i)
            values[(ts >= cycle.start) & (ts <= cycle.end)] = level + peak
            values[(ts > cycle.end) & (ts <= cycle.drain_end)] = level
        if noise:
            values = values + rng.normal(0.0, noise, len(ts))
        frame = pd.DataFrame(
            {
                "t": ts,
                "t_mono": ts - t0,
                "source": "prometheus",
                "kind": "sample",
                "metric": metric,
                "value": values,
                "labels": [{} for _ in ts],
                "error_class": None,
                "error": None,
            }
        )
        return frame, phases

    return make
