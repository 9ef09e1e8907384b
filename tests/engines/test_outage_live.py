"""An outage on a real engine: the test's own llama.cpp (``llama-server`` with the tiny GGUF, as
``servecheck engine up llamacpp`` launches it, on a port of its own, never the shared 8021) is
stopped mid-run and started again; the load rides it out (analysis/outage.py) and reports the
window, what failed, the time to recover and the requests lost.

Skips when the llama-server binary or the tiny model is not in the cache (the lead's engine
bring-up builds them: ``servecheck engine up llamacpp``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from servecheck.engines.llamacpp import LlamaCpp
from servecheck.records.record import LOST
from tests.hostile.support import load_cmd

PORT = int(os.environ.get("SERVECHECK_OUTAGE_LLAMACPP_PORT", "8691"))


def _plan() -> list[str]:
    engine = LlamaCpp()
    if not engine.binary.is_file():
        pytest.skip(f"llama-server is not built ({engine.binary}): servecheck engine up llamacpp")
    try:
        argv = engine.plan(PORT).argv
    except Exception as exc:  # noqa: BLE001 - the tiny model not cached: a skip that says so
        pytest.skip(f"the tiny model is not available: {exc}")
    if "--api-key" in argv:  # our own instance: no key to carry into the load's targets file
        i = argv.index("--api-key")
        del argv[i : i + 2]
    return argv


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{PORT}/health", timeout=2.0).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    _stop(proc)
    pytest.fail(f"llama-server did not become ready on {PORT}: {log.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


@pytest.mark.slow
@pytest.mark.engine("llamacpp")
def test_llamacpp_restart_mid_run(tmp_path: Path) -> None:
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", PORT)) == 0:
            pytest.skip(f"port {PORT} is in use; set SERVECHECK_OUTAGE_LLAMACPP_PORT")
    argv = _plan()
    log = tmp_path / "llama-server.log"
    proc = _start(argv, log)
    targets = tmp_path / "targets.yaml"
    targets.write_text(
        "targets:\n  - name: own-llamacpp\n"
        f"    base_url: http://127.0.0.1:{PORT}/v1\n    engine: llamacpp\n    timeout_s: 30\n"
        "    context_length: 512\n"
    )
    out = tmp_path / "reports"
    cmd = load_cmd(
        targets, out, "--rate", "3", "--duration", "40s", "--output-tokens", "16",
        "--error-budget", "90%", "--allow-lag", "--records", "all", target="own-llamacpp",
        tokenize=True,
    )  # fmt: skip
    load = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timeline: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 90
        while not list(out.glob("*/records-*.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(4.0)
        timeline["stopped"] = time.time()
        _stop(proc)
        time.sleep(3.0)
        timeline["restarting"] = time.time()
        proc = _start(argv, log)
        timeline["ready"] = time.time()
        stdout, _ = load.communicate(timeout=180)
    finally:
        if load.poll() is None:
            load.kill()
        _stop(proc)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    s: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    outages = s["outages"]
    print(json.dumps({"timeline": timeline, "outages": outages, "verdict": s["verdict"]}))
    assert outages["count"] == 1, (outages, stdout[-3000:])
    (w,) = outages["windows"]
    assert w["recovered"], w
    assert w["failures"].get("connect", 0) >= 3 and w["failures"].get(LOST, 0) > 0, w
    assert w["recover_s"] >= 3.0, w  # it was down at least as long as the test kept it down
    assert s["requests"]["ok"] > 0
    assert set(w["failures"]) <= {"connect", "stream-error", LOST}, w  # refused while it was down
    assert s["verdict"] == "inconclusive" and load.returncode == 1, s["reasons"]
