"""Capacity planning: stop rule, best level, knee and replicas (pure), and one short real sweep."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.analysis.capacity import (
    Step,
    best_step,
    knee,
    replicas_for,
    should_stop,
    sweep_knee,
)
from servecheck.cli import main
from servecheck.reference.inprocess import RunningServer
from tests.report.conftest import write_targets


def step(level: float, rps: float, e2e_p95: float, passed: bool = True) -> Step:
    return Step(
        level=level,
        mode="users",
        passed=passed,
        requests_per_s=rps,
        tokens_per_s=rps * 16,
        error_rate=0.0,
        goodput=1.0,
        latency_ms={"e2e": {"p95": e2e_p95}},
    )


def test_knee_is_where_latency_starts_to_climb() -> None:
    # Throughput grows then flattens while latency first stays flat, then climbs steeply.
    steps = [
        step(1, 10, 100),
        step(2, 20, 105),
        step(4, 38, 115),
        step(8, 45, 220),
        step(16, 47, 480),
    ]
    kn = sweep_knee(steps, "e2e_p95")
    assert kn is not None and kn.level == 4, kn


def test_no_knee_on_a_straight_line_or_too_few_points() -> None:
    assert knee([1, 2, 3, 4], [10, 20, 30, 40]) is None
    assert knee([1, 2], [10, 50]) is None


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        pytest.param([step(1, 10, 100), step(2, 20, 110)], None, id="growing"),
        pytest.param(
            [step(1, 10, 100, False), step(2, 20, 110, False)],
            "SLOs not met at two load levels",
            id="two-breaches",
        ),
        pytest.param(
            [step(1, 10, 100), step(2, 20, 110), step(4, 15, 300)],
            "throughput dropped to 15.00 req/s",
            id="drop",
        ),
        pytest.param([step(1, 10, 100), step(2, 20, 110), step(4, 19, 150)], None, id="small-dip"),
    ],
)
def test_stop_rule(steps: list[Step], expected: str | None) -> None:
    reason = should_stop(steps, 0.10)
    assert (reason is None) if expected is None else (reason is not None and expected in reason), (
        reason
    )


def test_best_step_and_replicas() -> None:
    steps = [step(1, 10, 100), step(2, 20, 110), step(4, 30, 300, False)]
    best = best_step(steps)
    assert best is not None and best.level == 2
    assert replicas_for(50, best.requests_per_s) == 3
    assert replicas_for(40, 20) == 2
    assert replicas_for(40, 20, headroom=0.8) == 3
    assert replicas_for(10, 0) is None


def test_sweep_stops_past_saturation_and_reports(
    tmp_path: Path, make_reference: Callable[..., RunningServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep loop, stop rule and page, with ``run_load`` replaced by synthetic steps (fast, deterministic).

    Latency grows with the number of users and the SLO (e2e p95 <= 400 ms) breaks from 8 users on;
    the real ``run_load`` path is exercised by the accept test.
    """
    from servecheck.analysis.stats import RunStats
    from servecheck.load import run as load_cmd
    from tests.report.synth import synth_records, write_load_run

    calls: list[int] = []

    def fake_run_load(spec: load_cmd.LoadSpec, on_log: object = None) -> load_cmd.LoadResult:
        users = int(spec.users or 0)
        calls.append(users)
        passed = users < 8
        run_dir = write_load_run(
            Path(spec.out_dir) / str(spec.run_id),
            synth_records(60, seed=users, ttft_ms=20.0 * users, rate=10.0 * min(users, 6)),
            users=users,
            verdict="pass" if passed else "fail",
        )
        summary = json.loads((run_dir / "summary.json").read_text())
        return load_cmd.LoadResult(
            str(spec.run_id), run_dir, summary, RunStats(), [], passed, False, 0 if passed else 1, 0
        )

    monkeypatch.setattr(load_cmd, "run_load", fake_run_load)
    ref = make_reference(models=["ref-tiny"])
    targets = write_targets(tmp_path / "targets.yaml", ref=(ref.base_url, ["ref-tiny"]))
    code = main(
        [
            "capacity",
            "--target",
            "ref",
            "--targets-file",
            str(targets),
            "--users",
            "1,4,8,16,32",
            "--step-duration",
            "1s",
            "--max-steps",
            "6",
            "--slo",
            "e2e_p95<=400ms",
            "--target-rate",
            "100/s",
            "--out",
            str(tmp_path),
            "--run-id",
            "cap",
        ]
    )
    data = json.loads((tmp_path / "cap" / "capacity.json").read_text())
    assert code == 0
    assert calls == [1, 4, 8, 16], "stops after the second breach, never reaching 32"
    assert "SLOs not met at two load levels (8 users, 16 users)" in data["stop_reason"]
    assert data["best"]["level"] == 4
    assert data["replicas"] == replicas_for(100, data["best"]["requests_per_s"])
    assert data["knee"] is not None
    page = (tmp_path / "cap" / "report.html").read_text()
    assert page.count("<svg") == 4 and "Highest load meeting the SLOs: 4 users" in page
    assert (tmp_path / "cap" / "steps" / "01-1u" / "report.html").exists()


