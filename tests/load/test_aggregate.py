"""The streaming summary (servecheck/analysis/aggregate.py, keeper.py) against the record passes it
replaces: the same figures from workers' aggregates as from every record, in send order."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hdrh.histogram import HdrHistogram

from servecheck.analysis.aggregate import (
    Aggregate,
    Reservoir,
    Rule,
    aggregate_of,
    parse_records,
    read_aggregates,
    resolve_records,
    steady_of,
)
from servecheck.analysis.stats import PERCENTILES, Histogram, Schedule, Tally, compute_stats
from servecheck.analysis.steady import parse_steady_window
from servecheck.errors import SpecError
from servecheck.load.generator.keeper import RecordKeeper
from servecheck.records.record import RequestRecord


def _records(n: int, workers: int = 2, seed: int = 7) -> list[dict[str, Any]]:
    """An open-loop run of ``n`` requests spread over ``workers``, some failed, some shed, with
    ITLs, reasoning phases on a few, in send order, each with its worker and per-worker seq."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    seqs = [0] * workers
    for i in range(n):
        w = i % workers
        seqs[w] += 1
        sent = 1000.0 + i * 0.01
        ttft = rng.lognormvariate(-3.5, 0.5)
        itls = [rng.lognormvariate(-5, 0.3) for _ in range(rng.randint(0, 12))]
        e2e = ttft + sum(itls)
        err = "http-500" if i % 37 == 0 else "rate-limited" if i % 53 == 0 else None
        r: dict[str, Any] = {
            "worker": f"w{w}",
            "seq": seqs[w],
            "t_intended": sent - rng.random() * 0.002,
            "t_sent": sent,
            "t_done": sent + (0.001 if err else e2e),
            "ttft": None if err else ttft,
            "e2e": None if err else e2e,
            "tpot": None if err or not itls else sum(itls) / len(itls),
            "itls": [] if err else itls,
            "output_tokens": None if err else len(itls) + 1,
            "output_tokens_client": 0 if err else len(itls) + 1,
            "prompt_tokens": 20,
            "cached_tokens": None if err else 16 * (i % 2),
            "error": err,
            "abandoned": i % 41 == 0 and not err,
        }
        if i % 5 == 0 and not err:
            r.update(ttfr=ttft / 2, reasoning_tokens=3, reasoning_tokens_client=3)
            r.update(itls_reasoning=itls[:2], itls_answer=itls[2:])
        out.append(r)
    return out


@pytest.mark.parametrize(
    ("mu", "sigma", "n"),
    [
        pytest.param(-9.0, 0.5, 1, id="one-value-us"),
        pytest.param(-6.0, 1.0, 500, id="ms-spread"),
        pytest.param(-2.0, 2.0, 5000, id="wide"),
        pytest.param(3.0, 1.0, 300, id="seconds-to-clipped"),
    ],
)
def test_histogram_percentiles_are_hdrh_s_to_the_microsecond(
    mu: float, sigma: float, n: int
) -> None:
    rng = random.Random(n)
    values = [rng.lognormvariate(mu, sigma) for _ in range(n)]
    h = Histogram()
    h.record_many(values)
    ref = HdrHistogram(1, 3600 * 10**6, 3)
    for v in values:
        ref.record_value(max(1, min(int(round(v * 1e6)), 3600 * 10**6)))
    d = h.summary()
    assert d.percentiles == {k: ref.get_value_at_percentile(p) / 1000 for k, p in PERCENTILES}
    assert (d.min, d.max) == (ref.get_min_value() / 1000, ref.get_max_value() / 1000)
    decoded = HdrHistogram.decode(h.encode())  # the portable encoding still reads back in hdrh
    assert decoded.get_total_count() == n
    assert decoded.get_value_at_percentile(99.0) == ref.get_value_at_percentile(99.0)
    assert decoded.counts[:] == ref.counts[:]  # bucket for bucket (encode fills hdrh's counts)


def test_histogram_state_and_merge_are_exact() -> None:
    rng = random.Random(3)
    a, b, both = Histogram(), Histogram(), Histogram()
    for i in range(4000):
        v = rng.expovariate(30.0)
        (a if i % 3 else b).record(v)
        both.record(v)
    back = Histogram.from_state(json.loads(json.dumps(a.state())))
    back.add(b)
    assert back.summary() == both.summary()


def test_tallies_of_a_split_add_up_to_the_whole() -> None:
    recs = _records(3000)
    parts = [Tally(), Tally()]
    for r in recs:
        parts[int(r["worker"][1:])].add(r)
    merged = Tally.from_state(json.loads(json.dumps(parts[0].state())))
    merged.merge(Tally.from_state(json.loads(json.dumps(parts[1].state()))))
    assert merged.stats(Schedule()).as_dict() == compute_stats(recs).as_dict()


