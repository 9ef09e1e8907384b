"""``servecheck load`` against the hostile catalogue: nothing succeeded is FAIL, whatever the SLOs;
throughput counts only successes; a re-used --run-id is refused; compare needs comparable runs."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from servecheck.analysis.stats import compute_stats
from servecheck.analysis.verdict import load_run_verdict
from servecheck.cli import main
from servecheck.reference.hostile import hostile
from tests.hostile.support import load_cmd, write_targets
from tests.report.synth import synth_records, write_check_run, write_load_run

ROOT = Path(__file__).resolve().parents[2]


def run_cmd(cmd: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=dict(os.environ)
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "error"),
    [
        pytest.param("html-login-page", "invalid-sse", id="html-login-page"),
        pytest.param("always-429", "rate-limited", id="always-429"),
        pytest.param("close-mid-chunk", "stream-error", id="close-mid-chunk"),
    ],
)
def test_load_with_no_slo_fails_when_nothing_succeeded(
    tmp_path: Path, name: str, error: str
) -> None:
    with hostile(name) as srv:
        targets = write_targets(tmp_path / "targets.yaml", srv)
        proc = run_cmd(load_cmd(targets, tmp_path / "r", "--users", "2", "--max-requests", "10"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (run_dir,) = (tmp_path / "r").iterdir()
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["verdict"] == "fail" and s["exit_code"] == 1, s["reasons"]
    assert s["requests"]["ok"] == 0
    # A 429 is its own class (rate-limited, issue 16), counted apart from the failures.
    counted = (
        {"rate-limited": s["requests"]["rate_limited"]}
        if error == "rate-limited"
        else s["requests"]["errors"]
    )
    assert counted == {error: 10}, s["requests"]
    assert s["throughput"]["requests_per_s"] == 0 and s["throughput"]["output_tokens_per_s"] == 0
    assert s["throughput"]["attempted_per_s"] > 0
    assert s["reasons"][0].startswith(f"nothing succeeded: 0 of 10 requests ok (10 {error})")
    assert "verdict: FAIL (nothing succeeded" in proc.stdout


def test_the_verdict_rule() -> None:
    assert load_run_verdict(total=5, ok=0, errors={"timeout": 5}, slo_ok=True).status == "fail"
    assert load_run_verdict(total=5, ok=1, errors={"timeout": 4}, slo_ok=True).status == "pass"
    assert load_run_verdict(total=0, ok=0, errors={}, slo_ok=True).status == "inconclusive"
    lagged = load_run_verdict(
        total=5, ok=5, errors={}, slo_ok=True, unmeasured=["generator behind"]
    )
    assert (lagged.status, lagged.exit_code) == ("inconclusive", 1)
    dead = load_run_verdict(total=5, ok=0, errors={"timeout": 5}, slo_ok=True, unmeasured=["cpu"])
    assert dead.reasons[0].endswith("within the target's timeout_s"), dead.reasons


def test_throughput_counts_only_successes() -> None:
    records = synth_records(200, seed=3, error_share=0.5)
    st = compute_stats(records)
    assert 0 < st.ok < st.total
    assert st.requests_per_s == pytest.approx(st.ok / st.window_s)
    assert st.attempted_per_s == pytest.approx(st.total / st.window_s)
    ok_tokens = sum(r["output_tokens"] for r in records if not r["error"])
    assert st.tokens_per_s == pytest.approx(ok_tokens / st.window_s)


def test_a_used_run_id_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with hostile("always-429") as srv:
        targets = write_targets(tmp_path / "targets.yaml", srv)
        used = tmp_path / "r" / "again"
        used.mkdir(parents=True)
        (used / "records-w1.jsonl").write_text("{}\n")
        cmd = load_cmd(targets, tmp_path / "r", "--users", "1", "--max-requests", "2")
        assert main([*cmd[3:], "--run-id", "again"]) == 2
        assert srv.requests == 0, "refused before any request"
    err = capsys.readouterr().err
    assert "already holds a run (records-w1.jsonl)" in err and "new --run-id" in err
    assert sorted(p.name for p in used.iterdir()) == ["records-w1.jsonl"]


def test_compare_of_incomparable_runs_is_not_no_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    load = write_load_run(tmp_path / "load", synth_records(50, seed=1))
    check = write_check_run(tmp_path / "check", {"CHAT-BASIC": "passed"})
    assert main(["compare", str(load), str(check)]) == 2
    err = capsys.readouterr().err
    assert "nothing to compare" in err and "load results only" in err, err
    assert not (check / "compare").exists()


def test_compare_accepts_a_killed_runs_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_load_run(tmp_path / "base", synth_records(200, seed=1))
    killed = tmp_path / "killed"
    killed.mkdir()
    with (killed / "records-w1.jsonl").open("w") as fh:
        for r in synth_records(200, seed=2):
            fh.write(json.dumps(r) + "\n")
        fh.write('{"half a line')  # what kill -9 leaves
    # Compared from its records, and the comparison says the killed run cannot vouch for its
    # own figures: INCONCLUSIVE (exit 1), never a regression (issue 41 item 7).
    assert main(["compare", str(base), str(killed)]) == 1
    out = capsys.readouterr().out
    assert "was not summarised (killed?): compared from its 200 per-worker records" in out
    assert "ttft_p50" in out
    assert "verdict: INCONCLUSIVE (the current run has no verdict" in out, out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "rc", "source"),
    [
        pytest.param([], 1, "default", id="default-budget"),
        pytest.param(["--error-budget", "60%"], 0, "set", id="error-budget-option"),
        pytest.param(["--slo", "error_rate<=60%"], 0, "slo", id="error-rate-slo"),
    ],
)
def test_a_load_with_no_slo_has_an_error_budget(
    tmp_path: Path, args: list[str], rc: int, source: str
) -> None:
    """Issue 24.1: every second request answered 500 was a PASS when no SLO was given."""
    with hostile("every-other-500") as srv:
        targets = write_targets(tmp_path / "targets.yaml", srv)
        cmd = load_cmd(targets, tmp_path / "r", "--users", "2", "--max-requests", "20")
        proc = run_cmd([*cmd, "--allow-lag", *args])
    assert proc.returncode == rc, proc.stdout + proc.stderr
    (run_dir,) = (tmp_path / "r").iterdir()
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["requests"]["failed"] == 10 and s["requests"]["ok"] == 10, s["requests"]
    # junit.xml (issue 24.15): a case per SLO, the budget's among them, and the run's verdict.
    cases = {c.get("name"): c for c in ET.parse(run_dir / "junit.xml").getroot().iter("testcase")}
    bound = "1%" if source == "default" else "60%"
    assert set(cases) == {f"SLO error_rate<={bound}", "load run verdict"}, set(cases)
    failure = cases["load run verdict"].find("failure")
    assert (failure is not None) is bool(rc)
    if failure is not None:
        assert failure.get("message", "").startswith("FAIL: error budget exceeded: 10 of 20")
    budget = s["error_budget"]
    assert budget["source"] == source and budget["passed"] is (rc == 0), budget
    assert budget["max_error_rate"] == (0.01 if source == "default" else 0.6)
    if rc:
        assert s["verdict"] == "fail"
        assert s["reasons"] == [
            "error budget exceeded: 10 of 20 requests failed (50.00%; the budget is 1%)"
        ]
        assert "error budget: 1% of requests may fail (default" in proc.stdout
        assert "verdict: FAIL (error budget exceeded: 10 of 20 requests failed" in proc.stdout
    else:
        assert s["verdict"] == "pass", s["reasons"]
        assert "error budget: 60% of requests may fail" in proc.stdout


def test_the_error_budget_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from servecheck.analysis.budget import parse_error_budget, with_error_budget
    from servecheck.analysis.slo import parse_slos

    assert parse_error_budget("0.5%") == 0.005
    assert parse_error_budget("none") is None
    ttft = parse_slos(["ttft_p95<=1s"])
    assert [s.text for s in with_error_budget(ttft, 0.01)] == ["ttft_p95<=1s", "error_rate<=1%"]
    assert with_error_budget(ttft, None) == ttft
    own = parse_slos(["error_rate<=5%"], "targets.yaml")
    assert with_error_budget(ttft, 0.01, own) == ttft, "an error_rate SLO is the budget"
    with hostile("always-429") as srv:
        targets = write_targets(tmp_path / "targets.yaml", srv)
        cmd = load_cmd(targets, tmp_path / "r", "--users", "1", "--max-requests", "2")
        assert main([*cmd[3:], "--error-budget", "1"]) == 2  # 1 % or 100 %?
        assert srv.requests == 0, "refused before any request"
    err = capsys.readouterr().err
    assert "--error-budget '1': a percentage of failed requests, e.g. 1% or 0.5%" in err


def test_the_budget_fails_a_run_unless_nothing_succeeded_says_more() -> None:
    over = "error budget exceeded: 5 of 10 requests failed"
    run = load_run_verdict(total=10, ok=5, errors={"http-500": 5}, slo_ok=False, over_budget=over)
    assert (run.status, run.reasons) == ("fail", [over])
    dead = load_run_verdict(total=10, ok=0, errors={"http-500": 10}, slo_ok=False, over_budget=over)
    assert dead.reasons[0].startswith("nothing succeeded") and over not in dead.reasons
