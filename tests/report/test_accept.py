"""``servecheck accept`` end to end against the embedded reference server (a short run)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from servecheck.cli import main


def test_accept_runs_all_stages_and_fails_on_a_breached_slo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Readiness and the HEALTH checks pass; an impossible SLO fails the smoke load, so exit 1."""
    for var in ("SERVECHECK_REF_URL", "SERVECHECK_REF_API_KEY", "SERVECHECK_REF_METRICS_URL"):
        monkeypatch.delenv(var, raising=False)
    code = main(
        [
            "accept",
            "--target",
            "reference",
            "--smoke-duration",
            "2s",
            "-n",
            "0",
            "--surface",
            "health",
            "--slo",
            "ttft_p50<=0.001ms",
            "--ready-timeout",
            "30s",
            "--out",
            str(tmp_path),
            "--run-id",
            "acc",
        ]
    )
    run = tmp_path / "acc"
    data = json.loads((run / "accept.json").read_text())
    assert code == 1
    console = capsys.readouterr()
    said = " ".join((console.out + console.err).split())  # rich wraps long lines
    assert "load FAILED (fail: SLO breached: ttft_p50<=0.001ms" in said, said
    assert data["stages"]["ready"]["ok"] and data["stages"]["conformance"]["ok"], data["stages"]
    assert not data["stages"]["load"]["ok"]
    assert {
        "accept.json",
        "junit.xml",
        "report.html",
        "summary.md",
        "allure-results",
        "conformance",
        "load",
    } <= {p.name for p in run.iterdir()}
    junit = ET.parse(run / "junit.xml").getroot()
    names = {tc.get("name"): tc for tc in junit.iter("testcase")}
    assert "readiness" in names and names["SLO ttft_p50<=0.001ms"].find("failure") is not None
    assert any("HEALTH-" in n for n in names), "the conformance cases are merged in"
    slo_results = [
        json.loads(p.read_text()) for p in (run / "allure-results").glob("*-result.json")
    ]
    assert any(
        r["name"] == "SLO ttft_p50<=0.001ms" and r["status"] == "failed" for r in slo_results
    )
    page = (run / "report.html").read_text()
    assert "Smoke load" in page and "Conformance" in page and page.count("<svg") >= 3
    assert "ttft_p50&lt;=0.001ms" in page
    key = next(
        (
            line
            for line in (run / "reference-server.log").read_text().splitlines()
            if "sk-ref-" in line
        ),
        None,
    )
    assert key is None, "the embedded server's key must not be logged"


def test_accept_stops_when_the_target_never_gets_ready(tmp_path: Path) -> None:
    """Nothing listens: readiness fails within its bound, no catalogue or load runs, exit 1."""
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing answers there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    targets = tmp_path / "targets.yaml"
    targets.write_text(
        f"targets:\n  - name: down\n    base_url: http://127.0.0.1:{port}/v1\n    models: [m]\n",
        encoding="utf-8",
    )
    code = main(
        [
            "accept",
            "--target",
            "down",
            "--targets-file",
            str(targets),
            "--ready-timeout",
            "1s",
            "--out",
            str(tmp_path),
            "--run-id",
            "acc",
        ]
    )
    data = json.loads((tmp_path / "acc" / "accept.json").read_text())
    assert code == 1
    assert list(data["stages"]) == ["ready"] and data["stages"]["ready"]["state"] == "down"
    assert "nothing answers at" in (tmp_path / "acc" / "report.html").read_text()
    junit = ET.parse(tmp_path / "acc" / "junit.xml").getroot()
    assert [tc.get("name") for tc in junit.iter("testcase")] == ["readiness", "accept run verdict"]


def _down_targets(tmp_path: Path) -> Path:
    from servecheck.reference.hostile import closed_port

    targets = tmp_path / "targets.yaml"
    targets.write_text(
        f"targets:\n  - name: down\n    base_url: http://127.0.0.1:{closed_port()}/v1\n"
        "    models: [m]\n",
        encoding="utf-8",
    )
    return targets


