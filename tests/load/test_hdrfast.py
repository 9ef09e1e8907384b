"""The streaming summary's C prepare (servecheck/analysis/_hdrfast.c) against its Python reference:
the same bucket keys, sums, bounds and clip counts, and the same errors.

`make venv` builds the extension (on Linux, as it builds the native reader test_rxthread.py
tests); these tests fail on Linux without it and skip elsewhere.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servecheck.analysis import stats

try:
    from servecheck.analysis import _hdrfast
except ImportError:  # pragma: no cover - depends on the build
    if sys.platform == "linux":
        raise
    pytest.skip(
        "servecheck.analysis._hdrfast is not built (make venv builds it)", allow_module_level=True
    )

seconds = st.floats(min_value=-10.0, max_value=5000.0, allow_nan=False)
values = st.lists(
    st.one_of(seconds, st.none(), st.just(math.nan), st.integers(-3, 4000)), max_size=80
)


def test_the_summary_uses_the_c_prepare_where_it_is_built() -> None:
    assert stats.prepare is _hdrfast.prepare


@settings(max_examples=400, deadline=None)
@given(values)
def test_prepare_is_the_python_reference(vals: list[float | None]) -> None:
    assert _hdrfast.prepare(vals) == stats.prepare_py(vals)


@pytest.mark.parametrize(
    "vals",
    [
        pytest.param([], id="empty"),
        pytest.param([None, math.nan], id="nothing-kept"),
        pytest.param([0.0, -1.0, 1e-7], id="below-one-us"),
        pytest.param([3600.0, 3600.0000004, 3600.000001, 1e300], id="an-hour-and-beyond"),
        pytest.param([0.010, 0.0100005, 2.5, 0.000_001], id="bucket-edges"),
        pytest.param((0.01, 0.02), id="a-tuple"),
        pytest.param([True, 2], id="bool-and-int"),
    ],
)
def test_prepare_edges(vals: list[float | None]) -> None:
    assert _hdrfast.prepare(vals) == stats.prepare_py(vals)


def test_prepare_refuses_what_python_refuses() -> None:
    for bad in ([math.inf], [-math.inf], ["0.1"]):
        with pytest.raises((OverflowError, TypeError)) as c_err:
            _hdrfast.prepare(bad)
        with pytest.raises((OverflowError, TypeError)) as py_err:
            stats.prepare_py(bad)
        assert c_err.type is py_err.type


# -- the histogram's C core (issue 46) against stats._PyHistogram, the reference ---------------

durations = st.one_of(seconds, st.integers(-3, 4000), st.just(0.0), st.just(3600.0000006))


def test_the_summary_histogram_is_the_c_core_where_it_is_built() -> None:
    assert issubclass(stats.Histogram, _hdrfast.Hist)
    assert stats.Histogram is not stats._PyHistogram


def _same(c: Any, py: Any) -> None:
    assert c.state() == py.state()
    assert c.totals() == py.totals()
    assert (c.count, c.clipped) == (py.count, py.clipped)
    assert c.summary() == py.summary()
    assert c.encode() == py.encode()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(durations, st.lists(st.one_of(seconds, st.none()), max_size=70)), max_size=60
    ),
    st.lists(durations, max_size=40),
)
def test_the_c_histogram_is_the_python_reference(ops: list[Any], more: list[float]) -> None:
    """Values one at a time and ITL lists prepare()d, then every cold path: a merge, a copy, a
    subtraction, the state round trip."""
    c, py = stats.Histogram(), stats._PyHistogram()
    for op in ops:
        if isinstance(op, list):
            p = stats.prepare(op)
            c.record_prepared(p)
            py.record_prepared(p)
        else:
            c.record(op)
            py.record(op)
    _same(c, py)
    c2, py2 = stats.Histogram(), stats._PyHistogram()
    for v in more:
        c2.record(v)
        py2.record(v)
    whole_c, whole_py = c.copy(), py.copy()
    whole_c.add(c2)
    whole_py.add(py2)
    _same(whole_c, whole_py)
    whole_c.subtract(c2)
    whole_py.subtract(py2)
    _same(whole_c, whole_py)
    _same(stats.Histogram.from_state(c.state()), stats._PyHistogram.from_state(py.state()))
    apart_c, apart_py = c.copy(), py.copy()  # values that were never added here: as Python does
    apart_c.subtract(c2)
    apart_py.subtract(py2)
    assert apart_c.totals() == apart_py.totals()
    assert apart_c.items() == apart_py.items()
    assert type(apart_c) is stats.Histogram
    assert c.state() == py.state(), "a copy shares its counts with the original"


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        pytest.param(math.nan, ValueError, id="nan"),
        pytest.param(math.inf, OverflowError, id="inf"),
        pytest.param("0.1", TypeError, id="text"),
    ],
)
def test_the_c_histogram_refuses_what_python_refuses(bad: Any, error: type[Exception]) -> None:
    for h in (stats.Histogram(), stats._PyHistogram()):
        with pytest.raises(error):
            h.record(bad)
        assert h.count == 0


_AGGREGATE = """
import json, sys
if sys.argv[1] == "python":
    sys.modules["servecheck.analysis._hdrfast"] = None  # as an install without the extension
from servecheck.analysis import stats
from servecheck.analysis.aggregate import Rule, aggregate_of
sys.path.insert(0, sys.argv[2])
from test_aggregate import _records
assert (stats.Histogram is stats._PyHistogram) == (sys.argv[1] == "python")
recs = _records(3000)
for i, r in enumerate(recs):  # the TTFT decomposition's stamps (analysis/timings.py), in ms
    if r["ttft"] is not None:
        ttft_ms = r["ttft"] * 1000.0
        r["stamps"] = {"written": 0.05 + i % 7 / 100, "headers": ttft_ms - 1.5,
                       "body": ttft_ms - 0.2, "last_token": r["e2e"] * 1000.0}
agg = aggregate_of(recs, Rule(users=8, duration_s=30.0, slice_s=2.0))
st = agg.stats(stats.Schedule(mode="fixed"))
print(json.dumps({"state": agg.state(), "stats": st.as_dict()}, sort_keys=True))
"""


def test_an_aggregate_is_the_same_with_and_without_the_c_core() -> None:
    """The whole streaming summary of a run (tallies, slices, client counts, timings), fed the
    same records, in a process with the C core and in one where it cannot be imported."""
    here = str(Path(__file__).resolve().parent)
    out = {
        kind: subprocess.run(
            [sys.executable, "-c", _AGGREGATE, kind, here],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        for kind in ("native", "python")
    }
    native, python = json.loads(out["native"]), json.loads(out["python"])
    assert native["state"]["whole"]["hist"]["itl"][1], "the run recorded no ITLs"
    assert native["state"]["timings"]["stamped"], "the run's records had no stamps"
    assert native == python
