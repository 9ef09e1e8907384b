# ruff: noqa: F811 - the imported ``rx`` fixture is a parameter name, as pytest wants it
"""Token chunks counted by the native reader thread itself (``Reader.arm``, ``ResponseParser.tokens``).

An armed stream's token chunks never reach Python one by one: the thread keeps their arrival
times and hands them over in batches, before the stream's next other read. What must hold: the
batch goes first and in order; nothing is counted for a stream that was not armed, or armed with a
stale count of records; the first read that is not a token chunk disarms; a batch goes within
about 100 ms even while the stream is quiet; and a stream read this way ends with exactly the
state (token times, phases, usage, [DONE], deadline failure) that parsing every read gives, over
real sockets against the calibration server too.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from servecheck.load.generator import reactor as reactor_mod
from servecheck.load.generator.reactor import StreamReactor
from servecheck.load.generator.stream import StreamState, classify
from servecheck.load.generator.wire import ResponseParser, _Dechunker
from servecheck.reference.fast import FastServer, Timing
from tests.load.test_reactor import _body
from tests.load.test_rxthread import _pair as _plain_pair
from tests.load.test_rxthread import rx  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(
    reactor_mod.sys.platform != "linux", reason="the native reader is Linux-only"
)

_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


def _sse(obj: object) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


TOKEN = _sse({"choices": [{"index": 0, "delta": {"content": " tok"}}], "usage": None})
ROLE = _sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
THINK = _sse({"choices": [{"index": 0, "delta": {"reasoning_content": " hm"}}]})
FINISH = _sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}], "usage": None})
USAGE = _sse({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}})
END = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def _pair() -> tuple[socket.socket, socket.socket]:
    client, server = _plain_pair()
    server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each write its own segment
    return client, server


def _streaming(rx: object, key: int, head: bytes) -> tuple[socket.socket, socket.socket]:
    """A connection the reader watches under ``key``, whose first read (``head``) is taken."""
    client, server = _pair()
    rx.add(client.fileno(), key)  # type: ignore[attr-defined]
    server.sendall(head)
    first = _take_until(rx, lambda g: len(g) >= 1)
    assert [(r[0], r[3]) for r in first] == [(key, head)]
    return client, server


def _take_until(rx: object, done: object, timeout: float = 5.0) -> list[tuple]:
    got: list[tuple] = []
    end = time.monotonic() + timeout
    while not done(got) and time.monotonic() < end:  # type: ignore[operator]
        ready, _, _ = select.select([rx.fileno()], [], [], 0.05)  # type: ignore[attr-defined]
        if ready:
            got.extend(rx.take())  # type: ignore[attr-defined]
    return got


def _times(recs: list[tuple]) -> list[float]:
    return [t for r in recs if isinstance(r[3], list) for t in r[3]]


def _send_tokens(rx: object, server: socket.socket, n: int) -> None:
    """``n`` token chunks, each sent once the thread has read the one before: one read per chunk,
    as a server's writes a token apart arrive (waits for the read, not for a time)."""
    for _ in range(n):
        before = rx.stats()[0]  # type: ignore[attr-defined]
        server.sendall(TOKEN)
        end = time.monotonic() + 5
        while rx.stats()[0] == before and time.monotonic() < end:  # type: ignore[attr-defined]
            time.sleep(0.0002)


