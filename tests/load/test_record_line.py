"""The record line's ITL list, written by one format call (records._floats6), must hold exactly
the values ``round(x, 6)`` gave before, in the same key order, for any finite ITLs; where the C
writer is built (``_line.floats6``) its text is the Python reference's, byte for byte."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servecheck.records import record
from servecheck.records.record import RequestRecord

_itl = st.floats(min_value=-1.0, max_value=3600.0, allow_nan=False, allow_infinity=False)


@given(st.lists(_itl, max_size=300))
def test_itls_round_to_microseconds_as_before(itls: list[float]) -> None:
    rec = RequestRecord("t", "chat", "w0-1", 1, 1.0, 1.0, itls=itls, ttft=0.1, e2e=0.5)
    d = json.loads(rec.to_json())
    assert d["itls"] == [round(x, 6) for x in itls]
    assert list(d)[12:15] == ["tpot", "itls", "output_tokens"]  # the old key order


# The C writer (servecheck/records/_line.c) against its reference, on what it writes itself (a
# value below 10^4 s whose microsecond fraction is not within 4e-6 of one half) and on what it
# hands to Python's own printf: halves, huge, NaN, infinities, negative zero.
_any_float = st.one_of(
    st.floats(min_value=-2.0, max_value=2.0),
    st.floats(min_value=0.0, max_value=10_100.0),
    st.integers(0, 10**10).map(lambda u: (u + 0.5) / 1e6),
    st.integers(-(10**10), 10**10).map(lambda u: u / 1e6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, -1e-9, 5e-7, 2.5e-6, 9999.9999995, 123.4567885]),
)


def _native() -> Any:
    try:
        from servecheck.records import _line
    except ImportError:  # pragma: no cover - depends on the build
        if sys.platform == "linux":
            raise
        pytest.skip("servecheck.records._line is not built (make venv builds it)")
    return _line


@given(st.lists(_any_float, max_size=120))
def test_the_c_itl_array_is_python_s_text(xs: list[float]) -> None:
    line = _native()
    assert line.floats6(xs) == record._floats6_py(xs)
    assert line.floats6(tuple(xs)) == record._floats6_py(xs)
    assert record._floats6(xs) == record._floats6_py(xs)


@pytest.mark.parametrize(
    "xs",
    [
        pytest.param([1, 2.0], id="an-int"),
        pytest.param([0.5, True], id="a-bool"),
        pytest.param([0.5, None], id="a-none"),
    ],
)
def test_the_c_itl_array_leaves_what_is_not_a_float_to_python(xs: list[Any]) -> None:
    assert _native().floats6(xs) is None
    if None not in xs:
        assert record._floats6(xs) == record._floats6_py(xs) == f"[{xs[0]:.6f},{xs[1]:.6f}]"
