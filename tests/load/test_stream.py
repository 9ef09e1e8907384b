"""The load reader's TTFT/ITL agree with the timing client's on the same bytes and arrival times."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import servecheck.client.http as client_http
from servecheck.client.http import Exchange, _Collector, carries_token, token_phase
from servecheck.load.generator.stream import parse_stream_bytes, record_phases, token_kind
from servecheck.records.record import RequestRecord


def _chunk(delta: dict | None = None, usage: dict | None = None, choices: bool = True) -> str:
    obj: dict = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": None}] if choices else [],
    }
    if usage is not None:
        obj["usage"] = usage
    return json.dumps(obj)


ROLE = _chunk({"role": "assistant", "content": ""})
EMPTY = _chunk({"content": ""})
TOK = _chunk({"content": "hi"})
TOOL = _chunk(
    {
        "tool_calls": [
            {"index": 0, "id": "t1", "type": "function", "function": {"name": "f", "arguments": ""}}
        ]
    }
)
REASON = _chunk({"reasoning_content": "hmm"})
USAGE = _chunk(usage={"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}, choices=False)


def _events(*datas: str, sep: bytes = b"\n", space: bool = True) -> bytes:
    prefix = b"data: " if space else b"data:"
    return b"".join(prefix + d.encode() + sep + sep for d in datas)


CASES = {
    "role-then-content": [
        _events(ROLE),
        _events(EMPTY),
        _events(TOK),
        _events(TOK),
        _events(USAGE, "[DONE]"),
    ],
    "tool-call-first": [_events(ROLE), _events(TOOL), _events(TOK), _events("[DONE]")],
    "reasoning-first": [_events(ROLE), _events(REASON), _events(TOK), _events("[DONE]")],
    "crlf-framing": [
        _events(ROLE, sep=b"\r\n"),
        _events(TOK, sep=b"\r\n"),
        _events(TOK, "[DONE]", sep=b"\r\n"),
    ],
    "no-space-and-comments": [
        b": keep-alive\n\n" + _events(ROLE, space=False),
        _events(TOK, space=False),
        b": ping\n\n" + _events("[DONE]"),
    ],
}


def _split_anywhere(pieces: list[bytes]) -> list[bytes]:
    """Re-cut the stream at awkward places: inside 'data:', between the two newlines."""
    blob = b"".join(pieces)
    cuts = sorted({3, 7, len(blob) // 3, len(blob) // 2 + 1, len(blob) - 2})
    out, last = [], 0
    for c in cuts:
        out.append(blob[last:c])
        last = c
    out.append(blob[last:])
    return [p for p in out if p]


def _client_times(
    pieces: list[bytes], times: list[float], monkeypatch: pytest.MonkeyPatch
) -> tuple[float | None, list[float]]:
    clock: Iterator[float] = iter([*times, times[-1], times[-1]])
    monkeypatch.setattr(client_http, "_now", lambda: next(clock))
    ex = Exchange(
        method="POST", url="http://x/v1/chat/completions", request_headers={}, request_body={}
    )
    col = _Collector(ex, stream=True, limit_s=1e9, max_bytes=1 << 20)

    class _Resp:
        status_code = 200
        headers = {"content-type": "text/event-stream"}

    col.headers(_Resp())  # type: ignore[arg-type]
    for p in pieces:
        col.data(p)
    col.finish()
    return ex.timing.t_first_token, ex.timing.token_times


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in CASES])
@pytest.mark.parametrize(
    "split", [pytest.param(False, id="as-sent"), pytest.param(True, id="split-anywhere")]
)
def test_ttft_and_itl_agree_with_timing_client(
    name: str, split: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    pieces = _split_anywhere(CASES[name]) if split else CASES[name]
    # the client reads the header time first, then one clock reading per read
    times = [10.0 + i for i in range(len(pieces))]
    client_first, client_tokens = _client_times(pieces, [9.0, *times], monkeypatch)
    st = parse_stream_bytes(list(zip(pieces, times, strict=True)))
    assert st.t_first == client_first, (
        f"load reader TTFT at {st.t_first}, timing client at {client_first}"
    )
    assert st.token_times == client_tokens
    assert st.done and not st.problem


def test_role_only_chunk_is_not_the_first_token() -> None:
    st = parse_stream_bytes(
        [(_events(ROLE), 1.0), (_events(EMPTY), 2.0), (_events(TOK), 3.0), (_events("[DONE]"), 4.0)]
    )
    assert st.t_first == 3.0


def test_finish_reason_of_a_token_chunk_is_read_when_every_chunk_is_parsed() -> None:
    """vLLM's last token chunk carries the finish reason: drain reads it with ``fast=False``."""
    last = json.dumps(
        {"choices": [{"index": 0, "delta": {"content": "end"}, "finish_reason": "length"}]},
        separators=(",", ":"),
    )
    st = parse_stream_bytes([(_events(TOK, last, "[DONE]"), 1.0)], fast=False)
    assert (st.finish_reason, len(st.token_times)) == ("length", 2), st.finish_reason
    stop = json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    fin = parse_stream_bytes([(_events(TOK, stop, "[DONE]"), 1.0)])
    assert fin.finish_reason == "stop", "a finish chunk without content is parsed on the fast path"