def _accept_cmd(tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "servecheck", "accept", "--out", str(tmp_path), *args]


def test_accept_says_target_down_at_once_when_nothing_listens(tmp_path: Path) -> None:
    """Issue 41 item 2: against a target where nothing accepts a connection, accept said
    nothing and waited out its 300 s readiness limit. Without an asked-for wait
    (``--ready-timeout``) a closed port is "target down" at once, as for check and load."""
    targets = _down_targets(tmp_path)
    cmd = _accept_cmd(tmp_path, "--target", "down", "--targets-file", str(targets))
    # a generous guard, far below the 300 s it used to wait
    done = subprocess.run(
        [*cmd, "--run-id", "acc"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 1, done.stdout + done.stderr
    ready = json.loads((tmp_path / "acc" / "accept.json").read_text())["stages"]["ready"]
    assert ready["state"] == "down" and ready["detail"].startswith("target down: "), ready
    said = " ".join(done.stderr.split())  # rich wraps long lines
    assert "readiness: down: target down: cannot connect to 127.0.0.1:" in said, said
    assert "--ready-timeout TIME waits for it to come up" in said, said  # how to wait instead


def test_accept_says_what_readiness_waits_for_while_it_waits(tmp_path: Path) -> None:
    """Issue 41 item 2: asked to wait (``--ready-timeout 12s``), accept said nothing until the
    end. It names the state and the seconds waited of the limit as it goes, a line at least
    every 10 s (the polls back off to 5 s apart)."""
    targets = _down_targets(tmp_path)
    cmd = _accept_cmd(tmp_path, "--target", "down", "--targets-file", str(targets))
    done = subprocess.run(
        [*cmd, "--run-id", "acc", "--ready-timeout", "12s"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    waits = re.findall(r"readiness: waiting \(down, (\d+) s of 12 s\): nothing answers at", said)
    assert len(waits) >= 2 and waits[0] == "0", said
    assert "readiness: down: nothing answers at" in said, said


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "code"),
    [
        pytest.param(signal.SIGINT, 130, id="sigint"),
        pytest.param(signal.SIGTERM, 143, id="sigterm"),
    ],
)
def test_an_interrupted_accept_writes_a_partial_report(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    """Issue 41 item 2: an interrupted accept left an empty report folder. It writes
    accept.json, junit.xml and the page for what ran, marked partial and INCONCLUSIVE (not a
    FAIL: nothing was found wrong), names the stage it cut short, and exits 130 / 143."""
    from tests.hostile.support import communicate, wait_for, with_sigint

    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVECHECK_REF_")}
    # with_sigint: a background test run (nohup make test &) passes SIGINT on ignored.
    proc = subprocess.Popen(
        with_sigint(
            _accept_cmd(tmp_path, "--run-id", "acc", "--no-load", "--surface", "stream", "-n", "0")
            + ["--reference-arg=--ttft-ms=3000"]
        ),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    run = tmp_path / "acc"
    try:
        results = run / "conformance" / "results.jsonl"
        wait_for(lambda: results.exists() and results.stat().st_size > 0, "a first check")
        proc.send_signal(sig)
        stdout, stderr = communicate(proc, 120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, stdout + stderr
    data = json.loads((run / "accept.json").read_text())
    assert data["partial"] is True and data["verdict"] == "inconclusive", data
    assert data["interrupted"] == sig.name and data["exit_code"] == code, data
    assert data["stages"]["ready"]["ok"] is True, data["stages"]
    stage = data["stages"]["conformance"]
    assert stage["interrupted"] is True and f"interrupted by {sig.name}" in stage["detail"], stage
    page = (run / "report.html").read_text()
    assert "PARTIAL: accept was interrupted" in page and "INTERRUPTED" in page, page[:3000]
    assert "PARTIAL: the run was interrupted" in page  # the conformance part says so too
    assert (run / "summary.md").exists() and (run / "junit.xml").exists()
    said = " ".join(stderr.split())
    assert "servecheck accept: PARTIAL" in said and "during conformance" in said, said
