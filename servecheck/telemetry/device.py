"""Device memory as judged series: NVML, DCGM and AMD's amdgpu sysfs counters in the leak analysis.

Engines preallocate device memory (vLLM's ``gpu_memory_utilization``, llama.cpp's buffers), so a
healthy engine's device memory is flat, at its preallocation, whatever the load: that flat
series is the expected shape (a pass). What the pool-level gauges (``kv_usage``) cannot see is
memory beyond the pool that does not come back: an offload sidecar's staging buffer, a CUDA pool
that leaks on one path, a radix cache that grows for a week. So each device series gets the
same verdict as the engine's RSS: post-drain levels across identical cycles, Theil-Sen and
Mann-Kendall (:func:`~servecheck.telemetry.leak.analyse_leak`), with ``expect_flat`` set.

The series judged (:data:`DEVICE_SERIES`) and the rules around them:

- a series with samples is judged (``leak`` fails the run);
- a source that was there but whose series could not be read (every tick a gap, or NVML
  hiding the engine's processes) is ``unreadable``: INCONCLUSIVE with the reason, never dropped.
  The engine tree's series alone unreadable while the device series is judged is a note;
- no device memory source at all (no NVML, no amdgpu counters, no DCGM URL) is a note, "no
  device memory source", unless the target declares a GPU (``telemetry.device``): then
  INCONCLUSIVE;
- unified memory (NVML without memory figures, or ``telemetry.device: unified``): the engine's
  process-tree RSS (``rss_tree_bytes``) stands in, and the note says so.

:class:`AmdgpuSampler` reads ``mem_info_vram_used`` and ``mem_info_gtt_used`` under
``/sys/class/drm/card*/device/`` (the amdgpu driver's counters, bytes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servecheck.telemetry.samplers import Sampler, SourceUnavailable
from servecheck.telemetry.series import Gap, Sample, gap_from_exception

if TYPE_CHECKING:
    import pandas as pd

    from servecheck.telemetry.leak import LeakVerdict, Phases

DRM_ROOT = Path("/sys/class/drm")
DEVICE_CHOICES = ("auto", "nvidia", "amd", "unified", "none")
AMDGPU_FILES = {
    "mem_info_vram_used": "gpu_vram_used_bytes",
    "mem_info_gtt_used": "gpu_gtt_used_bytes",
}
NOTE = "note"
UNREADABLE = "unreadable"


@dataclass(slots=True, frozen=True)
class DeviceSeries:
    """One judged device series: its name in verdicts, the sampler's source and metric."""

    name: str
    source: str
    metric: str
    what: str
    vendor: str


DEVICE_SERIES = (
    DeviceSeries(
        "nvml_used_bytes", "nvml", "gpu_mem_used_bytes", "NVML device memory used", "nvidia"
    ),
    DeviceSeries(
        "nvml_engine_bytes",
        "nvml",
        "gpu_tree_mem_bytes",
        "NVML memory of the engine's process tree",
        "nvidia",
    ),
    DeviceSeries(
        "dcgm_fb_used_bytes", "dcgm", "gpu_mem_used_bytes", "DCGM framebuffer used", "nvidia"
    ),
    DeviceSeries(
        "amdgpu_vram_used_bytes", "amdgpu", "gpu_vram_used_bytes", "amdgpu VRAM used", "amd"
    ),
    DeviceSeries("amdgpu_gtt_used_bytes", "amdgpu", "gpu_gtt_used_bytes", "amdgpu GTT used", "amd"),
)
# Secondary series: unreadable while the device series of the same source is judged is a note.
_SECONDARY = {"nvml_engine_bytes": "nvml_used_bytes"}


def amdgpu_cards(root: Path = DRM_ROOT) -> list[Path]:
    """The ``device`` folders of amdgpu cards under ``root`` (those with a VRAM counter)."""
    if not root.is_dir():
        return []
    return sorted(
        card / "device"
        for card in root.glob("card*")
        if "-" not in card.name and (card / "device" / "mem_info_vram_used").exists()
    )


class AmdgpuSampler(Sampler):
    """AMD GPUs through the amdgpu driver's sysfs counters: ``gpu_vram_used_bytes`` and
    ``gpu_gtt_used_bytes`` (labels ``gpu``: the card's name). A counter that cannot be read is a
    gap; no amdgpu card at all is :class:`SourceUnavailable` (one gap, then the sampler ends)."""

    source = "amdgpu"

    def __init__(
        self, path: Path | str, *, root: Path = DRM_ROOT, interval_s: float = 1.0, **kwargs: Any
    ) -> None:
        super().__init__(path, interval_s, **kwargs)
        self.root = root
        self.cards: list[Path] = []

    def setup(self) -> None:
        self.cards = amdgpu_cards(self.root)
        if not self.cards:
            raise SourceUnavailable(f"no amdgpu sysfs counters under {self.root}")

    def sample(self, t: float, t_mono: float) -> Sequence[Sample | Gap]:
        out: list[Sample | Gap] = []
        for device in self.cards:
            labels = {"gpu": device.parent.name}
            for file, metric in AMDGPU_FILES.items():
                try:
                    value = float(int((device / file).read_text().strip()))
                except (OSError, ValueError) as exc:
                    gap = gap_from_exception(t, t_mono, self.source, exc, prefix=f"{file}: ")
                    gap.labels = dict(labels)
                    out.append(gap)
                    continue
                out.append(Sample(t, t_mono, self.source, metric, value, dict(labels)))
        return out


