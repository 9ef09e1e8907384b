"""The calibration server (servecheck.reference.fast) and the stream reactor together, with both
of the reactor's readers (the native reader thread and the pure-Python loop).

No timing goals here (those are benchmarks): only what must hold on any machine. A token can
never be timed before the server sent it (TTFT >= the configured TTFT), every token is counted,
many concurrent streams on one reader all complete, and the server says how late it was.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from servecheck.load.generator.reactor import StreamReactor
from servecheck.load.generator.stream import StreamState, classify
from servecheck.reference.fast import FastServer, Timing

ROOT = Path(__file__).resolve().parents[2]
TTFT_S, ITL_S = 0.050, 0.004


@pytest.fixture(params=["thread", "loop"])
def reader(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture()
def fast() -> Iterator[str]:
    server = FastServer("127.0.0.1", 0, Timing(TTFT_S, ITL_S, 16))
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.port}"
    server.stop = True
    thread.join(timeout=5)


def _body(n: int = 16, **extra: object) -> bytes:
    return json.dumps(
        {
            "model": "truth",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": n,
            "stream": True,
            "stream_options": {"include_usage": True},
            **extra,
        }
    ).encode()


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - loopback test server
        return json.loads(r.read())


def test_concurrent_streams_on_one_reader_are_complete_and_never_early(
    fast: str, reader: str
) -> None:
    reactor = StreamReactor(
        fast + "/v1", {"Content-Type": "application/json"}, 5.0, 10.0, reader=reader
    )
    assert reactor.kind == reader, (
        "the native reader (servecheck/load/generator/_rxthread.c) is not built: pip install -e . needs a C compiler"
    )
    results: list[tuple[str | None, str, StreamState, float]] = []

    def one() -> None:
        for _ in range(3):
            st = StreamState()
            t0 = time.perf_counter()
            res = reactor.post_stream("/chat/completions", _body(), st.feed, deadline=t0 + 20)
            st.close(res.t_end)
            err, msg = classify(res, st)
            results.append((err, msg, st, t0))

    threads = [threading.Thread(target=one) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    pooled = len(reactor.pool)
    reactor.close()
    assert len(results) == 72
    for err, msg, st, t0 in results:
        assert err is None, msg
        assert (
            len(st.token_times) == 16
            and st.usage is not None
            and st.usage["completion_tokens"] == 16
        )
        assert st.t_first is not None and st.t_first - t0 >= TTFT_S, (
            "a token was timed before the server sent it"
        )
        assert all(b >= a for a, b in zip(st.token_times, st.token_times[1:], strict=False))
        assert st.token_times[-1] - t0 >= TTFT_S + 15 * ITL_S, (
            "the last token was timed before it was due"
        )
    if sys.platform == "linux":
        # Linux stamps TCP reads; the odd read without a usable stamp (one that raced the kernel's
        # deferred switching-on of timestamps, or an offset measured while preempted) is timed by
        # the reader's clock and counted, never more than a few.
        assert reactor.kernel_stamps > 0 and reactor.user_stamps <= max(2, reactor.reads // 100), (
            reactor.kernel_stamps,
            reactor.user_stamps,
        )
    assert reactor.reads >= 72 and pooled == 24  # keep-alive: one connection per concurrent caller


def test_reader_deadline_and_a_server_that_never_answers(reader: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        reactor = StreamReactor(f"http://127.0.0.1:{port}/v1", {}, 2.0, 0.3, reader=reader)
        res = reactor.post_stream("/chat/completions", _body(), lambda b, t: None)
        assert res.error == "timeout" and res.error_message == "no data for 0.3 s"
        res = reactor.post_stream(
            "/chat/completions", _body(), lambda b, t: None, deadline=time.perf_counter() + 0.2
        )
        assert res.error == "timeout"
        reactor.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_reader_loop_that_dies_fails_its_requests_and_the_next_starts_a_new_one(
    reader: str, fast: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request waits with no timeout of its own: the loop, however it ends, fails what is
    still open (a loop that raised used to be noticed by each waiter's 2 s poll), and the next
    request starts a fresh loop that serves it."""
    reactor = StreamReactor(f"{fast}/v1", {}, 2.0, 5.0, reader=reader)
    real = StreamReactor._drain
    calls = {"n": 0}

    def broken(self: StreamReactor) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug in the pass")
        real(self)

    monkeypatch.setattr(StreamReactor, "_drain", broken)
    t0 = time.perf_counter()
    res = reactor.post_stream("/chat/completions", _body(), lambda b, t: None)
    assert res.error == "stream-error", res
    assert res.error_message == "the load generator's reader loop stopped"
    assert time.perf_counter() - t0 < 30.0  # a guard against a hang, not a timing claim
    st = StreamState()
    res = reactor.post_stream("/chat/completions", _body(), st.feed)
    reactor.close()
    assert res.error is None and res.status == 200, res
    st.close(res.t_end)
    assert len(st.token_times) == 16


