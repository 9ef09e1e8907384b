"""SLO expressions: parsing, pinned error messages, evaluation and per-request goodput."""

from __future__ import annotations

import pytest

from servecheck.analysis.slo import evaluate, parse_slo, parse_slos, request_predicate
from servecheck.analysis.stats import Schedule, compute_stats
from servecheck.errors import UsageError


@pytest.mark.parametrize(
    ("text", "metric", "stat", "op", "bound"),
    [
        pytest.param("ttft_p95<=500ms", "ttft", "p95", "<=", 500.0, id="ttft-ms"),
        pytest.param("e2e_p99<=8s", "e2e", "p99", "<=", 8000.0, id="e2e-seconds"),
        pytest.param("itl_p50<20ms", "itl", "p50", "<", 20.0, id="itl-strict"),
        pytest.param("tpot_mean <= 250us", "tpot", "mean", "<=", 0.25, id="spaces-us"),
        pytest.param("ttft_p99.9<=1s", "ttft", "p99.9", "<=", 1000.0, id="p99.9"),
        pytest.param("ttft_p999<=1s", "ttft", "p99.9", "<=", 1000.0, id="p999-alias"),
        pytest.param(
            "ttft_from_intended_p99<=2s",
            "ttft_from_intended",
            "p99",
            "<=",
            2000.0,
            id="from-intended",
        ),
        pytest.param("error_rate<=0.5%", "error_rate", None, "<=", 0.005, id="error-rate-percent"),
        pytest.param("rate_limited<5%", "rate_limited", None, "<", 0.05, id="rate-limited-percent"),
        pytest.param(
            "throughput_tokens>=100/s", "throughput_tokens", None, ">=", 100.0, id="tokens-per-s"
        ),
        pytest.param(
            "throughput_requests>2", "throughput_requests", None, ">", 2.0, id="requests-no-unit"
        ),
        pytest.param("goodput>=95%", "goodput", None, ">=", 0.95, id="goodput"),
    ],
)
def test_parse(text: str, metric: str, stat: str | None, op: str, bound: float) -> None:
    slo = parse_slo(text)
    assert (slo.metric, slo.stat, slo.op) == (metric, stat, op), f"parsed {text!r} as {slo}"
    assert slo.bound == pytest.approx(bound), f"{text!r}: bound {slo.bound}, expected {bound}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "tfft_p95<=500ms",
            "SLO 'tfft_p95<=500ms': unknown metric 'tfft' (did you mean \"ttft_p95\"?); metrics: ttft, itl, tpot, e2e, ttft_from_intended, e2e_from_intended, lag, ttfr, ttfa, itl_reasoning, itl_answer, error_rate, rate_limited, goodput, throughput_tokens, throughput_requests, time_to_ready, first_ttft, first_e2e, first_ttft_ratio, first_e2e_ratio, requests_to_warm, drain_ok, drain_time, recovery_s, swap_ttft_spike, swap_failed_requests, lost_requests, session_e2e, turn_ttft",
            id="typo-metric",
        ),
        pytest.param(
            "first_tft<=1s",
            "SLO 'first_tft<=1s': unknown metric 'first_tft' (did you mean \"first_ttft\"?); metrics: ttft, itl, tpot, e2e, ttft_from_intended, e2e_from_intended, lag, ttfr, ttfa, itl_reasoning, itl_answer, error_rate, rate_limited, goodput, throughput_tokens, throughput_requests, time_to_ready, first_ttft, first_e2e, first_ttft_ratio, first_e2e_ratio, requests_to_warm, drain_ok, drain_time, recovery_s, swap_ttft_spike, swap_failed_requests, lost_requests, session_e2e, turn_ttft",
            id="typo-metric-without-statistic",
        ),
        pytest.param(
            "first_ttft_p95<=5s",
            "SLO 'first_ttft_p95<=5s': first_ttft takes no statistic (one cold start, one value)",
            id="stat-on-cold-start",
        ),
        pytest.param(
            "time_to_ready<=120",
            "SLO 'time_to_ready<=120': add a unit: us, ms or s",
            id="cold-start-time-unit",
        ),
        pytest.param(
            "first_ttft_ratio<=10%",
            "SLO 'first_ttft_ratio<=10%': first_ttft_ratio is a plain number; write e.g. first_ttft_ratio<=10",
            id="cold-start-ratio-unit",
        ),
        pytest.param("ttft_p95<=500", "SLO 'ttft_p95<=500': add a unit: us, ms or s", id="no-unit"),
        pytest.param(
            "ttft_p95<=5kg",
            "SLO 'ttft_p95<=5kg': unit 'kg' is not a time unit (us, ms, s)",
            id="bad-unit",
        ),
        pytest.param(
            "ttft<=500ms",
            "SLO 'ttft<=500ms': ttft needs a statistic, e.g. ttft_p95 (one of p50, p90, p95, p99, p99.9, mean, min, max)",
            id="no-stat",
        ),
        pytest.param(
            "ttft_p96<=500ms",
            "SLO 'ttft_p96<=500ms': unknown statistic 'p96' (did you mean \"p99\"?); use one of p50, p90, p95, p99, p99.9, mean, min, max",
            id="bad-stat",
        ),
        pytest.param(
            "error_rate==0",
            "SLO 'error_rate==0': use one of <=, <, >=, > (an SLO is a bound, not an equality)",
            id="equality",
        ),
        pytest.param(
            "goodput>=120%",
            "SLO 'goodput>=120%': goodput must be between 0% and 100%",
            id="share-range",
        ),
        pytest.param(
            "ttft p95 under 1s",
            "SLO 'ttft p95 under 1s': cannot parse; write METRIC[_STAT] OP NUMBER[UNIT], e.g. ttft_p95<=500ms or error_rate<=0.5%",
            id="garbage",
        ),
        pytest.param(
            "error_rate<=1",
            "SLO 'error_rate<=1': a share needs %: write error_rate<=1%, or error_rate<=100% if 1 was a fraction",
            id="share-bare-one",
        ),
        pytest.param(
            "error_rate<0.01",
            "SLO 'error_rate<0.01': a share needs %: write error_rate<0.01%, or error_rate<1% if 0.01 was a fraction",
            id="share-bare-fraction",
        ),
        pytest.param(
            "rate_limited<=0.005",
            "SLO 'rate_limited<=0.005': a share needs %: write rate_limited<=0.005%, or rate_limited<=0.5% if 0.005 was a fraction",
            id="rate-limited-bare",
        ),
        pytest.param(
            "goodput>=95",
            "SLO 'goodput>=95': a share needs %: write goodput>=95%",
            id="goodput-bare-above-one",
        ),
        pytest.param(
            "goodput>=0.9ratio",
            "SLO 'goodput>=0.9ratio': goodput takes a percentage (0.5%), not 'ratio'",
            id="share-bad-unit",
        ),
        pytest.param(
            "error_rate_p95<=1%",
            "SLO 'error_rate_p95<=1%': error_rate takes no statistic; write e.g. error_rate<=0.5%",
            id="stat-on-share",
        ),
    ],
)
def test_errors_are_pinned(text: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_slo(text)
    assert str(info.value) == message


def test_comma_separated() -> None:
    slos = parse_slos(["ttft_p95<=500ms,error_rate<=1%", "goodput>=90%"], source="targets.yaml")
    assert [s.name for s in slos] == ["ttft_p95", "error_rate", "goodput"]
    assert {s.source for s in slos} == {"targets.yaml"}


def _rec(
    ttft: float,
    e2e: float,
    err: str | None = None,
    lag: float = 0.0,
    itls: list[float] | None = None,
) -> dict:
    return {
        "t_intended": 100.0,
        "t_sent": 100.0 + lag,
        "t_done": 100.0 + lag + e2e,
        "ttft": None if err else ttft,
        "e2e": e2e,
        "tpot": 0.01,
        "itls": itls or [0.01, 0.01],
        "output_tokens": 3,
        "output_tokens_client": 3,
        "error": err,
    }


def test_evaluate_pass_fail_and_no_data() -> None:
    records = [_rec(0.1, 1.0) for _ in range(98)] + [_rec(0.9, 2.0), _rec(0.0, 0.1, err="http-503")]
    slos = parse_slos(
        ["ttft_p50<=200ms", "ttft_max<=500ms", "error_rate<=0.5%", "error_rate<=2%", "lag_p99<=5ms"]
    )
    st = compute_stats(records, Schedule(), request_predicate(slos))
    verdicts = {v.slo.text: v for v in evaluate(slos, st)}
    assert verdicts["ttft_p50<=200ms"].passed
    assert not verdicts["ttft_max<=500ms"].passed
    assert verdicts["ttft_max<=500ms"].observed == pytest.approx(900.0, rel=1e-3)
    assert not verdicts["error_rate<=0.5%"].passed and verdicts["error_rate<=2%"].passed
    assert verdicts["ttft_max<=500ms"].line().startswith("FAIL ttft_max<=500ms  observed 90")
    empty = evaluate(parse_slos(["ttft_p95<=1s"]), compute_stats([], Schedule()))
    assert (
        not empty[0].passed
        and empty[0].line()
        == "FAIL ttft_p95<=1s  observed no data (no successful request measured this)  [cli]"
    )


def test_goodput_is_per_request() -> None:
    # 8 good, 1 slow first token, 1 error: goodput 80 %; the slow one fails ttft<=500ms on its own.
    records = [_rec(0.1, 1.0) for _ in range(8)] + [_rec(0.7, 1.0), _rec(0.1, 1.0, err="timeout")]
    slos = parse_slos(["ttft_p95<=500ms", "goodput>=80%", "goodput>=90%"])
    st = compute_stats(records, Schedule(), request_predicate(slos))
    assert st.goodput == pytest.approx(0.8)
    passed = [v.passed for v in evaluate(slos, st)]
    assert passed[1:] == [True, False]


def test_goodput_itl_uses_the_requests_own_percentile() -> None:
    pred = request_predicate(parse_slos(["itl_p50<20ms"]))
    assert pred is not None
    assert pred(_rec(0.1, 1.0, itls=[0.01, 0.01, 0.5]))  # one long gap: median still 10 ms
    assert not pred(_rec(0.1, 1.0, itls=[0.03, 0.03, 0.01]))


# A bare share is refused wherever an SLO string comes from, each with the place it came from.
_BARE = "SLO 'error_rate<=1': a share needs %: write error_rate<=1%, or error_rate<=100% if 1 was a fraction"


def _dead_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _targets_file(tmp_path, slo: str | None = None):
    lines = [
        "targets:",
        "  - name: dead",
        f"    base_url: http://127.0.0.1:{_dead_port()}/v1",
        "    engine: reference",
    ]
    if slo is not None:
        lines += ["    slo:", "      - ttft_p95<=1s", f"      - {slo}"]
    path = tmp_path / "targets.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bare_share_in_targets_yaml_is_reported_at_its_line(tmp_path) -> None:
    from servecheck.config import ConfigError, load_targets

    path = _targets_file(tmp_path, "error_rate<=1")
    with pytest.raises(ConfigError) as info:
        load_targets(path, env={})
    assert str(info.value) == f"{path}:7: targets[0].slo[1]: {_BARE}"


def test_bare_share_in_a_load_plan_names_the_plan(tmp_path) -> None:
    from servecheck.load.plan import load_plan

    plan = tmp_path / "plan.yaml"
    plan.write_text("users: 2\nslo: [ttft_p95<=1s, error_rate<=1]\n")
    with pytest.raises(UsageError) as info:
        load_plan(plan)
    assert str(info.value) == f"{plan}: slo: {_BARE}"


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["load", "--duration", "2s", "--users", "1"], id="load"),
        pytest.param(["accept", "--no-load"], id="accept"),
        pytest.param(["capacity", "--step-duration", "2s"], id="capacity"),
    ],
)
def test_bare_share_on_the_command_line_is_a_usage_error(tmp_path, capsys, argv) -> None:
    """Every command that takes ``--slo`` (cutover and soak take none; their SLOs come from
    targets.yaml, above) stops with rc 2 and one line, before it probes the
    (dead) target."""
    from servecheck.cli import main

    path = _targets_file(tmp_path)
    cmd, *rest = argv
    code = main(
        [cmd, "--target", "dead", "--targets-file", str(path), "--out", str(tmp_path / "out")]
        + rest
        + ["--slo", "error_rate<=1"]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip() == f"servecheck {cmd}: error: {_BARE}"


@pytest.mark.parametrize(
    "text,bound,unit",
    [
        pytest.param("swap_failed_requests<=0", 0.0, "requests", id="failed"),
        pytest.param("swap_ttft_spike<=1.5s", 1500.0, "ms", id="spike"),
    ],
)
def test_swap_slos_parse(text: str, bound: float, unit: str) -> None:
    slo = parse_slo(text)
    assert (slo.bound, slo.unit, slo.swap, slo.cold) == (bound, unit, True, False)


@pytest.mark.parametrize(
    "text,message",
    [
        pytest.param("swap_ttft_spike<=500", "add a unit", id="spike-no-unit"),
        pytest.param("swap_failed_requests<=1%", "is a count", id="failed-share"),
        pytest.param("swap_ttft_spike_p95<=1s", "takes no statistic", id="spike-stat"),
    ],
)
def test_swap_slo_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_slo(text)


def test_a_load_run_refuses_a_swap_slo_from_the_command_line() -> None:
    from servecheck.analysis.slo import reject_cold

    with pytest.raises(UsageError, match="a swap SLO, which servecheck load does not measure"):
        reject_cold(parse_slos(["swap_failed_requests<=0"]))
