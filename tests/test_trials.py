"""``--trials K`` (issue 43, item 3): a model-dependent check runs K times and passes when its
threshold of runs passed; the rate k/K reaches results.jsonl, summary.json, junit.xml and the
page; K=1 changes nothing.

The reference fault ``tools-ignored-every-fifth`` answers the 1st, 6th, 11th ... forced tool
call with text, like a model that misses now and then: TOOLS-REQUIRED (model-dependent, 4 of 5
to pass) sees 4/5 at K=5, 8/10 at K=10, 1/2 at K=2 and a plain failure at K=1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from servecheck.checks import CheckFailed, load_all, run_with_allowances
from servecheck.checks.context import Trials
from tests.support import TEST_KEY, context_for

CHECKS = load_all()
FLAKY = "tools-ignored-every-fifth"


def _judge(make_reference, check_id: str, trials: int, *faults: str):
    """Run ``check_id`` with ``trials`` on a fresh server; (the context, the failure or None)."""
    ctx = context_for(make_reference(*faults, api_key=TEST_KEY), check_id)
    ctx.trials = trials
    try:
        run_with_allowances(CHECKS[check_id], ctx)
    except CheckFailed as failure:
        return ctx, failure
    finally:
        ctx.client.close()
    return ctx, None


@pytest.mark.parametrize(
    "trials,threshold",
    [
        pytest.param(1, 1, id="K1"),
        pytest.param(2, 2, id="K2"),
        pytest.param(3, 3, id="K3"),
        pytest.param(5, 4, id="K5"),
        pytest.param(10, 8, id="K10"),
    ],
)
def test_thresholds(trials: int, threshold: int) -> None:
    """4 of 5 (rounded up) for a model-dependent check; every run for a protocol one."""
    assert CHECKS["TOOLS-REQUIRED"].model_dependent
    assert CHECKS["TOOLS-REQUIRED"].threshold(trials) == threshold
    assert not CHECKS["TOOLS-UNDEFINED-400"].model_dependent
    assert CHECKS["TOOLS-UNDEFINED-400"].threshold(trials) == trials


@pytest.mark.parametrize(
    "trials,passed,threshold",
    [pytest.param(5, 4, 4, id="4of5"), pytest.param(10, 8, 8, id="8of10")],
)
def test_flaky_model_passes_at_its_threshold(make_reference, trials, passed, threshold):
    ctx, failure = _judge(make_reference, "TOOLS-REQUIRED", trials, FLAKY)
    assert failure is None, str(failure)
    assert ctx.trial_result == Trials(
        passed=passed,
        runs=trials,
        threshold=threshold,
        first_failure='tool_choice "required" returned no tool call',
    )


def test_flaky_model_fails_below_its_threshold(make_reference):
    ctx, failure = _judge(make_reference, "TOOLS-REQUIRED", 2, FLAKY)
    assert failure is not None and failure.check_id == "TOOLS-REQUIRED"
    assert str(failure).startswith(
        "TOOLS-REQUIRED: passed 1/2 trials (threshold 2/2); the first failure: "
        'tool_choice "required" returned no tool call'
    ), str(failure)
    assert ctx.trial_result == Trials(1, 2, 2, 'tool_choice "required" returned no tool call')


def test_a_model_that_never_calls_fails_every_trial(make_reference):
    ctx, failure = _judge(make_reference, "TOOLS-REQUIRED", 5, "tools-ignored")
    assert failure is not None and "passed 0/5 trials (threshold 4/5)" in str(failure)
    assert ctx.trial_result is not None and ctx.trial_result.passed == 0


def test_one_trial_changes_nothing(make_reference):
    """K=1: the check's own failure, no rate, no tally."""
    ctx, failure = _judge(make_reference, "TOOLS-REQUIRED", 1, FLAKY)
    assert failure is not None
    assert str(failure).startswith('TOOLS-REQUIRED: tool_choice "required" returned no tool call')
    assert "trials" not in str(failure)
    assert ctx.trial_result is None