@dataclass(slots=True)
class DeviceJudgement:
    """What :func:`judge_device_memory` found: a verdict per judged or unreadable series, and
    the notes (no source, unified memory, a hidden engine tree)."""

    verdicts: dict[str, LeakVerdict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # INCONCLUSIVE reasons beyond the series


def _rows(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    return frame[frame["source"] == source] if len(frame) else frame


def _unavailable(rows: pd.DataFrame) -> str | None:
    """Why the source's sampler gave up at its start (its SourceUnavailable gap), or None."""
    gaps = rows[(rows["kind"] == "gap") & (rows["error_class"] == "SourceUnavailable")]
    return None if gaps.empty else str(gaps["error"].iloc[0])


def _gap_reason(rows: pd.DataFrame, series: DeviceSeries) -> str | None:
    """Why ``series`` has gaps and no sample: its last gap's error (None: no gap of it)."""
    gaps = rows[(rows["kind"] == "gap") & (rows["error_class"] != "SourceUnavailable")]
    error = gaps["error"].fillna("").astype(str)
    if series.metric == "gpu_tree_mem_bytes":
        gaps = gaps[gaps["error_class"] == "EngineNotVisible"]
    elif series.source == "nvml":
        side = (gaps["error_class"] == "EngineNotVisible") | error.str.startswith("per-process")
        gaps = gaps[~side]
    elif series.source == "amdgpu":
        file = next(f for f, m in AMDGPU_FILES.items() if m == series.metric)
        gaps = gaps[error.str.startswith(f"{file}:")]
    if gaps.empty:
        return None
    return f"{len(gaps)} gap(s), last: {gaps['error_class'].iloc[-1]}: {gaps['error'].iloc[-1]}"


def _judge(
    frame: pd.DataFrame, phases: Phases, series: DeviceSeries, min_cycles: int
) -> LeakVerdict:
    """One device series through the leak analysis, under its own name."""
    from servecheck.telemetry.leak import analyse_leak

    rows = _rows(frame, series.source)
    keep = (rows["kind"] == "gap") | (rows["metric"] == series.metric)
    sub = rows[keep].copy()
    sub.loc[sub["kind"] != "gap", "metric"] = series.name
    return analyse_leak(
        sub,
        phases,
        series.name,
        None,
        min_cycles=min_cycles,
        expect_flat=True,
        retention_cause=(
            "an allocator pool that grew once and stayed (a caching allocator's high-water mark)"
        ),
    )


def _unreadable(series: DeviceSeries, why: str) -> LeakVerdict:
    from servecheck.telemetry.leak import LeakVerdict

    return LeakVerdict(
        UNREADABLE,
        series.name,
        f"UNREADABLE: {series.name} ({series.what}): no sample could be read ({why})",
        math.nan,
    )


def _has_samples(rows: pd.DataFrame, metric: str) -> bool:
    return bool(((rows["kind"] == "sample") & (rows["metric"] == metric)).any())


def judge_device_memory(
    frame: pd.DataFrame, phases: Phases, *, declared: str = "auto", min_cycles: int = 5
) -> DeviceJudgement:
    """Judge every device memory series the run sampled (see the module docstring)."""
    out = DeviceJudgement()
    if declared == "none":
        out.notes.append("device memory: not judged (telemetry.device: none)")
        return out
    unified = declared == "unified" or _has_samples(_rows(frame, "nvml"), "gpu_unified_memory")
    if unified:
        _unified(frame, out)
        return out
    absent: list[str] = []
    for series in DEVICE_SERIES:
        rows = _rows(frame, series.source)
        if _has_samples(rows, series.metric):
            out.verdicts[series.name] = _judge(frame, phases, series, min_cycles)
            continue
        why = _gap_reason(rows, series) if len(rows) else None
        if why is None:
            reason = _unavailable(rows) if len(rows) else None
            if reason and reason not in absent:
                absent.append(reason)
            continue
        main = _SECONDARY.get(series.name)
        if main is not None and main in out.verdicts:
            out.notes.append(
                f"{series.name}: not judged, {series.what} could not be read ({why}); "
                f"{main} is judged instead"
            )
        else:
            out.verdicts[series.name] = _unreadable(series, why)
    if not out.verdicts:
        _no_source(out, declared, absent)
    return out


def _no_source(out: DeviceJudgement, declared: str, absent: list[str]) -> None:
    tried = "; ".join(absent) or "no device sampler ran"
    if declared in ("nvidia", "amd"):
        out.problems.append(
            f"device memory: inconclusive: the target declares an {declared} GPU "
            f"(telemetry.device) but no device memory could be read ({tried})"
        )
    else:
        out.notes.append(f"no device memory source ({tried})")


def _unified(frame: pd.DataFrame, out: DeviceJudgement) -> None:
    has_rss = _has_samples(_rows(frame, "rss"), "rss_tree_bytes")
    if has_rss:
        out.notes.append(
            "unified memory: device memory is host memory here, so the engine's process-tree RSS "
            "(rss_tree_bytes) stands in for it"
        )
    else:
        out.problems.append(
            "device memory: inconclusive: unified memory, and no RSS of the engine's process "
            "tree stands in for it (give telemetry.pid or telemetry.port)"
        )


__all__ = [
    "AMDGPU_FILES",
    "DEVICE_CHOICES",
    "DEVICE_SERIES",
    "AmdgpuSampler",
    "DeviceJudgement",
    "DeviceSeries",
    "amdgpu_cards",
    "judge_device_memory",
]
