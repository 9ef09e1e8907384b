"""The native reader thread (servecheck/load/_rxthread.c) on its own, over real loopback TCP.

What the reactor relies on: every read arrives once, with its key and the kernel's receive stamp;
a close and a reset are reported once and then the socket is no longer watched; nothing is
reported for a socket after ``remove``; a reused descriptor number never takes an old key; and a
record appended while the caller is taking the previous batch still wakes the caller.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Iterator

import pytest

from servecheck.load import reactor as reactor_mod

pytestmark = pytest.mark.skipif(reactor_mod.sys.platform != "linux", reason="the native reader is Linux-only")


@pytest.fixture()
def rx() -> Iterator[object]:
    assert reactor_mod._rxthread is not None, "the native reader is not built: pip install -e . needs a C compiler"
    r = reactor_mod._rxthread.Reader()
    yield r
    r.close()


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
    (key, stamp, t_read, data), = _wait_take(rx, 1)
    assert (key, data) == (41, b"hello")
    assert before_wall - 0.001 <= stamp <= time.time() + 0.001, "stamp is the kernel's CLOCK_REALTIME receive time"
    assert before_mono <= t_read <= time.perf_counter(), "t_read is on time.perf_counter's clock"
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
    time.sleep(0.05)  # read by the thread, not yet taken
    rx.remove(fd)  # type: ignore[attr-defined]
    client.close()
    server.close()
    client2, server2 = _pair()
    if client2.fileno() != fd:  # the lowest free number is normally the one just freed
        pytest.fail(f"descriptor {fd} was not reused (got {client2.fileno()}); the test cannot show what it means to")
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
        assert ready, f"records waiting ({total} of {7 * n} bytes taken) but the eventfd never became readable"
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
    monkeypatch.setenv(reactor_mod.ENV_READER, "fast")
    with pytest.raises(ValueError, match="SERVECHECK_READER must be 'thread' or 'loop', not 'fast'"):
        reactor_mod.reader_kind()