def _rule(**kw: Any) -> Rule:
    return Rule(slice_s=2.0, mode="fixed", users=1, duration_s=30.0, **kw)


def _by_worker(recs: list[dict[str, Any]], rule: Rule, origin: float) -> Aggregate:
    """Each worker's aggregate fed as its requests finish (not in send order), through its
    state on disk, merged."""
    aggs: dict[str, Aggregate] = {}
    for r in sorted(recs, key=lambda r: r["t_done"]):
        agg = aggs.get(r["worker"])
        if agg is None:
            agg = aggs[r["worker"]] = Aggregate(rule.share(len(aggs), 2), seed=len(aggs))
            agg.begin(origin)
        agg.add(r)
    merged: Aggregate | None = None
    for agg in aggs.values():
        back = Aggregate.from_state(json.loads(json.dumps(agg.state())), rule)
        if merged is None:
            merged = back
        else:
            merged.merge(back)
    assert merged is not None
    return merged


def test_workers_aggregates_give_the_figures_of_every_record_in_send_order() -> None:
    recs = _records(3000)
    rule = _rule(slos=("ttft_p95<=40ms",))
    ordered = aggregate_of(recs, rule)
    merged = _by_worker(recs, rule, origin=recs[0]["t_sent"])
    assert merged.count == ordered.count == 3000
    assert merged.stats(Schedule()).as_dict() == ordered.stats(Schedule()).as_dict()
    assert merged.scan.as_list() == ordered.scan.as_list()
    assert merged.timings.as_dict() == ordered.timings.as_dict()
    assert merged.client.state() == ordered.client.state()
    assert merged.extras == ordered.extras == {"cached_tokens"}  # what only the records tell
    assert merged.window is not None and ordered.window is not None
    assert merged.window.state() == ordered.window.state()  # an open loop: the same window
    window = parse_steady_window("auto")
    m = steady_of(merged, window, mode="fixed", users=1, duration_s=30.0)
    assert (
        m.bounds.applied and m.stats is not None and m.stats.total == merged.window.counts["total"]
    )


def test_a_closed_loop_window_opens_after_each_worker_s_users_started() -> None:
    """Closed loop, 4 users over 2 workers: a worker's window opens at its own 2nd send (its
    users' share), the run's at the 4th; each holds the requests sent after the first second."""
    recs = [r for r in _records(2000) if r["error"] is None]
    rule = Rule(slice_s=2.0, mode="closed", users=4, duration_s=18.0)
    ordered = aggregate_of(recs, rule)
    merged = _by_worker(recs, rule, origin=recs[0]["t_sent"])
    assert ordered.window is not None and merged.window is not None
    assert merged.window.counts["total"] == ordered.window.counts["total"]
    assert merged.window.counts["total"] < merged.whole.counts["total"]


def test_a_warm_up_by_count_is_split_between_workers() -> None:
    recs = _records(400)
    rule = _rule(warmup_requests=10)
    ordered = aggregate_of(recs, rule)
    merged = _by_worker(recs, rule, origin=recs[0]["t_sent"])
    assert ordered.warm.count == merged.warm.count == 10
    assert merged.whole.counts["total"] == ordered.whole.counts["total"] == 390
    assert merged.client.requests == ordered.client.requests  # the engine counts the warm-up too


def test_the_reservoir_is_uniform_and_merges_by_weight() -> None:
    r = Reservoir(1000, seed=1)
    for v in range(100_000):
        r.add(float(v))
    assert len(r.values) == 1000 and r.seen == 100_000
    assert 45_000 < sum(r.values) / len(r.values) < 55_000
    zeros, ones = Reservoir(1000, seed=2), Reservoir(1000, seed=3)
    for _ in range(90_000):
        zeros.add(0.0)
    for _ in range(10_000):
        ones.add(1.0)
    zeros.merge(ones)
    assert zeros.seen == 100_000 and len(zeros.values) == 1000
    assert 0.06 < sum(zeros.values) / 1000 < 0.14  # a tenth of the stream were ones


def _rec(seq: int) -> RequestRecord:
    sent = 1000.0 + seq * 0.01
    return RequestRecord(
        target="t",
        scenario="chat",
        worker="w0",
        seq=seq,
        t_intended=sent,
        t_sent=sent,
        t_done=sent + 0.05,
        ttft=0.01,
        e2e=0.05,
        itls=[0.01] * 4,
        output_tokens=5,
        output_tokens_client=5,
    )