def test_capacity_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capacity", "--users", "4,2"]) == 2
    assert "levels must increase" in capsys.readouterr().err
    assert main(["capacity", "--knee-metric", "foo"]) == 2
    assert "--knee-metric 'foo'" in capsys.readouterr().err


def test_a_step_keeps_the_first_answer_token_time_for_the_knee() -> None:
    """capacity --knee-metric ttfa_p95: a reasoning target's steps carry TTFA beside TTFT."""
    summary = {
        "requests": {"error_rate": 0.0, "total": 10},
        "throughput": {"requests_per_s": 2.0, "output_tokens_per_s": 30.0},
        "latency_ms": {"ttft": {"p95": 40.0}, "ttfa": {"p95": 900.0}, "ttfr": {"p95": 40.0}},
    }
    s = Step.from_summary(4, "users", summary, True)
    assert (s.metric("ttfa_p95"), s.metric("ttft_p95"), s.metric("ttfr_p95")) == (900.0, 40.0, 40.0)


def test_knee_metric_names_the_reasoning_phases(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capacity", "--knee-metric", "ttfb_p95"]) == 2
    assert "one of ttft|itl|e2e|tpot|ttfa|ttfr" in capsys.readouterr().err


def test_a_plain_chat_sweep_has_no_turns_and_prefix_cache_section() -> None:
    """Issue 24.15: plain chat steps gave a table of dashes and empty plots."""
    from servecheck.analysis.capacity import level_breakdown
    from servecheck.report.capacity_html import production_table

    empty = {"count": 0, "p50": None, "p90": None, "p99": None}
    plain = {  # a plain chat step's summary: no turns, no cached_tokens, no engine counters
        "prefix_cache": {
            "requests_reporting": 0,
            "requests_hit": 0,
            "hit_rate": None,
            **{
                k: empty
                for k in (
                    "ttft_cached_ms",
                    "ttft_uncached_ms",
                    "ttft_first_of_group_ms",
                    "ttft_later_in_group_ms",
                )
            },
            "engine": {"note": "the engine exposes no prefix-cache counters"},
        }
    }
    steps = [{"level": lv, "breakdown": level_breakdown(plain)} for lv in (1.0, 2.0)]
    assert production_table(steps, "users", None) is None
    hit = dict(plain["prefix_cache"], requests_reporting=10, requests_hit=4, hit_rate=0.3)
    steps.append({"level": 4.0, "breakdown": level_breakdown({"prefix_cache": hit})})
    table = production_table(steps, "users", None)
    assert table is not None
    _, rows, figs = table
    assert [r[0] for r in rows] == ["4"] and len(figs) == 1, "only the hit-rate plot has data"


def test_capacity_shares_the_load_error_budget(capsys: pytest.CaptureFixture[str]) -> None:
    from servecheck.analysis.budget import DEFAULT_ERROR_BUDGET
    from servecheck.workflows.capacity import CapacitySpec

    assert CapacitySpec().error_budget() == DEFAULT_ERROR_BUDGET
    assert CapacitySpec(max_error_rate="none").error_budget() is None
    assert main(["capacity", "--users", "1", "--max-error-rate", "1"]) == 2
    assert "--max-error-rate '1': a percentage of failed requests" in capsys.readouterr().err


def test_an_inconclusive_step_is_shown_as_such_and_is_no_slo_breach(tmp_path: Path) -> None:
    """Issue 42 item 3: two steps with TTFT p95 227 and 236 ms against an SLO of 2 s, no errors,
    were INCONCLUSIVE for generator lag, yet shown as FAIL and stopped as "SLOs not met at two
    load levels ... past saturation"."""
    from servecheck.report.capacity_html import _step_rows, _unmeasured_steps

    lag = "generator event-loop lag p99 475.1 ms > 50 ms; the machine is busy, not the generator"
    summary = {
        "verdict": "inconclusive",
        "reasons": [lag],
        "requests": {"error_rate": 0.0, "total": 40},
        "throughput": {"requests_per_s": 2.0, "output_tokens_per_s": 30.0},
        "latency_ms": {"ttft": {"p95": 227.0}, "e2e": {"p95": 900.0}},
    }
    steps = [Step.from_summary(lvl, "users", summary, False) for lvl in (2, 4)]
    assert [s.status for s in steps] == ["inconclusive", "inconclusive"]
    reason = should_stop(steps, 0.10)
    assert reason is not None and "SLOs not met" not in reason
    assert reason.startswith("two load levels could not be measured (2 users, 4 users): ")
    assert lag in reason
    dicts = [s.as_dict() for s in steps]
    assert [r[2] for r in _step_rows(dicts)] == ["INCONCLUSIVE", "INCONCLUSIVE"]
    (first, _) = _unmeasured_steps(dicts)
    assert first == f"step 1 (2): INCONCLUSIVE: {lag}"
