"""The smaller output defects of issue 14, each pinned: what a reader sees must say what it means."""

from __future__ import annotations

from pathlib import Path

import pytest

from servecheck.analysis.capacity import Step, should_stop
from servecheck.analysis.compare import compare_runs
from servecheck.cli import main
from servecheck.config.model import Target
from servecheck.load.run import validate
from servecheck.load.spec import LoadSpec
from servecheck.report.html import write_load_html
from servecheck.workflows.capacity import _ms
from tests.report.synth import synth_records, write_load_run


def test_the_same_slo_from_cli_and_targets_yaml_is_one_with_its_source() -> None:
    target = Target.model_validate(
        {
            "name": "t",
            "base_url": "http://127.0.0.1:9/v1",
            "slo": ["ttft_p95<=500ms", "goodput>=90%"],
        }
    )
    spec = LoadSpec(target=target, users=1, max_requests=1, slos=["ttft_p95 <= 0.5s"])
    slos = validate(spec)
    # The default error budget (no error_rate SLO was given) is judged beside them, by its name.
    assert [(s.name, s.source) for s in slos] == [
        ("ttft_p95", "cli"),
        ("goodput", "targets.yaml"),
        ("error_rate", "error budget"),
    ]


def test_compare_shows_no_median_p_value_beside_a_tail_verdict(tmp_path: Path) -> None:
    base = write_load_run(tmp_path / "b", synth_records(300, seed=1))
    cur = write_load_run(tmp_path / "c", synth_records(300, seed=2, ttft_ms=70.0))
    by = {m.name: m for m in compare_runs(base, cur).metrics}
    assert by["ttft_p50"].p_value is not None
    assert by["ttft_p95"].p_value is None and by["ttft_p95"].test == "order-statistic CI"


def test_the_itl_histogram_counts_token_gaps(tmp_path: Path) -> None:
    run = write_load_run(tmp_path / "r", synth_records(50, seed=1))
    page = write_load_html(run).read_text()
    assert "inter-token gaps" in page


def _step(level: float, ok: bool, rps: float, error_rate: float) -> Step:
    return Step(level, "users", ok, rps, 0.0, error_rate, None, total=10)


def test_capacity_says_broken_not_saturated_when_everything_failed() -> None:
    reason = should_stop([_step(1, False, 0.0, 1.0)])
    assert reason == (
        "nothing succeeded at 1 users (every request failed): the target is broken, not saturated"
    )
    assert _ms(None) == "no data" and _ms(12.34) == "12.3 ms"


def test_a_capability_error_names_the_choices_not_pydantic_internals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(
        "targets:\n  - name: a\n    base_url: http://127.0.0.1:9/v1\n    capabilities: {streaming: maybe}\n"
    )
    assert main(["targets", "--targets-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "targets[0].capabilities.streaming: 'maybe' is not one of true|false|auto\n"
    ), err
    assert ".bool" not in err and "literal[" not in err
