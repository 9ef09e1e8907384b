"""The record line's ITL list, written by one format call (records._floats6), must hold exactly
the values ``round(x, 6)`` gave before, in the same key order, for any finite ITLs; where the C
writer is built (``_line.floats6``) its text is the Python reference's, byte for byte."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from hypothesis import given, settings
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


# Whole records, as varied as the C writer of a record's dict and line (``_line.record``) must
# either write exactly or leave to the encoder: odd strings, ties of the microsecond rounding,
# timestamps, NaN and infinities, ints where floats go, stamps, errors, cancels, reasoning.
_time = st.one_of(
    st.floats(min_value=1.7e9, max_value=1.8e9),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(0, 10**6).map(lambda k: k / 128),  # exact ties of round(x, 6)
    st.integers(-(10**12), 10**12).map(lambda u: (u + 0.5) / 1e6),
    st.sampled_from([0.0, -0.0, -1e-9, 4e-5, 9.99994e-5, 2147483647.9999995, 3e9]),
    st.integers(-5, 5),
)
_text = st.one_of(st.text(max_size=12), st.sampled_from(["chat", "w0-1", 'say "hi"', "a\\b"]))
_maybe_time = st.one_of(st.none(), _time)
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), _time, _text)


@st.composite
def _records(draw: st.DrawFn) -> RequestRecord:
    rec = RequestRecord(
        draw(_text), draw(_text), draw(_text), draw(st.integers(0, 2**40)), draw(_time),
        draw(_time), request_id=draw(_text), kind=draw(_text),
    )  # fmt: skip
    rec.t_done, rec.ttft, rec.e2e, rec.tpot, rec.ttfa = (draw(_maybe_time) for _ in range(5))
    rec.itls = draw(st.lists(_any_float, max_size=70))
    rec.output_tokens = draw(st.one_of(st.none(), st.integers(0, 5000)))
    rec.output_tokens_client = draw(st.integers(0, 5000))
    rec.prompt_tokens, rec.status = draw(st.one_of(st.none(), st.integers(0, 99))), 200
    rec.error = draw(st.sampled_from([None, "http-503", "rate-limited", "timeout"]))
    rec.error_message, rec.abandoned = draw(_text), draw(st.booleans())
    rec.retry_after_s = draw(st.one_of(st.none(), _time))
    rec.stamps = draw(st.one_of(st.none(), st.dictionaries(_text, _scalar, max_size=6)))
    rec.server_timings = draw(st.one_of(st.none(), st.dictionaries(_text, _time, max_size=3)))
    rec.cancelled = draw(st.sampled_from([None, "ttft", "mid-stream"]))
    rec.new_conn, rec.response_id = draw(st.one_of(st.none(), st.booleans())), draw(_text)
    rec.cached_tokens, rec.turn = draw(_scalar), draw(st.one_of(st.none(), st.integers(0, 9)))
    rec.reasoning_tokens = draw(st.one_of(st.none(), st.integers(0, 9)))
    if draw(st.booleans()):  # reasoning phases: the encoder's path
        rec.ttfr, rec.reasoning_tokens_client = draw(_maybe_time), draw(st.integers(0, 9))
        rec.itls_reasoning, rec.itls_answer = rec.itls[:3], rec.itls[3:]
    return rec


@given(_records())
@settings(max_examples=400)
def test_a_record_s_dict_and_line_are_the_encoder_s(rec: RequestRecord) -> None:
    """``dict_and_line``, ``as_dict`` and ``to_json`` (from ``_line.record`` where it is built)
    against ``_reference_encoded``: the same line bytes, and dicts with the same keys in
    the same order, values of the same types and reprs (NaN is not equal to itself)."""
    want_dict, want_line = rec._reference_encoded()
    got_dict, got_line = rec.dict_and_line()
    assert got_line == want_line == rec.to_json()
    for d in (got_dict, rec.as_dict()):
        assert list(d) == list(want_dict)
        assert [(type(v), repr(v)) for v in d.values()] == [
            (type(v), repr(v)) for v in want_dict.values()
        ]


def test_the_common_record_goes_through_the_c_writer() -> None:
    """A streamed answer's record (stamps, ids, no reasoning) is one the C writer writes, and a
    reasoning one is left to the encoder."""
    _native()
    rec = RequestRecord("ref", "chat", "w0", 7, 1765000000.0012345, 1765000000.0015, itls=[0.01])
    rec.t_done, rec.ttft, rec.e2e, rec.ttfa = 1765000000.2, 0.03, 0.2, 0.03
    rec.stamps, rec.new_conn, rec.response_id = {"written": 0.04, "body": 29.5}, False, "c-1"
    got = rec._native(True)
    assert got is not None and got[1] == rec._reference_encoded()[1]
    rec.ttfr, rec.reasoning_tokens_client = 0.01, 2
    assert rec._native(True) is None


@given(st.lists(st.one_of(_time, st.floats(-1e-3, 1e-3)), max_size=60))
def test_rounding_a_list_in_c_is_python_s_round(xs: list[float]) -> None:
    """``rounded6`` (a checkpoint's reservoirs) gives ``round(v, 6)``'s floats (and ints) exactly."""
    _native()
    want = record.rounded6_py(xs)
    got = record.rounded6(xs)
    assert [(type(v), repr(v)) for v in got] == [(type(v), repr(v)) for v in want]
