"""The load reader's TTFT/ITL agree with the timing client's on the same bytes and arrival times."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import servecheck.client.http as client_http
from servecheck.client.http import Exchange, _Collector
from servecheck.load.stream import parse_stream_bytes


def _chunk(delta: dict | None = None, usage: dict | None = None, choices: bool = True) -> str:
    obj: dict = {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta or {}, "finish_reason": None}] if choices else []}
    if usage is not None:
        obj["usage"] = usage
    return json.dumps(obj)


ROLE = _chunk({"role": "assistant", "content": ""})
EMPTY = _chunk({"content": ""})
TOK = _chunk({"content": "hi"})
TOOL = _chunk({"tool_calls": [{"index": 0, "id": "t1", "type": "function", "function": {"name": "f", "arguments": ""}}]})
REASON = _chunk({"reasoning_content": "hmm"})
USAGE = _chunk(usage={"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}, choices=False)


def _events(*datas: str, sep: bytes = b"\n", space: bool = True) -> bytes:
    prefix = b"data: " if space else b"data:"
    return b"".join(prefix + d.encode() + sep + sep for d in datas)


CASES = {
    "role-then-content": [_events(ROLE), _events(EMPTY), _events(TOK), _events(TOK), _events(USAGE, "[DONE]")],
    "tool-call-first": [_events(ROLE), _events(TOOL), _events(TOK), _events("[DONE]")],
    "reasoning-first": [_events(ROLE), _events(REASON), _events(TOK), _events("[DONE]")],
    "crlf-framing": [_events(ROLE, sep=b"\r\n"), _events(TOK, sep=b"\r\n"), _events(TOK, "[DONE]", sep=b"\r\n")],
    "no-space-and-comments": [b": keep-alive\n\n" + _events(ROLE, space=False), _events(TOK, space=False), b": ping\n\n" + _events("[DONE]")],
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


def _client_times(pieces: list[bytes], times: list[float], monkeypatch: pytest.MonkeyPatch) -> tuple[float | None, list[float]]:
    clock: Iterator[float] = iter([*times, times[-1], times[-1]])
    monkeypatch.setattr(client_http, "_now", lambda: next(clock))
    ex = Exchange(method="POST", url="http://x/v1/chat/completions", request_headers={}, request_body={})
    col = _Collector(ex, stream=True, deadline=1e9, max_bytes=1 << 20)

    class _Resp:
        status_code = 200
        headers = {"content-type": "text/event-stream"}

    col.headers(_Resp())  # type: ignore[arg-type]
    for p in pieces:
        col.data(p)
    col.finish()
    return ex.timing.t_first_token, ex.timing.token_times


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in CASES])
@pytest.mark.parametrize("split", [pytest.param(False, id="as-sent"), pytest.param(True, id="split-anywhere")])
def test_ttft_and_itl_agree_with_timing_client(name: str, split: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    pieces = _split_anywhere(CASES[name]) if split else CASES[name]
    # the client reads the header time first, then one clock reading per read
    times = [10.0 + i for i in range(len(pieces))]
    client_first, client_tokens = _client_times(pieces, [9.0, *times], monkeypatch)
    st = parse_stream_bytes(list(zip(pieces, times, strict=True)))
    assert st.t_first == client_first, f"load reader TTFT at {st.t_first}, timing client at {client_first}"
    assert st.token_times == client_tokens
    assert st.done and not st.problem


def test_role_only_chunk_is_not_the_first_token() -> None:
    st = parse_stream_bytes([(_events(ROLE), 1.0), (_events(EMPTY), 2.0), (_events(TOK), 3.0), (_events("[DONE]"), 4.0)])
    assert st.t_first == 3.0


def test_usage_and_problems() -> None:
    st = parse_stream_bytes([(_events(TOK, TOK, USAGE, "[DONE]"), 1.0)])
    assert st.usage == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8} and len(st.token_times) == 2
    bad = parse_stream_bytes([(_events("not json", "[DONE]"), 1.0)])
    assert bad.problem_kind == "invalid-sse"
    err = parse_stream_bytes([(_events('{"error": {"message": "boom"}}'), 1.0)])
    assert err.problem_kind == "stream-error" and not err.done
