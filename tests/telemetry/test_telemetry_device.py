"""Device memory judged in the soak's leak analysis: scripted NVML (``FakeNvml``) and a fake
amdgpu sysfs tree (tmp_path) driven through the real samplers on a synthetic soak schedule,
one test per verdict: LEAK, flat at the preallocation (PASS), unreadable (INCONCLUSIVE), no
source (a note), unified memory (RSS stands in)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from servecheck.analysis.verdict import FAIL, INCONCLUSIVE, compose
from servecheck.load.soak import SoakPlan, leak_verdicts
from servecheck.telemetry import DeviceMemory, FakeNvml, NvmlSampler, Phases, ProcessMemory
from servecheck.telemetry.device import AmdgpuSampler, judge_device_memory
from servecheck.telemetry.series import Sample, SeriesWriter, load_series

GIB, MIB = 2**30, 2**20
T0 = 1_764_000_000.0
PREALLOC = 70 * GIB  # what an engine holds from its start: flat by design
Level = Callable[[int | None], float]  # cycle index (None: baseline) -> post-drain excess


def _schedule() -> tuple[Phases, np.ndarray]:
    phases = Phases.from_schedule(T0, baseline_s=10, load_s=10, drain_s=10, cycles=6)
    return phases, np.arange(T0, phases.cycles[-1].drain_end + 1e-9, 1.0)


def _excess(phases: Phases, t: float, after: Level) -> float:
    """The device memory beyond the preallocation at ``t``: ``after(i)`` from cycle i's load on."""
    level = after(None)
    for i, cycle in enumerate(phases.cycles):
        if t >= cycle.start:
            level = after(i)
    return level


def _run(
    sampler: object, tmp_path: Path, tick: Callable[[float], None]
) -> tuple[pd.DataFrame, Phases]:
    """Drive ``sampler`` over the schedule at synthetic times, through its series file."""
    phases, ts = _schedule()
    sampler.setup()  # type: ignore[attr-defined]
    writer = SeriesWriter(tmp_path / "telemetry" / "device.jsonl")
    for t in ts:
        tick(float(t))
        try:
            writer.write(sampler.sample(float(t), float(t - T0)))  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - what Sampler._loop does: a gap
            from servecheck.telemetry.series import gap_from_exception

            writer.write([gap_from_exception(float(t), float(t - T0), "nvml", exc)])
    writer.close()
    return load_series(tmp_path), phases


def _nvml(
    tmp_path: Path, after: Level, *, engine_share: float = 1.0
) -> tuple[pd.DataFrame, Phases]:
    """NVML over a soak: one H100 at the preallocation plus ``after``; the engine (this test's
    process) holds the same memory as the device."""
    me = os.getpid()
    fake = FakeNvml(device_list=[DeviceMemory(0, "NVIDIA H100", "GPU-aaaa", PREALLOC, 80 * GIB)])
    phases, _ = _schedule()
    sampler = NvmlSampler(tmp_path / "unused.jsonl", backend=fake, pid=me)

    def tick(t: float) -> None:
        used = int(PREALLOC + _excess(phases, t, after))
        fake.device_list[0].used = used
        fake.process_map[0] = [ProcessMemory(0, me, int(used * engine_share))]

    fake.init()
    return _run(sampler, tmp_path, tick)


def _plan() -> SoakPlan:
    return SoakPlan(
        model="m", cycles=6, cycle_s=10, idle_s=10, baseline_s=10, settle_s=5, concurrency=1
    )


def _judge(frame: pd.DataFrame, phases: Phases, device: str = "auto"):  # type: ignore[no-untyped-def]
    verdicts, _, stages = leak_verdicts(frame, phases, _plan(), None, None, device)
    return verdicts, compose(stages)


def test_nvml_growth_after_drain_is_a_leak(tmp_path: Path) -> None:
    frame, phases = _nvml(tmp_path, lambda i: 0.0 if i is None else 96 * MIB * (i + 1))
    verdicts, run = _judge(frame, phases)
    for name in ("nvml_used_bytes", "nvml_engine_bytes"):
        assert verdicts[name].status == "leak", verdicts[name].message
    assert verdicts["nvml_used_bytes"].message.startswith(
        "LEAK: nvml_used_bytes post-drain level rose 71776.0 MiB -> 72256.0 MiB over 6 cycles"
    )
    assert run.status == FAIL and "nvml_used_bytes: leak" in run.reasons
    assert run.exit_code == 1


def test_nvml_flat_at_the_preallocation_passes(tmp_path: Path) -> None:
    frame, phases = _nvml(tmp_path, lambda i: 0.0)
    verdicts, run = _judge(frame, phases)
    v = verdicts["nvml_used_bytes"]
    assert v.status == "ok", v.message
    assert "flat at its preallocation, the expected shape" in v.message
    assert verdicts["nvml_engine_bytes"].status == "ok"
    # The load never moved the device series: for kv_usage that is inconclusive, here the design.
    assert run.status == INCONCLUSIVE  # only because no kv_usage / requests_running was sampled
    assert all("nvml" not in r for r in run.reasons), run.reasons


