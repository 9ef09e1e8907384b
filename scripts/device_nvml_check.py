#!/usr/bin/env python3
"""Device check for the NVML sampler: does it see a ~2 GiB torch allocation come and go?

Run once on a machine with an NVIDIA GPU, torch and pynvml (nothing else from servecheck's
dependencies is needed)::

    python scripts/device_nvml_check.py            # 2 GiB on cuda:0, 2 s per phase
    python scripts/device_nvml_check.py --gib 4 --device 1 --out /tmp/nvml-check

Phases: *baseline* (CUDA context already created, so it is not counted as the allocation),
*allocated* (``torch.empty`` of ``--gib`` GiB, touched), *freed* (deleted and
``torch.cuda.empty_cache()``). The NVML sampler runs throughout and writes ``nvml.jsonl``;
the script prints the median used memory per phase for the device and for this process and
exits 0 when the allocation shows up within 10% (+64 MiB) and goes away to within 64 MiB,
1 when not, 2 when there is no CUDA device or NVML.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from servecheck.telemetry.samplers import NvmlSampler  # noqa: E402

MIB = 2**20
PHASES = ("baseline", "allocated", "freed")


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / MIB:,.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--gib", type=float, default=2.0, metavar="N", help="GiB to allocate (default: 2)"
    )
    parser.add_argument(
        "--device", type=int, default=0, metavar="I", help="CUDA device index (default: 0)"
    )
    parser.add_argument(
        "--hold", type=float, default=2.0, metavar="S", help="seconds per phase (default: 2)"
    )
    parser.add_argument(
        "--interval", type=float, default=0.2, metavar="S", help="sampling interval (default: 0.2)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="where nvml.jsonl goes (default: a temp dir)",
    )
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device visible to torch")
        return 2
    dev = torch.device(f"cuda:{args.device}")
    torch.zeros(1, device=dev)  # create the CUDA context before the baseline
    torch.cuda.synchronize(dev)
    uuid = str(getattr(torch.cuda.get_device_properties(dev), "uuid", "") or "")

    out = args.out or Path(tempfile.mkdtemp(prefix="nvml-check-"))
    path = out / "nvml.jsonl"
    if path.exists():
        path.unlink()
    sampler = NvmlSampler(
        path, interval_s=args.interval, max_duration_s=10 * args.hold + 60
    ).start()
    starts: dict[str, float] = {}
    reserved: dict[str, int] = {}
    settle = min(0.5, args.hold / 3)

    starts["baseline"] = time.time()
    reserved["baseline"] = torch.cuda.memory_reserved(dev)
    time.sleep(args.hold)

    block = torch.empty(int(args.gib * 2**30), dtype=torch.uint8, device=dev)
    block.fill_(1)  # touch it
    torch.cuda.synchronize(dev)
    starts["allocated"] = time.time()
    reserved["allocated"] = torch.cuda.memory_reserved(dev)
    time.sleep(args.hold)

    del block
    torch.cuda.synchronize(dev)
    torch.cuda.empty_cache()
    starts["freed"] = time.time()
    reserved["freed"] = torch.cuda.memory_reserved(dev)
    time.sleep(args.hold)
    end = time.time()
    summary = sampler.stop()

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    gaps = [r for r in rows if r["kind"] == "gap"]
    samples = [r for r in rows if r["kind"] == "sample"]
    print(
        f"sampler: {summary.samples} records in {summary.ticks} ticks, {summary.gaps} gap(s), "
        f"stopped by {summary.stopped}; series in {path}"
    )
    if summary.stopped == "unavailable":
        print(gaps[0]["error"] if gaps else "NVML not available")
        return 2
    for gap in gaps[:5]:
        print(f"gap: {gap['error_class']}: {gap['error']}")

    bounds = {
        name: (starts[name] + settle, ([starts[n] for n in PHASES[i + 1 :]] or [end])[0])
        for i, name in enumerate(PHASES)
    }

    def phase_median(metric: str, phase: str, **labels: str) -> float | None:
        lo, hi = bounds[phase]
        return _median(
            [
                float(r["value"])
                for r in samples
                if r["metric"] == metric
                and lo <= r["t"] <= hi
                and all(r["labels"].get(k) == v for k, v in labels.items())
            ]
        )

    gpus = sorted({r["labels"]["gpu"] for r in samples if r["metric"] == "gpu_mem_used_bytes"})
    by_uuid = {
        r["labels"]["gpu"]: r["labels"].get("uuid", "")
        for r in samples
        if r["metric"] == "gpu_mem_used_bytes"
    }
    chosen = next((g for g, u in by_uuid.items() if uuid and uuid.replace("GPU-", "") in u), None)
    if chosen is None and gpus:  # no UUID from torch: the GPU whose usage moved most

        def moved(g: str) -> float:
            a, b = (
                phase_median("gpu_mem_used_bytes", "allocated", gpu=g),
                phase_median("gpu_mem_used_bytes", "baseline", gpu=g),
            )
            return (a or 0.0) - (b or 0.0)

        chosen = max(gpus, key=moved)
    if chosen is None:
        print("no gpu_mem_used_bytes samples")
        return 1
    pid = str(os.getpid())
    print(
        f"\nGPU {chosen} ({by_uuid.get(chosen, '?')}), this pid {pid}, allocation {args.gib:g} GiB\n"
    )
    print(
        f"{'phase':<10} {'device used MiB':>16} {'this process MiB':>17} {'torch reserved MiB':>19}"
    )
    used: dict[str, float | None] = {}
    for phase in PHASES:
        used[phase] = phase_median("gpu_mem_used_bytes", phase, gpu=chosen)
        mine = phase_median("gpu_proc_mem_bytes", phase, gpu=chosen, pid=pid)
        print(f"{phase:<10} {_mib(used[phase]):>16} {_mib(mine):>17} {_mib(reserved[phase]):>19}")
    pids = sorted({r["labels"]["pid"] for r in samples if r["metric"] == "gpu_proc_mem_bytes"})
    print(
        f"\nprocesses NVML reported on any GPU: {', '.join(pids) or 'none (containers often hide them)'}"
    )

    base, alloc, freed = used["baseline"], used["allocated"], used["freed"]
    if base is None or alloc is None or freed is None:
        print("FAIL: a phase has no samples")
        return 1
    want = args.gib * 2**30
    grew, back = alloc - base, freed - base
    ok_grew = 0.9 * want <= grew <= 1.1 * want + 64 * MIB
    ok_back = abs(back) <= 64 * MIB
    print(
        f"allocation seen: +{grew / MIB:,.0f} MiB (want {want / MIB:,.0f} +/- 10%): {'ok' if ok_grew else 'FAIL'}"
    )
    print(
        f"after free: {back / MIB:+,.0f} MiB from baseline (want within 64 MiB): {'ok' if ok_back else 'FAIL'}"
    )
    return 0 if ok_grew and ok_back and not gaps else 1


if __name__ == "__main__":
    sys.exit(main())
