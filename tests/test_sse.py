"""The SSE parser and stream classifier: legal variations accepted, defects flagged.

Legal (WHATWG event-stream rules real servers rely on): ``data:`` with or without one space,
LF / CRLF / lone CR line ends, ``:`` comment lines, several ``data:`` lines joined with ``\\n``,
and bytes split anywhere, including inside a multi-byte UTF-8 character and between CR and LF.
Illegal for an OpenAI stream: no ``[DONE]``, non-JSON data, an error object inside a 200 stream,
data after ``[DONE]``, a body that ends inside an event.
"""

from __future__ import annotations

import json
import math

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servecheck.client.http import Exchange, StreamResult, _Collector
from servecheck.client.sse import SSEParser, classify_data

CHUNKS = [
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
    },
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "café"}}],
    },
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": " 你好"}}],
    },
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": " 🙂 Zürich"}}],
    },
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    },
]
TEXT = "café 你好 🙂 Zürich"
EXPECTED = [json.dumps(c, ensure_ascii=False) for c in CHUNKS] + ["[DONE]"]


def encode(
    datas: list[str],
    *,
    space: bool = True,
    eol: str = "\n",
    comments: bool = False,
    multiline: bool = False,
) -> bytes:
    """An event stream carrying ``datas`` in one of the legal spellings."""
    out = []
    prefix = "data: " if space else "data:"
    for data in datas:
        if comments:
            out.append(": keep-alive" + eol + eol)
        if multiline and data.startswith("{"):
            # JSON may be split over several data: lines; they are joined with "\n" (JSON whitespace).
            head, tail = data.split(",", 1)
            lines = [head + ",", tail]
        else:
            lines = [data]
        out.append("".join(prefix + line + eol for line in lines) + eol)
    return "".join(out).encode()


def parse(raw: bytes, cuts: list[int] | None = None) -> tuple[list[str], SSEParser]:
    parser = SSEParser()
    bounds = [0, *sorted(set(cuts or [])), len(raw)]
    events = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        events += parser.feed(raw[a:b])
    events += parser.close()
    return [e.data for e in events], parser


def joined(data: str) -> str:
    """Multi-line data joins with "\\n": compare as JSON, not as text."""
    return data if data == "[DONE]" else json.dumps(json.loads(data), ensure_ascii=False)


VARIANTS = [
    pytest.param({}, id="lf"),
    pytest.param({"space": False}, id="no-space"),
    pytest.param({"eol": "\r\n"}, id="crlf"),
    pytest.param({"eol": "\r"}, id="lone-cr"),
    pytest.param({"comments": True}, id="comments"),
    pytest.param({"multiline": True}, id="multi-line-data"),
    pytest.param(
        {"space": False, "eol": "\r\n", "comments": True, "multiline": True}, id="all-at-once"
    ),
]


@pytest.mark.parametrize("variant", VARIANTS)
def test_legal_spellings_give_the_same_events(variant):
    datas, parser = parse(encode(EXPECTED, **variant))
    assert [joined(d) for d in datas] == EXPECTED
    assert parser.problems == []


@pytest.mark.parametrize("variant", VARIANTS)
def test_split_at_every_byte_position(variant):
    raw = encode(EXPECTED, **variant)
    for cut in range(len(raw) + 1):
        datas, parser = parse(raw, [cut])
        assert [joined(d) for d in datas] == EXPECTED, (
            f"split at byte {cut}: {raw[max(0, cut - 8) : cut + 8]!r}"
        )
        assert parser.problems == [], f"split at byte {cut}"


def test_split_between_cr_and_lf_is_one_line_end():
    raw = b'data: {"a":1}\r\n\r\ndata: [DONE]\r\n\r\n'
    cut = raw.index(b"\r\n") + 1
    datas, _ = parse(raw, [cut])
    assert datas == ['{"a":1}', "[DONE]"]


