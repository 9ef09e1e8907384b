"""The native lane (``lane.py``, ``_lane.c``) against the reactor it stands in for.

A lane's record must be the reactor's record from the same response: every streaming fault and
legal SSE variation of the reference server, the hostile servers (endless, stalled, giant, closing
mid-body), a server that is down, stale pooled connections, and the lane's own bounds (slots taken
away, the stop, the size bound). Timing values differ between two requests; what is compared is
what the record says (status, error class and message, tokens, usage, finish reason, the stamps
present). No locust here; one run through Locust is at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from servecheck.load.generator import lane as lane_mod
from servecheck.load.generator.lane import Ended, Lane, with_lane
from servecheck.load.generator.reactor import StreamReactor
from servecheck.load.generator.stream import StreamState, classify
from servecheck.load.generator.wire import Origin, WireResult
from servecheck.reference.fast import FastServer, Timing
from servecheck.reference.faults import FAULTS
from servecheck.reference.hostile import closed_port, hostile
from servecheck.reference.inprocess import RunningServer

pytestmark = pytest.mark.skipif(not lane_mod.lane_wanted(), reason="the native lane is not built")

HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
BODY = {
    "model": "ref-tiny",
    "messages": [{"role": "user", "content": "tell me about rivers"}],
    "max_tokens": 12,
    "stream": True,
    "stream_options": {"include_usage": True},
    "temperature": 0,
}


def _wait(lane: Lane, want: int, timeout_s: float = 30.0) -> list[Ended | int]:
    got: list[Ended | int] = []
    end = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < end:
        select.select([lane.fileno()], [], [], 0.2)
        ended, _idle = lane.take()
        got += ended
    return got


def lane_one(
    base_url: str,
    body: dict[str, Any] | None = None,
    connect_timeout_s: float = 5.0,
    read_timeout_s: float = 10.0,
    timeout_s: float = 30.0,
) -> tuple[WireResult, StreamState]:
    origin = Origin(base_url, HEADERS)
    lane = Lane(origin, connect_timeout_s, read_timeout_s)
    try:
        lane.set_slots(1)
        st = StreamState()
        request = origin.request("/chat/completions", json.dumps(body or BODY).encode(), "rid-1")
        lane.put(1, request, timeout_s, st)
        (e,) = _wait(lane, 1, timeout_s + read_timeout_s + 10)
        assert isinstance(e, Ended)
        return e.res, e.st
    finally:
        lane.close()


def reactor_one(
    base_url: str,
    body: dict[str, Any] | None = None,
    connect_timeout_s: float = 5.0,
    read_timeout_s: float = 10.0,
    timeout_s: float = 30.0,
) -> tuple[WireResult, StreamState]:
    reactor = StreamReactor(base_url, HEADERS, connect_timeout_s, read_timeout_s)
    try:
        st = StreamState()
        res = reactor.post_stream(
            "/chat/completions",
            json.dumps(body or BODY).encode(),
            st.feed,
            deadline=time.perf_counter() + timeout_s,
            tokens=st,
            request_id="rid-1",
        )
        return res, st
    finally:
        reactor.close()


def said(res: WireResult, st: StreamState) -> dict[str, Any]:
    """What a record takes from one exchange, less its timings."""
    st.close(res.t_end)
    error, message = classify(res, st)
    return {
        "status": res.status,
        "error": error,
        "message": re.sub(r"(chatcmpl|resp|msg)-[0-9a-f]+", "ID", message),
        "tokens": len(st.token_times),
        "reasoning": list(st.reasoning_at),
        "usage": st.usage,
        "finish": st.finish_reason,
        "first_token": st.t_first is not None,
        "headers": sorted(k for k in res.headers if k != "date"),
        "body_prefix": re.sub(rb"(chatcmpl|resp|msg)-[0-9a-f]+", b"ID", res.body_prefix),
        # the record's body stamp is the first body read or the first token, whichever came
        # first (analysis/timings.py): a token chunk counted unparsed sets only the latter
        "stamps": [
            bool(res.t_sent),
            bool(res.t_written),
            bool(res.t_headers),
            bool(res.t_body or st.t_first),
        ],
    }


def both_ways(base_url: str, read_timeout_s: float = 10.0) -> tuple[Ended, Ended, bool]:
    """One exchange through a lane that hands over a plain answer's reads too, replayed from the
    same bundles twice: as the lane replays them (the plain answer, where the thread made one) and
    through the reactor's parser (the reads alone); and whether it came plain."""
    origin = Origin(base_url, HEADERS)
    lane = Lane(origin, 5.0, read_timeout_s, items_too=True)
    bundles: list[tuple[Any, ...]] = []
    try:
        lane.set_slots(1)
        request = origin.request("/chat/completions", json.dumps(BODY).encode(), "rid-1")
        lane.put(1, request, 30.0, StreamState())
        end = time.monotonic() + 30.0 + read_timeout_s
        while time.monotonic() < end and not (bundles and bundles[-1][1] != lane_mod.END_MORE):
            select.select([lane.fileno()], [], [], 0.2)
            bundles += lane._c.take()[0]

        def replayed(plain: bool) -> Ended:
            lane._open = {1: lane_mod._Open(StreamState(), 30.0)}
            ended = [lane.replay(b if plain else (*b[:-1], None)) for b in bundles]
            (e,) = [x for x in ended if x is not None]
            assert isinstance(e, Ended)
            return e

        return replayed(True), replayed(False), any(b[-1] is not None for b in bundles)
    finally:
        lane.close()


