"""``rolling:N`` (issue 41 item 7): the nights' prediction interval stays inside the metric's
domain (as does a repeat's interval, which compare also reads), and a night that doubted its own
measurement is INCONCLUSIVE, never a regression."""

from __future__ import annotations

from typing import Any

import pytest

from servecheck.analysis.compare import thresholds
from servecheck.history.analysis import judge_metric, judge_rolling


@pytest.mark.parametrize(
    ("metric", "nights", "tonight"),
    [
        pytest.param("throughput_rps", [40.0, 300.0, 50.0], 120.0, id="throughput-3-nights"),
        pytest.param("ttft_p99", [5.0, 90.0, 8.0], 20.0, id="latency-3-nights"),
    ],
)
def test_a_positive_metric_never_gets_a_negative_bound(
    metric: str, nights: list[float], tonight: float
) -> None:
    """Three spread nights gave throughput [-164.6, 246.4] req/s: a t interval around the mean.
    On the logarithms it stays positive (and still holds every night)."""
    j = judge_metric(metric, tonight, nights, thresholds()[metric], 0.01)
    assert j.low is not None and j.high is not None
    assert 0 < j.low <= min(nights) and j.high >= max(nights), (j.low, j.high)


def test_a_share_stays_within_0_and_1_and_says_it_was_clipped() -> None:
    j = judge_metric("error_rate", 0.0, [0.0, 0.30, 0.01], thresholds()["error_rate"], 0.01)
    assert j.low == 0.0 and j.high is not None and j.high <= 1.0, (j.low, j.high)
    assert "clipped to the metric's domain" in j.note


def _row(night: str, ttft: float, verdict: str = "pass") -> dict[str, Any]:
    return {
        "target": "t",
        "kind": "load",
        "run_id": f"run-{night}",
        "started_at": f"{night}T02:00:00Z",
        "engine_version": "1.0",
        "verdict": verdict,
        "metrics": {"ttft_p95": ttft, "throughput_rps": 30.0, "error_rate": 0.0},
        "checks": [],
    }


def test_a_night_that_doubted_its_measurement_is_inconclusive_not_a_regression() -> None:
    past = [_row(f"2026-11-0{i}", 23.0 + 0.3 * i) for i in range(1, 6)]
    judged = judge_rolling(past, _row("2026-11-06", 275.0, verdict="inconclusive"))
    assert judged.verdict.status == "inconclusive", judged.format_text()
    assert not any(m.regression for m in judged.metrics), judged.format_text()
    assert "judged itself INCONCLUSIVE" in " ".join(judged.verdict.reasons)
    # the same night measured cleanly is a regression
    assert judge_rolling(past, _row("2026-11-06", 275.0)).verdict.status == "fail"


def test_a_repeat_interval_of_throughput_is_not_negative() -> None:
    """``load --repeat 3`` runs far apart: the t interval of their mean is clipped at 0."""
    from servecheck.analysis.intervals import t_interval

    iv = t_interval([40.0, 300.0, 50.0])
    assert iv is not None and iv.low == 0.0 and iv.high is not None and iv.high > 300.0, iv
