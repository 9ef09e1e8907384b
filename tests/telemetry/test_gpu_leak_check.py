"""``scripts/gpu_leak_check.py --fake``: the prepared GPU check's whole flow on CPU (numpy model,
a FakeNvml fed by the server's cache tensors): the clean soak passes device memory, the leaking
one is a LEAK on it, and the verdict is in soak.json, summary.md and report.html."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_leak_check_runs_on_cpu_with_the_fake_backend(tmp_path: Path) -> None:
    argv = [sys.executable, str(ROOT / "scripts" / "gpu_leak_check.py"), "--fake"]
    argv += [
        "--cycles",
        "7",
        "--cycle-s",
        "2",
        "--idle-s",
        "4.5",
        "--kv-mib",
        "32",
        "--out",
        str(tmp_path),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # A guard, not a timing claim: the run takes about two minutes on two busy cores.
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS: LEAK on device memory only for the leaking run" in done.stdout
    clean = json.loads((tmp_path / "clean" / "soak.json").read_text())
    leaking = json.loads((tmp_path / "leaking" / "soak.json").read_text())
    assert clean["leak"]["nvml_used_bytes"]["status"] == "ok", clean["leak"]["nvml_used_bytes"]
    assert "flat at its preallocation" in clean["leak"]["nvml_used_bytes"]["message"]
    assert clean["verdict"] == "pass", clean["failures"]
    assert leaking["leak"]["nvml_used_bytes"]["status"] == "leak"
    assert "nvml_used_bytes: leak" in leaking["failures"] and leaking["exit_code"] == 1
    # The pool gauge does not see the kept tensors: only device (and here host) memory does.
    assert leaking["leak"]["kv_usage"]["status"] == "ok"
    assert "**nvml_used_bytes** leak: LEAK" in (tmp_path / "leaking" / "summary.md").read_text()
    assert "nvml_used_bytes" in (tmp_path / "leaking" / "report.html").read_text()


def test_gpu_leak_check_says_why_it_cannot_run(tmp_path: Path) -> None:
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a CUDA device is here: the check would run, not refuse")
    except ImportError:
        pass  # no torch: the GPU run must refuse with one line
    argv = [sys.executable, str(ROOT / "scripts" / "gpu_leak_check.py"), "--out", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.startswith("gpu_leak_check: cannot run here: ")
    assert "Traceback" not in done.stdout + done.stderr