def every_field(e: Ended) -> dict[str, Any]:
    """All that one replay made: the whole result and stream state, times included."""
    st = e.st
    st.close(e.res.t_end)
    state = {k: getattr(st, k) for k in StreamState.__slots__ if k != "_slow"}
    return {"res": dataclasses.asdict(e.res), "st": state, "slow": st._slow is None}


STREAM_FAULTS = sorted(
    f
    for f in FAULTS
    if f.startswith("stream-") and f not in ("stream-stall", "stream-stall-keepalive")
)


@pytest.mark.parametrize("fault", ["none", *STREAM_FAULTS])
def test_every_streaming_fault_reads_as_the_reactor_reads_it(
    make_reference: Callable[..., RunningServer], fault: str
) -> None:
    server = make_reference() if fault == "none" else make_reference(fault)
    want = said(*reactor_one(server.base_url))
    got = said(*lane_one(server.base_url))
    if fault in ("stream-differs",):  # a different answer on every request: shape only
        want.pop("usage"), got.pop("usage"), want.pop("tokens"), got.pop("tokens")
    assert got == want
    # the thread's plain answer is the parser's, field for field, from the same reads
    fast, slow, plain = both_ways(server.base_url)
    assert every_field(fast) == every_field(slow)
    if fault == "none":
        assert plain, "the reference's common answer came plain"


@pytest.mark.parametrize("quirk", ["sse-no-space", "sse-crlf", "sse-comments", "sse-split"])
def test_legal_sse_variations_read_as_the_reactor_reads_them(
    make_reference: Callable[..., RunningServer], quirk: str
) -> None:
    server = make_reference(quirks=(quirk,))
    want = said(*reactor_one(server.base_url))
    got = said(*lane_one(server.base_url))
    assert got == want and got["error"] is None and got["tokens"] == 12
    fast, slow, plain = both_ways(server.base_url)
    assert every_field(fast) == every_field(slow)
    assert plain == (quirk in ("sse-no-space", "sse-split")), f"{quirk}: plain is {plain}"


def test_errors_and_a_stall_read_as_the_reactor_reads_them(
    make_reference: Callable[..., RunningServer],
) -> None:
    locked = make_reference(api_key="sk-lane-selftest-4321")
    assert said(*lane_one(locked.base_url)) == said(*reactor_one(locked.base_url))
    stalled = make_reference("stream-stall")
    got = said(*lane_one(stalled.base_url, read_timeout_s=0.5))
    assert got == said(*reactor_one(stalled.base_url, read_timeout_s=0.5))
    assert got["error"] == "timeout" and got["message"] == "no data for 0.5 s"
    assert got["first_token"]


