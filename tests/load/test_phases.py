"""Reasoning phases in statistics, SLOs and the summary (docs/metrics.md: TTFR, TTFA, phase ITLs)."""

from __future__ import annotations

import pytest

from servecheck.analysis.slo import evaluate, parse_slo, request_predicate
from servecheck.analysis.stats import compute_stats
from servecheck.errors import UsageError
from servecheck.report.load_text import phase_lines


def _rec(seq: int, **kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "seq": seq,
        "t_intended": 100.0 + seq,
        "t_sent": 100.0 + seq,
        "t_done": 101.0 + seq,
        "error": None,
        "ttft": 0.1,
        "e2e": 1.0,
        "itls": [0.01, 0.01, 0.5, 0.02, 0.02],
        "output_tokens": 6,
        "output_tokens_client": 6,
    }
    base.update(kw)
    return base


REASONED = [
    _rec(
        i,
        ttfr=0.1,
        ttfa=0.63,
        reasoning_tokens=3,
        reasoning_tokens_client=3,
        itls_reasoning=[0.01, 0.01],
        itls_answer=[0.02, 0.02],
    )
    for i in range(10)
]


@pytest.mark.parametrize(
    "text,metric,stat,bound",
    [
        pytest.param("ttfa_p95<=2s", "ttfa", "p95", 2000.0, id="ttfa"),
        pytest.param("ttfr_p50<300ms", "ttfr", "p50", 300.0, id="ttfr"),
        pytest.param("itl_answer_p99<=50ms", "itl_answer", "p99", 50.0, id="itl-answer"),
        pytest.param("itl_reasoning_mean<=20ms", "itl_reasoning", "mean", 20.0, id="itl-reasoning"),
    ],
)
def test_phase_slos_parse(text: str, metric: str, stat: str, bound: float) -> None:
    slo = parse_slo(text)
    assert (slo.metric, slo.stat, slo.bound, slo.per_request) == (metric, stat, bound, True)


def test_phase_slo_without_statistic_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"ttfa needs a statistic, e.g. ttfa_p95"):
        parse_slo("ttfa<=2s")


def test_stats_report_both_first_token_times_and_phase_tokens() -> None:
    st = compute_stats(REASONED)
    lat = st.as_dict()["latency_ms"]
    assert lat["ttft"]["p50"] == pytest.approx(100.0, rel=0.01)
    assert lat["ttfa"]["p50"] == pytest.approx(630.0, rel=0.01)
    assert lat["ttfr"]["count"] == 10 and lat["itl_answer"]["count"] == 20
    assert lat["itl_reasoning"]["max"] == pytest.approx(10.0, rel=0.01)
    tokens = st.as_dict()["tokens"]
    assert (tokens["reasoning"], tokens["answer"], tokens["reasoning_requests"]) == (30, 30, 10)
    verdicts = evaluate([parse_slo("ttft_p95<=200ms"), parse_slo("ttfa_p95<=200ms")], st)
    assert [v.passed for v in verdicts] == [True, False], [v.line() for v in verdicts]


def test_without_reasoning_ttfa_is_ttft_and_answer_itls_are_all_itls() -> None:
    plain = [_rec(i) for i in range(4)]  # records written before ttfa existed
    st = compute_stats(plain)
    lat = st.as_dict()["latency_ms"]
    assert lat["ttfa"]["p50"] == lat["ttft"]["p50"] and lat["ttfr"]["count"] == 0
    assert lat["itl_answer"]["count"] == lat["itl"]["count"] == 20
    assert st.as_dict()["tokens"]["reasoning_requests"] == 0
    good = request_predicate([parse_slo("ttfa_p95<=200ms"), parse_slo("itl_answer_max<=100ms")])
    assert good is not None and not good(plain[0])  # its 500 ms ITL counts as an answer ITL
    assert good({**plain[0], "itls": [0.01]})


def test_goodput_reads_each_requests_own_ttfa() -> None:
    good = request_predicate([parse_slo("ttfa_p95<=500ms")])
    assert good is not None and not good(REASONED[0]) and good({**REASONED[0], "ttfa": 0.4})
    # a request that reasoned and was cut before any answer meets no TTFA bound
    assert not good({**REASONED[0], "ttfa": None})


def test_phase_lines_show_only_measured_phases() -> None:
    lines = phase_lines(compute_stats(REASONED).as_dict()["latency_ms"])
    assert [line.split()[0] for line in lines] == ["ttfr", "ttfa", "itl_reasoning", "itl_answer"]
    assert phase_lines({"ttfa": {"count": 0}}) == []
