#!/usr/bin/env python3
"""Device check for the device-memory leak verdict: does a soak call a real GPU leak a LEAK,
and a clean server not?

Serves a tiny random-weight decoder (one attention layer, bytes as tokens) with PyTorch on CUDA
behind an OpenAI-compatible chat API (the reference server's shape: streamed chunks, usage in
the last chunk, ``/v1/models``, ``/health``, ``/version``, ``/metrics`` under vLLM's names). Each
request owns a real KV cache tensor on the GPU, written token by token. With ``--leak`` the
server keeps the cache tensors of aborted requests (a client that hung up mid-stream), the
error-path leak engines have shipped; the pool gauge (``kv_usage``) does not see it, device
memory does. The script runs a short soak with abandoned streams twice, clean then leaking,
through ``servecheck.load.soak.run_soak``, and asserts ``nvml_used_bytes`` is ``leak`` for the
leaking run only. Exit 0: both as expected; 1: not; 2: cannot run here (no CUDA, no NVML, a
missing module). ::

    python scripts/gpu_leak_check.py                  # one NVIDIA GPU, about 4 minutes
    python scripts/gpu_leak_check.py --fake           # CPU, numpy, a FakeNvml fed by the server

``--fake`` runs the same flow without a GPU: the model in numpy, and a ``FakeNvml`` whose
device memory is what a caching allocator would hold for the server's cache tensors (the
high-water mark of live + kept bytes over a fixed preallocation). Needs servecheck's own
dependencies importable (httpx, pandas, scipy, pydantic, rich); torch and nvidia-ml-py for the
GPU run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIB = 2**20
MODEL = "tiny-random"
D = 256
VOCAB = 256
KV_SLOTS = 8  # the "pool" kv_usage is a share of: concurrency 4 moves it to ~0.5


class NumpyDecoder:
    """The decoder in numpy (``--fake``): same shapes and math as :class:`TorchDecoder`."""

    def __init__(self, seed: int = 0) -> None:
        import numpy as np

        self.np = np
        rng = np.random.default_rng(seed)
        self.emb, self.head = (
            rng.normal(0, 0.5, s).astype("float32") for s in ((VOCAB, D), (D, VOCAB))
        )
        self.wq, self.wk, self.wv, self.wo = (
            rng.normal(0, D**-0.5, (D, D)).astype("float32") for _ in range(4)
        )

    def new_cache(self, nbytes: int) -> Any:
        return self.np.zeros((2, max(8, nbytes // (2 * D * 4)), D), dtype="float32")

    def nbytes(self, cache: Any) -> int:
        return int(cache.nbytes)

    def step(self, cache: Any, pos: int, token: int) -> int:
        np = self.np
        x = self.emb[token]
        pos %= cache.shape[1]
        cache[0, pos], cache[1, pos] = x @ self.wk, x @ self.wv
        scores = cache[0, : pos + 1] @ (x @ self.wq) / math.sqrt(D)
        att = np.exp(scores - scores.max())
        h = (att / att.sum()) @ cache[1, : pos + 1]
        return int(np.argmax((x + h @ self.wo) @ self.head))


class TorchDecoder(NumpyDecoder):
    """The decoder on a CUDA device: every cache is a real GPU tensor."""

    def __init__(self, device: str, seed: int = 0) -> None:
        import torch

        self.torch, self.dev = torch, torch.device(device)
        gen = torch.Generator().manual_seed(seed)
        rand = lambda *s, std: (torch.randn(*s, generator=gen) * std).to(self.dev)  # noqa: E731
        self.emb, self.head = rand(VOCAB, D, std=0.5), rand(D, VOCAB, std=0.5)
        self.wq, self.wk, self.wv, self.wo = (rand(D, D, std=D**-0.5) for _ in range(4))

    def new_cache(self, nbytes: int) -> Any:
        slots = max(8, nbytes // (2 * D * 4))
        return self.torch.zeros((2, slots, D), dtype=self.torch.float32, device=self.dev)

    def nbytes(self, cache: Any) -> int:
        return int(cache.element_size() * cache.nelement())

    def step(self, cache: Any, pos: int, token: int) -> int:
        torch = self.torch
        with torch.no_grad():
            x = self.emb[token]
            pos %= cache.shape[1]
            cache[0, pos], cache[1, pos] = x @ self.wk, x @ self.wv
            att = torch.softmax(cache[0, : pos + 1] @ (x @ self.wq) / math.sqrt(D), dim=0)
            return int(torch.argmax((x + (att @ cache[1, : pos + 1]) @ self.wo) @ self.head))


@dataclass
class Engine:
    """The server's state: the model, live and kept caches, counters for /metrics."""

    model: NumpyDecoder
    kv_bytes: int
    leak: bool
    itl_s: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    live: dict[int, Any] = field(default_factory=dict)
    kept: list[Any] = field(default_factory=list)
    next_id: int = 0
    generated: int = 0
    aborted: int = 0
    high_water: int = 0  # what a caching allocator keeps reserved: the most ever held at once

    def held(self) -> int:
        """Bytes of cache tensors held now (live and kept); updates the high-water mark."""
        total = sum(self.model.nbytes(c) for c in [*self.live.values(), *self.kept])
        self.high_water = max(self.high_water, total)
        return total

    def metrics(self) -> str:
        with self.lock:
            self.held()
            usage = min(1.0, len(self.live) / KV_SLOTS)
            running = len(self.live)
            generated = self.generated
        return (
            f"vllm:kv_cache_usage_perc {usage}\nvllm:num_requests_running {running}\n"
            f"vllm:num_requests_waiting 0\nvllm:generation_tokens_total {generated}\n"
        )