@pytest.mark.parametrize(
    ("mode", "lines"),
    [
        pytest.param("all", 300, id="all"),
        pytest.param("sample:40", 40, id="sample"),
        pytest.param("none", None, id="none"),
    ],
)
def test_the_keeper_keeps_what_records_says_and_always_the_aggregate(
    tmp_path: Path, mode: str, lines: int | None
) -> None:
    keeper = RecordKeeper(tmp_path, "w0", mode, _rule(), seed=1)
    for seq in range(1, 301):
        keeper.keep(_rec(seq))
    keeper.checkpoint()
    _, _, bad = read_aggregates(tmp_path, _rule())
    assert bad == ["w0: stopped before its end; counted up to its last checkpoint"]
    keeper.close()
    agg, counts, bad = read_aggregates(tmp_path, _rule())
    assert agg is not None and bad == [] and counts == {"w0": 300}
    assert agg.whole.counts["ok"] == 300 and agg.whole.hist["itl"].count == 1200
    path = tmp_path / "records-w0.jsonl"
    if lines is None:
        assert not path.exists()
    else:
        got = path.read_text().splitlines()
        assert len(got) == lines and len({json.loads(x)["seq"] for x in got}) == lines


def test_an_unreadable_aggregate_is_named(tmp_path: Path) -> None:
    (tmp_path / "aggregate-w3.json").write_text("{not json")
    agg, _, bad = read_aggregates(tmp_path, _rule())
    assert agg is None and len(bad) == 1 and bad[0].startswith("w3: its aggregate could not")


@pytest.mark.parametrize(
    ("text", "planned", "want"),
    [
        pytest.param(None, 10, "all", id="auto-small"),
        pytest.param("auto", None, "all", id="auto-unplanned"),
        pytest.param("auto", 5_000_000, "sample:20000", id="auto-large"),
        pytest.param("SAMPLE:500", 5_000_000, "sample:500", id="sample"),
        pytest.param("none", 10, "none", id="none"),
    ],
)
def test_records_modes_resolve(text: str | None, planned: int | None, want: str) -> None:
    assert resolve_records(parse_records(text), planned) == want


@pytest.mark.parametrize("text", ["some", "sample:", "sample:0", "sample:x"])
def test_a_bad_records_mode_names_the_option(text: str) -> None:
    with pytest.raises(SpecError, match="sample:N") as err:
        parse_records(text)
    assert "records" in err.value.fields


def _keeper_run(tmp_path: Path, mode: str, n: int, final: bool) -> None:
    keeper = RecordKeeper(tmp_path, "w0", mode, _rule(), seed=1)
    for seq in range(1, n + 1):
        keeper.keep(_rec(seq))
        if seq == n // 2:
            keeper.checkpoint()  # what a process killed now would leave
    if final:
        keeper.close()
    elif keeper.writer is not None:
        keeper.writer.close()


@pytest.mark.parametrize(
    ("mode", "final", "source", "counted", "missing"),
    [
        pytest.param("all", True, "workers", 40, 0, id="finished"),
        pytest.param("all", False, "records", 40, 0, id="killed-records-on-disk"),
        pytest.param("none", False, "workers", 20, 1, id="killed-checkpoint-only"),
    ],
)
def test_the_summary_takes_the_aggregates_or_rebuilds_from_complete_records(
    tmp_path: Path, mode: str, final: bool, source: str, counted: int, missing: int
) -> None:
    """A process killed mid-run: with its records on disk the master rebuilds everything from
    them (exact); with only a checkpoint it counts up to it and says so."""
    from servecheck.load.summary import _aggregate, _Records

    _keeper_run(tmp_path, mode, 40, final)
    m = _aggregate(tmp_path, _rule(), _Records(tmp_path))
    assert (m.source, m.agg.count, len(m.missing)) == (source, counted, missing), m.missing
    if missing:
        assert "last checkpoint" in m.missing[0]


def test_a_reservoir_fed_one_at_a_time_is_the_one_fed_in_batches() -> None:
    """``add`` (the keeper's per-request path, issue 46: its own fast branches) draws what
    ``add_many`` draws from the same seed, while it fills and once it is full."""
    rng = random.Random(5)
    values = [rng.random() for _ in range(5000)]
    one, batch = Reservoir(300, seed=9), Reservoir(300, seed=9)
    for v in values:
        one.add(v)
    for i in range(0, len(values), 64):
        batch.add_many(values[i : i + 64])
    assert (one.seen, one.values) == (batch.seen, batch.values)
