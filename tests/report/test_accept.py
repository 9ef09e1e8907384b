"""``servecheck accept`` end to end against the embedded reference server (a short run)."""

from __future__ import annotations

import json
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
    assert [tc.get("name") for tc in junit.iter("testcase")] == ["readiness"]
