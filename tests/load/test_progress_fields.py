"""The command's progress and down watch read an answered request's records line without
decoding it whole (records.progress_fields, issue 46); what they read must be what ``json.loads``
reads, for any record, and any other line must be left to ``json.loads``."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from servecheck.records.record import RequestRecord, progress_fields

_t = st.floats(min_value=0.0, max_value=2e9, allow_nan=False, allow_infinity=False)
_dur = st.none() | st.floats(min_value=0.0, max_value=3600.0, allow_nan=False)
# strings that try to look like the fields: quotes, backslashes, the keys themselves
_text = st.lists(
    st.sampled_from(list('ab",\\:{}[] '))
    | st.sampled_from(
        ['"t_sent":1,', '"ttft":2,', '"error":null,', '"abandoned":false', '],"output_tokens":9,']
    ),
    max_size=12,
).map("".join)
_timings = st.none() | st.dictionaries(
    st.sampled_from(["ttft", "error", "t_sent", "abandoned", "cancelled", "prompt_n"]),
    st.none() | st.integers(0, 9) | st.booleans(),
    max_size=4,
)


@st.composite
def records(draw: st.DrawFn) -> RequestRecord:
    sent = draw(_t)
    return RequestRecord(
        target=draw(_text),
        scenario=draw(_text),
        worker=draw(_text),
        seq=draw(st.integers(0, 10**9)),
        t_intended=sent,
        t_sent=sent,
        t_done=draw(st.none() | _t),
        request_id=draw(_text),
        ttft=draw(_dur),
        e2e=draw(_dur),
        itls=draw(st.lists(st.floats(0.0, 10.0), max_size=8)),
        output_tokens=draw(st.none() | st.integers(0, 10**6)),
        output_tokens_client=draw(st.integers(0, 10**6)),
        status=draw(st.none() | st.sampled_from([200, 429, 500])),
        error=draw(st.none() | st.sampled_from(["connect", "stream-error", "http-500", "lost"])),
        error_message=draw(_text),
        abandoned=draw(st.booleans()),
        cancelled=draw(st.none() | st.sampled_from(["mid-stream", "before-first-token"])),
        server_timings=draw(_timings),
        finish_reason=draw(st.none() | _text),
    )


@settings(max_examples=400)
@given(records())
def test_what_it_reads_is_what_json_reads_and_the_rest_goes_whole(rec: RequestRecord) -> None:
    line = rec.to_json().encode()
    full = json.loads(line)
    light = progress_fields(line)
    plain = full["error"] is None and not full["abandoned"] and full.get("cancelled") is None
    if light is None:
        return  # decoded whole by the caller: always right
    assert plain, "a failed, abandoned or cancelled request must be decoded whole"
    assert light == {k: full[k] for k in light}
    assert set(light) >= {"t_sent", "ttft", "output_tokens", "output_tokens_client", "error"}


def test_a_plain_answer_is_read_without_decoding() -> None:
    """The common line (an answer, no error) takes the fast read: that is the point."""
    rec = RequestRecord("t", "chat", "w", 3, 10.5, 10.5, t_done=11.2, ttft=0.1, e2e=0.7,
                        itls=[0.01] * 63, output_tokens=64, output_tokens_client=64,
                        status=200, server_timings={"error": None, "ttft": 5})  # fmt: skip
    assert progress_fields(rec.to_json().encode()) == {
        "t_sent": 10.5, "ttft": 0.1, "output_tokens": 64, "output_tokens_client": 64,
        "error": None, "abandoned": False,
    }  # fmt: skip
    failed = RequestRecord("t", "chat", "w", 4, 10.5, 10.5, error="connect", status=None)
    assert progress_fields(failed.to_json().encode()) is None
    assert progress_fields(b"not json") is None


def test_a_nested_object_that_looks_like_an_answer_does_not_fool_it() -> None:
    """A failed request whose engine timings happen to hold ``"error":null`` and
    ``"abandoned":false`` is still a failure: only the top level's fields count."""
    rec = RequestRecord("t", "chat", "w", 5, 10.5, 10.5, ttft=0.1, error="stream-error",
                        server_timings={"error": None, "abandoned": False, "n": 1})  # fmt: skip
    assert progress_fields(rec.to_json().encode()) is None
    hung_up = RequestRecord("t", "chat", "w", 6, 10.5, 10.5, ttft=0.1, abandoned=True,
                            server_timings={"abandoned": False, "n": 1})  # fmt: skip
    assert progress_fields(hung_up.to_json().encode()) is None
