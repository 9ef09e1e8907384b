"""Telemetry during load: samplers (Prometheus, NVML, DCGM, process RSS), leak analysis, plots.

Typical use by a soak run::

    from servecheck.telemetry import Phases, TelemetryRecorder, analyse_leak, plot_timeseries

    with TelemetryRecorder(run_dir, "http://127.0.0.1:8000/metrics", "vllm", port=8000) as rec:
        ...  # baseline idle, then N identical load cycles each followed by an idle drain
    frame = rec.frame()
    verdict = analyse_leak(frame, phases, metric="kv_usage", tolerance=0.02)
    plot_timeseries(frame, run_dir / "telemetry.png", phases=phases)

Names are imported lazily (PEP 562): the NVML sampler then needs only the standard library
and pynvml, and starting samplers does not pay for scipy or matplotlib. See
docs/telemetry.md for metric names, file formats and verdict rules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servecheck.telemetry.leak import (
        Cycle,
        DrainVerdict,
        LeakVerdict,
        Phases,
        analyse_leak,
        check_drain,
        series_of,
    )
    from servecheck.telemetry.nvml import (
        DeviceMemory,
        FakeNvml,
        NvmlBackend,
        NvmlUnavailable,
        ProcessMemory,
        PynvmlBackend,
    )
    from servecheck.telemetry.plot import plot_timeseries, timeseries_figure
    from servecheck.telemetry.prometheus import CANONICAL, ENGINE_METRICS, MetricMap, extract
    from servecheck.telemetry.recorder import TelemetryRecorder, load_markers
    from servecheck.telemetry.samplers import (
        DcgmSampler,
        NvmlSampler,
        PrometheusSampler,
        RssSampler,
        Sampler,
        SamplerSummary,
        SourceUnavailable,
        find_pid_listening,
    )
    from servecheck.telemetry.series import Gap, Sample, SeriesWriter, load_series

_WHERE = {
    "leak": (
        "Cycle",
        "DrainVerdict",
        "LeakVerdict",
        "Phases",
        "analyse_leak",
        "check_drain",
        "series_of",
    ),
    "nvml": (
        "DeviceMemory",
        "FakeNvml",
        "NvmlBackend",
        "NvmlUnavailable",
        "ProcessMemory",
        "PynvmlBackend",
    ),
    "plot": ("plot_timeseries", "timeseries_figure"),
    "prometheus": ("CANONICAL", "ENGINE_METRICS", "MetricMap", "extract"),
    "recorder": ("TelemetryRecorder", "load_markers"),
    "samplers": (
        "DcgmSampler",
        "NvmlSampler",
        "PrometheusSampler",
        "RssSampler",
        "Sampler",
        "SamplerSummary",
        "SourceUnavailable",
        "find_pid_listening",
    ),
    "series": ("Gap", "Sample", "SeriesWriter", "load_series"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

__all__ = [
    "CANONICAL",
    "ENGINE_METRICS",
    "Cycle",
    "DcgmSampler",
    "DeviceMemory",
    "DrainVerdict",
    "FakeNvml",
    "Gap",
    "LeakVerdict",
    "MetricMap",
    "NvmlBackend",
    "NvmlSampler",
    "NvmlUnavailable",
    "Phases",
    "ProcessMemory",
    "PrometheusSampler",
    "PynvmlBackend",
    "RssSampler",
    "Sample",
    "Sampler",
    "SamplerSummary",
    "SeriesWriter",
    "SourceUnavailable",
    "TelemetryRecorder",
    "analyse_leak",
    "check_drain",
    "extract",
    "find_pid_listening",
    "load_markers",
    "load_series",
    "plot_timeseries",
    "series_of",
    "timeseries_figure",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