def test_nvml_that_cannot_be_read_is_inconclusive_with_the_reason(tmp_path: Path) -> None:
    fake = FakeNvml(
        device_list=[DeviceMemory(0, "NVIDIA H100", "GPU-aaaa", PREALLOC, 80 * GIB)],
        fail_next=[RuntimeError("NVMLError_Unknown: Unknown Error")] * 1000,
    )
    fake.init()
    frame, phases = _run(NvmlSampler(tmp_path / "x.jsonl", backend=fake), tmp_path, lambda t: None)
    verdicts, run = _judge(frame, phases)
    v = verdicts["nvml_used_bytes"]
    assert v.status == "unreadable"
    assert v.message == (
        "UNREADABLE: nvml_used_bytes (NVML device memory used): no sample could be read "
        "(130 gap(s), last: RuntimeError: NVMLError_Unknown: Unknown Error)"
    )
    assert run.status == INCONCLUSIVE and run.exit_code != 0  # never a pass
    assert any(r.startswith("nvml_used_bytes: inconclusive: nvml_used_bytes") for r in run.reasons)


def test_engine_hidden_by_nvml_is_a_note_beside_the_judged_device(tmp_path: Path) -> None:
    # The engine's pid is not among NVML's processes (a container's PID namespace).
    frame, phases = _nvml(tmp_path, lambda i: 0.0, engine_share=0.0)
    frame = frame[frame["metric"] != "gpu_tree_mem_bytes"]  # share 0 still writes 0 bytes
    fake_gap = frame.iloc[:1].assign(
        kind="gap", metric="gap", value=math.nan, error_class="EngineNotVisible", error="hidden"
    )
    frame = pd.concat([frame, fake_gap], ignore_index=True)
    verdicts, _ = _judge(frame, phases)
    assert "nvml_engine_bytes" not in verdicts
    assert verdicts["nvml_used_bytes"].status == "ok"
    assert "nvml_engine_bytes: not judged" in verdicts["device_memory"].message
    assert "nvml_used_bytes is judged instead" in verdicts["device_memory"].message


def _sysfs(tmp_path: Path, vram: Level, gtt: Level) -> tuple[pd.DataFrame, Phases]:
    device = tmp_path / "drm" / "card0" / "device"
    device.mkdir(parents=True)
    (tmp_path / "drm" / "card0-DP-1").mkdir()  # a connector, not a card
    for name in ("mem_info_vram_used", "mem_info_gtt_used"):
        (device / name).write_text("0\n")
    phases, _ = _schedule()

    def tick(t: float) -> None:
        (device / "mem_info_vram_used").write_text(f"{int(PREALLOC + _excess(phases, t, vram))}\n")
        (device / "mem_info_gtt_used").write_text(f"{int(GIB + _excess(phases, t, gtt))}\n")

    return _run(AmdgpuSampler(tmp_path / "x.jsonl", root=tmp_path / "drm"), tmp_path, tick)


def test_amdgpu_gtt_growth_is_a_leak_and_flat_vram_passes(tmp_path: Path) -> None:
    frame, phases = _sysfs(
        tmp_path, lambda i: 0.0, lambda i: 0.0 if i is None else 64 * MIB * (i + 1)
    )
    verdicts, run = _judge(frame, phases)
    assert verdicts["amdgpu_gtt_used_bytes"].status == "leak", verdicts[
        "amdgpu_gtt_used_bytes"
    ].message
    assert verdicts["amdgpu_vram_used_bytes"].status == "ok"
    assert "amdgpu_gtt_used_bytes: leak" in run.reasons and run.status == FAIL


def test_amdgpu_flat_passes(tmp_path: Path) -> None:
    frame, phases = _sysfs(tmp_path, lambda i: 0.0, lambda i: 0.0)
    verdicts, _ = _judge(frame, phases)
    for name in ("amdgpu_vram_used_bytes", "amdgpu_gtt_used_bytes"):
        assert verdicts[name].status == "ok", verdicts[name].message


def test_amdgpu_counter_that_cannot_be_read_is_inconclusive(tmp_path: Path) -> None:
    device = tmp_path / "drm" / "card1" / "device"
    device.mkdir(parents=True)
    (device / "mem_info_vram_used").write_text("garbage\n")  # the driver's answer, not a number
    frame, phases = _run(
        AmdgpuSampler(tmp_path / "x.jsonl", root=tmp_path / "drm"), tmp_path, lambda t: None
    )
    verdicts, run = _judge(frame, phases)
    assert verdicts["amdgpu_vram_used_bytes"].status == "unreadable"
    assert "mem_info_vram_used: invalid literal" in verdicts["amdgpu_vram_used_bytes"].message
    assert run.status == INCONCLUSIVE


