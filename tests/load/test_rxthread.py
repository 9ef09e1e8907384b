"""The native reader thread (servecheck/load/generator/_rxthread.c) on its own, over real loopback TCP.

What the reactor relies on: every read arrives once, with its key and the kernel's receive stamp;
a close and a reset are reported once and then the socket is no longer watched; nothing is
reported for a socket after ``remove``; a reused descriptor number never takes an old key; a
record appended while the caller is taking the previous batch still wakes the caller; and where
the thread marks a read as one token (``token_chunk``), the parser would have counted exactly that.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servecheck.load.generator import reactor as reactor_mod
from servecheck.load.generator.stream import StreamState
from servecheck.load.generator.wire import ResponseParser

pytestmark = pytest.mark.skipif(
    reactor_mod.sys.platform != "linux", reason="the native reader is Linux-only"
)


@pytest.fixture()
def rx() -> Iterator[object]:
    assert reactor_mod._rxthread is not None, (
        "the native reader is not built: pip install -e . needs a C compiler"
    )
    # Linux turns receive timestamps on lazily (a work queue) when the first socket asks; the
    # reactor holds a socket with them on for its whole life, and so does this fixture.
    keeper = reactor_mod._stamps_keeper()
    time.sleep(0.05)
    r = reactor_mod._rxthread.Reader()
    yield r
    r.close()
    if keeper is not None:
        keeper.close()


def _pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as srv:
        client = socket.create_connection(srv.getsockname())
        server, _ = srv.accept()
    client.setsockopt(socket.SOL_SOCKET, reactor_mod.SO_TIMESTAMPNS, 1)
    client.setblocking(False)
    return client, server


def _wait_take(rx: object, want: int, timeout: float = 5.0) -> list[tuple]:
    got: list[tuple] = []
    end = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < end:
        ready, _, _ = select.select([rx.fileno()], [], [], max(0.0, end - time.monotonic()))  # type: ignore[attr-defined]
        if ready:
            got.extend(rx.take())  # type: ignore[attr-defined]
    return got


def test_reads_carry_key_and_kernel_stamp(rx: object) -> None:
    client, server = _pair()
    rx.add(client.fileno(), 41)  # type: ignore[attr-defined]
    assert rx.running  # type: ignore[attr-defined]
    before_wall, before_mono = time.time(), time.perf_counter()
    server.sendall(b"hello")
    ((key, stamp, t_read, data, token),) = _wait_take(rx, 1)
    assert token is False, "not a chunk with a token event"
    assert (key, data) == (41, b"hello")
    assert before_wall - 0.001 <= stamp <= time.time() + 0.001, (
        "stamp is the kernel's CLOCK_REALTIME receive time"
    )
    assert before_mono <= t_read <= time.perf_counter(), "t_read is on time.perf_counter's clock"
    reads, passes, cpu_s, slice_ns, late = rx.stats()  # type: ignore[attr-defined]
    assert reads == 1 and passes == 1 and cpu_s > 0
    assert late == 0, "read at once: not late"
    # the short scheduler slice, taken where the kernel knows one for an ordinary thread (6.12+)
    assert slice_ns in (0, 100_000)
    if _kernel() >= (6, 12) and os.sched_getscheduler(0) == os.SCHED_OTHER:
        assert slice_ns == 100_000
    client.close()
    server.close()


def test_close_and_reset_are_reported_once(rx: object) -> None:
    a_client, a_server = _pair()
    b_client, b_server = _pair()
    rx.add(a_client.fileno(), 1)  # type: ignore[attr-defined]
    rx.add(b_client.fileno(), 2)  # type: ignore[attr-defined]
    a_server.close()  # orderly close: EOF
    b_server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    b_client.setblocking(True)
    b_client.send(b"unread")  # data the server never reads, so the close below sends a reset
    b_client.setblocking(False)
    time.sleep(0.05)
    b_server.close()
    records = {r[0]: r[3] for r in _wait_take(rx, 2)}
    assert records[1] == b""
    assert isinstance(records[2], int) and records[2] != 0, records
    time.sleep(0.1)
    assert rx.take() == [], "a closed socket is reported once, not on every pass"  # type: ignore[attr-defined]
    a_client.close()
    b_client.close()


def test_nothing_is_read_after_remove(rx: object) -> None:
    client, server = _pair()
    rx.add(client.fileno(), 5)  # type: ignore[attr-defined]
    rx.remove(client.fileno())  # type: ignore[attr-defined]
    server.sendall(b"late")
    time.sleep(0.1)
    assert rx.take() == []  # type: ignore[attr-defined]
    assert client.recv(16) == b"late", "the bytes stay in the socket for whoever reads it next"
    client.close()
    server.close()


def test_a_reused_descriptor_number_gets_its_new_key(rx: object) -> None:
    client, server = _pair()
    fd = client.fileno()
    rx.add(fd, 1)  # type: ignore[attr-defined]
    server.sendall(b"old")
    # Wait until the thread has read it (its eventfd is readable while records wait), not yet
    # taken: a fixed sleep here lost the race on a busy CI core.
    ready, _, _ = select.select([rx.fileno()], [], [], 5.0)  # type: ignore[attr-defined]
    assert ready, "the reader thread did not read b'old' within 5 s"
    rx.remove(fd)  # type: ignore[attr-defined]
    client.close()
    server.close()
    client2, server2 = _pair()
    if client2.fileno() != fd:  # the lowest free number is normally the one just freed
        pytest.fail(
            f"descriptor {fd} was not reused (got {client2.fileno()}); the test cannot show what it means to"
        )
    rx.add(fd, 2)  # type: ignore[attr-defined]
    server2.sendall(b"new")
    records = _wait_take(rx, 2)
    assert [(r[0], r[3]) for r in records] == [(1, b"old"), (2, b"new")]
    client2.close()
    server2.close()


def test_no_wake_up_is_lost_while_taking(rx: object) -> None:
    """Many small writes while the caller takes batches: every byte arrives, and the caller, which
    only waits on the eventfd, is never left waiting while records are queued."""
    client, server = _pair()
    server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rx.add(client.fileno(), 9)  # type: ignore[attr-defined]
    total, n = 0, 3000
    for i in range(n):
        server.send(b"x" * 7)
        if i % 50 == 0:
            for rec in rx.take():  # type: ignore[attr-defined]
                total += len(rec[3])
    end = time.monotonic() + 5
    while total < 7 * n and time.monotonic() < end:
        ready, _, _ = select.select([rx.fileno()], [], [], 1.0)  # type: ignore[attr-defined]
        assert ready, (
            f"records waiting ({total} of {7 * n} bytes taken) but the eventfd never became readable"
        )
        total += sum(len(rec[3]) for rec in rx.take())  # type: ignore[attr-defined]
    assert total == 7 * n
    client.close()
    server.close()


def test_close_is_idempotent_and_final(rx: object) -> None:
    client, server = _pair()
    rx.add(client.fileno(), 3)  # type: ignore[attr-defined]
    rx.close()  # type: ignore[attr-defined]
    rx.close()  # type: ignore[attr-defined]
    assert not rx.running  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="closed"):
        rx.add(client.fileno(), 4)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=">= 0"):
        reactor_mod._rxthread.Reader().add(-1, 1)  # type: ignore[union-attr]
    client.close()
    server.close()


def test_reader_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(reactor_mod.ENV_READER, "loop")
    assert reactor_mod.reader_kind() == "loop"
    monkeypatch.delenv(reactor_mod.ENV_READER)
    assert reactor_mod.reader_kind() == "thread"
    assert reactor_mod.reader_kind("loop") == "loop"
    monkeypatch.setenv(reactor_mod.ENV_READER, "lane")  # the lane's reactor reads with the thread
    assert reactor_mod.reader_kind() == "thread"
    monkeypatch.setenv(reactor_mod.ENV_READER, "fast")
    with pytest.raises(
        ValueError, match="SERVECHECK_READER must be 'lane', 'thread' or 'loop', not 'fast'"
    ):
        reactor_mod.reader_kind()


# -- token_chunk: the thread's shortcut must agree with the parser ------------------------------

_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _fresh() -> tuple[ResponseParser, StreamState]:
    st = StreamState()
    ex = ResponseParser(st.feed, on_token=st.token)
    ex.feed(_HEAD, 0.0)
    assert ex.in_body and ex.dech is not None
    return ex, st


def _state(ex: ResponseParser, st: StreamState) -> tuple:
    assert ex.dech is not None
    return (
        st.token_times,
        st.reasoning_at,
        st.t_first_answer,
        st.chunks,
        st.usage,
        st.done,
        st.problem,
        st._buf,
        st._slow is None,
        ex.dech.state,
        ex.dech.pending,
        ex.dech.done,
        ex.done,
    )


_content = st.one_of(
    st.just(""),
    st.just(" tok"),
    st.just('\\"'),
    st.just('\\"delta\\":{\\"content\\":\\"x'),
    st.text(alphabet='ab "\\{}:,\n', max_size=6).map(lambda x: json.dumps(x)[1:-1]),
)
_usage = st.sampled_from(
    [
        "",
        ',"usage":null',
        ',"usage": null',
        ',"usage":{"completion_tokens":3}',
        ',"usage":null,"usage":{"completion_tokens":3}',
        ',"usage" :null',
    ]
)
_extra = st.sampled_from(
    [
        "",
        ',"x":1',
        ',"tool_calls":[]',
        ',"text":"a"',
        ',"error":{"message":"boom"}',
        ',"reasoning":"hmm"',  # a reasoning delta: never the shortcut's answer token
        ',"reasoning_content":""',
    ]
)


@st.composite
def _reads(draw: st.DrawFn) -> bytes:
    """One read: a well-formed token chunk in some shape, or one with a single near miss."""
    content = draw(_content)
    delta = draw(
        st.sampled_from(
            [
                '{"content":"%s"}',
                '{"content": "%s"}',
                '{"role":"assistant","content":"%s"}',
                '{"content":"%s","tool_calls":null}',
                '{"reasoning_content":"r","content":"%s"}',
                '{"reasoning":"%s"}',
                '{"reasoning_content":"%s","content":null}',
            ]
        )
    )
    body = (
        '{"id":"c1","choices":[{"index":0,"delta":'
        + (delta % content)
        + draw(_extra)
        + "}]"
        + draw(_usage)
        + "}"
    )
    event, size_fmt, tail, size_error = "data: %s\n\n", "%x", b"\r\n", 0
    miss = draw(st.integers(0, 15))
    if miss == 1:
        event = draw(
            st.sampled_from(
                [
                    "data:%s\n\n",
                    "data: %s\r\n\r\n",
                    "data: %s\n",
                    ": hi\ndata: %s\n\n",
                    "data: %s\n\ndata: %s\n\n",
                    "data: %s\n\n\n",
                    "event: x\ndata: %s\n\n",
                ]
            )
        )
    elif miss == 2:
        size_fmt = draw(st.sampled_from(["%X", "%x;ext=1", "0%x", " %x", "%x "]))
    elif miss == 3:
        size_error = draw(st.sampled_from([1, -1, 16]))
    elif miss == 4:
        tail = draw(st.sampled_from([b"\n", b"", b"\r\n0\r\n\r\n", b"\r\n5\r\n"]))
    payload = (event % ((body,) * event.count("%s"))).encode()
    if miss == 5:
        i = draw(st.integers(0, len(payload) - 1))
        payload = payload[:i] + payload[i + 1 :]  # one byte lost (the size is still the new length)
    read = (size_fmt % max(len(payload) + size_error, 0)).encode() + b"\r\n" + payload + tail
    if miss == 6:
        read = read[: draw(st.integers(0, len(read) - 1))]
    if miss == 7:
        return draw(st.binary(max_size=200))
    return read


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_reads())
def test_token_chunk_agrees_with_the_parser(read: bytes) -> None:
    """Where the thread says "one chunk, one token event", parsing the bytes counts exactly one
    token and ends between chunks and events; and taking the shortcut leaves the same state."""
    rx_mod = reactor_mod._rxthread
    assert rx_mod is not None, "the native reader is not built"
    if not rx_mod.token_chunk(read):
        return
    parsed_ex, parsed = _fresh()
    parsed_ex.feed(read, 1.0)
    assert (
        parsed.token_times == [1.0]
        and parsed.reasoning_at == []  # the shortcut's token is an answer token, as parsed
        and parsed.t_first_answer == 1.0
        and parsed.usage is None
        and not parsed.done
        and not parsed.problem
    ), read
    assert (
        parsed_ex.dech is not None
        and parsed_ex.dech.state == 0
        and not parsed_ex.dech.pending
        and not parsed._buf
    )
    short_ex, short = _fresh()
    assert short_ex.token(1.0)
    assert _state(short_ex, short) == _state(parsed_ex, parsed)


def test_token_chunk_examples() -> None:
    rx_mod = reactor_mod._rxthread
    assert rx_mod is not None, "the native reader is not built"
    ev = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":" tok"}}],"usage":null}\n\n'
    assert rx_mod.token_chunk(b"%x\r\n%s\r\n" % (len(ev), ev))
    assert not rx_mod.token_chunk(b"%x\r\n%s\r\n" % (len(ev) + 1, ev)), "wrong chunk size"
    assert not rx_mod.token_chunk(b"%x\r\n%s\r\n0\r\n\r\n" % (len(ev), ev)), "more than one chunk"
    usage = ev.replace(b'"usage":null', b'"usage":{"completion_tokens":1}')
    assert not rx_mod.token_chunk(b"%x\r\n%s\r\n" % (len(usage), usage)), (
        "a usage object must be parsed"
    )
    empty = ev.replace(b'" tok"', b'""')
    assert not rx_mod.token_chunk(b"%x\r\n%s\r\n" % (len(empty), empty)), (
        "empty content is not a token"
    )


def test_shortcut_is_refused_mid_chunk_and_mid_event() -> None:
    """The shortcut applies only at a boundary; elsewhere the bytes must be fed."""
    ex, stt = _fresh()
    ex.feed(b"10\r\ndata: {", 1.0)  # a chunk under way
    assert not ex.token(2.0) and stt.token_times == []
    ex2, st2 = _fresh()
    ex2.feed(b"6\r\ndata: \r\n", 1.0)  # a whole chunk, but the SSE event is not finished
    assert not ex2.token(2.0) and st2.token_times == []


def test_bad_descriptors_are_refused(rx: object) -> None:
    with pytest.raises(ValueError, match="cannot be read"):
        rx.add(1 << 30, 1)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="cannot be read"):
        rx.add(rx.fileno(), 1)  # type: ignore[attr-defined]
    spare = socket.socket()
    fd = spare.fileno()
    spare.close()
    with pytest.raises(OSError):
        rx.add(fd, 1)  # type: ignore[attr-defined]


def test_a_forked_child_cannot_take_the_parents_records(rx: object) -> None:
    import os

    client, server = _pair()
    rx.add(client.fileno(), 7)  # type: ignore[attr-defined]
    server.sendall(b"one")
    time.sleep(0.05)
    pid = os.fork()
    if pid == 0:  # the child: every use must be refused, and close() must not hang
        code = 0
        try:
            rx.take()  # type: ignore[attr-defined]
            code = 1
        except RuntimeError:
            pass
        rx.close()  # type: ignore[attr-defined]
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child's take() was not refused"
    ready, _, _ = select.select([rx.fileno()], [], [], 2.0)  # type: ignore[attr-defined]
    assert ready, "the parent's wake-up survived the child"
    assert [r[3] for r in rx.take()] == [b"one"]  # type: ignore[attr-defined]
    client.close()
    server.close()


def _kernel() -> tuple[int, int]:
    major, minor = (os.uname().release.split(".") + ["0"])[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def test_a_read_taken_long_after_its_bytes_arrived_is_counted_late(rx: object) -> None:
    """Bytes that waited 50 ms before the thread read them (here: the descriptor added only then)
    count as a late read: what the summary's saturation flag is made of (analysis/stats.py)."""
    client, server = _pair()
    server.sendall(b"x")
    time.sleep(0.05)
    rx.add(client.fileno(), 7)  # type: ignore[attr-defined]
    (rec,) = _wait_take(rx, 1)
    assert rec[0] == 7 and rec[3] == b"x"
    late = rx.stats()[4]  # type: ignore[attr-defined]
    assert late == 1
    client.close()
    server.close()