def test_server_closing_mid_response_is_a_stream_error(reader: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = srv.getsockname()[1]

        def serve() -> None:
            conn, _ = srv.accept()
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"6\r\ndata: "
            )
            conn.close()

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        reactor = StreamReactor(f"http://127.0.0.1:{port}/v1", {}, 2.0, 5.0, reader=reader)
        res = reactor.post_stream("/chat/completions", _body(), lambda b, t: None)
        reactor.close()
        t.join(timeout=5)
    assert (
        res.error == "stream-error"
        and res.error_message == "the server closed the connection mid-body"
    )


def test_https_is_refused_by_the_reactor() -> None:
    with pytest.raises(ValueError, match="plain HTTP"):
        StreamReactor("https://127.0.0.1:1/v1", {})


def test_fast_server_routes_and_lateness(fast: str) -> None:
    assert _get(fast + "/v1/models")["data"][0]["id"] == "truth"
    req = urllib.request.Request(
        fast + "/v1/completions",
        data=_body(5, prompt="x", stream=False),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=5) as r:  # noqa: S310
        full = json.loads(r.read())
    assert full["choices"][0]["text"] == " tok" * 5 and full["usage"]["completion_tokens"] == 5
    bad = urllib.request.Request(fast + "/v1/chat/completions", data=b"{nope", method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(bad, timeout=5)  # noqa: S310
    assert info.value.code == 400
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(fast + "/nowhere", timeout=5)  # noqa: S310
    assert info.value.code == 404
    stats = _get(fast + "/stats")
    assert (
        stats["writes"] >= 1
        and stats["late_p50_ms"] >= 0
        and stats["late_max_ms"] >= stats["late_p99_ms"]
    )


def test_fast_server_survives_a_client_that_hangs_up_mid_stream(fast: str) -> None:
    host, port = fast.removeprefix("http://").split(":")
    body = _body(200)
    with socket.create_connection((host, int(port))) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body)
        )
        assert s.recv(4096).startswith(b"HTTP/1.1 200 OK")
    time.sleep(3 * ITL_S)
    assert _get(fast + "/v1/models")["data"], (
        "the server must go on serving after a client vanished"
    )


def _post(url: str, body: bytes) -> bytes:
    req = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - loopback test server
        return bytes(r.read())


def test_fast_server_metrics_count_what_it_answered_in_vllm_names(fast: str) -> None:
    """/metrics: counters of the requests answered in full (usage's own figures), TTFT and e2e
    histograms no shorter than the schedule; a client that hung up counts nowhere; the page keeps
    its size whatever the traffic."""
    from servecheck.telemetry.prometheus import parse_samples, read_histogram

    def scrape() -> tuple[dict, int]:
        with urllib.request.urlopen(fast + "/metrics", timeout=5) as r:  # noqa: S310
            text = r.read().decode()
        return parse_samples(text), len(text.splitlines())

    before, size = scrape()
    assert before["vllm:request_success_total"][0][1] == 0
    host, port = fast.removeprefix("http://").split(":")
    gone = _body(200)
    with socket.create_connection((host, int(port))) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
            % (len(gone), gone)
        )
        assert s.recv(4096).startswith(b"HTTP/1.1 200 OK")
    streamed = _post(fast + "/v1/chat/completions", _body(5))
    usage = [
        json.loads(line[6:])["usage"]
        for line in streamed.decode().splitlines()
        if line.startswith("data: {") and '"choices":[]' in line
    ][0]
    full = json.loads(_post(fast + "/v1/completions", _body(3, prompt="x", stream=False)))
    time.sleep(3 * ITL_S)
    after, size_after = scrape()

    def value(name: str) -> float:
        return after[name][0][1]

    assert value("vllm:request_success_total") == 2
    assert value("vllm:generation_tokens_total") == 5 + 3
    assert value("vllm:prompt_tokens_total") == (
        usage["prompt_tokens"] + full["usage"]["prompt_tokens"]
    )
    assert after["vllm:request_success_total"][0][0] == {"engine": "0", "model_name": "truth"}
    ttft = read_histogram(after, "vllm:time_to_first_token_seconds")
    e2e = read_histogram(after, "vllm:e2e_request_latency_seconds")
    assert ttft is not None and e2e is not None
    # The hung-up stream never finished (its TTFT counts only if its first token left first).
    assert e2e.count == 2 and ttft.count >= 2 and e2e.buckets[-1][1] == 2
    assert ttft.sum >= ttft.count * TTFT_S and e2e.sum >= TTFT_S + 4 * ITL_S + TTFT_S + 2 * ITL_S
    assert size_after == size


