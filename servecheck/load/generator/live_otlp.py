"""The live view pushed as OpenTelemetry metrics (OTLP over HTTP).

The same figures as the OpenMetrics endpoint (``load/generator/live.py``), read from the same
:class:`~servecheck.load.generator.live.LiveView` snapshot by observable instruments, so nothing is done per
request: the SDK's periodic reader calls them once an export interval. Needs the ``otlp`` extra
(``pip install 'servecheck[otlp]'``: opentelemetry-sdk and its OTLP/HTTP exporter); without it the
run is refused before it starts (``load/generator/live.py``'s ``otlp_missing``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from servecheck.load.generator.live import QUANTILES, LiveView

__all__ = ["INSTRUMENTS", "meter_provider", "start"]

NAME = "servecheck.load"
INSTRUMENTS = (
    "servecheck.load.requests",
    "servecheck.load.errors",
    "servecheck.load.output_tokens",
    "servecheck.load.in_flight",
    "servecheck.load.window.requests_per_second",
    "servecheck.load.window.output_tokens_per_second",
    "servecheck.load.window.error_ratio",
    "servecheck.load.window.ttft",
    "servecheck.load.window.ttfa",
    "servecheck.load.window.itl",
    "servecheck.load.window.e2e",
)


def meter_provider(view: LiveView, readers: Sequence[Any]) -> Any:
    """A MeterProvider whose observable instruments read ``view``; ``readers`` export it."""
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource

    attrs = {f"servecheck.{k}": str(v) for k, v in view.info.items()}
    provider = MeterProvider(
        metric_readers=list(readers),
        resource=Resource.create({"service.name": "servecheck-load", **attrs}),
    )
    meter = provider.get_meter(NAME)

    def requests(_: CallbackOptions) -> Iterable[Observation]:
        tot = view.snapshot()["totals"]
        yield Observation(tot["ok"], {"outcome": "ok"})
        yield Observation(sum(tot["errors"].values()), {"outcome": "error"})

    def errors(_: CallbackOptions) -> Iterable[Observation]:
        for cls, n in sorted(view.snapshot()["totals"]["errors"].items()):
            yield Observation(n, {"error_class": cls})

    def total(key: str) -> Any:
        def read(_: CallbackOptions) -> Iterable[Observation]:
            yield Observation(view.snapshot()["totals"][key])

        return read

    def window(key: str) -> Any:
        def read(_: CallbackOptions) -> Iterable[Observation]:
            win = view.snapshot()["window"]
            if win is not None:
                yield Observation(float(win[key]))

        return read

    def quantiles(metric: str) -> Any:
        def read(_: CallbackOptions) -> Iterable[Observation]:
            win = view.snapshot()["window"]
            for stat, q in QUANTILES if win is not None else ():
                v = win[f"{metric}_ms"][stat]
                if v is not None:
                    yield Observation(v / 1000.0, {"quantile": f"{q:g}"})

        return read

    p = NAME
    meter.create_observable_counter(f"{p}.requests", [requests], "1", "finished requests")
    meter.create_observable_counter(f"{p}.errors", [errors], "1", "failed requests by class")
    meter.create_observable_counter(
        f"{p}.output_tokens", [total("output_tokens")], "1", "output tokens"
    )
    meter.create_observable_gauge(f"{p}.in_flight", [total("in_flight")], "1", "in flight now")
    for name, key in (
        ("requests_per_second", "requests_per_s"),
        ("output_tokens_per_second", "output_tokens_per_s"),
        ("error_ratio", "error_ratio"),
    ):
        meter.create_observable_gauge(f"{p}.window.{name}", [window(key)], "1", "last window")
    for m in ("ttft", "ttfa", "itl", "e2e"):
        meter.create_observable_gauge(
            f"{p}.window.{m}", [quantiles(m)], "s", f"{m.upper()} quantiles, last window"
        )
    return provider


def start(view: LiveView, endpoint: str, interval_s: float = 5.0) -> Any:
    """Export ``view`` to the OTLP/HTTP ``endpoint`` every ``interval_s``; returns the provider
    (``shutdown()`` it at the end: the last export goes then)."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=endpoint), export_interval_millis=interval_s * 1000
    )
    return meter_provider(view, [reader])
