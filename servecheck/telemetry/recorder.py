"""TelemetryRecorder: start the samplers that fit a target, stop them, load what they wrote."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from servecheck.errors import UsageError, did_you_mean
from servecheck.telemetry.device import DRM_ROOT, AmdgpuSampler, amdgpu_cards
from servecheck.telemetry.nvml import NvmlBackend
from servecheck.telemetry.samplers import (
    DcgmSampler,
    NvmlSampler,
    PrometheusSampler,
    RssSampler,
    Sampler,
    SamplerSummary,
)
from servecheck.telemetry.series import TELEMETRY_DIR, load_series

if TYPE_CHECKING:
    import pandas as pd

    from servecheck.config.model import Target

SETTINGS_KEYS = (
    "metrics",
    "pid",
    "port",
    "interval_s",
    "dcgm_url",
    "nvml",
    "metrics_url",
    "device",
)
# Memory moves slowly, and NVML/DCGM/psutil calls are not free: these samplers never run faster,
# whatever ``interval_s`` says (a plan that counts their samples must use this floor).
SLOW_FLOOR_S = 1.0
SLOW_SOURCES = ("nvml", "dcgm", "rss", "amdgpu")


def real_interval(source: str, interval_s: float) -> float:
    """How often ``source``'s sampler really samples when asked for ``interval_s``."""
    return max(interval_s, SLOW_FLOOR_S) if source in SLOW_SOURCES else interval_s


