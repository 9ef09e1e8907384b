"""The TTFT decomposition and request ids (servecheck/analysis/timings.py): per-request stamps from
both readers (the reactor, plain HTTP; the blocking reader, https), in order, new vs reused
connections, the request id header as sent (renamed, off), what the server echoed, the body's id,
and the run's ``timings`` section with its slowest requests."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from servecheck.analysis.timings import (
    TimingsTally,
    phases_of,
    record_stamps,
    request_id_header,
)
from servecheck.errors import SpecError
from servecheck.load.generator.reactor import StreamReactor
from servecheck.load.generator.stream import (
    StreamState,
    classify,
    record_from_stream,
    record_phases,
)
from servecheck.load.generator.wire import WireClient, WireResult
from servecheck.records.record import RequestRecord
from servecheck.reference.inprocess import RunningServer
from servecheck.report.load_text import format_timings

Reader = WireClient | StreamReactor
BODY = json.dumps(
    {
        "model": "ref-tiny",
        "messages": [{"role": "user", "content": "tell me about rivers"}],
        "max_tokens": 12,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
    }
).encode()


def _record(seq: int = 1) -> RequestRecord:
    return RequestRecord("t", "chat", "w", seq, 0.0, 0.0, request_id=f"run-w-{seq}")


def _one(reader: Reader, rid: str | None = "run-w-1", header: str | None = "X-Request-Id"):
    """One request through ``reader``, recorded as the Locust user records it."""
    st = StreamState()
    res = reader.post_stream("/chat/completions", BODY, st.feed, tokens=st, request_id=rid)
    st.close(res.t_end)
    err, msg = classify(res, st)
    assert err is None, msg
    t0 = res.t_sent
    rec = record_from_stream(
        _record(),
        ttft=None if st.t_first is None else st.t_first - t0,
        e2e=res.t_end - t0,
        token_times=st.token_times,
        usage=st.usage,
    )
    record_phases(rec, st, t0)
    record_stamps(rec, res, st, t0, header)
    return rec, res


def _assert_ordered(rec: RequestRecord) -> None:
    s = rec.stamps
    assert s is not None and rec.ttft is not None and rec.e2e is not None
    chain = [
        ("t0", 0.0),
        ("written", s["written"]),
        ("headers", s["headers"]),
        ("body", s["body"]),
        ("first token", round(rec.ttft * 1000, 3)),
        ("last token", s["last_token"]),
        ("end", round(rec.e2e * 1000, 3) + 0.001),
    ]
    for (a, x), (b, y) in zip(chain, chain[1:], strict=False):
        assert x <= y, f"{a} ({x} ms) after {b} ({y} ms): {s}"


@pytest.fixture(params=["blocking", "reactor"])
def make_reader(request: pytest.FixtureRequest) -> Iterator[Callable[..., Reader]]:
    made: list[Reader] = []

    def make(base_url: str, header: str | None = "X-Request-Id", **kw: object) -> Reader:
        cls = WireClient if request.param == "blocking" else StreamReactor
        reader = cls(
            base_url,
            {"Content-Type": "application/json"},
            5.0,
            10.0,
            request_id_header=header,
            **kw,
        )
        made.append(reader)
        return reader

    yield make
    for reader in made:
        reader.close()


def test_stamps_are_present_and_ordered_and_a_reused_connection_has_no_connect(
    make_reference: Callable[..., RunningServer], make_reader: Callable[..., Reader]
) -> None:
    reader = make_reader(make_reference().base_url)
    first, res1 = _one(reader)
    second, res2 = _one(reader)
    assert first.new_conn is True and first.stamps is not None
    assert first.stamps["connect"] > 0, "a new connection's TCP connect is timed"
    assert "tls" not in first.stamps, "plain HTTP has no handshake"
    assert second.new_conn is False and second.stamps is not None
    assert "connect" not in second.stamps, "a reused keep-alive connection did not connect"
    for rec in (first, second):
        _assert_ordered(rec)
    assert first.response_id and first.response_id.startswith("chatcmpl-"), first.response_id
    phases = phases_of(json.loads(second.to_json()))
    ttft_ms = second.ttft * 1000  # type: ignore[operator]
    parts = ("send", "wait_headers", "headers_to_body", "body_to_token")
    assert sum(phases[k] for k in parts) == pytest.approx(ttft_ms, abs=0.01), phases


class _EchoServer:
    """A keep-alive HTTP/1.1 stub that keeps each request head and answers one SSE stream whose
    chunks carry ``"id":"chatcmpl-stub-N"``, echoing the request id header when ``echo``."""

    def __init__(self, echo: bool = True, tls: ssl.SSLContext | None = None) -> None:
        self.echo, self.tls = echo, tls
        self.heads: list[str] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _conn(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                text = head.decode("latin-1")
                length = next(
                    int(line.split(":", 1)[1])
                    for line in text.split("\r\n")
                    if line.lower().startswith("content-length:")
                )
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                self.heads.append(text)
                conn.sendall(self._answer(text, len(self.heads)))
        except OSError:
            return
        finally:
            conn.close()

    def _answer(self, head: str, n: int) -> bytes:
        rid = next(
            (
                line.split(":", 1)[1].strip()
                for line in head.split("\r\n")
                if line.lower().startswith("x-request-id:")
            ),
            None,
        )
        events = [
            {"id": f"chatcmpl-stub-{n}", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
            *(
                {"id": f"chatcmpl-stub-{n}", "choices": [{"index": 0, "delta": {"content": w}}]}
                for w in ("a", " b", " c")
            ),
            {"id": f"chatcmpl-stub-{n}", "choices": [], "usage": {"completion_tokens": 3}},
        ]
        body = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"
        echo = f"x-request-id: {rid}\r\n" if self.echo and rid else ""
        return (
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            f"{echo}content-length: {len(body)}\r\n\r\n"
        ).encode() + body

    def close(self) -> None:
        self.sock.close()


@pytest.fixture()
def echo_server() -> Iterator[_EchoServer]:
    server = _EchoServer()
    yield server
    server.close()


def test_request_id_arrives_and_the_echo_and_body_id_are_recorded(
    echo_server: _EchoServer, make_reader: Callable[..., Reader]
) -> None:
    reader = make_reader(f"http://127.0.0.1:{echo_server.port}/v1")
    rec, _ = _one(reader, rid="run7-w0-3")
    assert "\r\nX-Request-Id: run7-w0-3" in echo_server.heads[0], echo_server.heads[0]
    assert rec.request_id_echo == "run7-w0-3"
    assert rec.response_id == "chatcmpl-stub-1"
    line = json.loads(rec.to_json())
    assert line["request_id_echo"] == "run7-w0-3" and line["response_id"] == "chatcmpl-stub-1"
    _assert_ordered(rec)


@pytest.mark.parametrize(
    ("header", "sent"),
    [
        pytest.param("X-Correlation-Id", "\r\nX-Correlation-Id: rid-1", id="renamed"),
        pytest.param(None, None, id="off"),
    ],
)
def test_request_id_header_renamed_or_off(
    echo_server: _EchoServer,
    make_reader: Callable[..., Reader],
    header: str | None,
    sent: str | None,
) -> None:
    reader = make_reader(f"http://127.0.0.1:{echo_server.port}/v1", header=header)
    rec, _ = _one(reader, rid="rid-1", header=header)
    head = echo_server.heads[0]
    assert "x-request-id" not in head.lower(), head
    if sent is None:
        assert "rid-1" not in head, "with the header off no request id goes out"
    else:
        assert sent in head, head
    assert rec.request_id_echo is None, "the stub echoes only X-Request-Id"
    assert rec.response_id == "chatcmpl-stub-1", "the body's id is kept either way"


def test_https_stamps_time_the_handshake(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make a test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server = _EchoServer(tls=ctx)
    reader = WireClient(f"https://127.0.0.1:{server.port}/v1", {}, 5.0, 10.0, verify_tls=False)
    try:
        first, _ = _one(reader)
        second, _ = _one(reader)
    finally:
        reader.close()
        server.close()
    assert first.new_conn and first.stamps is not None
    assert first.stamps["connect"] > 0 and first.stamps["tls"] > 0, first.stamps
    assert second.new_conn is False and second.stamps is not None
    assert "tls" not in second.stamps and "connect" not in second.stamps
    assert first.request_id_echo == "run-w-1" and first.response_id == "chatcmpl-stub-1"
    _assert_ordered(first)
    _assert_ordered(second)


def test_a_body_whose_first_read_was_a_counted_token_starts_at_that_token() -> None:
    res = WireResult(status=200, t_sent=10.0, t_written=10.001, t_headers=10.010, t_body=10.030)
    st = StreamState()
    st.tokens([10.020, 10.040])  # counted by the reader thread before any read was fed
    rec = _record()
    record_stamps(rec, res, st, 10.0)
    assert rec.stamps == {"written": 1.0, "headers": 10.0, "body": 20.0, "last_token": 40.0}
    never = _record()
    record_stamps(never, WireResult(error="connect"), StreamState(), 0.0)
    assert never.stamps is None and never.new_conn is None, "a request never sent has no stamps"


def test_request_id_header_names() -> None:
    assert request_id_header("X-Request-Id") == "X-Request-Id"
    assert request_id_header(" off ") is None and request_id_header("none") is None
    with pytest.raises(SpecError, match=r"a header name .* or 'off'"):
        request_id_header("X-Id\r\nEvil: 1")


def _line(seq: int, ttft: float, e2e: float, **kw: object) -> dict:
    return {
        "request_id": f"r-{seq}",
        "worker": "w",
        "t_sent": 100.0 + seq,
        "ttft": ttft,
        "e2e": e2e,
        "error": None,
        "new_conn": seq == 1,
        "stamps": {
            "written": 0.1,
            "headers": ttft * 1000 - 2,
            "body": ttft * 1000 - 1,
            "last_token": e2e * 1000 - 1,
            **({"connect": 0.5} if seq == 1 else {}),
        },
        **kw,
    }


def test_run_section_percentiles_and_slowest() -> None:
    tally = TimingsTally(slowest_n=3)
    lines = [_line(i, ttft=0.010 * i, e2e=1.0 - 0.01 * i) for i in range(1, 21)]
    lines[4]["request_id_echo"] = "r-5"
    lines[5]["response_id"] = "chatcmpl-6"
    lines[6]["response_id"] = "chatcmpl-r-7"  # vLLM: chatcmpl-<X-Request-Id>
    failed = {**_line(99, 9.0, 9.0), "error": "timeout"}
    list(tally.tap([*lines, failed, {"request_id": "old", "ttft": 5.0}]))
    t = tally.as_dict()["timings"]
    assert t["requests_stamped"] == 20, "failed and unstamped records are not phases"
    assert t["connections"] == {"new": 1, "reused": 20}
    assert t["request_id_echoed"] == 1 and t["request_id_echo_differs"] == 0
    assert t["response_ids"] == 2 and t["request_id_in_body"] == 1
    ph = t["phases_ms"]
    assert ph["connect"]["count"] == 1 and ph["connect"]["p50"] == pytest.approx(0.5, rel=1e-2)
    assert ph["headers_to_body"]["p50"] == pytest.approx(1.0, rel=1e-2)
    assert ph["body_to_token"]["p99"] == pytest.approx(1.0, rel=1e-2)
    assert "tls" not in ph and "token_to_answer" not in ph
    by_ttft = [r["request_id"] for r in t["slowest"]["by_ttft"]]
    by_e2e = [r["request_id"] for r in t["slowest"]["by_e2e"]]
    assert by_ttft == ["r-20", "r-19", "r-18"], by_ttft
    assert by_e2e == ["r-1", "r-2", "r-3"], by_e2e
    assert t["slowest"]["by_e2e"][0]["stamps"]["connect"] == 0.5
    text = format_timings(tally.section())  # the renderer reads the typed section
    assert text[0].startswith("ttft parts ms p50/p99: connect 0.50/0.50  send 0.10/0.10")
    assert text[-1].startswith("slowest ttft 200.0 ms: request r-20")
    assert TimingsTally().as_dict() == {}, "records without stamps add no section"


@pytest.mark.parametrize(
    ("given", "header"),
    [
        pytest.param(None, "X-Request-Id", id="default"),
        pytest.param("X-Correlation-Id", "X-Correlation-Id", id="renamed"),
        pytest.param("off", None, id="off"),
    ],
)
def test_the_option_sets_the_spec_field(given: str | None, header: str | None) -> None:
    from servecheck.commands.load.spec import spec_from_options
    from servecheck.config.model import Target

    target = Target.model_validate({"name": "t", "base_url": "http://127.0.0.1:9/v1"})
    spec = spec_from_options(target, {"users": 1, "duration": "5s", "request_id_header": given})
    assert spec.request_id_header == header


def test_a_bad_header_name_is_one_usage_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from servecheck.cli import main

    rc = main(
        ["load", "--target", "reference", "--users", "1", "--duration", "2s"]
        + ["--out", str(tmp_path), "--request-id-header", "X Id"]
    )
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "--request-id-header 'X Id': a header name (letters, digits, '-'), or 'off'" in err, err
    assert "Traceback" not in err and not any(tmp_path.iterdir()), "refused before any run"
