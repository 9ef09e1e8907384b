"""A load run's ``junit.xml``: a case per SLO (the error budget among them) and one for the
run's verdict, whatever the verdict: a FAIL with no SLO of the user's, an INCONCLUSIVE whose
SLOs all held, and an SLO the run could not judge (the target was down before the load) are
failing cases that say why. Read back with ``xml.etree``, as a CI's JUnit reader would. The
interrupted run's file (marked partial) is tests/hostile/test_interruptions.py's; a FAIL from
the default error budget alone is tests/hostile/test_load_verdicts.py's."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from servecheck.workflows.support import Suite, slo_cases, write_junit
from tests.hostile.support import load_cmd

BUDGET = {"slo": "error_rate<=1%", "source": "error budget", "op": "<=", "bound": 0.01,
          "unit": "ratio", "observed": 0.0, "passed": True, "note": ""}  # fmt: skip


def _cases(tmp_path: Path, summary: dict[str, Any], asked: list[str]) -> dict[str, ET.Element]:
    suite = Suite("servecheck.load", slo_cases(summary, asked=asked))
    path = write_junit(tmp_path / "junit.xml", [suite])
    return {str(c.get("name")): c for c in ET.parse(path).getroot().iter("testcase")}


def _failure(case: ET.Element) -> str | None:
    f = case.find("failure")
    return None if f is None else str(f.get("message"))


def test_an_inconclusive_run_whose_slos_held_fails_its_verdict_case(tmp_path: Path) -> None:
    why = "the generator fell behind: lag p99 80.0 ms > 25 ms"
    summary = {"slo": [BUDGET], "verdict": "inconclusive", "reasons": [why]}
    cases = _cases(tmp_path, summary, ["error_rate<=1%"])
    assert list(cases) == ["SLO error_rate<=1%", "load run verdict"]
    assert _failure(cases["SLO error_rate<=1%"]) is None
    assert _failure(cases["load run verdict"]) == f"INCONCLUSIVE: {why}"


def test_an_slo_nothing_measured_says_so(tmp_path: Path) -> None:
    ttft = {"slo": "ttft_p95<=500ms", "source": "cli", "op": "<=", "bound": 500.0, "unit": "ms",
            "observed": None, "passed": False, "note": "no successful request measured this"}  # fmt: skip
    summary = {"slo": [ttft, {**BUDGET, "observed": 1.0, "passed": False}], "verdict": "fail",
               "reasons": ["nothing succeeded: 20 of 20 requests failed"]}  # fmt: skip
    cases = _cases(tmp_path, summary, ["ttft_p95<=500ms", "error_rate<=1%"])
    assert _failure(cases["SLO ttft_p95<=500ms"]) == (
        "no successful request measured this; bound <= 500.0 (cli)"
    )
    budget = _failure(cases["SLO error_rate<=1%"])
    assert budget == "observed 1.0 ratio; bound <= 0.01 (error budget)"
    assert _failure(cases["load run verdict"]) == (
        "FAIL: nothing succeeded: 20 of 20 requests failed; SLO breached: ttft_p95<=500ms"
    )


@pytest.mark.slow
def test_a_target_down_before_the_load_fails_every_slo_it_was_given(tmp_path: Path) -> None:
    """Nothing listens on port 9: the error budget could not be judged (no request finished),
    and it is a failing case that says why (the file used to leave it out)."""
    targets = tmp_path / "targets.yaml"
    targets.write_text(
        "targets:\n  - name: gone\n    base_url: http://127.0.0.1:9/v1\n"
        "    engine: vllm\n    models: [m]\n    timeout_s: 2\n"
    )
    cmd = load_cmd(targets, tmp_path / "r", "--users", "1", "--max-requests", "3", target="gone")
    proc = subprocess.run(
        [*cmd, "--slo", "ttft_p95<=500ms"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (run_dir,) = (tmp_path / "r").iterdir()
    s = json.loads((run_dir / "summary.json").read_text())
    # the error budget judges nothing when no request finished: it is not in summary.json's slo
    assert s["verdict"] == "fail" and [v["slo"] for v in s["slo"]] == ["ttft_p95<=500ms"]
    root = ET.parse(run_dir / "junit.xml").getroot()
    cases = {str(c.get("name")): c for c in root.iter("testcase")}
    assert list(cases) == ["SLO ttft_p95<=500ms", "SLO error_rate<=1%", "load run verdict"]
    ttft = _failure(cases["SLO ttft_p95<=500ms"]) or ""
    assert ttft.startswith("no successful request measured this; "), ttft
    budget = _failure(cases["SLO error_rate<=1%"])
    assert budget == "not judged: " + "; ".join(s["reasons"]), budget
    assert _failure(cases["load run verdict"]) == "FAIL: " + "; ".join(
        [*s["reasons"], "SLO breached: ttft_p95<=500ms"]
    )
    assert root.find("testsuite").get("failures") == "3"  # type: ignore[union-attr]
