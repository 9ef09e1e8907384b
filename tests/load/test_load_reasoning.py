"""``servecheck load`` on a reasoning target reports both first-token times (TTFT and TTFA)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.records.parquet import read_run_records
from servecheck.reference.inprocess import RunningServer
from servecheck.reference.reasoning import ReasoningMode

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
THINK_TOKENS = 6


def test_load_on_a_reasoning_target_reports_ttfa(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference(reasoning=ReasoningMode(tokens=THINK_TOKENS), ttft_ms=10, itl_ms=2)
    targets = tmp_path / "targets.yaml"
    targets.write_text(
        "targets:\n  - name: ref\n"
        f"    base_url: {server.base_url}\n    engine: reference\n    reasoning: auto\n"
    )
    out = tmp_path / "reports"
    cmd = [sys.executable, "-m", "servecheck", "load", "--target", "ref"]
    cmd += ["--targets-file", str(targets), "--out", str(out), "--quiet", "--no-tokenize"]
    # --allow-lag: this test judges what is measured, not whether a busy machine kept up
    cmd += ["--users", "2", "--max-requests", "8", "--slo", "ttfa_p95<=30s", "--allow-lag"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["requests"]["ok"] == 8
    assert s["latency_ms"]["ttfr"]["count"] == 8 and s["latency_ms"]["ttfa"]["count"] == 8
    assert s["tokens"]["reasoning"] == 8 * THINK_TOKENS and s["tokens"]["reasoning_requests"] == 8
    assert s["tokens"]["answer"] == s["tokens"]["output"] - 8 * THINK_TOKENS
    recs = list(read_run_records(run_dir))
    for r in recs:
        # the answer starts after all the reasoning: TTFR is the TTFT, TTFA comes no earlier
        # (equal only when a delayed read delivered the whole thought with the first answer token)
        assert r["ttfr"] == r["ttft"] <= r["ttfa"], r
        assert r["reasoning_tokens"] == r["reasoning_tokens_client"] == THINK_TOKENS
        assert len(r["itls_reasoning"]) == THINK_TOKENS - 1
        assert len(r["itls_answer"]) == r["output_tokens"] - THINK_TOKENS - 1
    text = (run_dir / "summary.txt").read_text()
    assert "ttfa " in text and "ttfr " in text and "PASS ttfa_p95<=30s" in text
    assert "TTFA (first answer token)" in (run_dir / "report.html").read_text()
