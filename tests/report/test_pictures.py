"""The data behind issue 30's pictures, from small summary dicts: per-slice series of the load
page (report/slice_figures.py), the comparison's bars, CDFs and overlaid series
(report/compare_figures.py) and the conformance matrix (report/conformance_matrix.py); and
their honest empty states: nothing measured, no picture and a line that says why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servecheck.analysis.compare import Comparison, MetricDelta, RunParts
from servecheck.report import compare_figures as cf
from servecheck.report import slice_figures as sf
from servecheck.report.conformance_matrix import NO_ROWS, build_matrix, matrix_html, state_of
from tests.report.svgtext import has_text


def _row(i: int, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "start_s": float(i),
        "end_s": float(i + 1),
        "count": 10,
        "errors": 0,
        "rate_limited": 0,
        "output_tokens_per_s": 100.0 + i,
        "in_flight": 2.0,
        "ttft_ms": {"p50": 10.0 + i, "p95": 20.0 + i, "p99": 30.0 + i},
        "itl_ms": {"p50": 1.0, "p95": 2.0, "p99": 3.0},
        "e2e_ms": {"p50": 50.0, "p95": 60.0, "p99": 70.0},
    }
    row.update(over)
    return row


def _summary(*rows: dict[str, Any]) -> dict[str, Any]:
    return {"slices": {"slice_s": 1.0, "t0": 100.0, "rows": list(rows)}}


# ------------------------------------------------------------------ load page


def test_latency_series_are_the_slices_percentiles_at_their_midpoints() -> None:
    series = sf.latency_series(_summary(_row(0), _row(1), _row(2)))
    assert set(series) == {f"{m} {p}" for m in ("ttft", "itl", "e2e") for p in sf.PERCENTILES}
    assert series["ttft p99"] == ([0.5, 1.5, 2.5], [30.0, 31.0, 32.0])
    assert series["e2e p50"][1] == [50.0, 50.0, 50.0]


def test_a_slice_where_nothing_finished_is_a_gap_not_a_zero() -> None:
    empty = _row(1, count=0, output_tokens_per_s=0.0, in_flight=0.0)
    empty.update(
        {f"{m}_ms": {"p50": None, "p95": None, "p99": None} for m in ("ttft", "itl", "e2e")}
    )
    summary = _summary(_row(0), empty, _row(2))
    assert sf.latency_series(summary)["ttft p50"][1] == [10.0, None, 12.0]
    rates = sf.rate_series(summary)
    assert rates["error_rate"][1] == [0.0, None, 0.0]
    assert rates["output_tokens_per_s"][1] == [100.0, 0.0, 102.0]


def test_error_rate_leaves_the_shed_requests_to_their_own_line() -> None:
    """3 of 10 errored, 2 of them shed (429): 10 % failed, 20 % rate-limited, as the run's
    error rate counts them; a summary without ``rate_limited`` has errors alone."""
    rates = sf.rate_series(_summary(_row(0, errors=3, rate_limited=2)))
    assert rates["error_rate"][1] == [pytest.approx(10.0)]
    assert rates["rate_limited"][1] == [pytest.approx(20.0)]
    old = _row(0, errors=3)
    del old["rate_limited"]
    rates = sf.rate_series(_summary(old))
    assert rates["error_rate"][1] == [pytest.approx(30.0)] and "rate_limited" not in rates


def test_the_load_page_pictures_carry_their_panels() -> None:
    summary = _summary(_row(0, errors=1, rate_limited=1), _row(1))
    html = sf.slice_figures_html(summary)
    assert html.count("<svg") == 2 and "1 s slices" in html
    for text in (sf.LATENCY_TITLE, sf.RATES_TITLE, "ttft p99", "e2e p50", sf.SHED_LABEL, "failed"):
        assert has_text(html, text), text


@pytest.mark.parametrize(
    "summary",
    [
        pytest.param({}, id="no-slices"),
        pytest.param({"slices": {"rows": []}}, id="no-rows"),
        pytest.param({"slices": {"rows": [{"start_s": "x"}]}}, id="junk"),
        pytest.param({"slices": "broken"}, id="not-a-mapping"),
    ],
)
def test_no_slices_no_picture_and_a_line_why(summary: dict[str, Any]) -> None:
    html = sf.slice_figures_html(summary)
    assert "<svg" not in html and sf.NO_SLICES in html


def test_nothing_succeeded_draws_the_errors_and_says_there_is_no_latency() -> None:
    failed = _row(0, errors=10, output_tokens_per_s=0.0)
    failed.update(
        {f"{m}_ms": {"p50": None, "p95": None, "p99": None} for m in ("ttft", "itl", "e2e")}
    )
    html = sf.slice_figures_html(_summary(failed))
    assert html.count("<svg") == 1 and sf.NO_LATENCY in html
    assert sf.rate_series(_summary(failed))["error_rate"][1] == [100.0]


# ------------------------------------------------------------------ compare / cutover


def _delta(name: str, unit: str, a: float | None, b: float | None, **kw: Any) -> MetricDelta:
    return MetricDelta(name, unit, a, b, **kw)


def test_metric_panels_group_percentiles_by_family_and_rates_in_percent() -> None:
    metrics = [
        _delta("ttft_p50", "ms", 10.0, 12.0),
        _delta("ttft_p95", "ms", 20.0, 30.0, regression=True),
        _delta("itl_p50", "ms", 2.0, 1.0, improvement=True),
        _delta("throughput_rps", "req/s", 5.0, 4.0),
        _delta("error_rate", "fraction", 0.01, 0.02),
        _delta("ttfa_p50", "ms", None, 3.0),  # one side did not measure it: left out
    ]
    panels = dict(cf.metric_panels(metrics))
    assert panels["TTFT ms"] == [("p50", 10.0, 12.0, ""), ("p95", 20.0, 30.0, "regression")]
    assert panels["ITL ms"] == [("p50", 2.0, 1.0, "improvement")]
    assert panels["req/s"] == [("rps", 5.0, 4.0, "")]
    (rate,) = panels["rates (%)"]
    assert rate[0] == "error rate" and rate[1:3] == pytest.approx((1.0, 2.0))
    assert "TTFA ms" not in panels


def test_cdf_is_the_share_at_or_below_each_value_and_bounded_in_points() -> None:
    assert cf.cdf([3.0, 1.0, 2.0, float("nan")]) == ([1.0, 2.0, 3.0], [1 / 3, 2 / 3, 1.0])
    xs, ys = cf.cdf([float(i) for i in range(10_000)], points=100)
    assert len(xs) == 100 and xs[0] == 0.0 and xs[-1] == 9999.0 and ys[-1] == 1.0
    assert ys == sorted(ys) and cf.cdf([]) == ([], [])


def _run(folder: Path, ttft_s: list[float], summary: dict[str, Any] | None) -> Path:
    folder.mkdir(parents=True)
    doc = {"samples": {"ttft": {"values": ttft_s}, "e2e": {"values": [0.1, 0.2]}}}
    (folder / "samples.json").write_text(json.dumps(doc))
    (folder / "summary.json").write_text(json.dumps({"requests": {}, **(summary or {})}))
    return folder


def test_comparison_pictures_overlay_both_runs(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", [0.01, 0.02], _summary(_row(0), _row(1)))
    b = _run(tmp_path / "b", [0.03, 0.04], _summary(_row(0, errors=2), _row(1)))
    assert cf.read_samples(a)["ttft"] == pytest.approx([10.0, 20.0])
    cmp = Comparison(RunParts(a, load=a), RunParts(b, load=b), [_delta("ttft_p50", "ms", 15, 35)])
    html = cf.comparison_figures_html(cmp, ("OLD", "NEW"))
    for title in (
        cf.METRICS_TITLE.format(a="NEW", b="OLD"),
        cf.CDF_TITLE.format(a="OLD", b="NEW"),
        cf.SERIES_TITLE.format(a="OLD", b="NEW"),
    ):
        assert has_text(html, title), title
    assert has_text(html, "TTFT") and has_text(html, "E2E") and not has_text(html, "ITL")


def test_a_side_without_samples_or_slices_is_named(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", [0.01], None)  # no slices
    b = tmp_path / "b"
    b.mkdir()
    (b / "summary.json").write_text(json.dumps({"requests": {}, **_summary(_row(0))}))
    cmp = Comparison(RunParts(a, load=a), RunParts(b, load=b), [])
    html = cf.comparison_figures_html(cmp)
    assert "<svg" not in html
    assert "No metric bars" in html
    assert (
        "No latency CDFs (reservoir samples): current" in html and "samples.json) has none" in html
    )
    assert "No time series (time slices): baseline (summary.json slices) has none" in html


def test_no_load_part_no_pictures(tmp_path: Path) -> None:
    cmp = Comparison(RunParts(tmp_path), RunParts(tmp_path), [])
    html = cf.comparison_figures_html(cmp)
    assert "<svg" not in html and "do not both have a load part" in html


# ------------------------------------------------------------------ conformance


def _result(check: str, outcome: str, target: str = "a", model: str = "m") -> dict[str, Any]:
    return {"check": check, "target": target, "model": model, "outcome": outcome}


def test_matrix_cells_take_the_worst_outcome_and_keep_the_counts() -> None:
    rows = [
        _result("STREAM-DONE", "passed"),
        _result("STREAM-OBJECT", "nonstrict"),
        _result("MODELS-LIST", "passed"),
        _result("MODELS-CONTEXT", "failed", target="b"),
        _result("MODELS-LIST", "passed", target="b"),
        _result("TOOLS-CALL", "skipped", target="b"),
        {"check": None, "outcome": "error"},  # a collection error: no check, no cell
    ]
    m = build_matrix(rows)
    assert m.surfaces == ["MODELS", "STREAM", "TOOLS"]  # the catalogue's order
    assert m.columns == [("a", "m"), ("b", "m")]
    assert m.state("STREAM", ("a", "m")) == "nonstrict"
    assert m.state("MODELS", ("b", "m")) == "fail"
    assert m.state("MODELS", ("a", "m")) == "pass"
    assert m.state("TOOLS", ("b", "m")) == "skip" and m.state("TOOLS", ("a", "m")) is None
    assert m.cells[("MODELS", ("b", "m"))] == {"failed": 1, "passed": 1}
    assert state_of({"xpassed": 1, "nonstrict": 3}) == "fail"


def test_matrix_html_shows_every_state_and_escapes_names() -> None:
    rows = [
        _result("STREAM-DONE", "passed", target="<b>x</b>"),
        _result("STREAM-OBJECT", "nonstrict", target="y"),
        _result("MODELS-CONTEXT", "error", target="y"),
    ]
    html = matrix_html(rows)
    assert "class='cell pass'" in html and "class='cell nonstrict'" in html
    assert "class='cell fail'" in html and "class='cell none'" in html
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert "✘ 1" in html and "~ 1" in html and "✔ 1" in html


def test_no_results_no_matrix_and_a_line_why() -> None:
    assert matrix_html([]) == f"<p class='muted'>{NO_ROWS}</p>"
