"""``--otlp``: the live view as OpenTelemetry metrics (load/generator/live_otlp.py), read by the SDK's
in-memory reader and pushed over OTLP/HTTP to an in-process collector stub."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from servecheck.errors import SpecError
from servecheck.load.generator import live
from servecheck.load.generator.live import live_config, otlp_missing
from servecheck.reference.inprocess import RunningServer
from tests.load.test_live import _fed_view

needs_sdk = pytest.mark.skipif(
    otlp_missing() is not None, reason="the otlp extra is not installed (pip install '.[otlp]')"
)


def _points(metrics_data: Any) -> dict[str, list[tuple[dict[str, Any], float]]]:
    out: dict[str, list[tuple[dict[str, Any], float]]] = {}
    for rm in metrics_data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    out.setdefault(m.name, []).append((dict(p.attributes), p.value))
    return out


@needs_sdk
def test_in_memory_reader_sees_every_instrument_with_the_window() -> None:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from servecheck.load.generator.live_otlp import INSTRUMENTS, meter_provider

    reader = InMemoryMetricReader()
    provider = meter_provider(_fed_view(), [reader])
    try:
        points = _points(reader.get_metrics_data())
    finally:
        provider.shutdown()
    assert set(INSTRUMENTS) <= set(points), set(INSTRUMENTS) - set(points)
    assert ({"outcome": "ok"}, 49) in points["servecheck.load.requests"]
    assert ({"error_class": "http-500"}, 7) in points["servecheck.load.errors"]
    p50 = dict((a["quantile"], v) for a, v in points["servecheck.load.window.ttft"])["0.5"]
    assert p50 == pytest.approx(0.06, abs=1e-4)


class _Collector(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        n = int(self.headers.get("Content-Length") or 0)
        type(self).bodies.append(self.rfile.read(n))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@needs_sdk
def test_otlp_http_export_reaches_a_collector() -> None:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    from servecheck.load.generator.live_otlp import INSTRUMENTS, start

    _Collector.bodies = []
    server = HTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/metrics"
        provider = start(_fed_view(), url, interval_s=60.0)
        provider.force_flush(timeout_millis=10_000)
        provider.shutdown()
    finally:
        server.shutdown()
    assert _Collector.bodies, "the collector got no export"
    names, resource = set(), {}
    for body in _Collector.bodies:
        req = ExportMetricsServiceRequest.FromString(body)
        for rm in req.resource_metrics:
            resource.update({a.key: a.value.string_value for a in rm.resource.attributes})
            names |= {m.name for sm in rm.scope_metrics for m in sm.metrics}
    assert set(INSTRUMENTS) <= names, set(INSTRUMENTS) - names
    assert resource["service.name"] == "servecheck-load" and resource["servecheck.run_id"] == "r"


def test_otlp_option_is_checked_before_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SpecError, match="an http"):
        live_config(None, None, None, otlp="collector:4318")
    monkeypatch.setattr(live, "otlp_missing", lambda: "opentelemetry.sdk.metrics")
    with pytest.raises(SpecError) as info:
        live_config(None, None, None, otlp="http://127.0.0.1:4318/v1/metrics")
    assert "servecheck[otlp]" in str(info.value) and "opentelemetry.sdk.metrics" in str(info.value)


@needs_sdk
@pytest.mark.slow
def test_load_run_pushes_to_an_otlp_collector(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """The Locust process (gevent-patched, so the SDK's export thread is a greenlet) exports as
    the run goes and once at its end."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    from tests.load.test_load_cli import _cmd, _run, _targets

    _Collector.bodies = []
    server = HTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ref = make_reference(ttft_ms=5, itl_ms=1)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/metrics"
        cmd = _cmd(
            _targets(tmp_path, ref),
            tmp_path / "out",
            *("--users", "2", "--duration", "8s", "--records", "none", "--otlp", url),
        )
        res = _run(cmd, timeout=120)
    finally:
        server.shutdown()
    assert res.returncode in (0, 1), res.stdout[-2000:] + res.stderr[-2000:]
    ok = []
    for body in _Collector.bodies:
        for rm in ExportMetricsServiceRequest.FromString(body).resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == "servecheck.load.requests":
                        ok += [
                            p.as_int
                            for p in m.sum.data_points
                            if any(a.value.string_value == "ok" for a in p.attributes)
                        ]
    assert len(_Collector.bodies) >= 2, "an export during the run and one at its end"
    assert ok and max(ok) > 0, f"no finished requests were exported: {ok}"
