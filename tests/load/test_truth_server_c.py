"""The C truth server (``benchmarks/truth_server.c``) answers what the Python calibration server
(``servecheck.reference.fast``) answers, so a benchmark may run against either.

Each pair (one of each, same timing) gets the same raw requests on one keep-alive connection
each; the answers must match byte for byte once the response ids and ``created`` stamps are
taken out: status line, headers, every chunk's JSON (keys, order, separators), token counts,
the usage chunk, ``[DONE]``, the reasoning split; errors match in status and type. Then what only
the C one promises (the Python one raises on some of it): hostile input it survives, a 413 the
client gets to read. Timing is checked loosely (never early, done within seconds): this machine
is loaded. Every wait is bounded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

from servecheck.reference.fast import FastServer, Timing

ROOT = Path(__file__).resolve().parents[2]
TTFT_S, ITL_S, TOKENS, THINK = 0.050, 0.010, 10, 3
WAIT_S = 10.0  # the bound on any one read; a test fails rather than hangs

if shutil.which("gcc") is None:
    pytest.skip(
        "gcc is not on PATH, so benchmarks/truth_server.c cannot be built (apt-get install gcc)",
        allow_module_level=True,
    )
if sys.platform != "linux":
    pytest.skip(
        "the C truth server uses epoll and SO_TIMESTAMPNS: Linux only", allow_module_level=True
    )


def _truth_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_truth", ROOT / "benchmarks" / "_truth.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built the way benchmarks build it (``_truth.build_truth_server``), into a temporary cache."""
    return Path(_truth_module().build_truth_server(tmp_path_factory.mktemp("truth-bin")))


@dataclass
class Pair:
    c_port: int
    py_port: int
    proc: subprocess.Popen[bytes]


