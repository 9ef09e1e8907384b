"""The streaming summary's C prepare (servecheck/analysis/_hdrfast.c) against its Python reference:
the same bucket keys, sums, bounds and clip counts, and the same errors.

`make venv` builds the extension (on Linux, as it builds the native reader test_rxthread.py
tests); these tests fail on Linux without it and skip elsewhere.
"""

from __future__ import annotations

import math
import sys

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
