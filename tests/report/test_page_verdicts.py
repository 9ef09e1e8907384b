"""One verdict per page (issue 41): an INCONCLUSIVE or interrupted run's page title, its section
badges, its summary.md and summary.txt say what its JSON and its console say. Before, a page's
title badge was pass-or-fail: an interrupted load's said FAIL beside an INCONCLUSIVE body."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from servecheck.report.accept_html import write_accept_html
from servecheck.report.html import write_load_html
from servecheck.report.load_sections import format_summary
from tests.hostile.support import communicate, load_cmd, wait_for, with_sigint, write_targets
from tests.report.synth import synth_records, write_check_run, write_load_run

WORDS = re.compile(r"\b(PASS|FAIL|FAILED|INCONCLUSIVE)\b")
BUDGET = {
    "slo": "error_rate<=60%",
    "source": "error budget",
    "metric": "error_rate",
    "op": "<=",
    "bound": 0.6,
    "unit": "fraction",
    "observed": 0.0,
    "passed": True,
    "note": "",
}


def _text(html: str) -> str:
    """The words a reader sees: the page without its tags, style and script."""
    html = re.sub(r"<(style|script)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


def _title_badge(html: str) -> str:
    h1 = re.search(r"<h1>(.*?)</h1>", html, re.S)
    assert h1, html[:500]
    badge = re.search(r'<span class="badge verdict[^"]*"[^>]*>([^<]*)</span>', h1.group(1))
    assert badge, f"no verdict badge in the title: {h1.group(1)}"
    return badge.group(1)


def _run_badges(html: str) -> list[str]:
    """The verdict badges of the page's run-level lines: the title's and each section's head
    (a ``<p>`` that opens with a verdict badge), not an SLO table's rows."""
    return [
        _title_badge(html),
        *re.findall(r'<p><span class="badge verdict[^"]*"[^>]*>([^<]*)</span>', html),
    ]


def _inconclusive_load(path: Path, reason: str) -> Path:
    run = write_load_run(path, synth_records(40, seed=3), verdict="inconclusive", slo=[BUDGET])
    summary = json.loads((run / "summary.json").read_text())
    summary["reasons"] = [reason]
    (run / "summary.json").write_text(json.dumps(summary))
    return run


@pytest.mark.parametrize(
    "reason",
    [
        pytest.param("partial run: interrupted by SIGINT after 4.2 s", id="interrupted"),
        pytest.param("the load generator fell behind its schedule", id="generator-behind"),
    ],
)
def test_an_inconclusive_load_page_says_inconclusive_everywhere(
    tmp_path: Path, reason: str
) -> None:
    run = _inconclusive_load(tmp_path / "load", reason)
    html = write_load_html(run).read_text()
    assert _title_badge(html) == "INCONCLUSIVE", "the title's badge is the run's verdict"
    assert set(_run_badges(html)) == {"INCONCLUSIVE"}, _run_badges(html)
    seen = set(WORDS.findall(_text(html)))
    assert "FAIL" not in seen and "FAILED" not in seen, f"a FAIL on an INCONCLUSIVE page: {seen}"
    assert " ✘" not in html, "the nav marks the section as failed"
    md = (run / "summary.md").read_text()
    assert md.splitlines()[0].endswith(": INCONCLUSIVE"), md.splitlines()[0]
    assert "FAIL" not in md.replace("error_rate", ""), md
    summary = json.loads((run / "summary.json").read_text())
    text = format_summary(summary, [])  # summary.txt and the console's last lines
    assert summary["verdict"] == "inconclusive"
    assert text.splitlines()[-1].startswith(f"verdict: INCONCLUSIVE ({reason}"), text


def test_a_failed_load_page_still_says_fail(tmp_path: Path) -> None:
    run = write_load_run(tmp_path / "load", synth_records(40, seed=3), verdict="fail")
    html = write_load_html(run).read_text()
    assert _title_badge(html) == "FAIL" and set(_run_badges(html)) == {"FAIL"}
    assert (run / "summary.md").read_text().splitlines()[0].endswith(": FAIL")