def test_fast_server_command_line_reports_a_busy_port() -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "servecheck.commands.fast_server", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=ROOT,
        )
    assert (
        out.returncode == 3
        and f"cannot listen on 127.0.0.1:{port}" in out.stdout
        and "Traceback" not in out.stderr
    )


def test_connections_on_descriptors_above_1024(fast: str, reader: str) -> None:
    """A run of a thousand streams holds descriptors above 1023, which ``select`` refuses."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        if hard != resource.RLIM_INFINITY and hard < 1200:
            pytest.fail(f"this test needs 1200 descriptors; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    filler = []
    try:
        while True:  # take every number below 1100, so the next socket lands above 1024
            fd = os.open(os.devnull, os.O_RDONLY)
            filler.append(fd)
            if fd >= 1100:
                break
        reactor = StreamReactor(
            fast + "/v1", {"Content-Type": "application/json"}, 5.0, 10.0, reader=reader
        )
        st = StreamState()
        res = reactor.post_stream("/chat/completions", _body(), st.feed)
        reactor.close()
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert res.error is None, res.error_message
    assert len(st.token_times) == 16


def test_request_id_reaches_the_server_and_its_lateness_is_kept(fast: str, reader: str) -> None:
    reactor = StreamReactor(
        fast + "/v1", {"Content-Type": "application/json"}, 5.0, 10.0, reader=reader
    )
    st = StreamState()
    res = reactor.post_stream("/chat/completions", _body(), st.feed, request_id="run1-w0-7")
    plain = reactor.post_stream("/chat/completions", _body(), StreamState().feed)
    reactor.close()
    assert res.error is None and plain.error is None
    per = _get(fast + "/stats/requests")
    assert per["unit"] == "ms" and per["tracked"] == 1, (
        "only requests with an X-Request-Id are kept"
    )
    first, last = per["requests"]["run1-w0-7"]
    assert 0 <= first < 1000 and 0 <= last < 1000


def test_hanging_up_mid_stream_is_abandoned_not_failed(fast: str, reader: str) -> None:
    reactor = StreamReactor(
        fast + "/v1", {"Content-Type": "application/json"}, 5.0, 10.0, reader=reader
    )
    st = StreamState()
    res = reactor.post_stream(
        "/chat/completions",
        _body(200),
        st.feed,
        on_token=st.token,
        until=lambda: len(st.token_times) >= 3,
    )
    st.close(res.t_end)
    pooled = len(reactor.pool)
    full = StreamState()
    after = reactor.post_stream("/chat/completions", _body(), full.feed, on_token=full.token)
    reactor.close()
    assert res.hung_up and res.error is None and classify(res, st) == (None, "")
    assert 3 <= len(st.token_times) < 200 and pooled == 0, (
        "the abandoned connection is closed, not pooled"
    )
    assert after.error is None and len(full.token_times) == 16, (
        "the next request gets a fresh connection"
    )
    end = time.monotonic() + 5
    while _get(fast + "/stats")["open_streams"] and time.monotonic() < end:
        time.sleep(0.05)
    assert _get(fast + "/stats")["open_streams"] == 0, (
        "the server saw the hang-up and stopped that stream"
    )
