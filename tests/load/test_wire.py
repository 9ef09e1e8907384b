"""The load readers against the reference server: error classes per fault, legal SSE variations,
token counts equal to the timing client's. Every test runs on both readers: the blocking
:class:`WireClient` (https targets) and the epoll :class:`StreamReactor` (plain HTTP, the default).
No locust here (plain sockets and threads)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servecheck.client.http import ClientSettings, ServeClient
from servecheck.load.generator.reactor import StreamReactor
from servecheck.load.generator.stream import StreamState, classify
from servecheck.load.generator.wire import WireClient, _Conn, _Dechunker
from servecheck.reference.inprocess import RunningServer

Reader = WireClient | StreamReactor

BODY = {
    "model": "ref-tiny",
    "messages": [{"role": "user", "content": "tell me about rivers"}],
    "max_tokens": 12,
    "stream": True,
    "stream_options": {"include_usage": True},
    "temperature": 0,
}


@pytest.fixture(params=["blocking", "reactor"])
def make_reader(request: pytest.FixtureRequest) -> Iterator[Callable[..., Reader]]:
    made: list[Reader] = []

    def make(
        base_url: str,
        headers: dict[str, str] | None = None,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 10.0,
    ) -> Reader:
        cls = WireClient if request.param == "blocking" else StreamReactor
        reader = cls(
            base_url,
            {"Content-Type": "application/json"} if headers is None else headers,
            connect_timeout_s,
            read_timeout_s,
        )
        made.append(reader)
        return reader

    yield make
    for reader in made:
        reader.close()


def _exchange(
    server: RunningServer,
    make_reader: Callable[..., Reader],
    body: dict | None = None,
    read_timeout_s: float = 10.0,
    client: Reader | None = None,
) -> tuple[str | None, str, StreamState]:
    wire = client or make_reader(server.base_url, read_timeout_s=read_timeout_s)
    st = StreamState()
    res = wire.post_stream("/chat/completions", json.dumps(body or BODY).encode(), st.feed)
    st.close(res.t_end)
    err, msg = classify(res, st)
    return err, msg, st


@pytest.mark.parametrize(
    ("fault", "error", "message"),
    [
        pytest.param(
            "stream-no-done",
            "stream-error",
            "the stream ended without data: [[]DONE]",
            id="no-done",
        ),
        pytest.param(
            "stream-error-in-200",
            "stream-error",
            "error object in stream: *upstream model crashed*",
            id="error-object",
        ),
        pytest.param(
            "stream-non-json", "invalid-sse", "data is not a JSON object: *", id="non-json"
        ),
        pytest.param(
            "stream-wrong-content-type",
            "invalid-sse",
            "content-type is 'application/json*', not text/event-stream",
            id="content-type",
        ),
    ],
)
def test_fault_error_classes(
    make_reference: Callable[..., RunningServer],
    make_reader: Callable[..., Reader],
    fault: str,
    error: str,
    message: str,
) -> None:
    import fnmatch

    err, msg, _ = _exchange(make_reference(fault), make_reader)
    assert err == error, f"{fault}: got {err} ({msg})"
    assert fnmatch.fnmatch(msg, message), msg


def test_stall_is_a_timeout(
    make_reference: Callable[..., RunningServer], make_reader: Callable[..., Reader]
) -> None:
    err, msg, st = _exchange(make_reference("stream-stall"), make_reader, read_timeout_s=0.5)
    assert err == "timeout" and msg == "no data for 0.5 s"
    assert st.t_first is not None  # tokens before the stall were timed


def test_http_connect_errors_and_keepalive(
    make_reference: Callable[..., RunningServer], make_reader: Callable[..., Reader]
) -> None:
    server = make_reference(api_key="sk-wire-selftest-5678")
    err, msg, _ = _exchange(server, make_reader)
    assert err == "http-401" and "Missing API key" in msg
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    wire = make_reader(f"http://127.0.0.1:{closed_port}/v1", {}, 2.0, 2.0)
    res = wire.post_stream("/chat/completions", b"{}", lambda b, t: None)
    assert (
        res.error == "connect" and f"cannot connect to 127.0.0.1:{closed_port}" in res.error_message
    )
    ok = make_reference()
    client = make_reader(ok.base_url)
    for _ in range(3):
        err, msg, st = _exchange(ok, make_reader, client=client)
        assert err is None, msg
    assert len(client.pool) == 1, "a finished chunked response must leave its connection reusable"


def test_hang_up_after_a_few_tokens(
    make_reference: Callable[..., RunningServer], make_reader: Callable[..., Reader]
) -> None:
    """Both readers end an abandoned stream the same way: no error, not pooled, next request fine."""
    server = make_reference()
    client = make_reader(server.base_url)
    st = StreamState()
    res = client.post_stream(
        "/chat/completions",
        json.dumps(BODY).encode(),
        st.feed,
        until=lambda: len(st.token_times) >= 2,
    )
    assert res.hung_up and classify(res, st) == (None, "") and 2 <= len(st.token_times) < 12
    assert client.pool == [], "an abandoned connection is closed, not pooled"
    err, msg, full = _exchange(server, make_reader, client=client)
    assert err is None and len(full.token_times) == 12, msg


@pytest.mark.parametrize(
    "quirk",
    [pytest.param(q, id=q) for q in ("sse-no-space", "sse-crlf", "sse-comments", "sse-split")],
)
def test_legal_variations_pass_and_count_like_the_timing_client(
    make_reference: Callable[..., RunningServer], make_reader: Callable[..., Reader], quirk: str
) -> None:
    server = make_reference(quirks=(quirk,))
    err, msg, st = _exchange(server, make_reader)
    assert err is None, f"{quirk}: {msg}"
    with ServeClient(ClientSettings(base_url=server.base_url, headers={})) as client:
        ex = client.post("/chat/completions", BODY, stream=True)
    assert len(st.token_times) == len(ex.timing.token_times) == 12
    assert (
        st.usage is not None
        and st.usage["completion_tokens"] == ex.stream.usage()["completion_tokens"]
    )  # type: ignore[union-attr]


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6),
    ext=st.booleans(),
    aligned=st.booleans(),
)
def test_dechunker_reassembles_any_split(
    payloads: list[bytes], cuts: list[int], ext: bool, aligned: bool
) -> None:
    """Chunked bodies cut at arbitrary read boundaries (and whole-chunk reads, the fast path)
    decode to the same bytes; the terminating chunk ends the body."""
    chunks = [b"%x%s\r\n%s\r\n" % (len(p), b";x=1" if ext else b"", p) for p in payloads] + [
        b"0\r\n\r\n"
    ]
    body = b"".join(chunks)
    bounds = sorted({c for c in cuts if 0 < c < len(body)})
    reads = (
        chunks
        if aligned
        else [body[a:b] for a, b in zip([0, *bounds], [*bounds, len(body)], strict=True)]
    )
    dech = _Dechunker()
    out = b"".join(dech.feed(r) for r in reads)
    assert out == b"".join(payloads) and dech.done


def test_a_retry_takes_a_fresh_connection(
    make_reference: Callable[..., RunningServer], make_reader: Callable[..., Reader]
) -> None:
    """Two pooled keep-alive connections the server has closed: the first fails, and the retry must
    not take the second stale one (seen against llama.cpp: 'connection closed before the headers')."""
    server = make_reference()
    reader = make_reader(server.base_url)
    for _ in range(2):
        mine, theirs = socket.socketpair()
        theirs.close()
        if isinstance(reader, WireClient):
            mine.settimeout(5)
            reader.pool.append(_Conn(mine))
        else:
            mine.setblocking(False)
            reader.pool.append(mine)
    err, msg, st = _exchange(server, make_reader, client=reader)
    assert err is None, msg
    assert len(st.token_times) == 12
