"""``servecheck load --repeat N``: the intervals (analysis/intervals.py), the folded verdict
(workflows/repeat.py) and compare's use of the intervals (analysis/compare.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servecheck.analysis.compare import MetricDelta, apply_intervals
from servecheck.analysis.intervals import Interval, repeat_intervals, t_interval
from servecheck.analysis.stats import RunStats
from servecheck.errors import SpecError
from servecheck.load.run import LoadResult
from servecheck.load.spec import LoadSpec
from servecheck.workflows.repeat import RepeatSpec, run_repeat


def test_t_interval_matches_the_t_table() -> None:
    iv = t_interval([11.0, 12.0, 13.0])
    assert iv is not None and iv.mean == 12.0
    # s = 1, t(0.975, 2) = 4.303 (the t table), half width 4.303 / sqrt(3) = 2.484 (away from
    # 0: a low end below it is clipped, the figures are latencies and rates)
    assert iv.low == pytest.approx(12.0 - 2.484, abs=1e-3)
    assert iv.high == pytest.approx(12.0 + 2.484, abs=1e-3)


def test_one_run_has_no_interval_and_no_runs_nothing() -> None:
    one = t_interval([5.0])
    assert one is not None and one.low is None and one.high is None
    assert t_interval([]) is None
    assert one.overlaps(Interval(2, 5.0, 4.0, 6.0, (4.0, 6.0))) is None


def _summary(verdict: str, ttft_p95: float, rps: float, total: int = 10) -> dict[str, Any]:
    return {
        "verdict": verdict,
        "reasons": [] if verdict == "pass" else [f"{verdict} on purpose"],
        "requests": {"total": total},
        "latency_ms": {"ttft": {"p50": ttft_p95 / 2, "p95": ttft_p95, "p99": ttft_p95 * 1.2}},
        "throughput": {"requests_per_s": rps, "output_tokens_per_s": rps * 10},
        "steady": {"applied": False},
    }


def test_intervals_use_the_steady_window_and_skip_runs_that_sent_nothing() -> None:
    a = _summary("pass", 100.0, 10.0)
    a["steady"] = {
        "applied": True,
        "requests": {"total": 8},
        "latency_ms": {"ttft": {"p95": 50.0}},
        "throughput": {"requests_per_s": 12.0},
    }
    down = _summary("fail", 0.0, 0.0, total=0)
    iv = repeat_intervals([a, _summary("pass", 60.0, 12.0), down])
    assert iv["ttft_p95"]["values"] == [50.0, 60.0]
    assert iv["throughput_rps"]["n"] == 2


@pytest.mark.parametrize(
    ("verdicts", "want"),
    [
        pytest.param(["pass", "pass", "pass"], "pass", id="all-pass"),
        pytest.param(["pass", "fail", "inconclusive"], "fail", id="one-fails"),
        pytest.param(["pass", "inconclusive", "pass"], "inconclusive", id="one-inconclusive"),
    ],
)
def test_repeat_verdict_folds_the_runs(tmp_path: Path, verdicts: list[str], want: str) -> None:
    from servecheck import api

    seen: list[str] = []

    def run_one(spec: LoadSpec) -> LoadResult:
        seen.append(str(spec.run_id))
        k = len(seen) - 1
        summary = _summary(verdicts[k], 100.0 + k, 10.0 + k)
        folder = Path(spec.out_dir) / str(spec.run_id)
        folder.mkdir(parents=True)
        ok = verdicts[k] == "pass"
        return LoadResult(
            str(spec.run_id), folder, summary, RunStats(), [], ok, False, 0 if ok else 1, 0
        )

    load = LoadSpec(target=api.target("reference"), users=1, duration_s=1.0, out_dir=tmp_path)
    result = run_repeat(RepeatSpec(load, 3), run_one)
    assert seen == ["run-01", "run-02", "run-03"]
    assert result.summary["verdict"] == want
    assert result.exit_code == (0 if want == "pass" else 1)
    written = json.loads((result.run_dir / "summary.json").read_text())
    assert written["kind"] == "repeat" and written["method"] == "Student t over runs, 95%"
    assert written["intervals"]["ttft_p95"]["values"] == [100.0, 101.0, 102.0]
    if want != "pass":
        assert any(r.startswith("run-0") for r in written["reasons"])


def test_repeat_needs_two_runs() -> None:
    from servecheck import api

    load = LoadSpec(target=api.target("reference"), users=1, duration_s=1.0)
    with pytest.raises(SpecError, match="between 2 and"):
        RepeatSpec(load, 1).validate()


def _delta(name: str, significant: bool = True) -> MetricDelta:
    return MetricDelta(
        name, "ms", 100.0, 130.0, significant=significant, regression=significant, beyond=True
    )


def _iv(low: float, high: float) -> dict[str, Any]:
    return Interval(3, (low + high) / 2, low, high, (low, high)).as_dict()


def test_overlapping_intervals_withdraw_a_regression() -> None:
    d = _delta("ttft_p95")
    apply_intervals([d], {"ttft_p95": _iv(90, 125)}, {"ttft_p95": _iv(110, 150)}, [])
    assert not d.significant and not d.regression
    assert "overlap: within run-to-run spread" in d.note


def test_separate_intervals_keep_the_regression() -> None:
    d = _delta("ttft_p95")
    apply_intervals([d], {"ttft_p95": _iv(95, 105)}, {"ttft_p95": _iv(125, 135)}, [])
    assert d.significant and d.regression and "apart" in d.note


def test_one_sided_repeat_is_noted_and_changes_nothing() -> None:
    d, notes = _delta("ttft_p95"), []
    apply_intervals([d], {"ttft_p95": _iv(90, 125)}, None, notes)
    assert d.regression and notes and "only one of the runs was repeated" in notes[0]


def test_load_repeat_runs_twice_and_writes_intervals(
    tmp_path: Path, make_reference: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from servecheck.cli import main
    from tests.report.conftest import write_targets

    ref = make_reference(models=["ref-tiny"], ttft_ms=5, itl_ms=1)
    targets = write_targets(tmp_path / "targets.yaml", ref=(ref.base_url, ["ref-tiny"]))
    code = main(
        [
            "load",
            *("--target", "ref", "--targets-file", str(targets)),
            *("--users", "2", "--duration", "1s", "--repeat", "2", "--quiet"),
            *("--out", str(tmp_path), "--run-id", "rep"),
        ]
    )
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert code == 0, out
    assert [r["run_id"] for r in summary["runs"]] == ["run-01", "run-02"]
    assert (tmp_path / "rep" / "run-02" / "records.parquet").exists()
    assert summary["intervals"]["ttft_p95"]["n"] == 2
    assert "repeat 2 runs of chat on ref: Student t over runs, 95%" in out


def test_load_repeat_is_a_usage_error_below_two(capsys: pytest.CaptureFixture[str]) -> None:
    from servecheck.cli import main

    code = main(
        ["load", "--target", "reference", "--users", "1", "--duration", "1s", "--repeat", "0"]
    )
    assert code == 2
    assert "--repeat 0: between 2 and 50" in capsys.readouterr().err
