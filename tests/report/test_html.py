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


def test_a_partial_check_page_says_partial_and_never_a_made_up_not_run_count(
    tmp_path: Path,
) -> None:
    """Issue 41 items 4/6: an interrupted check's page read a missing not-run count as "0
    check(s) did not run" under a bare FAIL badge. The count is given when known, "unknown"
    when not, and the badge says PARTIAL as the console does; the JUnit mark of a run whose
    pytest was killed before its summary says unknown too."""
    from servecheck.workflows.conformance import mark_partial

    known = write_check_run(tmp_path / "known", {"HEALTH-OK": "passed"})
    data = json.loads((known / "summary.json").read_text())
    (known / "summary.json").write_text(json.dumps({**data, "partial": True, "not_run": 115}))
    page = write_conformance_html(known).read_text()
    assert "PARTIAL: the run was interrupted; 115 check(s) did not run." in page, page
    assert re.search(r'class="badge verdict[^"]*">PARTIAL<', page), page

    killed = tmp_path / "killed"  # pytest killed: results.jsonl, no summary.json
    killed.mkdir()
    row = {"check": "HEALTH-OK", "target": "t", "model": "m", "outcome": "passed", "nodeid": "x"}
    (killed / "results.jsonl").write_text(json.dumps(row) + "\n")
    summary = mark_partial(killed, "interrupted by SIGINT")
    assert summary["not_run"] is None, summary
    page = write_conformance_html(killed).read_text()
    unknown = "the number of checks that did not run is unknown"
    assert unknown in page and "0 check(s) did not run" not in page, page
    assert unknown in (killed / "junit.xml").read_text()


def test_summary_md_keeps_comparison_signs_and_escapes_only_html(tmp_path: Path) -> None:
    """Issue 42 item 12b: accept's summary.md showed "&gt;" (HTML escaping in Markdown that a
    CI log shows as it is). Only a "<" that opens a tag is escaped now."""
    run = write_check_run(
        tmp_path / "run",
        {"CHAT-SHAPE": "failed"},
        messages={"CHAT-SHAPE": "CHAT-SHAPE: 3 > 2 and a<=b, then <b>bold</b> <!-- c -->"},
    )
    write_conformance_html(run)
    md = (run / "summary.md").read_text()
    assert "CHAT-SHAPE: 3 > 2 and a<=b, then &lt;b>bold&lt;/b> &lt;!-- c -->" in md, md
    assert "&gt;" not in md
    load = write_load_run(tmp_path / "load", synth_records(40, seed=2), verdict="inconclusive")
    summary = json.loads((load / "summary.json").read_text())
    summary["reasons"] = ["generator event-loop lag p99 690.2 ms > 25 ms"]
    (load / "summary.json").write_text(json.dumps(summary))
    write_load_html(load)
    md = (load / "summary.md").read_text()
    assert "- generator event-loop lag p99 690.2 ms > 25 ms" in md and "&gt;" not in md, md