@pytest.mark.parametrize(
    ("name", "kw"),
    [
        ("endless-sse", {"timeout_s": 1.5}),
        ("headers-then-stall", {"read_timeout_s": 0.6}),
        ("close-mid-chunk", {}),
        ("giant-line", {}),
        ("html-login-page", {}),
        ("always-429", {}),
        ("accepts-never-answers", {"read_timeout_s": 0.6}),
        ("huge-body", {}),
        ("refusals-huge", {}),
        ("drops-first", {}),
    ],
)
def test_hostile_servers_read_as_the_reactor_reads_them(name: str, kw: dict[str, float]) -> None:
    """Bounded like the reactor: an endless stream ends at the deadline, a silent one at the
    no-data timeout, a giant line at the parser's size bound; the same class and message."""
    with hostile(name, max_s=20.0) as srv:
        want = said(*reactor_one(srv.base_url, **kw))
    with hostile(name, max_s=20.0) as srv:
        got = said(*lane_one(srv.base_url, **kw))
    for d in (want, got):  # the hostile servers' own bodies vary in length with timing
        d.pop("tokens") if name in ("endless-sse",) else None
    assert got == want


def test_a_target_that_is_down_is_a_connect_error_in_the_reactors_words() -> None:
    port = closed_port()
    res, _st = lane_one(f"http://127.0.0.1:{port}/v1", connect_timeout_s=2.0)
    want, _ = reactor_one(f"http://127.0.0.1:{port}/v1", connect_timeout_s=2.0)
    assert res.error == want.error == "connect"
    assert res.error_message == want.error_message
    assert f"cannot connect to 127.0.0.1:{port}" in res.error_message


def test_many_exchanges_reuse_connections_and_count_every_token(
    make_reference: Callable[..., RunningServer],
) -> None:
    server = make_reference()
    origin = Origin(server.base_url, HEADERS)
    lane = Lane(origin, 5.0, 10.0)
    try:
        lane.set_slots(4)
        for seq in range(1, 41):
            body = json.dumps(BODY).encode()
            lane.put(
                seq, origin.request("/chat/completions", body, f"r-{seq}"), 30.0, StreamState()
            )
        got = _wait(lane, 40)
        stats = lane.stats()
    finally:
        lane.close()
    ended = [e for e in got if isinstance(e, Ended)]
    assert sorted(e.seq for e in ended) == list(range(1, 41))
    assert all(e.res.error is None and len(e.st.token_times) == 12 for e in ended)
    assert sum(e.res.new_conn for e in ended) <= 8, "keep-alive connections are reused"
    assert stats["started"] == 40 and stats["reads"] >= 40
    assert stats["kernel_stamps"] + stats["user_stamps"] == stats["reads"]
    for e in ended:  # a token is never timed before the request went out (on loopback the
        # kernel may stamp the answer before the writer reads its clock after the send returns:
        # analysis/timings.py's record_stamps; so t_written is not a bound on it)
        assert e.res.t_sent <= e.res.t_written and e.res.t_sent <= e.st.token_times[0]
        assert e.st.token_times[0] <= e.res.t_end


def test_a_slot_left_without_a_request_counts_as_held(
    make_reference: Callable[..., RunningServer],
) -> None:
    """A free slot with nothing queued waits for the generator, not for its user: that wait is
    the lane's held time (a closed loop sending late), and the exchanges' time is busy time."""
    server = make_reference()
    origin = Origin(server.base_url, HEADERS)
    lane = Lane(origin, 5.0, 10.0)
    body = json.dumps(BODY).encode()
    try:
        lane.set_slots(1)
        lane.put(1, origin.request("/chat/completions", body, "r-1"), 30.0, StreamState())
        assert len(_wait(lane, 1)) == 1
        quick = lane.stats()
        time.sleep(0.3)  # the slot is free and the queue empty: the generator holds it
        lane.put(2, origin.request("/chat/completions", body, "r-2"), 30.0, StreamState())
        assert len(_wait(lane, 1)) == 1
        stats = lane.stats()
    finally:
        lane.close()
    assert quick["busy_s"] > 0 and quick["held_s"] < 0.1
    assert 0.25 <= stats["held_s"] - quick["held_s"] < 5.0, stats
    assert stats["busy_s"] > quick["busy_s"]