def test_an_armed_stream_hands_its_token_times_over_in_batches_then_its_next_read(
    rx: object,
) -> None:
    client, server = _streaming(rx, 7, _HEAD + ROLE)
    assert not rx.arm(client.fileno(), 7, 0), (
        "refused: a record was made that the caller has not counted"
    )  # type: ignore[attr-defined]
    assert not rx.arm(client.fileno(), 8, 1), "refused: another exchange's key"  # type: ignore[attr-defined]
    assert rx.arm(client.fileno(), 7, 1)  # type: ignore[attr-defined]
    before = time.perf_counter()
    _send_tokens(rx, server, 20)
    server.sendall(FINISH + USAGE + END)
    recs = _take_until(rx, lambda g: any(isinstance(r[3], bytes) for r in g))
    after = time.perf_counter()
    kinds = ["tokens" if isinstance(r[3], list) else "bytes" for r in recs]
    assert kinds[-1] == "bytes" and set(kinds[:-1]) == {"tokens"}, kinds
    assert recs[-1][3] == FINISH + USAGE + END and recs[-1][4] is False
    times = _times(recs)
    assert len(times) == 20
    assert all(before <= t <= after for t in times), "arrival times are on perf_counter's clock"
    assert times == sorted(times)
    assert all(r[0] == 7 and r[2] == r[3][-1] for r in recs[:-1]), "t_read is the batch's last"
    tokens, kernel, user = rx.counted()  # type: ignore[attr-defined]
    assert tokens == 20 and kernel + user == 20 and kernel >= 18, (tokens, kernel, user)
    assert rx.stats()[0] == 22, "the counted reads are reads too"  # type: ignore[attr-defined]
    # Disarmed by the read that was not a token chunk: the next token chunk comes as bytes.
    server.sendall(TOKEN)
    (late,) = _take_until(rx, lambda g: len(g) >= 1)
    assert late[3] == TOKEN and late[4] is True
    client.close()
    server.close()


def test_a_quiet_armed_stream_still_gets_its_batch(rx: object) -> None:
    client, server = _streaming(rx, 3, _HEAD)
    assert rx.arm(client.fileno(), 3, 1)  # type: ignore[attr-defined]
    _send_tokens(rx, server, 3)
    recs = _take_until(rx, lambda g: len(_times(g)) >= 3)
    assert len(_times(recs)) == 3, "the sweep sends a batch that no read follows (within 100 ms)"
    client.close()
    server.close()


def test_an_unarmed_stream_and_a_removed_one_count_nothing(rx: object) -> None:
    client, server = _streaming(rx, 4, _HEAD)
    _send_tokens(rx, server, 3)
    recs = _take_until(rx, lambda g: len(g) >= 3)
    assert [r[3] for r in recs] == [TOKEN] * 3, "not armed: every read is handed over"
    assert rx.counted()[0] == 0  # type: ignore[attr-defined]
    assert rx.arm(client.fileno(), 4, 4)  # type: ignore[attr-defined]
    rx.remove(client.fileno())  # type: ignore[attr-defined]
    assert not rx.arm(client.fileno(), 4, 4), "a removed descriptor cannot be armed"  # type: ignore[attr-defined]
    server.sendall(TOKEN)
    time.sleep(0.2)  # nothing may arrive; a wait for an absence can only be bounded
    assert rx.take() == [] and rx.counted()[0] == 0  # type: ignore[attr-defined]
    client.close()
    server.close()


# -- the parser: a batch leaves the state one read per token leaves ---------------------------


def _parser(deadline: float | None = None) -> tuple[ResponseParser, StreamState]:
    st = StreamState()
    ex = ResponseParser(st.feed, deadline, tokens=st)
    ex.feed(_HEAD + ROLE, 0.5)
    return ex, st


def _state(ex: ResponseParser, st: StreamState) -> tuple:
    return (
        st.token_times,
        st.reasoning_at,
        st.t_first,
        st.t_first_answer,
        st.chunks,
        st.usage,
        st.done,
        ex.done,
        ex.res.error,
        ex.res.t_end,
        ex.last,
    )


@pytest.mark.parametrize("deadline", [None, 1.035, 5.0])
def test_a_batch_equals_one_token_read_each(deadline: float | None) -> None:
    times = [1.0 + 0.01 * i for i in range(10)]
    one, one_st = _parser(deadline)
    for t in times:
        if not one.done:
            assert one.token(t)
    batch, batch_st = _parser(deadline)
    assert batch.countable()
    batch.tokens(times[:4])
    batch.tokens(times[4:])
    assert _state(batch, batch_st) == _state(one, one_st)
    if deadline == 1.035:
        # As a read per token: the token that arrived past the deadline counts, then it fails.
        assert batch.res.error == "timeout" and batch_st.token_times == times[:5]
    for ex, st in ((one, one_st), (batch, batch_st)):
        if not ex.done:
            ex.feed(FINISH + USAGE + END, 1.2)
            st.close(1.2)
    assert _state(batch, batch_st) == _state(one, one_st)


