"""The load page's TTFT decomposition table and slowest requests (report/timings_html.py)."""

from __future__ import annotations

import json
from pathlib import Path

from servecheck.analysis.timings import TimingsTally
from servecheck.report.html import write_load_html
from tests.report.synth import synth_records, write_load_run


def _stamped(i: int) -> dict:
    ttft = 0.020 + 0.001 * i
    return {
        "request_id": f"run-w0-{i}<b>",
        "response_id": f"chatcmpl-run-w0-{i}",
        "ttft": ttft,
        "e2e": 0.5,
        "error": None,
        "new_conn": i == 0,
        "stamps": {
            "written": 0.05,
            "headers": ttft * 1000 - 3,
            "body": ttft * 1000 - 1,
            "last_token": 499.0,
            **({"connect": 0.4} if i == 0 else {}),
        },
    }


def test_load_page_splits_ttft_into_phases_and_lists_the_slowest(tmp_path: Path) -> None:
    run = write_load_run(tmp_path / "load", synth_records(40, seed=2))
    tally = TimingsTally()
    list(tally.tap(_stamped(i) for i in range(30)))
    summary = json.loads((run / "summary.json").read_text())
    summary.update(tally.as_dict())
    (run / "summary.json").write_text(json.dumps(summary))
    page = write_load_html(run).read_text()
    assert "TTFT decomposition (ms from request start)" in page
    for phase in ("connect", "send (in TTFT)", "wait_headers (in TTFT)", "body_to_token (in TTFT)"):
        assert f"<td>{phase}</td>" in page, phase
    assert "1 new, 29 reused" in page and "<code>X-Request-Id</code>" in page
    assert "run-w0-29&lt;b&gt;" in page and "<b>" not in page.split("TTFT decomposition")[1][:9000]
    assert "chatcmpl-run-w0-29" in page, "the slowest by TTFT is listed first with its engine id"
    md = (run / "summary.md").read_text()
    assert "TTFT decomposition (ms):" in md and "| wait_headers (in TTFT) |" in md


def test_a_run_without_stamps_has_no_decomposition(tmp_path: Path) -> None:
    run = write_load_run(tmp_path / "load", synth_records(10, seed=3))
    assert "TTFT decomposition" not in write_load_html(run).read_text()
