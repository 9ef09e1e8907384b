"""A calibration server for load generators: streams on an exact, known schedule at high rates.

The reference server (:mod:`servecheck.reference.server`) models an engine: faults, KV blocks,
metrics, tokenizer. That costs ~50 us per streamed chunk in aiohttp, so it saturates near 20k
chunks/s on one core (``docs/benchmarks.md``), and a load generator measured above that rate is
charged with the server's lateness. This server does only what calibration needs:

* ``POST /v1/chat/completions`` and ``/v1/completions``, streamed (SSE, OpenAI chunk shape, a
  role-only first chunk for chat, ``stream_options.include_usage``) or not;
* every request gets exactly ``max_tokens`` tokens (default ``--tokens``): the first at arrival +
  TTFT, then one every ITL on an absolute schedule (``first + k * ITL``), so the truth of every
  request is known in advance: TTFT, ITL and E2E = TTFT + (n - 1) * ITL;
* ``GET /health``, ``GET /v1/models`` (one model, ``truth``), and ``GET /stats``: the server's own
  lateness (how long after its due time each write left), so a benchmark can show the truth held;
* ``GET /metrics``: request and token counters, TTFT and e2e histograms under vLLM's names
  (``reference/fast_metrics.py``), so that a load run's engine truth has something to sample;
* ``GET /stats/requests``: per request that carried an ``X-Request-Id``, how late its first and its
  last token left (ms), so a benchmark can take the server's lateness out of each request's error;
  with ``--reasoning-tokens R`` a third value: how late its first answer token left;
* ``--reasoning-tokens R``: the first R token chunks are reasoning (``delta.reasoning_content``),
  the rest answer, so the truth also holds TTFR = TTFT and TTFA = TTFT + R * ITL.

One thread, one ``epoll`` loop, non-blocking sockets, chunk bytes built once per request and a heap
of due times. When the next write is under 2 ms away the loop polls without sleeping (epoll's
timeout is whole milliseconds), which spends this server's core to keep writes on time: pin it to
a core of its own (``taskset``). HTTP/1.1 keep-alive; no TLS, no pipelining.

    python -m servecheck.commands.fast_server --port 8100 --ttft-ms 100 --itl-ms 10 --tokens 64
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import itertools
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.clock import clock_offset
from servecheck.reference.fast_metrics import FastMetrics

_perf = time.perf_counter
MODEL = "truth"
MAX_REQUEST_BYTES = 1 << 20
LATE_BUCKET_S = 10e-6  # lateness histogram resolution
LATE_BUCKETS = 20_000  # 0 .. 200 ms, then one overflow bucket
MAX_TRACKED = 500_000  # requests whose first/last lateness /stats/requests keeps
SPIN_BELOW_S = 0.002
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None)
_ANC_BYTES = socket.CMSG_SPACE(16)


@dataclass(slots=True)
class Timing:
    ttft_s: float = 0.100
    itl_s: float = 0.010
    tokens: int = 64
    reasoning_tokens: int = 0  # the first ones of every answer are reasoning


@dataclass(slots=True)
class _Conn:
    sock: socket.socket
    inbuf: bytearray = field(default_factory=bytearray)
    arrived: float = 0.0  # when the bytes of the request being parsed reached this host
    outbuf: bytearray = field(default_factory=bytearray)
    busy: bool = False  # a response is in progress (no pipelining)
    closed: bool = False
    request_id: str = ""  # X-Request-Id of the request being answered


@dataclass(slots=True)
class _Stream:
    conn: _Conn
    left: int  # token chunks still to send
    token: bytes  # one token chunk, framed (chunked encoding)
    tail: bytes  # sent with the last token: finish, usage, [DONE], end of body
    first_due: float = 0.0
    sent: int = 0
    rid: str = ""  # the request's X-Request-Id, if any
    think: bytes = b""  # a reasoning token chunk, sent instead of ``token`` while thinking
    think_left: int = 0  # reasoning chunks still to send
    think_n: int = 0  # reasoning chunks in all
    arrived: float = 0.0  # when the request reached this host (for /metrics' e2e)
    prompt_tokens: int = 0  # what its usage says, counted by /metrics when it completes
    tokens: int = 0  # generated tokens, likewise


class _Lateness:
    """How late writes left, as a fixed-resolution histogram (no per-write allocation)."""

    __slots__ = ("counts", "n", "worst")

    def __init__(self) -> None:
        self.counts = [0] * (LATE_BUCKETS + 1)
        self.n = 0
        self.worst = 0.0

    def add(self, late: float) -> None:
        i = int(late / LATE_BUCKET_S)
        self.counts[i if i < LATE_BUCKETS else LATE_BUCKETS] += 1
        self.n += 1
        if late > self.worst:
            self.worst = late

    def quantile(self, q: float) -> float:
        if self.n == 0:
            return 0.0
        rank = q * (self.n - 1)
        seen = 0
        for i, c in enumerate(self.counts):
            seen += c
            if seen > rank:
                return (
                    min((i + 0.5) * LATE_BUCKET_S, self.worst) if i < LATE_BUCKETS else self.worst
                )
        return self.worst

    def summary(self) -> dict[str, float | int]:
        ms = 1000.0
        return {
            "writes": self.n,
            "late_p50_ms": round(self.quantile(0.5) * ms, 3),
            "late_p99_ms": round(self.quantile(0.99) * ms, 3),
            "late_p999_ms": round(self.quantile(0.999) * ms, 3),
            "late_max_ms": round(self.worst * ms, 3),
        }


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _sse(obj: dict[str, Any] | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return _chunk(b"data: " + data.encode() + b"\n\n")


def _response(status: str, body: bytes, ctype: str = "application/json") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


class FastServer:
    def __init__(self, host: str, port: int, timing: Timing) -> None:
        self.timing = timing
        self.listener = socket.create_server((host, port), backlog=4096, reuse_port=False)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.ep = select.epoll()
        self.ep.register(self.listener.fileno(), select.EPOLLIN)
        self.conns: dict[int, _Conn] = {}
        self.heap: list[tuple[float, int, _Stream]] = []
        self.seq = itertools.count()
        self.late = _Lateness()
        self.per_request: dict[str, list[float]] = {}  # X-Request-Id -> [first, last] lateness (s)
        self.requests = 0
        self.metrics = FastMetrics()
        self.cpu0 = time.process_time()
        self.clock_offset = clock_offset()  # realtime - perf_counter, for the kernel's stamps
        self.stop = False
        self._routes: dict[tuple[str, str], Callable[[_Conn, bytes, float], None]] = {
            ("GET", "/health"): self._health,
            ("GET", "/v1/models"): self._models,
            ("GET", "/stats"): self._stats,
            ("GET", "/stats/requests"): self._stats_requests,
            ("GET", "/metrics"): self._metrics,
            ("POST", "/v1/chat/completions"): self._chat,
            ("POST", "/v1/completions"): self._completions,
        }

    # -- loop -------------------------------------------------------------------

    def serve(self) -> None:
        heap, ep, lfd = self.heap, self.ep, self.listener.fileno()
        next_offset = _perf() + 1.0
        while not self.stop:
            now = _perf()
            if now > next_offset:
                self.clock_offset, next_offset = clock_offset(), now + 1.0
            while heap and heap[0][0] <= now:
                due, _, st = heapq.heappop(heap)
                self._emit(st, due, now)
                if st.left > 0:
                    heapq.heappush(
                        heap, (st.first_due + st.sent * self.timing.itl_s, next(self.seq), st)
                    )
            wait = heap[0][0] - _perf() if heap else 0.5
            events = ep.poll(wait - 0.001 if wait > SPIN_BELOW_S else 0)
            for fd, ev in events:
                if fd == lfd:
                    self._accept()
                    continue
                conn = self.conns.get(fd)
                if conn is None:
                    continue
                if ev & select.EPOLLOUT:
                    self._flush(conn)
                if ev & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                    self._readable(conn)

    def _accept(self) -> None:
        for _ in range(256):
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if SO_TIMESTAMPNS is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self.conns[sock.fileno()] = _Conn(sock)
            self.ep.register(sock.fileno(), select.EPOLLIN)

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        fd = conn.sock.fileno()
        self.conns.pop(fd, None)
        with contextlib.suppress(OSError):
            self.ep.unregister(fd)
        conn.sock.close()

    def _readable(self, conn: _Conn) -> None:
        try:
            data, anc, _flags, _addr = conn.sock.recvmsg(65536, _ANC_BYTES)
        except BlockingIOError:
            return
        except OSError:
            self._close(conn)
            return
        if not data:
            self._close(conn)  # a client that hangs up mid-stream: its stream ends with the socket
            return
        if not conn.inbuf:
            # The schedule starts when the request reached this host (the kernel's receive stamp),
            # not when this loop got round to it: a busy server is then late, and says so.
            now = _perf()
            conn.arrived = now
            if anc:
                sec, nsec = struct.unpack_from("qq", anc[0][2])
                k = sec + nsec * 1e-9 - self.clock_offset
                if now - 30.0 < k <= now:
                    conn.arrived = k
        conn.inbuf += data
        if len(conn.inbuf) > MAX_REQUEST_BYTES:
            self._send(
                conn,
                _response("413 Payload Too Large", b'{"error":{"message":"request too large"}}'),
            )
            self._close(conn)
            return
        if not conn.busy:
            self._parse(conn)

    def _parse(self, conn: _Conn) -> None:
        while conn.inbuf and not conn.busy and not conn.closed and self._parse_one(conn):
            pass

    def _parse_one(self, conn: _Conn) -> bool:
        """Handle one complete request at the head of ``inbuf``; False when it is not complete yet."""
        buf = conn.inbuf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = bytes(buf[:end]).decode("latin-1").split("\r\n")
        length = 0
        conn.request_id = ""
        for line in head[1:]:
            k, _, v = line.partition(":")
            key = k.strip().lower()
            if key == "content-length":
                length = int(v.strip() or 0)
            elif key == "x-request-id":
                conn.request_id = v.strip()[:200]
        if len(buf) < end + 4 + length:
            return False
        body = bytes(buf[end + 4 : end + 4 + length])
        del buf[: end + 4 + length]
        parts = head[0].split(" ")
        method, path = (parts[0], parts[1].split("?", 1)[0]) if len(parts) >= 2 else ("", "")
        handler = self._routes.get((method, path))
        self.requests += 1
        arrived = conn.arrived or _perf()
        # A pipelined request behind this one has no stamp of its own: it is taken as arrived now.
        conn.arrived = _perf() if buf else 0.0
        if handler is None:
            self._send(
                conn,
                _response("404 Not Found", b'{"error":{"message":"not found","type":"not_found"}}'),
            )
        else:
            handler(conn, body, arrived)
        return True

    def _send(self, conn: _Conn, data: bytes) -> None:
        if conn.closed:
            return
        if conn.outbuf:
            conn.outbuf += data
            return
        try:
            n = conn.sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError:
            self._close(conn)
            return
        if n < len(data):
            conn.outbuf += data[n:]
            self.ep.modify(conn.sock.fileno(), select.EPOLLIN | select.EPOLLOUT)

    def _flush(self, conn: _Conn) -> None:
        try:
            n = conn.sock.send(conn.outbuf)
        except BlockingIOError:
            return
        except OSError:
            self._close(conn)
            return
        del conn.outbuf[:n]
        if not conn.outbuf:
            self.ep.modify(conn.sock.fileno(), select.EPOLLIN)
            if not conn.busy and conn.inbuf:
                self._parse(conn)

    def _emit(self, st: _Stream, due: float, now: float) -> None:
        conn = st.conn
        if conn.closed:
            st.left = 0
            return
        late = now - due
        self.late.add(late)
        st.sent += 1
        st.left -= 1
        if st.sent == 1:
            self.metrics.first_token(self.timing.ttft_s + late)
        if st.left <= 0:
            self.metrics.finished(st.prompt_tokens, st.tokens, now - st.arrived)
        thinking = st.think_left > 0
        st.think_left -= thinking
        if st.rid:
            if st.sent == 1 and len(self.per_request) < MAX_TRACKED:
                self.per_request[st.rid] = [late, late] + ([0.0] if st.think_n else [])
            tracked = self.per_request.get(st.rid)
            if tracked is not None and st.left <= 0:
                tracked[1] = late
            if tracked is not None and st.think_n and st.sent == st.think_n + 1:
                tracked[2] = late  # the first answer token
        if thinking and st.left > 0:
            self._send(conn, st.think)
            return
        if st.left > 0:
            self._send(conn, st.token)
            return
        conn.busy = False
        self._send(conn, st.token + st.tail)
        if conn.inbuf and not conn.closed:
            self._parse(conn)

    # -- routes -------------------------------------------------------------------

    def _health(self, conn: _Conn, _body: bytes, _arrived: float) -> None:
        self._send(conn, _response("200 OK", b"ok", "text/plain"))

    def _models(self, conn: _Conn, _body: bytes, _arrived: float) -> None:
        body = {
            "object": "list",
            "data": [
                {
                    "id": MODEL,
                    "object": "model",
                    "created": 0,
                    "owned_by": "servecheck",
                    "max_model_len": 1 << 20,
                }
            ],
        }
        self._send(conn, _response("200 OK", json.dumps(body).encode()))

    def _stats(self, conn: _Conn, _body: bytes, _arrived: float) -> None:
        body = {
            "requests": self.requests,
            "open_streams": len(self.heap),
            "cpu_s": round(time.process_time() - self.cpu0, 3),
            **self.late.summary(),
        }
        self._send(conn, _response("200 OK", json.dumps(body).encode()))

    def _metrics(self, conn: _Conn, _body: bytes, _arrived: float) -> None:
        page = self.metrics.page(running=len(self.heap))
        self._send(conn, _response("200 OK", page, "text/plain; version=0.0.4"))

    def _stats_requests(self, conn: _Conn, _body: bytes, _arrived: float) -> None:
        ms = 1000.0
        per = {rid: [round(x * ms, 4) for x in late] for rid, late in self.per_request.items()}
        body = {"tracked": len(per), "limit": MAX_TRACKED, "unit": "ms", "requests": per}
        self._send(conn, _response("200 OK", json.dumps(body, separators=(",", ":")).encode()))

    def _chat(self, conn: _Conn, body: bytes, arrived: float) -> None:
        self._generate(conn, body, arrived, chat=True)

    def _completions(self, conn: _Conn, body: bytes, arrived: float) -> None:
        self._generate(conn, body, arrived, chat=False)

    def _generate(self, conn: _Conn, raw: bytes, arrived: float, chat: bool) -> None:
        try:
            req = json.loads(raw)
            if not isinstance(req, dict):
                raise ValueError("the body is not a JSON object")
            n = int(req.get("max_completion_tokens") or req.get("max_tokens") or self.timing.tokens)
            if n < 1:
                raise ValueError("max_tokens must be at least 1")
        except (ValueError, TypeError) as exc:
            bad = json.dumps(
                {"error": {"message": f"bad request: {exc}", "type": "invalid_request_error"}}
            )
            self._send(conn, _response("400 Bad Request", bad.encode()))
            return
        prompt = req.get("messages") if chat else req.get("prompt")
        prompt_tokens = max(1, len(json.dumps(prompt)) // 4)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{next(self.seq)}"
        obj = "chat.completion.chunk" if chat else "text_completion"
        created = int(time.time())
        base = {"id": rid, "object": obj, "created": created, "model": MODEL}
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": n,
            "total_tokens": prompt_tokens + n,
        }
        think = min(self.timing.reasoning_tokens, n - 1) if chat else 0  # leave one answer token
        if think:
            usage["completion_tokens_details"] = {"reasoning_tokens": think}

        def choice(
            piece: str | None, finish: str | None = None, role: bool = False
        ) -> dict[str, Any]:
            if chat:
                delta: dict[str, Any] = (
                    {"role": "assistant", "content": ""}
                    if role
                    else ({"content": piece} if piece else {})
                )
                return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {"index": 0, "text": piece or "", "logprobs": None, "finish_reason": finish}

        if not req.get("stream"):
            text = " tok" * (n - think)
            msg: dict[str, Any] = {"role": "assistant", "content": text}
            if think:
                msg["reasoning_content"] = " think" * think
            message = {
                "index": 0,
                "finish_reason": "length",
                "logprobs": None,
                **({"message": msg} if chat else {"text": text}),
            }
            full = json.dumps(
                {
                    **base,
                    "object": "chat.completion" if chat else "text_completion",
                    "choices": [message],
                    "usage": usage,
                }
            ).encode()
            st = _Stream(conn, 1, b"", _response("200 OK", full), rid=conn.request_id)
            st.arrived, st.prompt_tokens, st.tokens = arrived, prompt_tokens, n
            conn.busy = True
            delay = self.timing.ttft_s + (n - 1) * self.timing.itl_s
            heapq.heappush(self.heap, (arrived + delay, next(self.seq), st))
            return
        opts = req.get("stream_options")
        with_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        extra = {"usage": None} if with_usage else {}
        token = _sse({**base, "choices": [choice(" tok")], **extra})
        tail = _sse({**base, "choices": [choice(None, "length")], **extra})
        if with_usage:
            tail += _sse({**base, "choices": [], "usage": usage})
        tail += _sse("[DONE]") + b"0\r\n\r\n"
        head = _STREAM_HEAD + (
            _sse({**base, "choices": [choice(None, role=True)], **extra}) if chat else b""
        )
        conn.busy = True
        self._send(conn, head)
        st = _Stream(
            conn, n, token, tail, first_due=arrived + self.timing.ttft_s, rid=conn.request_id
        )
        st.arrived, st.prompt_tokens, st.tokens = arrived, prompt_tokens, n
        if think:
            reasoning = {"index": 0, "delta": {"reasoning_content": " think"}, "logprobs": None}
            st.think = _sse({**base, "choices": [{**reasoning, "finish_reason": None}], **extra})
            st.think_left = st.think_n = think
        heapq.heappush(self.heap, (st.first_due, next(self.seq), st))


def run_server(host: str, port: int, timing: Timing, ready_file: Path | None = None) -> int:
    """Serve until SIGTERM / SIGINT (``python -m servecheck.commands.fast_server`` parses the
    command line): 0, or 2 when it cannot listen (3 for a busy port)."""
    try:
        server = FastServer(host, port, timing)
    except OSError as exc:
        print(f"servecheck fast server: cannot listen on {host}:{port}: {exc.strerror or exc}")
        return 2 if exc.errno != errno.EADDRINUSE else 3

    def _stop(*_: Any) -> None:
        server.stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if ready_file:
        tmp = ready_file.with_suffix(".tmp")
        tmp.write_text(str(server.port))
        os.replace(tmp, ready_file)
    print(
        f"servecheck fast server on http://{host}:{server.port}/v1 (TTFT {timing.ttft_s * 1000:g} ms, "
        f"ITL {timing.itl_s * 1000:g} ms)",
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        server.serve()
    return 0
