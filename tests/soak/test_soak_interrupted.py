"""An interrupted ``servecheck soak`` (Ctrl-C, or SIGTERM from a CI job's cancel) keeps what it
measured and says so: soak.json, report.html and junit.xml for what finished, marked partial, and
never a pass. A leak the finished cycles already show still fails the run.

Each test waits for the event it needs (finished requests, a cycle's marker), never for a time.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from servecheck.reference.inprocess import RunningServer
from tests.hostile.support import communicate, wait_for, with_sigint
from tests.soak.support import write_targets

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
# 200 cycles of 1.5 s load and 1 s idle: far longer than any test waits.
LONG = ["--cycles", "200", "--cycle", "1.5s", "--idle", "1s", "--settle", "0.4s"]
LONG += ["--interval", "0.1s", "--concurrency", "3", "--max-tokens", "40", "--no-progress"]


@contextlib.contextmanager
def _soak(
    server: RunningServer, tmp_path: Path, *args: str
) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """``servecheck soak`` on ``server`` with the long plan: the process and its run folder;
    killed if the test leaves it running."""
    targets = write_targets(tmp_path, server.base_url, server.root)
    out = tmp_path / "reports"
    cmd = [sys.executable, "-m", "servecheck", "soak", "--target", "ref"]
    cmd += ["--targets-file", str(targets), "--out", str(out), "--run-id", "cut", *LONG, *args]
    proc = subprocess.Popen(
        with_sigint(cmd), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        yield proc, out / "cut"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _records(run_dir: Path) -> int:
    path = run_dir / "records.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _loads_started(run_dir: Path) -> int:
    """How many load phases have begun (their markers in telemetry/markers.jsonl)."""
    path = run_dir / "telemetry" / "markers.jsonl"
    if not path.exists():
        return 0
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
    return sum(1 for r in rows if r["name"] == "load")


def _junit(run_dir: Path) -> tuple[ET.Element, dict[str, str | None], dict[str, ET.Element]]:
    root = ET.parse(run_dir / "junit.xml").getroot()
    props = {p.get("name") or "": p.get("value") for p in root.iter("property")}
    return root, props, {c.get("name") or "": c for c in root.iter("testcase")}


@pytest.mark.parametrize(
    "sig", [pytest.param(signal.SIGTERM, id="sigterm"), pytest.param(signal.SIGINT, id="sigint")]
)
def test_interrupted_soak_writes_its_files_marked_partial_and_inconclusive(
    make_reference: Callable[..., RunningServer], tmp_path: Path, sig: int
) -> None:
    server = make_reference(kv_blocks=64, ttft_ms=5, itl_ms=5)
    with _soak(server, tmp_path, "--no-rss") as (proc, run_dir):
        wait_for(lambda: _records(run_dir) >= 5, "five finished requests")
        proc.send_signal(sig)
        stdout, stderr = communicate(proc, 90)
    name = signal.Signals(sig).name
    assert proc.returncode == 128 + sig, stdout + stderr
    assert "Traceback" not in stderr, stderr
    data = json.loads((run_dir / "soak.json").read_text())
    assert data["partial"] is True and data["verdict"] == "inconclusive", data["failures"]
    assert data["ok"] is False and data["exit_code"] == 1
    assert data["failures"][0].startswith(f"partial run: interrupted by {name} after "), data
    assert "of 200 cycles finished" in data["failures"][0]
    assert (run_dir / "report.html").is_file() and _records(run_dir) >= 5
    root, props, cases = _junit(run_dir)
    assert props.get("servecheck_partial") == "true", props
    error = cases["interrupted"].find("error")
    assert error is not None and error.get("type") == "interrupted"
    assert error.get("message", "").startswith(f"partial run: interrupted by {name} after ")
    assert cases["soak run verdict"].find("failure") is not None  # inconclusive: never a pass
    assert int(root.get("errors") or 0) >= 1
    assert f"INCONCLUSIVE partial run: interrupted by {name}" in stdout, stdout
    assert f"report (partial): {run_dir} (soak.json, junit.xml, report.html)" in stdout, stdout
    assert f"records: {run_dir / 'records.jsonl'}" in stdout, stdout


def test_interrupted_soak_still_fails_on_a_leak_its_finished_cycles_show(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """kv-leak keeps the KV blocks of every dropped stream: the finished cycles already show
    KV usage climbing after each drain, and the cut run says leak, not only 'interrupted'."""
    server = make_reference("kv-leak", kv_blocks=64, ttft_ms=5, itl_ms=5)
    with _soak(server, tmp_path, "--no-rss", "--abandon") as (proc, run_dir):
        # The 9th load has begun: 8 cycles' drains finished (the leak test needs 5; the rest is
        # margin for a cycle a loaded machine leaves with a gap in its drain samples).
        wait_for(lambda: _loads_started(run_dir) >= 9, "eight finished cycles", bound_s=120)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = communicate(proc, 90)
    assert proc.returncode == 128 + signal.SIGTERM, stdout + stderr
    data = json.loads((run_dir / "soak.json").read_text())
    assert data["partial"] is True and data["verdict"] == "fail", data["failures"]
    assert data["leak"]["kv_usage"]["status"] == "leak", data["leak"]["kv_usage"]["message"]
    assert data["leak"]["kv_usage"]["cycles_used"] >= 5
    assert data["failures"][0].startswith("partial run: interrupted by SIGTERM"), data
    assert "kv_usage: leak" in data["failures"]
    _, props, cases = _junit(run_dir)
    assert props.get("servecheck_partial") == "true"
    assert cases["leak kv_usage"].find("failure") is not None
    assert "FAIL kv_usage: leak" in stdout, stdout


def test_interrupted_clean_soak_with_enough_cycles_is_still_not_a_pass(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """Eight clean finished cycles give an OK kv_usage verdict, but the run was cut:
    INCONCLUSIVE (exit 143), whatever the finished part says."""
    server = make_reference(kv_blocks=64, ttft_ms=5, itl_ms=5)
    with _soak(server, tmp_path, "--no-rss") as (proc, run_dir):
        wait_for(lambda: _loads_started(run_dir) >= 9, "eight finished cycles", bound_s=120)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = communicate(proc, 90)
    assert proc.returncode == 128 + signal.SIGTERM, stdout + stderr
    data = json.loads((run_dir / "soak.json").read_text())
    assert data["leak"]["kv_usage"]["status"] == "ok", data["leak"]["kv_usage"]["message"]
    assert data["verdict"] == "inconclusive" and data["ok"] is False, data["failures"]
    _, _, cases = _junit(run_dir)
    assert cases["leak kv_usage"].find("failure") is None
    assert cases["soak run verdict"].find("failure") is not None
