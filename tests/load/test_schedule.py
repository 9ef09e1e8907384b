"""Arrival schedules: absolute times, worker splits, Poisson statistics; duration/rate parsing; shapes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from servecheck.errors import UsageError
from servecheck.load.workload.schedule import (
    FixedRate,
    Gamma,
    Poisson,
    for_worker,
    parse_burstiness,
    parse_duration,
    parse_rate,
    ramp,
    spike,
    split_count,
    steps,
)


def test_fixed_rate_is_absolute() -> None:
    offs = list(itertools.islice(FixedRate(4.0).offsets(), 1001))
    # slot i is exactly i/rate: no accumulated error even after 1000 slots
    assert offs[1000] == 250.0
    assert all(offs[i] == i / 4.0 for i in range(1001))
    assert FixedRate(4.0).planned(10.0) == 40


def test_workers_partition_the_fixed_schedule() -> None:
    rate, workers = 10.0, 3
    merged = sorted(
        t
        for k in range(workers)
        for t in itertools.islice(for_worker(rate, False, 0, k, workers).offsets(), 100)
        if t < 20.0
    )
    assert merged == [i / rate for i in range(200)]
    assert sum(for_worker(rate, False, 0, k, workers).planned(20.0) for k in range(workers)) == 200


def test_poisson_mean_rate_and_seed() -> None:
    offs = np.array(list(itertools.islice(Poisson(50.0, seed=3).offsets(), 20_000)))
    gaps = np.diff(offs)
    assert gaps.mean() == pytest.approx(1 / 50.0, rel=0.03)
    assert gaps.std() == pytest.approx(1 / 50.0, rel=0.05)  # exponential: std == mean
    assert list(itertools.islice(Poisson(50.0, seed=3).offsets(), 5)) == offs[:5].tolist()
    assert list(itertools.islice(Poisson(50.0, seed=4).offsets(), 5)) != offs[:5].tolist()
    worker_rates = [for_worker(60.0, True, 1, k, 3) for k in range(3)]
    assert all(isinstance(w, Poisson) and w.rate == 20.0 for w in worker_rates)
    assert len({w.seed for w in worker_rates if isinstance(w, Poisson)}) == 3


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_keeps_the_rate_and_sets_the_spread(burstiness: float) -> None:
    offs = np.array(list(itertools.islice(Gamma(50.0, burstiness, seed=3).offsets(), 20_000)))
    gaps = np.diff(offs)
    assert gaps.mean() == pytest.approx(1 / 50.0, rel=0.05)
    # a gamma of shape k has a coefficient of variation 1/sqrt(k): burstier below 1
    assert gaps.std() / gaps.mean() == pytest.approx(burstiness**-0.5, rel=0.08)
    assert list(itertools.islice(Gamma(50.0, burstiness, seed=3).offsets(), 5)) == offs[:5].tolist()


def test_gamma_workers_share_the_rate_with_their_own_seeds() -> None:
    parts = [for_worker(60.0, False, 1, k, 3, burstiness=0.5) for k in range(3)]
    assert all(isinstance(w, Gamma) and w.rate == 20.0 and w.burstiness == 0.5 for w in parts)
    assert len({w.seed for w in parts if isinstance(w, Gamma)}) == 3
    planned = Gamma(10.0, 0.5, seed=0).planned(30.0)
    assert planned == sum(
        1 for t in itertools.islice(Gamma(10.0, 0.5).offsets(), 10_000) if t < 30.0
    )


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "lots"])
def test_burstiness_must_be_a_positive_number(text: str) -> None:
    with pytest.raises(UsageError, match="burstiness"):
        parse_burstiness(text)


@pytest.mark.parametrize(
    ("total", "workers"),
    [pytest.param(10, 3, id="10-over-3"), pytest.param(2, 4, id="fewer-than-workers")],
)
def test_split_count(total: int, workers: int) -> None:
    shares = [split_count(total, k, workers) for k in range(workers)]
    assert sum(shares) == total and max(shares) - min(shares) <= 1


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("90s", 90.0), ("5m", 300.0), ("1h30m", 5400.0), ("250ms", 0.25)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "rate"), [("5", 5.0), ("5/s", 5.0), ("300/min", 5.0), ("0.5/s", 0.5), ("3600/h", 1.0)]
)
def test_parse_rate(text: str, rate: float) -> None:
    assert parse_rate(text) == rate


def test_parse_errors() -> None:
    with pytest.raises(
        UsageError, match=r"duration '5 minutes': write e.g. 30s, 5m, 1h30m or a number of seconds"
    ):
        parse_duration("5 minutes")
    with pytest.raises(UsageError, match=r"rate 'fast': write requests per second"):
        parse_rate("fast")


def test_shapes() -> None:
    r = ramp(1, 9, over=8.0, steps=4, hold=2.0)
    assert [r.tick(t)[0] for t in (0.0, 2.5, 4.5, 7.9, 9.0)] == [3, 5, 7, 9, 9]  # type: ignore[index]
    assert r.tick(10.0) is None and r.duration == 10.0
    s = steps(4, 4, every=5.0, count=3)
    assert [s.tick(t)[0] for t in (0, 5, 14.9)] == [4, 8, 12] and s.tick(15) is None  # type: ignore[index]
    sp = spike(2, 20, at=5.0, length=2.0, total=10.0)
    assert [sp.tick(t)[0] for t in (1, 5.5, 8)] == [2, 20, 2]  # type: ignore[index]