def test_countable_only_between_chunks_and_events_with_a_sink_and_no_hang_up() -> None:
    ex, st = _parser()
    assert ex.countable() and st.between_events()
    ex.feed(TOKEN[:10], 1.0)
    assert not ex.countable(), "mid-chunk"
    ex.feed(TOKEN[10:], 1.0)
    assert ex.countable()
    half = _chunk(b'data: {"choices":[{"delta":{"content":"a"}}]}\n')
    ex.feed(half, 1.1)
    assert not ex.countable() and not st.between_events(), "mid-event"
    plain = StreamState()
    no_sink = ResponseParser(plain.feed, on_token=plain.token)
    no_sink.feed(_HEAD, 0.0)
    assert not no_sink.countable(), "no sink"
    hang = StreamState()
    until = ResponseParser(hang.feed, tokens=hang, until=lambda: False)
    until.feed(_HEAD, 0.0)
    assert not until.countable(), "a hang-up check runs per token"
    err = StreamState()
    not_ok = ResponseParser(err.feed, tokens=err)
    not_ok.feed(b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n", 0.0)
    assert not not_ok.countable(), "an error body is kept, not counted"


# -- over real sockets: the calibration server, both readers -------------------------------------


@pytest.fixture()
def server_url() -> Iterator[str]:
    server = FastServer("127.0.0.1", 0, Timing(0.02, 0.004, 40, reasoning_tokens=6))
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.port}/v1"
    server.stop = True
    thread.join(timeout=5)


def _run(url: str, reader: str, n: int = 40) -> tuple[list[tuple], StreamReactor]:
    reactor = StreamReactor(url, {"Content-Type": "application/json"}, 5.0, 10.0, reader=reader)
    out: list[tuple] = []
    body = _body(n)

    def one() -> None:
        for _ in range(2):
            st = StreamState()
            t0 = time.perf_counter()
            res = reactor.post_stream("/chat/completions", body, st.feed, t0 + 20, tokens=st)
            st.close(res.t_end)
            out.append((classify(res, st), st, t0))

    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    reactor.close()
    return out, reactor


def test_streams_read_through_the_thread_count_what_the_python_loop_counts(
    server_url: str,
) -> None:
    thread, rt = _run(server_url, "thread")
    loop, _ = _run(server_url, "loop")
    assert rt.kind == "thread", "the native reader is not built"
    assert len(thread) == len(loop) == 24
    for (err, st, t0), (lerr, lst, _) in zip(thread, loop, strict=True):
        assert err == (None, "") and lerr == (None, "")
        assert len(st.token_times) == len(lst.token_times) == 40
        assert st.reasoning_at == lst.reasoning_at == list(range(6))
        assert st.usage == lst.usage and st.usage is not None
        assert st.done and lst.done
        assert st.t_first is not None and st.t_first - t0 >= 0.02, "never early"
        assert st.token_times == sorted(st.token_times)
        assert st.t_first_answer == st.token_times[6]
    # How many the thread counted depends on scheduling (a stream is armed only once the loop
    # has parsed its head before its first token arrives); that it counted is what matters here.
    counted, kernel, user = rt._counted()
    assert counted > 0 and kernel + user == counted
    assert rt.kernel_stamps + rt.user_stamps == rt.reads >= counted


# -- the dechunker's several-whole-chunks path agrees with its state machine -----------------