class TelemetryRecorder:
    """Runs a set of samplers for one target and writes ``<run_dir>/telemetry/*.jsonl``.

    Use as a context manager::

        with TelemetryRecorder(run_dir, "http://127.0.0.1:8000/metrics", "vllm", pid=1234) as rec:
            ...  # drive load; rec.mark("cycle-1-start") if useful
        frame = rec.frame()

    Samplers started: Prometheus when ``metrics_url`` is given; NVML when ``nvml`` is true
    (default ``True``: without NVML it writes one gap and ends); DCGM when ``dcgm_url`` is
    given; RSS when ``pid`` or ``port`` is given. All share one stop event. Samplers never raise
    into the caller; :meth:`summaries` reports their sample and gap counts, also written to
    ``telemetry/summary.json`` on :meth:`stop`.
    """

    def __init__(
        self,
        run_dir: Path | str,
        metrics_url: str | None = None,
        engine: str = "generic",
        *,
        pid: int | None = None,
        port: int | None = None,
        interval_s: float = 0.5,
        metric_map: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        nvml: bool = True,
        nvml_backend: NvmlBackend | None = None,
        dcgm_url: str | None = None,
        max_duration_s: float = 7 * 24 * 3600.0,
        device: str = "auto",
        drm_root: Path | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / TELEMETRY_DIR
        self.stop_event = threading.Event()
        self._started = False
        self._summaries: list[SamplerSummary] = []
        common: dict[str, Any] = {"stop_event": self.stop_event, "max_duration_s": max_duration_s}
        slow = real_interval("rss", interval_s)
        self.samplers: list[Sampler] = []
        if metrics_url:
            self.samplers.append(
                PrometheusSampler(
                    self.dir / "prometheus.jsonl",
                    metrics_url,
                    engine,
                    metric_map=metric_map,
                    headers=headers,
                    interval_s=interval_s,
                    **common,
                )
            )
        if nvml:
            self.samplers.append(
                NvmlSampler(
                    self.dir / "nvml.jsonl",
                    backend=nvml_backend,
                    interval_s=slow,
                    pid=pid,
                    port=port,
                    **common,
                )
            )
        if _wants_amdgpu(device, drm_root):
            self.samplers.append(
                AmdgpuSampler(
                    self.dir / "amdgpu.jsonl", root=drm_root or DRM_ROOT, interval_s=slow, **common
                )
            )
        if dcgm_url:
            self.samplers.append(
                DcgmSampler(self.dir / "dcgm.jsonl", dcgm_url, interval_s=slow, **common)
            )
        if pid is not None or port is not None:
            self.samplers.append(
                RssSampler(
                    self.dir / "rss.jsonl",
                    pid=pid,
                    port=port,
                    interval_s=slow,
                    **common,
                )
            )

    @classmethod
    def for_target(
        cls,
        target: Target,
        run_dir: Path | str,
        settings: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> TelemetryRecorder:
        """A recorder for a ``targets.yaml`` target.

        ``settings`` is the target's ``telemetry`` block as a plain dict: ``metrics``
        (canonical -> sample name), ``pid``, ``port``, ``interval_s``, ``dcgm_url``, ``nvml``,
        ``metrics_url``. The metrics URL is, in order: ``settings.metrics_url``, the target's
        ``metrics_url``, ``<server root>/metrics``. The target's auth headers are sent (some
        proxies guard /metrics). Raises :class:`UsageError` on an unknown settings key.
        """
        url, kwargs = _target_kwargs(target, settings, overrides)
        # A gateway's metrics_url may point at its upstream engine: read that engine's names.
        return cls(run_dir, url, target.metrics_engine or target.engine, **kwargs)

    @staticmethod
    def intervals_for(
        target: Target, settings: Mapping[str, Any] | None = None, **overrides: Any
    ) -> dict[str, float]:
        """Source -> real sampling interval of each sampler :meth:`for_target` would start with
        the same arguments (nothing is started): for a plan to count the samples it will get."""
        url, kw = _target_kwargs(target, settings, overrides)
        wanted = {
            "prometheus": bool(url),
            "nvml": bool(kw.get("nvml", True)),
            "dcgm": bool(kw.get("dcgm_url")),
            "rss": kw.get("pid") is not None or kw.get("port") is not None,
            "amdgpu": _wants_amdgpu(str(kw.get("device", "auto")), kw.get("drm_root")),
        }
        interval = float(kw.get("interval_s", 0.5))
        return {src: real_interval(src, interval) for src, on in wanted.items() if on}

    def start(self) -> TelemetryRecorder:
        """Start every sampler thread."""
        if self._started:
            raise RuntimeError("TelemetryRecorder already started")
        self._started = True
        self.dir.mkdir(parents=True, exist_ok=True)
        for sampler in self.samplers:
            sampler.start()
        return self

    def wait_ready(self, timeout_s: float = 10.0) -> bool:
        """Wait until every sampler has taken its first sample (or given up on its source).

        Call it before the idle baseline starts: the first scrape pays for imports and a TCP
        connection. Returns False when ``timeout_s`` passed first.
        """
        deadline = time.monotonic() + timeout_s
        return all(s.ready.wait(max(0.0, deadline - time.monotonic())) for s in self.samplers)

    def mark(self, name: str, **labels: str) -> None:
        """Write a phase marker (``telemetry/markers.jsonl``: t, t_mono, name, labels)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        row = {"t": time.time(), "t_mono": time.monotonic(), "name": name, "labels": labels}
        with (self.dir / "markers.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")

    def stop(self, timeout_s: float = 5.0) -> list[SamplerSummary]:
        """Stop all samplers (waiting up to ``timeout_s`` in all), write and return summaries."""
        self.stop_event.set()
        deadline = time.monotonic() + timeout_s
        self._summaries = [s.stop(max(0.0, deadline - time.monotonic())) for s in self.samplers]
        if self._started:
            path = self.dir / "summary.json"
            path.write_text(json.dumps([s.to_dict() for s in self._summaries], indent=2) + "\n")
        return self._summaries

    def summaries(self) -> list[SamplerSummary]:
        """Summaries now (live counts while running, final ones after :meth:`stop`)."""
        return [s.summary() for s in self.samplers]

    def frame(self) -> pd.DataFrame:
        """Everything recorded so far as one long DataFrame (see :func:`load_series`)."""
        return load_series(self.dir)

    def __enter__(self) -> TelemetryRecorder:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _target_kwargs(
    target: Target, settings: Mapping[str, Any] | None, overrides: Mapping[str, Any]
) -> tuple[str, dict[str, Any]]:
    """The metrics URL and the recorder's keyword arguments for ``target`` (see ``for_target``)."""
    cfg = dict(settings or {})
    for key in cfg:
        if key not in SETTINGS_KEYS:
            raise UsageError(
                f"targets.yaml: {target.name}.telemetry.{key}: unknown key"
                f"{did_you_mean(key, SETTINGS_KEYS)}; known: {', '.join(SETTINGS_KEYS)}"
            )
    url = cfg.get("metrics_url") or target.metrics_url or target.server_root + "/metrics"
    kwargs: dict[str, Any] = {
        "pid": cfg.get("pid"),
        "port": cfg.get("port"),
        "interval_s": float(cfg.get("interval_s", 0.5)),
        "metric_map": cfg.get("metrics"),
        "headers": {**target.headers, **target.auth_headers()},
        "nvml": bool(cfg.get("nvml", True)),
        "dcgm_url": cfg.get("dcgm_url"),
        "device": str(cfg.get("device", "auto")),
    }
    kwargs.update(overrides)
    return url, kwargs


def _wants_amdgpu(device: str, drm_root: Path | None) -> bool:
    """The amdgpu sampler runs where an amdgpu card shows its counters, or where the target
    declares an AMD GPU (then its absence is a gap that says why)."""
    if device == "none":
        return False
    return device == "amd" or bool(amdgpu_cards(drm_root or DRM_ROOT))


def load_markers(run_dir: Path | str) -> pd.DataFrame:
    """Markers written by :meth:`TelemetryRecorder.mark`: columns t, t_mono, name, labels."""
    path = Path(run_dir) / TELEMETRY_DIR / "markers.jsonl"
    rows: list[dict[str, Any]] = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    import pandas as pd  # here, not at import: a load run's recorder never needs it

    return pd.DataFrame(rows, columns=["t", "t_mono", "name", "labels"])