def _handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _json(self, status: int, body: dict[str, Any]) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.startswith("/metrics"):
                raw = engine.metrics().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            elif self.path.startswith("/v1/models"):
                self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            elif self.path.startswith("/version"):
                self._json(200, {"version": "gpu-leak-check"})
            else:
                self._json(200, {})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
            tokens = list(prompt.encode()[-128:]) or [32]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            with engine.lock:
                rid, engine.next_id = engine.next_id, engine.next_id + 1
                cache = engine.model.new_cache(engine.kv_bytes)
                engine.live[rid] = cache
                engine.held()
            try:
                self._generate(rid, cache, tokens, int(body.get("max_tokens", 16)))
            except (BrokenPipeError, ConnectionResetError):
                with engine.lock:
                    engine.aborted += 1
                    if engine.leak:  # the injected leak: an aborted request's cache stays
                        engine.kept.append(cache)
            finally:
                with engine.lock:
                    engine.live.pop(rid, None)

        def _chunk(self, rid: int, delta: dict[str, Any], **more: Any) -> None:
            choice = {"index": 0, "delta": delta, "finish_reason": more.pop("finish", None)}
            data = {
                "id": f"chatcmpl-{rid}",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": MODEL,
                "choices": [choice],
                **more,
            }
            self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        def _generate(self, rid: int, cache: Any, prompt: list[int], max_tokens: int) -> None:
            token = 32
            for pos, tok in enumerate(prompt):
                token = engine.model.step(cache, pos, tok)
            self._chunk(rid, {"role": "assistant", "content": ""})
            for i in range(max_tokens):
                token = engine.model.step(cache, len(prompt) + i, token)
                text = chr(32 + token % 95)
                self._chunk(rid, {"content": text})
                with engine.lock:
                    engine.generated += 1
                time.sleep(engine.itl_s)
            usage = {
                "prompt_tokens": len(prompt),
                "completion_tokens": max_tokens,
                "total_tokens": len(prompt) + max_tokens,
            }
            self._chunk(rid, {}, finish="length", usage=usage)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler


def fake_nvml(engine: Engine, prealloc: int) -> Any:
    """A FakeNvml whose device (and this process) hold the preallocation plus the allocator's
    high-water mark of the server's cache tensors."""
    from servecheck.telemetry.nvml import DeviceMemory, FakeNvml, ProcessMemory

    def update(fake: FakeNvml) -> None:
        with engine.lock:
            engine.held()
            used = prealloc + engine.high_water
        fake.device_list[0].used = used
        fake.process_map[0] = [ProcessMemory(0, os.getpid(), used)]

    return FakeNvml(
        device_list=[DeviceMemory(0, "FakeNvml (CPU)", "GPU-fake", prealloc, 80 * 2**30)],
        on_devices=update,
    )


