"""``servecheck compare``: a real shift is a regression; noise is not; thresholds parse or explain."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servecheck.analysis.compare import compare_runs, parse_threshold
from servecheck.cli import main
from servecheck.errors import UsageError
from tests.report.synth import synth_records, write_check_run, write_load_run


def test_shifted_ttft_is_a_regression(tmp_path: Path) -> None:
    base = write_load_run(tmp_path / "base", synth_records(400, seed=1))
    cur = write_load_run(tmp_path / "cur", synth_records(400, seed=2, ttft_ms=65.0))
    cmp = compare_runs(base, cur)
    by = {m.name: m for m in cmp.metrics}
    assert by["ttft_p50"].regression, by["ttft_p50"]
    assert by["ttft_p95"].regression, by["ttft_p95"]
    assert by["ttft_p50"].p_value is not None and by["ttft_p50"].p_value < 0.01
    assert not by["itl_p50"].regression, by["itl_p50"]
    assert cmp.regressed


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed-{s}") for s in (3, 5, 7, 11, 13)])
def test_noise_is_not_a_regression(tmp_path: Path, seed: int) -> None:
    base = write_load_run(tmp_path / "base", synth_records(300, seed=seed))
    cur = write_load_run(tmp_path / "cur", synth_records(300, seed=seed + 1000))
    cmp = compare_runs(base, cur, seed=seed)
    assert not cmp.regressed, cmp.regressions


def test_a_small_significant_shift_within_threshold_is_not_a_regression(tmp_path: Path) -> None:
    base = write_load_run(tmp_path / "base", synth_records(2000, seed=1, sigma=0.1))
    cur = write_load_run(tmp_path / "cur", synth_records(2000, seed=2, ttft_ms=52.5, sigma=0.1))
    by = {m.name: m for m in compare_runs(base, cur).metrics}
    assert (
        by["ttft_p50"].significant and not by["ttft_p50"].beyond and not by["ttft_p50"].regression
    )
    # ... and a tighter threshold turns the same data into a regression.
    by = {m.name: m for m in compare_runs(base, cur, threshold_overrides=["ttft=+2%"]).metrics}
    assert by["ttft_p50"].regression


def test_error_rate_increase_is_caught(tmp_path: Path) -> None:
    base = write_load_run(tmp_path / "base", synth_records(500, seed=1))
    cur = write_load_run(tmp_path / "cur", synth_records(500, seed=2, error_share=0.08))
    by = {m.name: m for m in compare_runs(base, cur).metrics}
    assert by["error_rate"].regression and by["error_rate"].test == "fisher-exact"


def test_newly_failing_check_is_a_regression_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_check_run(
        tmp_path / "base",
        {"CHAT-BASIC": "passed", "STREAM-DONE": "passed", "TOOLS-ARGS-JSON": "failed"},
    )
    cur = write_check_run(
        tmp_path / "cur",
        {"CHAT-BASIC": "passed", "STREAM-DONE": "failed", "TOOLS-ARGS-JSON": "passed"},
        version="1.1",
    )
    code = main(["compare", str(base), str(cur)])
    out = capsys.readouterr().out
    assert code == 1
    assert "NEWLY FAILING STREAM-DONE: passed -> failed" in out
    assert "engine version changed: 1.0 -> 1.1" in out
    assert (cur / "compare" / "report.html").exists() and (
        cur / "compare" / "compare.json"
    ).exists()


def test_no_regression_exit_0_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_load_run(tmp_path / "base", synth_records(200, seed=1))
    cur = write_load_run(tmp_path / "cur", synth_records(200, seed=2))
    assert main(["compare", str(base), str(cur), "--json", "--out", str(tmp_path / "cmp")]) == 0
    assert '"verdict": "ok"' in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "ttft_p96=+10%", "unknown metric 'ttft_p96' (did you mean", id="unknown-metric"
        ),
        pytest.param("ttft_p95=10", "expected METRIC=+N%", id="no-unit"),
        pytest.param("error_rate=+5ms", "ms applies to latencies only", id="ms-on-rate"),
    ],
)
def test_bad_threshold_is_a_usage_error(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_threshold(text)


def test_missing_run_folder_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(tmp_path / "nope"), str(tmp_path / "nope2")]) == 2
    assert "no such run folder" in capsys.readouterr().err


def _reasoned(records: list[dict], think_ms: float) -> list[dict]:
    """The same requests as a reasoning model's: the answer starts ``think_ms`` after the TTFT."""
    return [
        {**r, "ttfr": r["ttft"], "ttfa": r["ttft"] + think_ms / 1000.0}
        if r.get("ttft") is not None
        else r
        for r in records
    ]


def test_longer_thinking_is_a_ttfa_regression_with_ttft_unchanged(tmp_path: Path) -> None:
    """A model that thinks longer before answering: TTFT (first token of any kind) stays, the
    first answer token moves, and compare says so on ttfa."""
    recs = synth_records(400, seed=1)
    base = write_load_run(tmp_path / "base", _reasoned(recs, 200.0))
    cur = write_load_run(tmp_path / "cur", _reasoned(recs, 400.0))
    by = {m.name: m for m in compare_runs(base, cur).metrics}
    assert by["ttfa_p50"].regression and not by["ttft_p50"].regression, (
        by["ttfa_p50"],
        by["ttft_p50"],
    )
    assert "ttfr_p50" in by and not by["ttfr_p50"].regression


def test_without_reasoning_compare_has_no_ttfa_rows(tmp_path: Path) -> None:
    base = write_load_run(tmp_path / "base", synth_records(100, seed=1))
    cur = write_load_run(tmp_path / "cur", synth_records(100, seed=2))
    names = {m.name for m in compare_runs(base, cur).metrics}
    assert "ttft_p50" in names and not any(n.startswith(("ttfa", "ttfr")) for n in names)