def test_protocol_checks_run_once(make_reference):
    """A check the protocol decides is not repeated: one request, no tally."""
    ctx, failure = _judge(make_reference, "TOOLS-UNDEFINED-400", 5)
    assert failure is None
    assert ctx.trial_result is None
    assert len(ctx.exchanges) == 1


def _check(folder: Path, *args: str, env: dict[str, str] | None = None, run_id: str = "run"):
    """``servecheck check ARGS --run-id run`` in ``folder`` against the embedded reference."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SERVECHECK_REF_", "SERVECHECK_TRIALS"))
    }
    return subprocess.run(
        [sys.executable, "-m", "servecheck", "check", *args, "--run-id", run_id, "-n", "0"],
        cwd=folder,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_check_reports_the_rate_everywhere(tmp_path: Path) -> None:
    """End to end: exit 0 at 4/5; results.jsonl, summary.json, junit.xml and report.html say 4/5."""
    out = _check(
        tmp_path, "-k", "TOOLS-REQUIRED", "--trials", "5", f"--reference-arg=--fault={FLAKY}"
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "TOOLS-REQUIRED reference/ref-tiny: 4/5 passed (threshold 4/5): passed" in out.stdout
    run = tmp_path / "reports" / "run"
    (row,) = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert row["outcome"] == "passed"
    assert row["trials"]["passed"] == 4 and row["trials"]["runs"] == 5
    assert row["message"] == "passed 4/5 trials (threshold 4/5)"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["trials"] == 5
    assert [(r["check"], r["trials"]["passed"]) for r in summary["trial_rates"]] == [
        ("TOOLS-REQUIRED", 4)
    ]
    props = {
        p.get("name"): p.get("value")
        for p in ET.parse(run / "junit.xml").getroot().iter("property")  # noqa: S314
    }
    assert props.get("servecheck_trials") == "4/5 (threshold 4/5)"
    page = (run / "report.html").read_text()
    assert "Repeated trials" in page and "4/5" in page


@pytest.mark.slow
def test_check_below_threshold_exits_1_and_k1_is_unchanged(tmp_path: Path) -> None:
    """K=2 on the same server: 1/2, a failure (exit 1) naming the rate. K=1 (the default): the
    plain failure, and no trials in results.jsonl."""
    fault = f"--reference-arg=--fault={FLAKY}"
    below = _check(tmp_path, "-k", "TOOLS-REQUIRED", fault, env={"SERVECHECK_TRIALS": "2"})
    assert below.returncode == 1, below.stdout + below.stderr
    (row,) = [
        json.loads(line)
        for line in (tmp_path / "reports" / "run" / "results.jsonl").read_text().splitlines()
    ]
    assert row["outcome"] == "failed" and row["trials"]["passed"] == 1
    assert row["message"].startswith("TOOLS-REQUIRED: passed 1/2 trials (threshold 2/2)")
    once = _check(tmp_path, "-k", "TOOLS-REQUIRED", fault, run_id="once")
    assert once.returncode == 1
    lines = (tmp_path / "reports" / "once" / "results.jsonl").read_text().splitlines()
    (row,) = [json.loads(line) for line in lines]
    assert "trials" not in row and "trials" not in row["message"]
    assert (
        json.loads((tmp_path / "reports" / "once" / "summary.json").read_text())["trial_rates"]
        == []
    )


@pytest.mark.parametrize(
    "args,env",
    [
        pytest.param(("--trials", "0"), {}, id="zero"),
        pytest.param(("--trials", "many"), {}, id="word"),
        pytest.param((), {"SERVECHECK_TRIALS": "51"}, id="env-too-many"),
    ],
)
def test_bad_trials_is_a_usage_error(tmp_path: Path, args, env) -> None:
    out = _check(tmp_path, *args, env=env)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--trials" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "reports").exists()