def test_no_device_source_is_a_note_unless_the_target_declares_a_gpu(tmp_path: Path) -> None:
    sampler = NvmlSampler(
        tmp_path / "telemetry" / "nvml.jsonl", backend=FakeNvml(fail_init="no driver")
    )
    sampler.run()  # the real thread body: one SourceUnavailable gap, then it ends
    frame = load_series(tmp_path)
    phases, _ = _schedule()
    judged = judge_device_memory(frame, phases)
    assert judged.verdicts == {} and judged.problems == []
    assert judged.notes == ["no device memory source (NVML not available: no driver)"]
    declared = judge_device_memory(frame, phases, declared="nvidia")
    assert declared.notes == []
    assert declared.problems == [
        "device memory: inconclusive: the target declares an nvidia GPU (telemetry.device) but "
        "no device memory could be read (NVML not available: no driver)"
    ]


def test_unified_memory_lets_the_engine_rss_stand_in(tmp_path: Path) -> None:
    fake = FakeNvml(device_list=[DeviceMemory(0, "NVIDIA GB10", "GPU-cccc", 0, 0, unified=True)])
    fake.init()
    frame, phases = _run(NvmlSampler(tmp_path / "x.jsonl", backend=fake), tmp_path, lambda t: None)
    assert judge_device_memory(frame, phases).problems == [
        "device memory: inconclusive: unified memory, and no RSS of the engine's process tree "
        "stands in for it (give telemetry.pid or telemetry.port)"
    ]
    rss = [
        Sample(float(t), float(t - T0), "rss", "rss_tree_bytes", float(2 * GIB + i % 3), {})
        for i, t in enumerate(_schedule()[1])
    ]
    writer = SeriesWriter(tmp_path / "telemetry" / "rss.jsonl")
    writer.write(rss)
    writer.close()
    verdicts, _ = _judge(load_series(tmp_path), phases)
    assert "rss_tree_bytes" in verdicts
    assert "process-tree RSS (rss_tree_bytes) stands in" in verdicts["device_memory"].message
    assert not any(name.startswith("nvml_") for name in verdicts)


def test_declared_none_is_not_judged(tmp_path: Path) -> None:
    frame, phases = _nvml(tmp_path, lambda i: 0.0 if i is None else 96 * MIB * (i + 1))
    verdicts, run = _judge(frame, phases, device="none")
    assert "nvml_used_bytes" not in verdicts
    assert verdicts["device_memory"].status == "note"
    assert "nvml_used_bytes: leak" not in run.reasons


def test_engine_tree_counts_child_processes_and_not_strangers(tmp_path: Path) -> None:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        me = os.getpid()
        fake = FakeNvml(
            device_list=[
                DeviceMemory(0, "NVIDIA H100", "GPU-aaaa", 50 * GIB, 80 * GIB),
                DeviceMemory(1, "NVIDIA H100", "GPU-bbbb", 9 * GIB, 80 * GIB),
            ],
            process_map={
                0: [ProcessMemory(0, me, 1 * GIB), ProcessMemory(0, child.pid, 40 * GIB)],
                1: [ProcessMemory(1, 1, 8 * GIB)],  # another tenant's process
            },
        )
        fake.init()
        records = NvmlSampler(tmp_path / "x.jsonl", backend=fake, pid=me).sample(T0, 0.0)
    finally:
        child.kill()
        child.wait(30)
    tree = [r for r in records if isinstance(r, Sample) and r.metric == "gpu_tree_mem_bytes"]
    assert [r.value for r in tree] == [41 * GIB]


def test_dcgm_framebuffer_is_judged_apart_from_nvml(tmp_path: Path) -> None:
    # Both samplers write gpu_mem_used_bytes; each source is its own series, never summed.
    nvml, phases = _nvml(tmp_path / "n", lambda i: 0.0)
    dcgm = nvml[(nvml["metric"] == "gpu_mem_used_bytes")].copy()
    dcgm["source"] = "dcgm"
    step = dcgm["t"].map(
        lambda t: _excess(phases, t, lambda i: 0.0 if i is None else 128 * MIB * (i + 1))
    )
    dcgm["value"] = dcgm["value"] + step
    verdicts, _ = _judge(pd.concat([nvml, dcgm], ignore_index=True), phases)
    assert verdicts["dcgm_fb_used_bytes"].status == "leak", verdicts["dcgm_fb_used_bytes"].message
    assert verdicts["nvml_used_bytes"].status == "ok", verdicts["nvml_used_bytes"].message