def _start_c(binary: Path, tmp: Path, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    ready = tmp / f"port-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [str(binary), "--port", "0", "--ready-file", str(ready), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    end = time.monotonic() + WAIT_S
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            out, err = proc.communicate(timeout=WAIT_S)
            pytest.fail(f"the C truth server did not start: rc={proc.returncode} {out!r} {err!r}")
        time.sleep(0.01)
    return proc, int(ready.read_text())


def _stop_c(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
        return -9


def _pair(binary: Path, tmp: Path, think: int) -> Iterator[Pair]:
    server = FastServer("127.0.0.1", 0, Timing(TTFT_S, ITL_S, TOKENS, think))
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    proc, port = _start_c(
        binary,
        tmp,
        *("--ttft-ms", str(TTFT_S * 1000), "--itl-ms", str(ITL_S * 1000)),
        *("--tokens", str(TOKENS), "--reasoning-tokens", str(think)),
    )
    yield Pair(port, server.port, proc)
    server.stop = True
    thread.join(timeout=5)
    rc = _stop_c(proc)
    assert rc == 0, f"the C truth server exited {rc} on SIGTERM, expected 0"


@pytest.fixture(scope="module")
def pair(binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from _pair(binary, tmp_path_factory.mktemp("truth"), 0)


@pytest.fixture(scope="module")
def thinking_pair(binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from _pair(binary, tmp_path_factory.mktemp("truth-r"), THINK)


# -- a raw HTTP/1.1 client: exact bytes out, the response as the server framed it ---------------


@dataclass
class Response:
    status: str
    headers: list[tuple[str, str]]
    body: bytes  # de-chunked
    chunks: list[tuple[float, bytes]] = field(default_factory=list)  # arrival, payload
    t_sent: float = 0.0
    t_done: float = 0.0


class Client:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def _more(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError(f"the server closed the connection; unread: {self.buf[:200]!r}")
        self.buf += data

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, raw: bytes) -> Response:
        t0 = time.perf_counter()
        self.sock.sendall(raw)
        return self.read(t0)

    def read(self, t0: float = 0.0) -> Response:
        status = self._line().decode("latin-1")
        headers = []
        while line := self._line():
            k, _, v = line.decode("latin-1").partition(":")
            headers.append((k.strip(), v.strip()))
        names = {k.lower(): v for k, v in headers}
        res = Response(status, headers, b"", t_sent=t0)
        if names.get("transfer-encoding") == "chunked":
            while size := int(self._line(), 16):
                payload = self._take(size)
                res.chunks.append((time.perf_counter(), payload))
                res.body += payload
                assert self._take(2) == b"\r\n", "a chunk not followed by CRLF"
            assert self._line() == b"", "no CRLF after the last chunk"
        else:
            res.body = self._take(int(names.get("content-length", "0")))
        res.t_done = time.perf_counter()
        return res


def post(path: str, body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode("latin-1") + body


def get(path: str, *headers: str) -> bytes:
    head = f"GET {path} HTTP/1.1\r\nHost: x\r\n" + "".join(f"{h}\r\n" for h in headers)
    return head.encode("latin-1") + b"\r\n"


def chat(**fields: object) -> bytes:
    return json.dumps(
        {"model": "truth", "messages": [{"role": "user", "content": "hi"}], **fields}
    ).encode()


def completion(**fields: object) -> bytes:
    return json.dumps({"model": "truth", "prompt": "hello world", **fields}).encode()


USAGE = {"stream_options": {"include_usage": True}}
PROMPT = (  # compact, escapes, non-ASCII (2-, 3- and 4-byte), a float: usage counts json.dumps
    '{"messages":[{"role":"user","content":"h\\u00e9llo \\"q\\" \\/ \\t caf\xc3\xa9 \xe2\x82\xac'
    ' \xf0\x9f\x98\x80 \\ud83d\\ude00","n":[1.50e3,-0,1E-7,true,null,{}]}],"max_tokens":2,'
    '"stream":true,"stream_options":{"include_usage":1}}'
).encode("latin-1")

SAME = [
    pytest.param(
        post("/v1/chat/completions", chat(max_tokens=4, stream=True, **USAGE)),
        id="chat-stream-usage",
    ),
    pytest.param(post("/v1/chat/completions", chat(max_tokens=3, stream=True)), id="chat-stream"),
    pytest.param(
        post("/v1/chat/completions", chat(stream=True, **USAGE)), id="chat-stream-default-tokens"
    ),
    pytest.param(
        post("/v1/completions", completion(max_tokens=3, stream=True, **USAGE)),
        id="completions-stream-usage",
    ),
    pytest.param(
        post("/v1/completions", completion(max_tokens=2, stream=True)), id="completions-stream"
    ),
    pytest.param(post("/v1/chat/completions", chat(max_tokens=3)), id="chat-whole"),
    pytest.param(
        post("/v1/completions", completion(max_tokens=4, stream=False)), id="completions-whole"
    ),
    pytest.param(
        post("/v1/chat/completions", chat(max_completion_tokens=2, max_tokens=5, stream=True)),
        id="max-completion-tokens-first",
    ),
    pytest.param(
        post("/v1/chat/completions", chat(max_completion_tokens=0, max_tokens=2, stream=True)),
        id="zero-falls-through",
    ),
    pytest.param(
        post("/v1/chat/completions", chat(max_tokens=" 3 ", stream="yes", **USAGE)),
        id="tokens-as-string-stream-truthy",
    ),
    pytest.param(
        post("/v1/chat/completions", chat(max_tokens=2.9, stream=1)), id="tokens-as-float"
    ),
    pytest.param(
        post("/v1/chat/completions", chat(max_tokens=True, stream=True)), id="tokens-true"
    ),
    pytest.param(
        post("/v1/chat/completions", chat(max_tokens=2, stream=True, stream_options=[1])),
        id="stream-options-not-object",
    ),
    pytest.param(post("/v1/chat/completions", PROMPT), id="prompt-escapes-unicode-compact"),
    pytest.param(
        post(
            "/v1/completions",
            b'\xef\xbb\xbf{"prompt": ["a", "b"], "max_tokens": 2, "stream": true, "stream": false}',
        ),
        id="bom-and-duplicate-key",
    ),
    pytest.param(post("/v1/completions?x=1", completion(max_tokens=1)), id="query-string"),
    pytest.param(get("/health"), id="health"),
    pytest.param(get("/v1/models"), id="models"),
    pytest.param(get("/nowhere"), id="not-found"),
    pytest.param(post("/v1/models", b"{}"), id="wrong-method"),
    pytest.param(post("/v1/chat/completions", b"{nope"), id="bad-json"),
    pytest.param(post("/v1/chat/completions", b""), id="empty-body"),
    pytest.param(post("/v1/chat/completions", b"[1, 2]"), id="not-an-object"),
    pytest.param(post("/v1/chat/completions", b'{"a": 1} x'), id="extra-data"),
    pytest.param(post("/v1/chat/completions", b'{"a": "\xff"}'), id="invalid-utf8"),
    pytest.param(post("/v1/chat/completions", b'{"a": "\x01"}'), id="control-char"),
    pytest.param(post("/v1/chat/completions", chat(max_tokens=-3)), id="negative-tokens"),
    pytest.param(post("/v1/chat/completions", chat(max_tokens="abc")), id="tokens-not-a-number"),
    pytest.param(post("/v1/chat/completions", chat(max_tokens=[1])), id="tokens-a-list"),
    pytest.param(post("/v1/chat/completions", b'{"max_tokens": NaN}'), id="tokens-nan"),
]

_NORMAL = [
    (re.compile(rb'"id": ?"(chatcmpl|cmpl)-\d+"'), rb'"id":"\1-N"'),
    (re.compile(rb'"created": ?\d+'), rb'"created":T'),
]


def _normal(body: bytes) -> bytes:
    for pattern, repl in _NORMAL:
        body = pattern.sub(repl, body)
    return body


def _shape(res: Response) -> tuple[object, ...]:
    """What must be equal: the status, the headers but Content-Length (the ids differ in length),
    and the body with ids and timestamps taken out; an error's body only in its type."""
    headers = [(k, v) for k, v in res.headers if k.lower() != "content-length"]
    length = dict((k.lower(), v) for k, v in res.headers).get("content-length")
    assert length is None or int(length) == len(res.body), "Content-Length is not the body's"
    if res.status.startswith(("HTTP/1.1 4", "HTTP/1.1 5")):
        return res.status, headers, json.loads(res.body)["error"].get("type")
    return res.status, headers, _normal(res.body).decode("latin-1")


def _both(pair: Pair, raw: bytes) -> tuple[Response, Response]:
    out = []
    for port in (pair.py_port, pair.c_port):
        client = Client(port)
        try:
            out.append(client.send(raw))
            out.append(client.send(get("/health")))  # the connection is still usable after it
        finally:
            client.close()
    py, py_after, c, c_after = out
    assert py_after.body == c_after.body == b"ok", "keep-alive: the next request was not answered"
    return py, c


@pytest.mark.parametrize("raw", SAME)
def test_answers_what_the_python_server_answers(pair: Pair, raw: bytes) -> None:
    py, c = _both(pair, raw)
    assert _shape(c) == _shape(py), (
        f"Received (C): {c.status} {_normal(c.body)[:1500]!r}\n"
        f"Expected (Python): {py.status} {_normal(py.body)[:1500]!r}"
    )


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(
            post("/v1/chat/completions", chat(max_tokens=6, stream=True, **USAGE)), id="chat-stream"
        ),
        pytest.param(
            post("/v1/chat/completions", chat(max_tokens=2, stream=True)),
            id="one-answer-token-left",
        ),
        pytest.param(
            post("/v1/chat/completions", chat(max_tokens=1, stream=True, **USAGE)),
            id="no-room-to-think",
        ),
        pytest.param(post("/v1/chat/completions", chat(max_tokens=5)), id="chat-whole"),
        pytest.param(
            post("/v1/completions", completion(max_tokens=4, stream=True, **USAGE)),
            id="completions-never-think",
        ),
    ],
)
def test_reasoning_split_is_the_python_servers(thinking_pair: Pair, raw: bytes) -> None:
    py, c = _both(thinking_pair, raw)
    assert _shape(c) == _shape(py), (
        f"Received (C): {_normal(c.body)[:1500]!r}\nExpected (Python): {_normal(py.body)[:1500]!r}"
    )


def _events(res: Response) -> list[dict | str]:
    out: list[dict | str] = []
    for _, payload in res.chunks:
        text = payload.decode()
        assert text.startswith("data: ") and text.endswith("\n\n"), f"not one SSE event: {text!r}"
        data = text[6:-2]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_stream_content_and_schedule(pair: Pair) -> None:
    """10 tokens, TTFT 50 ms, ITL 10 ms: a role chunk, 10 tokens, finish, usage, [DONE]; the
    first token never before TTFT and the end never before TTFT + 9 ITL (the server counts from
    when the request reached it, after the client sent it); both well within seconds."""
    client = Client(pair.c_port)
    try:
        res = client.send(
            post("/v1/chat/completions", chat(stream=True, **USAGE), "X-Request-Id: sched-1")
        )
        stats = json.loads(client.send(get("/stats/requests")).body)
    finally:
        client.close()
    events = _events(res)
    tokens = [
        e
        for e in events
        if isinstance(e, dict) and e["choices"] and e["choices"][0]["delta"].get("content")
    ]
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # type: ignore[index]
    assert len(tokens) == TOKENS and events[-1] == "[DONE]"
    assert events[-2]["usage"]["completion_tokens"] == TOKENS  # type: ignore[index]
    first = res.chunks[1][0] - res.t_sent
    e2e = res.t_done - res.t_sent
    truth = TTFT_S + (TOKENS - 1) * ITL_S
    assert TTFT_S - 0.002 <= first <= TTFT_S + 2.0, (
        f"first token after {first:.4f} s, TTFT {TTFT_S}"
    )
    assert truth - 0.002 <= e2e <= truth + 2.0, f"E2E {e2e:.4f} s, truth {truth:.3f} s"
    late = stats["requests"]["sched-1"]
    assert len(late) == 2 and all(0 <= x < 2000 for x in late), late


def test_stats_and_per_request_lateness_have_the_python_shape(
    pair: Pair, thinking_pair: Pair
) -> None:
    for p, n in ((pair, 2), (thinking_pair, 3)):
        got = {}
        for port in (p.py_port, p.c_port):
            client = Client(port)
            try:
                client.send(
                    post(
                        "/v1/chat/completions",
                        chat(max_tokens=5, stream=True),
                        'X-Request-Id: \tr\xe9q "1"',
                    )
                )
                client.send(post("/v1/chat/completions", chat(max_tokens=2), "x-request-id: whole"))
                got[port] = (
                    json.loads(client.send(get("/stats")).body),
                    json.loads(client.send(get("/stats/requests")).body),
                )
            finally:
                client.close()
        (py_stats, py_req), (c_stats, c_req) = got[p.py_port], got[p.c_port]
        assert list(c_stats) == list(py_stats), (list(c_stats), list(py_stats))
        assert all(isinstance(v, int | float) for v in c_stats.values()), c_stats
        assert c_stats["writes"] >= 1 + 5 and c_stats["late_max_ms"] >= c_stats["late_p99_ms"] >= 0
        assert list(c_req) == list(py_req) and c_req["limit"] == py_req["limit"]
        assert c_req["unit"] == "ms" and c_req["tracked"] == len(c_req["requests"])
        for rid, values in (('r\xe9q "1"', n), ("whole", 2)):  # the pair saw other requests too
            assert len(c_req["requests"][rid]) == len(py_req["requests"][rid]) == values, rid


def test_metrics_page_has_the_python_lines(binary: Path, tmp_path: Path) -> None:
    server = FastServer("127.0.0.1", 0, Timing(TTFT_S, ITL_S, TOKENS, 0))
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    proc, port = _start_c(binary, tmp_path, "--ttft-ms", "50", "--itl-ms", "10", "--tokens", "10")
    pages = []
    try:
        for p in (server.port, port):
            client = Client(p)
            try:
                client.send(post("/v1/chat/completions", chat(max_tokens=3, stream=True)))
                client.send(post("/v1/completions", completion(max_tokens=2)))
                pages.append(client.send(get("/metrics")))
            finally:
                client.close()
    finally:
        server.stop = True
        thread.join(timeout=5)
        _stop_c(proc)
    py, c = pages
    # The same lines in the same order, the same counters; the histograms' buckets and sums hold
    # each server's own lateness, so only their counts are compared.
    names = re.compile(r"^(\S+) \S+$", re.M)
    assert names.sub(r"\1", c.body.decode()) == names.sub(r"\1", py.body.decode())
    assert _shape(c)[:2] == _shape(py)[:2]

    def counters(page: Response) -> list[str]:
        keep = ("_total{", "_count{", "waiting{", "running{")
        return [line for line in page.body.decode().splitlines() if any(k in line for k in keep)]

    assert counters(c) == counters(py)


def test_413_for_a_request_over_1_mib(pair: Pair) -> None:
    """Both answer 413 to a body that passes 1 MiB (sent so that the Python one, which resets a
    connection it closes with unread bytes, has read everything)."""
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n"
    raw = head + b" " * ((1 << 20) + 1 - len(head))
    for port in (pair.py_port, pair.c_port):
        client = Client(port)
        try:
            res = client.send(raw)
        finally:
            client.close()
        assert res.status == "HTTP/1.1 413 Payload Too Large", (port, res.status, res.body)


def test_413_is_read_by_a_client_still_sending(pair: Pair) -> None:
    """The C server answers from the head alone and drains what follows, so a client that sends
    its whole 3 MiB before reading gets the answer rather than a reset."""
    client = Client(pair.c_port)
    try:
        res = client.send(post("/v1/chat/completions", b"x" * (3 << 20)))
        with pytest.raises(ConnectionError):
            client.send(get("/health"))  # closed after the answer
    finally:
        client.close()
    assert res.status == "HTTP/1.1 413 Payload Too Large"
    assert json.loads(res.body) == {"error": {"message": "request too large"}}


HOSTILE = [
    pytest.param(bytes(range(256)) * 64 + b"\r\n\r\n" + os.urandom(4096), id="garbage"),
    pytest.param(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Le", id="half-head"),
    pytest.param(
        post("/v1/chat/completions", chat(max_tokens=5, stream=True))[:-7], id="half-body"
    ),
    pytest.param(
        b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n{}", id="negative-length"
    ),
    pytest.param(
        b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 1x\r\n\r\n{}", id="bad-length"
    ),
    pytest.param(
        b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        id="huge-length",
    ),
    pytest.param(b"GET /" + b"a" * (1 << 20) + b"\r\n", id="endless-head"),
    pytest.param(post("/v1/chat/completions", b"[" * 100_000 + b"]" * 100_000), id="deep-nesting"),
    pytest.param(post("/v1/chat/completions", chat(max_tokens=10**30)), id="huge-tokens"),
    pytest.param(post("/v1/chat/completions", chat(max_tokens=1e308 * 10)), id="infinite-tokens"),
    pytest.param(
        post("/v1/chat/completions", b'{"max_tokens": "' + b"9" * 5000 + b'"}'),
        id="long-int-string",
    ),
    pytest.param(post("/v1/chat/completions", b'{"a": "\\u12"}'), id="short-escape"),
    pytest.param(post("/v1/chat/completions", b'{"a": "\xed\xa0'), id="cut-utf8"),
    pytest.param(post("/v1/chat/completions", b"\x00" * 64), id="nul-bytes"),
    pytest.param(
        post("/v1/chat/completions", chat(max_tokens=50, stream=True)), id="hang-up-mid-stream"
    ),
    pytest.param(
        b"".join(post("/v1/chat/completions", chat(max_tokens=3, stream=True)) for _ in range(50)),
        id="pipelined-then-gone",
    ),
]


@pytest.mark.parametrize("raw", HOSTILE)
def test_survives_hostile_input(binary: Path, tmp_path: Path, raw: bytes) -> None:
    proc, port = _start_c(binary, tmp_path)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as s:
            try:
                s.sendall(raw)
                s.settimeout(0.2)
                s.recv(4096)  # whatever it answers, if anything, then hang up mid-way
            except OSError:
                pass
        time.sleep(0.1)
        assert proc.poll() is None, f"the C truth server died (rc={proc.returncode})"
        client = Client(port)
        try:
            assert client.send(get("/health")).body == b"ok"
            res = client.send(post("/v1/completions", completion(max_tokens=2, stream=False)))
            assert res.status == "HTTP/1.1 200 OK"
        finally:
            client.close()
    finally:
        assert _stop_c(proc) == 0, "the C truth server did not exit cleanly on SIGTERM"


def test_hostile_json_is_a_400(pair: Pair) -> None:
    for body in (b"[" * 100_000, b'{"max_tokens": 1e999}', b'{"max_tokens": 100000000000}'):
        client = Client(pair.c_port)
        try:
            res = client.send(post("/v1/chat/completions", body))
        finally:
            client.close()
        assert res.status == "HTTP/1.1 400 Bad Request", (body[:40], res.status)
        assert json.loads(res.body)["error"]["type"] == "invalid_request_error"


def test_command_line(binary: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=30)

    assert run("--help").returncode == 0
    bad = run("--ttft-ms", "soon")
    assert bad.returncode == 2 and "--ttft-ms" in bad.stderr
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        out = run("--port", str(port))
    assert out.returncode == 3 and f"cannot listen on 127.0.0.1:{port}" in out.stdout, out


def test_build_says_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    truth = _truth_module()
    monkeypatch.setattr(truth.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match=r"needs gcc .*\(--server python\)"):
        truth.build_truth_server(tmp_path / "empty-cache")
    with pytest.raises(ValueError, match="expected one of c, python"):
        truth.start_truth_server(tmp_path, 0.1, 0.01, 4, impl="rust")
