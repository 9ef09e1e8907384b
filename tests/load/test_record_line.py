"""The record line's ITL list, written by one format call (records._floats6), must hold exactly
the values ``round(x, 6)`` gave before, in the same key order, for any finite ITLs."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from servecheck.records.record import RequestRecord

_itl = st.floats(min_value=-1.0, max_value=3600.0, allow_nan=False, allow_infinity=False)


@given(st.lists(_itl, max_size=300))
def test_itls_round_to_microseconds_as_before(itls: list[float]) -> None:
    rec = RequestRecord("t", "chat", "w0-1", 1, 1.0, 1.0, itls=itls, ttft=0.1, e2e=0.5)
    d = json.loads(rec.to_json())
    assert d["itls"] == [round(x, 6) for x in itls]
    assert list(d)[12:15] == ["tpot", "itls", "output_tokens"]  # the old key order
