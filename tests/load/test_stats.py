"""HDR statistics against numpy on known data; throughput, tokens, lag flags."""

from __future__ import annotations

import numpy as np
import pytest

from servecheck.analysis.stats import PERCENTILES, Schedule, compute_stats, distribution


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(np.linspace(0.001, 2.0, 10_001), id="uniform-1ms-2s"),
        pytest.param(
            np.random.default_rng(7).lognormal(mean=-2.3, sigma=0.6, size=20_000),
            id="lognormal-100ms",
        ),
        pytest.param(np.concatenate([np.full(990, 0.1), np.full(10, 5.0)]), id="bimodal-tail"),
    ],
)
def test_percentiles_match_numpy_within_hdr_precision(values: np.ndarray) -> None:
    d = distribution(values.tolist())
    assert d.count == len(values)
    for name, p in PERCENTILES:
        # nearest rank, as HDR defines it; np.percentile(method="inverted_cdf") agrees except where
        # p/100*n lands a float ulp above an integer (99.9 % of 20 000), so the rank is computed exactly
        rank = max(
            1,
            round(p * len(values) * 10) // 1000
            + (1 if (round(p * len(values) * 10) % 1000) else 0),
        )
        exact = float(np.sort(values)[rank - 1]) * 1000.0
        got = d.get(name)
        assert got is not None
        # 3 significant digits plus the 1 us rounding on the way in
        assert got == pytest.approx(exact, rel=1e-3, abs=0.002), (
            f"{name}: HDR {got} ms vs numpy {exact} ms"
        )
    assert d.max == pytest.approx(values.max() * 1000.0, rel=1e-3)
    assert d.mean == pytest.approx(values.mean() * 1000.0, rel=1e-3)


def _r(
    sent: float,
    e2e: float,
    tokens: int | None,
    client: int,
    intended: float | None = None,
    err: str | None = None,
) -> dict:
    return {
        "t_intended": sent if intended is None else intended,
        "t_sent": sent,
        "t_done": sent + e2e,
        "ttft": None if err else 0.1,
        "e2e": e2e,
        "tpot": None,
        "itls": [],
        "output_tokens": tokens,
        "output_tokens_client": client,
        "error": err,
    }


def test_throughput_tokens_and_intended_latency() -> None:
    records = [
        _r(0.0, 1.0, 10, 10),
        _r(1.0, 1.0, 20, 19),
        _r(2.0, 2.0, None, 5, intended=1.5),
        _r(3.0, 0.5, None, 0, err="http-500"),
    ]
    st = compute_stats(records, Schedule(mode="fixed", planned=4, max_lag_ms=1000))
    assert st.window_s == pytest.approx(4.0)  # first send 0.0 -> last done 4.0
    assert st.output_tokens == 35 and st.output_tokens_usage == 30 and st.output_tokens_client == 34
    assert st.usage_missing == 1 and st.discrepant == 1
    assert st.tokens_per_s == pytest.approx(35 / 4.0)
    assert st.requests_per_s == pytest.approx(3 / 4.0)  # the failed request is not throughput
    assert st.attempted_per_s == pytest.approx(1.0)
    assert st.error_rate == pytest.approx(0.25) and st.errors == {"http-500": 1}
    assert st.latency["e2e_from_intended"].max == pytest.approx(2500.0, rel=1e-3)
    assert st.latency["e2e"].max == pytest.approx(2000.0, rel=1e-3)
    assert not st.behind


def test_lagging_generator_is_flagged() -> None:
    late = [_r(i * 0.1 + 0.2, 0.5, 5, 5, intended=i * 0.1) for i in range(50)]
    st = compute_stats(late, Schedule(mode="fixed", planned=100, max_lag_ms=25))
    assert st.behind
    assert st.behind_reasons[0].startswith("schedule lag p99 200.")
    assert (
        st.behind_reasons[1] == "sent 50 of 100 planned requests (50.0%): the generator fell behind"
    )
    loop = compute_stats([_r(0.0, 0.5, 5, 5)], Schedule(), loop_lag_s=[0.001] * 98 + [0.2, 0.3])
    assert loop.behind and "event-loop lag p99" in loop.behind_reasons[0]


def test_abandoned_requests_keep_ttft_but_not_e2e_or_goodput() -> None:
    done = _r(0.0, 1.0, 10, 10)
    quit_early = {**_r(0.5, 0.2, None, 4), "abandoned": True, "ttft": 0.05}
    failed = _r(1.0, 0.5, None, 0, err="http-500")
    st = compute_stats([done, quit_early, failed], per_request=lambda r: True)
    assert st.abandoned == 1 and st.ok == 2 and st.error_rate == pytest.approx(1 / 3)
    assert st.latency["e2e"].count == 1 and st.latency["e2e"].max == pytest.approx(1000.0, rel=1e-3)
    assert st.latency["ttft"].count == 2, "an abandoned stream's first token is a real TTFT"
    assert st.usage_missing == 0, "an abandoned stream never gets its usage chunk"
    assert (
        st.goodput == pytest.approx(0.5) and st.goodput_requests == 1
    )  # of the two that were not abandoned
    assert st.as_dict()["requests"]["abandoned"] == 1


