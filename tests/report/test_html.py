"""The HTML pages and summary.md: content, escaping and redaction."""

from __future__ import annotations

import json
import re
from pathlib import Path

from servecheck.redact import register
from servecheck.report.html import write_conformance_html, write_load_html
from tests.report.synth import synth_records, write_check_run, write_load_run

SECRET = "sk-report-test-0123456789abcdef"


def test_conformance_page_shows_failures_reasons_and_escapes(tmp_path: Path) -> None:
    register(SECRET)
    run = write_check_run(
        tmp_path / "run",
        {
            "CHAT-SHAPE": "failed",
            "STREAM-DONE": "passed",
            "TOOLS-ARGS-JSON": "nonstrict",
            "CHAT-LOGPROBS": "skipped",
        },
        messages={
            "CHAT-SHAPE": f"CHAT-SHAPE: bad body\n  Expected: an object\n  Received: <script>alert(1)</script> Bearer {SECRET}",
            "TOOLS-ARGS-JSON": "TOOLS-ARGS-JSON: non-strict: llama.cpp returns arguments as an object",
            "CHAT-LOGPROBS": "CHAT-LOGPROBS: t does not declare capability logprobs",
        },
    )
    page = write_conformance_html(run).read_text()
    assert (
        "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    )
    assert SECRET not in page
    assert "Received:" in page and "llama.cpp returns arguments as an object" in page
    assert "does not declare capability logprobs" in page
    assert "1 failed" in page and "1 nonstrict" in page and "version 1.0" in page
    md = (run / "summary.md").read_text()
    assert "FAIL `CHAT-SHAPE` (failed)" in md and SECRET not in md


def test_load_page_has_plots_slos_and_lag_flag(tmp_path: Path) -> None:
    run = write_load_run(
        tmp_path / "load",
        synth_records(120, seed=1, error_share=0.05),
        verdict="fail",
        slo=[
            {
                "slo": "ttft_p95<=10ms",
                "source": "cli",
                "metric": "ttft_p95",
                "op": "<=",
                "bound": 10.0,
                "unit": "ms",
                "observed": 61.2,
                "passed": False,
                "note": "",
            }
        ],
    )
    summary = json.loads((run / "summary.json").read_text())
    summary["schedule"]["behind"] = True
    summary["schedule"]["reasons"] = ["schedule lag p99 80 ms exceeds 25 ms"]
    (run / "summary.json").write_text(json.dumps(summary))
    page = write_load_html(run).read_text()
    svgs = re.findall(r"<svg\b.*?</svg>", page, re.S)
    assert len(svgs) == 4, "percentile bars, TTFT and ITL histograms, throughput over time"
    assert all("<path" in s for s in svgs)
    assert "Generator lag:" in page and "schedule lag p99 80 ms exceeds 25 ms" in page
    assert "ttft_p95&lt;=10ms" in page and "61.2 ms" in page
    assert "http-503" in page
    assert 'src="http' not in page and "<link" not in page and "<script" not in page, (
        "the page must be self-contained"
    )
    md = (run / "summary.md").read_text()
    assert "FAIL `ttft_p95<=10ms` observed 61.2 ms" in md and "generator lag" in md


def test_empty_run_folder_still_renders(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    assert "No check results were recorded" in write_conformance_html(tmp_path / "r").read_text()
    assert "No load summary" in write_load_html(tmp_path / "r").read_text()