def test_split_inside_a_multibyte_character():
    raw = encode(EXPECTED)
    emoji = raw.index("🙂".encode())
    for offset in range(1, 4):
        datas, parser = parse(raw, [emoji + offset])
        assert [joined(d) for d in datas] == EXPECTED
        assert parser.problems == []


@settings(max_examples=150, deadline=None)
@given(variant=st.sampled_from([v.values[0] for v in VARIANTS]), data=st.data())
def test_any_splits_give_the_same_events(variant, data):
    raw = encode(EXPECTED, **variant)
    cuts = data.draw(
        st.lists(st.integers(min_value=0, max_value=len(raw)), max_size=24), label="cuts"
    )
    datas, parser = parse(raw, cuts)
    assert [joined(d) for d in datas] == EXPECTED
    assert parser.problems == []


def test_classify_data():
    assert classify_data("[DONE]").kind == "done"
    assert classify_data(json.dumps(CHUNKS[1])).kind == "chunk"
    assert classify_data('{"error": {"message": "boom"}}').kind == "error"
    assert classify_data("{'id': 'python repr'}").kind == "non-json"
    assert classify_data("[1, 2]").kind == "non-json"


# ---------------------------------------------------------------------------------------------
# The stream as a whole (what servecheck's client records for a response body)


def collect(
    pieces: list[bytes], content_type: str = "text/event-stream", status: int = 200
) -> StreamResult:
    ex = Exchange(
        method="POST", url="http://test/v1/chat/completions", request_headers={}, request_body=None
    )
    collector = _Collector(ex, True, math.inf, 1 << 20)
    collector.headers(httpx.Response(status, headers={"content-type": content_type}))
    for piece in pieces:
        assert collector.data(piece)
    collector.finish()
    assert ex.stream is not None
    return ex.stream


def codes(stream: StreamResult) -> list[str]:
    return [p.code for p in stream.problems]


@pytest.mark.parametrize("variant", VARIANTS)
def test_clean_stream_has_no_problems(variant):
    raw = encode(EXPECTED, **variant)
    stream = collect([raw[i : i + 7] for i in range(0, len(raw), 7)])
    assert codes(stream) == []
    assert stream.done
    assert stream.text(0) == TEXT
    assert len(stream.chunks) == len(CHUNKS)


@pytest.mark.parametrize(
    "body,code",
    [
        pytest.param(encode(EXPECTED[:-1]), "missing-done", id="missing-done"),
        pytest.param(
            encode([EXPECTED[0], "{'id': 'c1', 'choices': []}", "[DONE]"]),
            "non-json",
            id="non-json",
        ),
        pytest.param(encode([EXPECTED[0], "ping", "[DONE]"]), "non-json", id="bare-word"),
        pytest.param(
            encode(
                [
                    EXPECTED[0],
                    '{"error": {"message": "engine died", "type": "server_error"}}',
                    "[DONE]",
                ]
            ),
            "error-object",
            id="error-object-in-200",
        ),
        pytest.param(encode([*EXPECTED, EXPECTED[1]]), "data-after-done", id="data-after-done"),
        pytest.param(
            encode(EXPECTED[:-1]) + b'data: {"id": "c1", "choices": []}',
            "truncated-event",
            id="truncated-final-event",
        ),
        pytest.param(
            encode(EXPECTED).replace("你".encode(), "你".encode()[:2]), "bad-utf8", id="bad-utf8"
        ),
    ],
)
def test_defects_are_flagged(body, code):
    stream = collect([body])
    assert code in codes(stream), stream.problems


def test_error_object_is_kept_for_the_report():
    stream = collect([encode(['{"error": {"message": "engine died"}}', "[DONE]"])])
    assert stream.error_obj == {"error": {"message": "engine died"}}
    assert stream.chunks == []


def test_wrong_content_type_is_flagged_and_not_parsed():
    stream = collect([encode(EXPECTED)], content_type="application/json")
    assert codes(stream) == ["not-event-stream"]
    assert stream.chunks == []
