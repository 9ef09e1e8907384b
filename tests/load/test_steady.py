"""The steady window and the time slices (servecheck/analysis/steady.py), on hand-made records."""

from __future__ import annotations

from typing import Any

import pytest

from servecheck.analysis.aggregate import Rule, aggregate_of, steady_of
from servecheck.analysis.stats import Histogram
from servecheck.analysis.steady import (
    MAX_SLICES,
    SteadyWindow,
    parse_slice_s,
    parse_steady_window,
    scan,
    window_bounds,
)
from servecheck.errors import SpecError


def _rec(sent: float, e2e: float, ttft: float = 0.01, error: str | None = None) -> dict[str, Any]:
    return {
        "t_sent": sent,
        "t_intended": sent,
        "t_done": sent + e2e,
        "ttft": None if error else ttft,
        "e2e": None if error else e2e,
        "itls": [] if error else [0.001, 0.002],
        "output_tokens": 0 if error else 3,
        "error": error,
    }


def _closed_run(users: int = 4, duration: float = 20.0) -> list[dict[str, Any]]:
    """A closed loop of ``users`` whose first second is slow (the ramp), then fast."""
    out = []
    for u in range(users):
        t = 1000.0 + u * (1.0 / users)  # spawned over the first second
        while t < 1000.0 + duration:
            slow = t < 1001.0
            e2e = 0.5 if slow else 0.1
            out.append(_rec(t, e2e, ttft=0.4 if slow else 0.02))
            t += e2e
    return sorted(out, key=lambda r: r["t_sent"])


def _measure(
    recs: list[dict[str, Any]], window: str, *, mode: str, users: int, duration_s: float
) -> Any:
    rule = Rule(slice_s=5.0, window=window, mode=mode, users=users, duration_s=duration_s)
    agg = aggregate_of(recs, rule)
    return steady_of(
        agg, parse_steady_window(window), mode=mode, users=users, duration_s=duration_s
    )


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("auto", SteadyWindow("auto"), id="auto"),
        pytest.param(None, SteadyWindow("auto"), id="default-auto"),
        pytest.param("none", SteadyWindow("none"), id="none"),
        pytest.param("10s:50s", SteadyWindow("range", 10.0, 50.0), id="range"),
        pytest.param("5s:", SteadyWindow("range", 5.0, None), id="open-end"),
        pytest.param(":30", SteadyWindow("range", 0.0, 30.0), id="open-start"),
    ],
)
def test_window_parses(text: str | None, want: SteadyWindow) -> None:
    assert parse_steady_window(text) == want


@pytest.mark.parametrize(
    ("text", "pinned"),
    [
        pytest.param("later", "auto, none or START:END", id="word"),
        pytest.param("50s:10s", "END after START", id="backwards"),
        pytest.param("x:10s", "duration", id="bad-duration"),
    ],
)
def test_bad_window_names_the_field(text: str, pinned: str) -> None:
    with pytest.raises(SpecError, match=pinned) as err:
        parse_steady_window(text)
    assert "steady_window" in err.value.fields


def test_slice_width_is_bounded_below() -> None:
    assert parse_slice_s("2s") == 2.0
    with pytest.raises(SpecError, match="at least 100ms"):
        parse_slice_s("10ms")


def test_auto_window_leaves_the_ramp_out_and_judges_the_steady_part() -> None:
    recs = _closed_run()
    m = _measure(recs, "auto", mode="closed", users=4, duration_s=20.0)
    assert m.bounds.applied, m.bounds.how
    assert m.bounds.start == pytest.approx(1001.0, abs=0.3)
    assert m.stats is not None and 0 < m.stats.total < len(recs)
    # The ramp's slow TTFTs are out of the window's figures, in the whole run's.
    assert (m.stats.latency["ttft"].get("max") or 0) < 100.0
    assert all(r["t_sent"] >= m.bounds.start for r in recs if m.bounds.holds(r))


def test_requests_straddling_the_stop_are_out() -> None:
    recs = [_rec(1000.0 + i * 0.5, 0.2) for i in range(40)] + [_rec(1019.9, 2.0)]
    m = _measure(recs, "auto", mode="fixed", users=1, duration_s=20.0)
    assert m.bounds.applied
    assert m.stats is not None and m.stats.total == 40  # the one finishing at 1021.9 is out