def test_event_loop_lag_names_its_cause_and_stands_aside_for_kernel_stamps() -> None:
    """Issue 42 item 2: on the engine's own 2-core machine every run was INCONCLUSIVE, blamed
    on "the generator's CPU is saturated" while it used 0.02 cores. The cause is named; with
    kernel receive stamps a late event loop does not cost a latency, so it is a note."""
    from servecheck.analysis.host import HostLoad

    busy = HostLoad(cores=2, busy=0.96, steal=0.0, generator_cores=0.02, busiest_process=0.02)
    lags = [0.001] * 98 + [0.2, 0.5]
    sched = Schedule(cause=busy.cause())
    user_clock = compute_stats([_r(0.0, 0.5, 5, 5)], sched, loop_lag_s=lags)
    assert user_clock.behind
    (reason,) = user_clock.behind_reasons
    assert "the machine is busy, not the generator (96% of 2 cores busy" in reason, reason
    assert "--allow-lag" in reason and "CPU is saturated" not in reason
    kernel = Schedule(kernel_clock=True, cause=busy.cause())
    stamped = compute_stats([_r(0.0, 0.5, 5, 5)], kernel, loop_lag_s=lags)
    assert not stamped.behind and stamped.behind_reasons == []
    (note,) = stamped.lag_notes
    assert note.startswith("generator event-loop lag p99 ") and "the latencies stand" in note
    assert stamped.as_dict()["schedule"]["notes"] == [note]


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        (
            (2, 0.97, 0.0, 0.95, 0.95),
            "the generator's CPU is saturated (a Locust process used 0.95",
        ),
        ((2, 0.97, 0.0, 0.10, 0.10), "the machine is busy, not the generator (97% of 2 cores"),
        ((4, 0.30, 0.15, 0.10, 0.10), "15% stolen by the hypervisor"),
        ((4, 0.20, 0.0, 0.10, 0.10), "neither the generator (0.10 cores) nor the machine (20%"),
    ],
)
def test_host_load_names_the_cause(
    host: tuple[int, float, float, float, float], expected: str
) -> None:
    from servecheck.analysis.host import HostLoad

    assert expected in HostLoad(*host).cause()


def test_host_load_from_process_infos() -> None:
    from collections import namedtuple

    from servecheck.analysis.host import HostLoad, machine_cpu

    Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")
    before = Times(100, 0, 50, 1000, 10, 0, 0, 0, 5, 0)
    after = Times(180, 0, 90, 1010, 10, 0, 0, 0, 9, 0)  # 120 busy of 130: guest not twice
    host = machine_cpu(before, after, cores=2)
    assert host == {"cores": 2, "busy": pytest.approx(120 / 130, abs=1e-4), "steal": 0.0}
    infos = [
        {"cpu_s": 0.5, "started": 10.0, "ended": 30.0, "host_cpu": host},
        {"cpu_s": 1.5, "started": 10.0, "ended": 30.0, "host_cpu": {**host, "busy": 0.5}},
    ]
    load = HostLoad.from_infos(infos)
    assert load is not None
    assert load.generator_cores == pytest.approx(0.1) and load.busiest_process == 0.075
    assert load.busy == pytest.approx(120 / 130, abs=1e-4)
    assert HostLoad.from_infos([{"cpu_s": 1.0, "started": 0.0, "ended": 1.0}]) is None


def test_a_reader_that_read_late_flags_the_run_even_with_kernel_stamps() -> None:
    """Issue 46: at 768 and 1024 streams on one core, 4-11 % of first tokens shared a read with
    the next (TTFT error p99 20-30 ms) while the summary said the generator kept up: kernel
    stamps cannot undo two tokens read together. Late reads (over 10 ms after their bytes
    arrived) above 0.01 % now flag the run, naming why; 512 streams' 0.0013 % does not."""
    fast = {**_r(0.0, 0.5, 5, 5), "itls": [0.01] * 4}  # a token every 10 ms
    kept_up = Schedule(kernel_clock=True, reads=954_286, late_reads=12)
    assert not compute_stats([fast], kept_up).behind
    fell = Schedule(kernel_clock=True, reads=1_413_641, late_reads=753, cause="its CPU")
    # a token every 50 ms: a read 10 ms late takes one token, its time its own (a busy machine)
    slow = {**_r(0.0, 0.5, 5, 5), "itls": [0.05] * 4}
    assert not compute_stats([slow], fell).behind
    st = compute_stats([fast], fell)
    assert st.behind
    (reason,) = st.behind_reasons
    assert reason.startswith("the reader took 0.053% of its reads more than 10 ms after"), reason
    assert reason.endswith("shares that one's time; its CPU")


def test_a_lane_whose_slots_waited_for_requests_flags_the_run() -> None:
    """Issue 46: the lane's Python side fills its queue once a pass; a slot that found it empty
    waited for the generator, not its user, and the closed loop sent late. Over 5 % of the
    slots' time held flags the run; over 1 % is a note; the ramp's few milliseconds are nothing."""
    rec = {**_r(0.0, 0.5, 5, 5), "itls": [0.01] * 4}
    quiet = compute_stats([rec], Schedule(held_s=0.3, busy_s=7800.0))
    assert not quiet.behind and not quiet.lag_notes
    noted = compute_stats([rec], Schedule(held_s=2.0, busy_s=98.0))
    assert not noted.behind
    (note,) = noted.lag_notes
    assert note.startswith("the users' slots waited 2.0% of their time"), note
    st = compute_stats([rec], Schedule(held_s=6.0, busy_s=94.0, cause="its CPU"))
    assert st.behind
    (reason,) = st.behind_reasons
    assert reason.startswith(
        "the users' slots waited 6.0% of their time for the generator's next request (at most"
        " 5%): the closed loop sent later"
    ), reason
    assert reason.endswith("its throughput is the generator's; its CPU"), reason