@settings(max_examples=500, deadline=None)
@given(
    payloads=hst.lists(hst.binary(min_size=1, max_size=40), min_size=1, max_size=5),
    tail=hst.sampled_from([b"", b"0\r\n\r\n", b"0\r\n", b"5\r\nab", b"3;x\r\nabc\r\n", b"zz\r\n"]),
    bad_crlf=hst.booleans(),
)
def test_several_whole_chunks_decode_as_the_state_machine_does(
    payloads: list[bytes], tail: bytes, bad_crlf: bool
) -> None:
    read = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + tail
    if bad_crlf:
        read = read.replace(b"\r\n", b"\r.", 2)  # a size line or a chunk's end broken
    fast, slow = _Dechunker(), _Dechunker()
    try:
        got: bytes | type = fast.feed(read)
    except ValueError as exc:
        got = exc.__class__
    try:
        want: bytes | type = slow._states(read)
    except ValueError as exc:
        want = exc.__class__
    assert got == want
    assert (fast.state, fast.pending, fast.left, fast.done) == (
        slow.state,
        slow.pending,
        slow.left,
        slow.done,
    )


# -- a read that holds several writes: its leading token chunks are counted, the rest parsed ----

_PIECES = [
    TOKEN,
    _sse({"choices": [{"index": 0, "delta": {"content": "é\\n"}}], "usage": None}),
    ROLE,
    THINK,
    FINISH,
    USAGE,
    END,
    TOKEN[:7],
    _chunk(b'data: {"choices":[{"delta":{"content":"a"}}]}\n'),
    _chunk(b": keep-alive\n\n"),
]


@settings(max_examples=1500, deadline=None)
@given(hst.lists(hst.sampled_from(range(len(_PIECES))), min_size=1, max_size=6))
def test_counting_the_leading_token_chunks_then_parsing_the_rest_equals_parsing_it_all(
    picks: list[int],
) -> None:
    """What the thread does with an armed stream's read (its leading token chunks counted at the
    read's time, the rest a record) leaves the state that reading each of those chunks alone and
    then the rest leaves; and, for a well-formed body, the state that parsing the read whole does."""
    rx_mod = reactor_mod._rxthread
    assert rx_mod is not None, "the native reader is not built"
    read = b"".join(_PIECES[i] for i in picks)
    lead = rx_mod.token_prefix(read)
    tokens = 0
    for i in picks:
        if i not in (0, 1):
            break
        tokens += 1
    assert lead == sum(len(_PIECES[i]) for i in picks[:tokens]), "the prefix is the token chunks"
    split, split_st = _parser()
    split.tokens([2.0] * tokens)
    if lead < len(read):
        split.feed(read[lead:], 2.0)
    one_by_one, one_st = _parser()
    for i in picks[:tokens]:
        one_by_one.feed(_PIECES[i], 2.0)
    if lead < len(read):
        one_by_one.feed(read[lead:], 2.0)
    assert _state(split, split_st) == _state(one_by_one, one_st), read
    if 7 not in picks:  # a broken chunk: where reads end then changes what follows it
        whole, whole_st = _parser()
        whole.feed(read, 2.0)
        assert _state(split, split_st)[:-1] == _state(whole, whole_st)[:-1], read


def test_an_armed_stream_counts_the_token_chunks_a_read_begins_with(rx: object) -> None:
    client, server = _streaming(rx, 9, _HEAD)
    assert rx.arm(client.fileno(), 9, 1)  # type: ignore[attr-defined]
    before = rx.stats()[0]  # type: ignore[attr-defined]
    server.sendall(TOKEN * 3)  # one write: one read of three token chunks
    end = time.monotonic() + 5
    while rx.stats()[0] == before and time.monotonic() < end:  # type: ignore[attr-defined]
        time.sleep(0.0002)
    server.sendall(TOKEN + FINISH + USAGE + END)
    recs = _take_until(rx, lambda g: any(isinstance(r[3], bytes) for r in g))
    assert recs[-1][3] == FINISH + USAGE + END, "the rest of the read, after its token chunk"
    times = _times(recs)
    assert len(times) == 4 and times[0] == times[1] == times[2] < times[3], (
        "the chunks of one read share its time"
    )
    client.close()
    server.close()