def test_a_stale_pooled_connection_is_retried_on_a_fresh_one(
    make_reference: Callable[..., RunningServer],
) -> None:
    """The server closes every kept-alive connection after its answer (as llama.cpp may): the
    next request on it fails before any byte and goes again on a new connection, unseen."""
    server = make_reference()
    origin = Origin(server.base_url, HEADERS)
    lane = Lane(origin, 5.0, 10.0)
    try:
        lane.set_slots(1)
        body = json.dumps(BODY).encode()
        lane.put(1, origin.request("/chat/completions", body, "r-1"), 30.0, StreamState())
        assert len(_wait(lane, 1)) == 1
        server.stop()
        server.start()  # same port: the lane's pooled connection is now stale
        lane.put(2, origin.request("/chat/completions", body, "r-2"), 30.0, StreamState())
        (e,) = _wait(lane, 1)
    finally:
        lane.close()
    assert isinstance(e, Ended) and e.res.error is None, e
    assert e.res.new_conn and len(e.st.token_times) == 12


def test_slots_taken_away_drop_their_exchanges_and_a_stop_withdraws_the_queue(
    make_reference: Callable[..., RunningServer],
) -> None:
    server = make_reference("stream-stall")  # every exchange stays open
    origin = Origin(server.base_url, HEADERS)
    lane = Lane(origin, 5.0, 30.0)
    try:
        lane.set_slots(3)
        body = json.dumps(BODY).encode()
        for seq in range(1, 11):
            lane.put(
                seq, origin.request("/chat/completions", body, f"r-{seq}"), 60.0, StreamState()
            )
        deadline = time.monotonic() + 10
        while lane.open()[0] < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lane.open()[0] == 3 and lane.queued() == 7
        lane.set_slots(1)
        dropped = _wait(lane, 2, 10.0)
        assert len(dropped) == 2 and all(isinstance(d, int) for d in dropped), dropped
        lane.stop_at(time.perf_counter())
        lane.set_slots(0)
        got = _wait(lane, 1, 10.0)
        assert all(isinstance(d, int) for d in got)
        _ended, idle = lane.take()
        assert idle and lane.open()[0] == 0
        assert sorted(lane.unsent()) == list(range(4, 11))
    finally:
        lane.close()


def test_an_exchange_the_parser_ended_is_aborted_in_the_lane() -> None:
    """A giant line: the parser fails it at 1 MiB; the lane stops reading it (no 200 MiB read)."""
    with hostile("giant-line", max_s=20.0) as srv:
        t0 = time.monotonic()
        res, st = lane_one(srv.base_url)
        took = time.monotonic() - t0
        sent = srv.sent_bytes
    assert res.error == "too-large"
    assert took < 60 and sent < 100 * 1024 * 1024, "the lane stopped reading when the parser did"


def test_reader_info_with_the_lane_adds_both_threads() -> None:
    info = {"kind": "thread", "reads": 10, "kernel_stamps": 9, "user_stamps": 1, "wakes": 3}
    info["thread"] = {"reads": 10, "passes": 2, "cpu_s": 0.5, "slice_us": 100.0, "late_reads": 1}
    lane = {
        "reads": 90,
        "passes": 8,
        "cpu_s": 1.25,
        "slice_us": 100.0,
        "late_reads": 2,
        "kernel_stamps": 90,
        "user_stamps": 0,
        "held_s": 0.5,
        "busy_s": 40.0,
        "long_passes": 6,
    }
    out = with_lane(info, lane)
    assert out["kind"] == "lane" and out["reads"] == 100 and out["kernel_stamps"] == 99
    assert out["thread"] == {
        "reads": 100,
        "passes": 10,
        "cpu_s": 1.75,
        "slice_us": 100.0,
        "late_reads": 3,
        "held_s": 0.5,  # the lane's alone: the reactor's thread holds no slots
        "busy_s": 40.0,
        "long_passes": 6,  # the lane's alone: the reactor's thread has one pause
    }
    # a reactor reader thread that never read (no hand-back) leaves the lane's figures alone
    idle = {**info, "thread": {"reads": 0, "passes": 0, "cpu_s": 0.0, "slice_us": None}}
    assert with_lane(idle, lane)["thread"] == {
        "reads": 90,
        "passes": 8,
        "cpu_s": 1.25,
        "slice_us": 100.0,
        "late_reads": 2,
        "held_s": 0.5,
        "busy_s": 40.0,
        "long_passes": 6,
    }