def test_usage_and_problems() -> None:
    st = parse_stream_bytes([(_events(TOK, TOK, USAGE, "[DONE]"), 1.0)])
    assert (
        st.usage == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
        and len(st.token_times) == 2
    )
    bad = parse_stream_bytes([(_events("not json", "[DONE]"), 1.0)])
    assert bad.problem_kind == "invalid-sse"
    err = parse_stream_bytes([(_events('{"error": {"message": "boom"}}'), 1.0)])
    assert err.problem_kind == "stream-error" and not err.done


# -- the byte-level fast path agrees with the parse ------------------------------------------

_text = st.lists(
    st.sampled_from(["a", " ", '"', "\\", "é", "{", "}", ":", ",", '"content":"', "usage", "\n"]),
    max_size=5,
).map("".join)
_delta = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["assistant", None]),
        "content": st.one_of(st.none(), _text),
        "tool_calls": st.just([{"index": 0, "function": {"arguments": "{}"}}]),
        "reasoning_content": _text,
        "reasoning": _text,
    },
)
_choice = st.one_of(
    st.fixed_dictionaries(
        {"index": st.just(0), "delta": _delta},
        optional={
            "finish_reason": st.sampled_from([None, "stop"]),
            "logprobs": st.just({"content": [{"token": "a"}]}),
        },
    ),
    st.fixed_dictionaries({"index": st.just(0), "text": _text}),
    st.fixed_dictionaries(
        {"index": st.just(0), "message": st.fixed_dictionaries({"content": _text})}
    ),
)
_chunk_obj = st.fixed_dictionaries(
    {"id": st.just("c"), "choices": st.lists(_choice, max_size=2)},
    optional={
        "usage": st.one_of(
            st.none(), st.just({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})
        ),
        "error": st.just({"message": "boom"}),
    },
)


@settings(max_examples=400, deadline=None)
@given(obj=_chunk_obj, compact=st.booleans())
def test_token_kind_never_disagrees_with_carries_token(obj: dict, compact: bool) -> None:
    data = json.dumps(obj, separators=(",", ":") if compact else None).encode()
    kind = token_kind(data)
    if kind is not None:
        assert kind == carries_token(obj), data
        # the fast path only ever says "answer token": a reasoning-only chunk goes to the parse
        assert not kind or token_phase(obj) == "answer", data
        assert not isinstance(obj.get("usage"), dict), "a usage object must go through the parse"
    fast = parse_stream_bytes([(b"data: " + data + b"\n\n", 1.0)])
    slow = parse_stream_bytes([(b"data: " + data + b"\n\n", 1.0)], fast=False)
    assert (
        fast.token_times,
        fast.usage,
        fast.problem_kind,
        fast.reasoning_at,
        fast.t_first_answer,
    ) == (slow.token_times, slow.usage, slow.problem_kind, slow.reasoning_at, slow.t_first_answer)


# -- reasoning phases -----------------------------------------------------------------------

REASONING = _chunk({"reasoning": "hmm"})


def test_reasoning_phases_split_ttft_ttfr_and_ttfa() -> None:
    """TTFT is the first token of any kind; TTFR the first reasoning one, TTFA the first answer
    one; each phase's ITLs leave out the gap from thinking to answering."""
    st = parse_stream_bytes(
        [
            (_events(ROLE), 1.0),
            (_events(REASON), 2.0),
            (_events(REASONING), 2.5),
            (_events(REASON), 3.5),
            (_events(TOK), 6.0),
            (_events(TOK, TOK), 6.25),
            (_events(TOK), 7.0),
            (_events(USAGE, "[DONE]"), 7.5),
        ]
    )
    assert st.t_first == 2.0 and st.t_first_reasoning == 2.0 and st.t_first_answer == 6.0
    assert st.reasoning_at == [0, 1, 2] and len(st.token_times) == 7
    assert st.phase_itls() == ([0.5, 1.0], [0.25, 0.0, 0.75])
    rec = RequestRecord("t", "chat", "w", 0, 0.0, 0.5)
    record_phases(rec, st, 0.5)
    assert (rec.ttfr, rec.ttfa, rec.reasoning_tokens_client) == (1.5, 5.5, 3)
    assert rec.reasoning_tokens is None  # usage without completion_tokens_details
    line = json.loads(rec.to_json())
    assert line["itls_reasoning"] == [0.5, 1.0] and line["itls_answer"] == [0.25, 0.0, 0.75]


def test_no_reasoning_means_ttfa_is_ttft_and_no_phase_fields() -> None:
    st = parse_stream_bytes(
        [(_events(ROLE), 1.0), (_events(TOK), 2.0), (_events(TOK, "[DONE]"), 3.0)]
    )
    rec = RequestRecord("t", "chat", "w", 0, 0.0, 0.0)
    record_phases(rec, st, 0.0)
    line = json.loads(rec.to_json())
    assert line["ttfa"] == 2.0 and "ttfr" not in line and "itls_answer" not in line


def test_reasoning_tokens_come_from_usage_details() -> None:
    usage = _chunk(
        usage={"completion_tokens": 5, "completion_tokens_details": {"reasoning_tokens": 2}},
        choices=False,
    )
    st = parse_stream_bytes([(_events(REASON, REASON, TOK, usage, "[DONE]"), 1.0)])
    rec = RequestRecord("t", "chat", "w", 0, 0.0, 0.0)
    record_phases(rec, st, 0.0)
    assert rec.reasoning_tokens == 2 and rec.reasoning_tokens_client == 2
    assert rec.itls_reasoning == [0.0] and rec.itls_answer == []