def soak_once(args: argparse.Namespace, leak: bool, out: Path) -> tuple[str, str, int]:
    """One server and one soak; returns nvml_used_bytes' status and message, and the exit code."""
    from servecheck.config.loader import load_targets
    from servecheck.load.soak import SoakPlan, run_soak
    from servecheck.report.soak_html import write_soak_report

    model: NumpyDecoder = NumpyDecoder() if args.fake else TorchDecoder(args.device)
    engine = Engine(model, int(args.kv_mib * MIB), leak, args.itl_ms / 1000)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(engine))
    server.daemon_threads = True
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    ).start()
    port = server.server_address[1]
    name = "leaking" if leak else "clean"
    targets = out / f"targets-{name}.yaml"
    targets.write_text(
        "targets:\n  - name: gpu\n"
        f"    base_url: http://127.0.0.1:{port}/v1\n    engine: vllm\n    models: [{MODEL}]\n"
        f"    timeout_s: 60\n    telemetry: {{pid: {os.getpid()}, device: nvidia}}\n"
    )
    target = load_targets(targets).get("gpu")
    plan = SoakPlan(
        model=MODEL,
        cycles=args.cycles,
        cycle_s=args.cycle_s,
        idle_s=args.idle_s,
        baseline_s=args.idle_s,
        settle_s=args.idle_s / 4,
        concurrency=4,
        max_tokens=48,
        prompt_words=20,
        interval_s=0.25,
        abandon=True,
        abandon_share=0.5,
        abandon_chunks=4,
        probe_streams=4,
        probe_rounds=1,
        drain_bound_s=5.0,
    )
    plan.validate()
    # Warm up: the allocator's pool reaches its high-water mark before the baseline, as an
    # engine's preallocation does at start.
    _warm_up(port, args.warm_requests)
    overrides: dict[str, Any] = {"pid": os.getpid()}
    if args.fake:
        overrides["nvml_backend"] = fake_nvml(engine, 2 * 2**30)
    try:
        result = run_soak(
            target,
            plan,
            out / name,
            telemetry_overrides=overrides,
            progress=False,
            say=lambda line: print(f"  [{name}] {line}"),
        )
        write_soak_report(result)
    finally:
        server.shutdown()
        server.server_close()
    verdict = result.leak.get("nvml_used_bytes")
    print(
        f"  [{name}] aborted {engine.aborted}, kept {len(engine.kept)} cache(s) of "
        f"{args.kv_mib:g} MiB; soak exit {result.exit_code}"
    )
    if verdict is None:
        note = result.leak.get("device_memory")
        return "missing", note.message if note else "no nvml_used_bytes verdict", result.exit_code
    return verdict.status, verdict.message, result.exit_code


def _warm_up(port: int, requests: int) -> None:
    """``requests`` streams at once, more than the soak ever has open, read to their end."""
    import httpx

    body = {"model": MODEL, "messages": [{"role": "user", "content": "warm up"}], "max_tokens": 8}

    def one() -> None:
        with httpx.Client(timeout=60) as client:
            client.post(
                f"http://127.0.0.1:{port}/v1/chat/completions", json=body
            ).raise_for_status()

    threads = [threading.Thread(target=one) for _ in range(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)


def _can_run(args: argparse.Namespace) -> str | None:
    """Why this machine cannot run the check (None: it can)."""
    for module in ("httpx", "pandas", "scipy", "pydantic", "rich", "numpy"):
        try:
            __import__(module)
        except ImportError as exc:
            return f"servecheck's dependency {module} is missing: {exc}"
    if args.fake:
        return None
    try:
        import pynvml  # noqa: F401
        import torch
    except ImportError as exc:
        return f"the GPU run needs torch and nvidia-ml-py: {exc} (or run with --fake)"
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch (or run with --fake)"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--fake", action="store_true", help="CPU, numpy and a FakeNvml (no GPU)")
    parser.add_argument(
        "--device", default="cuda:0", metavar="DEV", help="torch device (default: cuda:0)"
    )
    parser.add_argument(
        "--cycles", type=int, default=6, metavar="N", help="soak cycles (default: 6)"
    )
    parser.add_argument(
        "--cycle-s", type=float, default=6.0, metavar="S", help="load per cycle (default: 6)"
    )
    parser.add_argument(
        "--idle-s", type=float, default=6.0, metavar="S", help="idle per cycle (default: 6)"
    )
    parser.add_argument(
        "--kv-mib", type=float, default=8.0, metavar="MIB", help="KV cache per request (default: 8)"
    )
    parser.add_argument(
        "--itl-ms", type=float, default=5.0, metavar="MS", help="pause per token (default: 5)"
    )
    parser.add_argument(
        "--warm-requests",
        type=int,
        default=16,
        metavar="N",
        help="concurrent warm-up requests (default: 16)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, metavar="DIR", help="run folders (default: a temp dir)"
    )
    args = parser.parse_args(argv)
    why = _can_run(args)
    if why is not None:
        print(f"gpu_leak_check: cannot run here: {why}")
        return 2
    import tempfile

    out = args.out or Path(tempfile.mkdtemp(prefix="gpu-leak-check-"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results = {}
    for leak in (False, True):
        print(
            f"soak against the {'leaking' if leak else 'clean'} server ({'FakeNvml, CPU' if args.fake else args.device})"
        )
        results[leak] = soak_once(args, leak, out)
    ok = results[False][0] != "leak" and results[True][0] == "leak"
    for leak, (status, message, code) in results.items():
        print(
            f"{'leaking' if leak else 'clean'}: nvml_used_bytes {status} (soak exit {code}): {message}"
        )
    print(
        f"{'PASS' if ok else 'FAIL'}: LEAK on device memory {'only for the leaking run' if ok else 'not as expected'}"
        f" ({time.monotonic() - started:.0f} s; run folders in {out})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