def _calibrated(itl_s: float, tokens: int) -> Iterator[str]:
    server = FastServer("127.0.0.1", 0, Timing(0.01, itl_s, tokens))
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.port}/v1"
    finally:
        server.stop = True
        thread.join(timeout=5)


def _lane_batch(base_url: str, slots: int, n: int, tokens: int) -> tuple[list[Ended], dict]:
    """``n`` requests of ``tokens`` tokens through one lane with ``slots`` slots: the exchanges
    and the lane's counters."""
    origin = Origin(base_url, HEADERS)
    lane = Lane(origin, 5.0, 10.0)
    body = json.dumps({**BODY, "model": "truth", "max_tokens": tokens}).encode()
    try:
        lane.set_slots(slots)
        for seq in range(1, n + 1):
            request = origin.request("/chat/completions", body, f"rid-{seq}")
            lane.put(seq, request, 30.0, StreamState())
        done = [e for e in _wait(lane, n, 60.0) if isinstance(e, Ended)]
        return done, lane.stats()
    finally:
        lane.close()


def test_the_lane_takes_its_long_pause_where_tokens_come_far_apart() -> None:
    # 30 ms between tokens: far more than four long pauses, so a window of calm token reads earns
    # the long pause (a busy machine can make a window tight: a few batches, each bounded)
    stats: dict = {}
    for _ in range(4):
        with contextlib.contextmanager(_calibrated)(0.03, 24) as url:
            done, stats = _lane_batch(url, 16, 32, 24)
        assert len(done) == 32 and all(e.res.error is None for e in done)
        assert all(len(e.st.token_times) == 24 for e in done)  # every token read and counted
        if stats["long_passes"] > 0:
            break
    assert 0 < stats["long_passes"] <= stats["passes"]


def test_the_lane_keeps_its_short_pause_where_tokens_come_close() -> None:
    # 2 ms between tokens: a long pause would take two at once, so every window is tight
    with contextlib.contextmanager(_calibrated)(0.002, 48) as url:
        done, stats = _lane_batch(url, 16, 64, 48)
    assert len(done) == 64 and all(e.res.error is None for e in done)
    assert stats["counted"] > 16 * 48 and stats["long_passes"] == 0


def test_the_lane_wants_a_long_pause_no_shorter_than_its_pause() -> None:
    with pytest.raises(ValueError, match="pause"):
        lane_mod._lane.Lane(socket.AF_INET, "127.0.0.1", 80, True, 1.0, 1.0, 0.002, 1024, 0.001)


def test_the_lane_refuses_a_host_name_it_cannot_use() -> None:
    with pytest.raises(ValueError, match="numeric address"):
        lane_mod._lane.Lane(socket.AF_INET, "localhost", 80, True, 1.0, 1.0, 0.0, 1024)


# -- the framing, byte for byte: any response cut into any reads -----------------------------

TOKEN = 'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n'
PIECES = [
    TOKEN % "a",
    TOKEN % "bb",
    'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n',
    'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n',
    ": keep-alive\n\n",
    "data: [DONE]\n\n",
    TOKEN.replace("\n\n", "\n") % "c",  # an event whose end comes with the next piece
    "\n",
    TOKEN.replace("\n", "\r\n") % "d",  # CRLF framing from here on
]