@pytest.mark.parametrize(
    ("mode", "window", "duration", "pinned"),
    [
        pytest.param("shape", "auto", 20.0, "not one steady load", id="shape-whole"),
        pytest.param("trace", "auto", 20.0, "not one steady load", id="trace-whole"),
        pytest.param("closed", "none", 20.0, "whole run", id="none"),
        pytest.param("closed", "auto", 1.5, "too short", id="too-short"),
    ],
)
def test_auto_judges_whole_runs_with_the_reason(
    mode: str, window: str, duration: float, pinned: str
) -> None:
    recs = _closed_run(duration=duration)
    sc = scan(iter(recs), 5.0, 4)
    b = window_bounds(
        parse_steady_window(window), sc, mode=mode, users=4, run_start=1000.0, duration_s=duration
    )
    assert not b.applied
    assert pinned in b.how


def test_range_window_is_relative_to_the_first_send() -> None:
    recs = _closed_run()
    sc = scan(iter(recs), 5.0, 4)
    b = window_bounds(
        parse_steady_window("5s:10s"), sc, mode="closed", users=4, run_start=1000.0, duration_s=20.0
    )
    assert (b.applied, b.start, b.end) == (True, 1005.0, 1010.0)


def test_slices_count_every_request_once_with_percentiles() -> None:
    recs = _closed_run() + [_rec(1010.0, 0.0, error="http-500")]
    recs.sort(key=lambda r: r["t_sent"])
    rows = scan(iter(recs), 5.0, 4).as_list()
    # The last requests finish just past 20 s: a fifth slice holds them.
    assert [r["start_s"] for r in rows] == [0.0, 5.0, 10.0, 15.0, 20.0]
    assert sum(r["count"] for r in rows) == len(recs)
    assert sum(r["errors"] for r in rows) == 1
    first, later = rows[0], rows[2]
    assert first["ttft_ms"]["p99"] > later["ttft_ms"]["p99"]  # the ramp's slow first second
    assert 3.0 < later["in_flight"] <= 4.01  # four users, always one request each
    assert set(later["hdr"]) == {"ttft", "itl", "e2e"}


def test_long_runs_merge_slices_to_stay_bounded() -> None:
    recs = [_rec(1000.0 + i, 0.1) for i in range(int(MAX_SLICES * 3))]
    sc = scan(iter(recs), 1.0, 0)
    rows = sc.as_list()
    assert len(rows) <= MAX_SLICES
    assert sc.slice_s == 4.0  # doubled twice
    assert sum(r["count"] for r in rows) == len(recs)


def test_merged_histograms_equal_one_histogram() -> None:
    a, b, both = Histogram(), Histogram(), Histogram()
    for i, v in enumerate([0.01, 0.02, 0.5, 0.03, 1.2, 0.07]):
        (a if i % 2 else b).record(v)
        both.record(v)
    a.add(b)
    assert a.summary().as_dict() == both.summary().as_dict()


def test_slices_count_the_shed_errors_apart_and_keep_them_through_a_merge() -> None:
    """A 429 is an error of its slice and also ``rate_limited`` (the load page draws failed
    and shed apart, as the run's error rate counts them); two workers' scans add up, and a
    checkpoint from before the count reads as none shed."""
    from servecheck.analysis.steady import Scan

    mine = [_rec(1000.0, 0.1), _rec(1000.2, 0.0, error="rate-limited")]
    theirs = [_rec(1000.4, 0.0, error="rate-limited"), _rec(1000.6, 0.0, error="http-500")]
    a, b = scan(iter(mine), 1.0, 0), scan(iter(theirs), 1.0, 0)
    a.merge(Scan.from_state(b.state()))
    (row,) = a.as_list()
    assert (row["count"], row["errors"], row["rate_limited"]) == (4, 3, 2)
    old = b.state()
    old["slices"] = {i: st[:5] for i, st in old["slices"].items()}  # before rate_limited
    (row,) = Scan.from_state(old).as_list()
    assert (row["errors"], row["rate_limited"]) == (2, 0)