def test_an_inconclusive_accept_page_says_inconclusive_everywhere(tmp_path: Path) -> None:
    """readiness ok, conformance passed, the smoke load INCONCLUSIVE: accept.json and the
    console say INCONCLUSIVE, and so do the page's title, its stage table and summary.md."""
    run = tmp_path / "acc"
    write_check_run(run / "conformance", {"HEALTH-SERVES": "passed", "MODELS-EXPECTED": "passed"})
    reason = "partial run: interrupted by SIGINT after 1.5 s"
    _inconclusive_load(run / "load", reason)
    stages = {
        "ready": {"ok": True, "state": "ready", "detail": "ready", "seconds": 0.1},
        "conformance": {"ok": True, "exit_code": 0, "seconds": 3.0, "folder": "conformance"},
        "load": {
            "ok": False,
            "verdict": "inconclusive",
            "reasons": [reason],
            "detail": f"inconclusive ({reason})",
            "exit_code": 1,
            "seconds": 2.0,
            "folder": "load",
        },
    }
    accept = {
        "kind": "accept",
        "target": "reference",
        "stages": stages,
        "verdict": "inconclusive",
        "reasons": [f"load: inconclusive ({reason})"],
        "ok": False,
        "exit_code": 1,
    }
    (run / "accept.json").write_text(json.dumps(accept))
    html = write_accept_html(run).read_text()
    assert _title_badge(html) == "INCONCLUSIVE"
    stage_rows = dict(
        re.findall(r"<tr><td>(\w+)</td><td><span class=\"badge verdict[^\"]*\">([^<]*)<", html)
    )
    assert stage_rows == {"ready": "PASS", "conformance": "PASS", "load": "INCONCLUSIVE"}
    seen = set(WORDS.findall(_text(html)))
    assert "FAIL" not in seen and "FAILED" not in seen, f"a FAIL on an INCONCLUSIVE page: {seen}"
    md = (run / "summary.md").read_text()
    assert md.splitlines()[0] == "## servecheck accept: reference: INCONCLUSIVE", md
    assert "- load: INCONCLUSIVE" in md and "FAIL" not in md.replace("error_rate", ""), md


@pytest.mark.slow
def test_an_interrupted_load_has_one_verdict_on_its_page(tmp_path: Path) -> None:
    """SIGINT to ``servecheck load`` mid-run: exit 130, and summary.json, summary.txt, the
    console, report.html's title and summary.md all say INCONCLUSIVE (the page said FAIL)."""
    from servecheck.reference.hostile import hostile

    with hostile("every-other-500") as srv:
        targets = write_targets(tmp_path / "targets.yaml", srv)
        cmd = load_cmd(
            targets,
            tmp_path / "r",
            *("--users", "2", "--duration", "60s", "--run-id", "int"),
            *("--allow-lag", "--error-budget", "60%"),
        )
        proc = subprocess.Popen(
            with_sigint(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        run = tmp_path / "r" / "int"
        try:
            wait_for(lambda: any(run.glob("records-*.jsonl")), "the first records")
            wait_for(lambda: srv.api_requests >= 20, "twenty requests")
            proc.send_signal(2)  # SIGINT
            stdout, stderr = communicate(proc, 120)  # a bound against a hang
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130, stdout + stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["verdict"] == "inconclusive", summary["reasons"]
    assert "verdict: INCONCLUSIVE (partial run: interrupted" in stdout + stderr
    assert (run / "summary.txt").read_text().splitlines()[-1].startswith("verdict: INCONCLUSIVE")
    html = (run / "report.html").read_text()
    assert _title_badge(html) == "INCONCLUSIVE" and set(_run_badges(html)) == {"INCONCLUSIVE"}
    seen = set(WORDS.findall(_text(html)))
    assert "FAIL" not in seen, f"a FAIL on an INCONCLUSIVE page: {seen}"
    assert (run / "summary.md").read_text().splitlines()[0].endswith(": INCONCLUSIVE")