class Scripted:
    """A one-connection server that answers each request with the given writes, apart in time."""

    def __init__(self, writes: list[bytes]) -> None:
        self.writes = writes
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        import threading

        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                try:
                    got = b""
                    while b"\r\n\r\n" not in got:
                        got += conn.recv(65536)
                    length = int(re.search(rb"Content-Length: (\d+)", got).group(1))  # type: ignore[union-attr]
                    while len(got.split(b"\r\n\r\n", 1)[1]) < length:
                        got += conn.recv(65536)
                    for w in self.writes:
                        conn.sendall(w)
                        time.sleep(0.003)  # apart: separate reads, as a server's flushes are
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def _response(pieces: list[int], sizes: list[int], cuts: list[int], close: bool) -> list[bytes]:
    body = "".join(PIECES[i] for i in pieces).encode()
    if not sizes:  # a chunk a piece, as servers write them: the lane's token chunks
        sizes = [len(PIECES[i].encode()) for i in pieces]
    chunks, pos = [], 0
    for size in sizes:  # chunk boundaries anywhere in the body
        if pos >= len(body):
            break
        part = body[pos : pos + max(1, size)]
        chunks.append(b"%x\r\n%s\r\n" % (len(part), part))
        pos += len(part)
    if pos < len(body):
        chunks.append(b"%x\r\n%s\r\n" % (len(body) - pos, body[pos:]))
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    raw = head + b"".join(chunks) + (b"" if close else b"0\r\n\r\n")
    bounds = sorted({c for c in cuts if 0 < c < len(raw)})
    if not bounds:  # whole chunks as reads: the lane's token-chunk path
        return [head, *chunks] + ([] if close else [b"0\r\n\r\n"])
    return [raw[a:b] for a, b in zip([0, *bounds], [*bounds, len(raw)], strict=True)]


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as hs  # noqa: E402


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=hs.lists(hs.integers(0, len(PIECES) - 1), min_size=1, max_size=12),
    sizes=hs.one_of(hs.just([]), hs.lists(hs.sampled_from([1, 7, 40, 75, 200, 4000]), max_size=12)),
    cuts=hs.one_of(hs.just([]), hs.lists(hs.integers(0, 3000), max_size=5)),
    close=hs.booleans(),
)
def test_any_framing_cut_into_any_reads_reads_as_the_reactor_reads_it(
    pieces: list[int], sizes: list[int], cuts: list[int], close: bool
) -> None:
    """Token chunks the lane counts itself must be exactly those the reactor's parser would
    count: between chunks, between events, before [DONE], without CR framing; everything else is
    the parser's. A response that closes instead of ending is the parser's error in both."""
    server = Scripted(_response(pieces, sizes, cuts, close))
    try:
        base = f"http://127.0.0.1:{server.port}/v1"
        want = said(*reactor_one(base, read_timeout_s=3.0))
        got = said(*lane_one(base, read_timeout_s=3.0))
        fast, slow, _ = both_ways(base, read_timeout_s=3.0)
    finally:
        server.close()
    assert got == want
    assert every_field(fast) == every_field(slow)


def test_the_common_answer_comes_plain_and_the_rest_through_the_parser() -> None:
    """The thread reads the common answer itself (a plain one: framing off, events split); a
    comment, CR framing, an event of two lines, a trailer or a chunk extension go to the parser.
    Either way the answer is the parser's (``every_field``)."""
    role, tok, fin, use, done = (PIECES[i].encode() for i in (2, 0, 3, 4, 6))
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

    def chunk(b: bytes, ext: bytes = b"") -> bytes:
        return b"%x%s\r\n%s\r\n" % (len(b), ext, b)

    common = [head + chunk(role), chunk(tok), chunk(tok), chunk(fin) + chunk(use) + chunk(done)]
    cases = {
        "common": (common + [b"0\r\n\r\n"], True),
        "no space after data:": (
            [head + chunk(b"data:" + tok[6:]), chunk(fin + done), b"0\r\n\r\n"],
            True,
        ),
        "a comment": ([head + chunk(b": ping\n\n"), *common[1:], b"0\r\n\r\n"], False),
        "CRLF": ([head + chunk(tok.replace(b"\n", b"\r\n")), chunk(done), b"0\r\n\r\n"], False),
        "two lines": ([head + chunk(b"data: [\ndata: 1]\n\n"), chunk(done), b"0\r\n\r\n"], False),
        "a trailer": (common + [b"0\r\nX-Done: 1\r\n\r\n"], False),
        "an extension": ([head + chunk(tok, b";x=1"), chunk(done), b"0\r\n\r\n"], False),
    }
    for name, (writes, want_plain) in cases.items():
        server = Scripted(writes)
        try:
            fast, slow, plain = both_ways(f"http://127.0.0.1:{server.port}/v1", read_timeout_s=3.0)
        finally:
            server.close()
        assert plain == want_plain, name
        assert every_field(fast) == every_field(slow), name
        assert fast.res.error is None and fast.st.done, name
