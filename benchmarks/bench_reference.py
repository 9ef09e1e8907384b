"""How many concurrent streams the reference server sustains on one core.

The server runs pinned to CPU 0 (taskset) with a known TTFT and inter-token delay; a minimal
asyncio client on CPU 1 opens N concurrent streams over raw sockets (no HTTP library, so the
client is not the bottleneck) and measures when each stream's first content and last byte
arrive. The server keeps up while observed TTFT and E2E stay close to what it was configured
for; we report the lateness (observed minus configured) p50/p99 and the server's CPU use.

    python benchmarks/bench_reference.py            # writes its section of docs/benchmarks.md
    python benchmarks/bench_reference.py --quick    # smaller sweep, prints only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
TTFT_MS, TOKENS = 100.0, 64
ITL_MS = 10.0  # set per sweep by run()


async def one_stream(port: int, body: bytes) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
    )
    await writer.drain()
    first = None
    chunks = 0
    buf = b""
    while True:
        data = await reader.read(65536)
        if not data:
            break
        buf += data
        if first is None:
            idx = buf.find(b'{"content":"')
            if idx >= 0 and buf[idx + 12 : idx + 13] not in (b'"', b""):
                first = time.perf_counter()  # the first non-empty content delta, not the role chunk
        chunks += data.count(b"data: ")
        if b"data: [DONE]" in buf[-64:]:
            break
        buf = buf[-256:]
    end = time.perf_counter()
    writer.close()
    return ((first or end) - t0) * 1000, (end - t0) * 1000, chunks


async def wave(port: int, n: int, rounds: int = 3) -> list[tuple[float, float, int]]:
    """Keep about ``n`` streams open: starts spread evenly over one stream's duration, for
    ``rounds`` durations (a burst of n simultaneous connects would measure accept() instead)."""
    body = json.dumps(
        {
            "model": "ref-tiny",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": TOKENS,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    period = (TTFT_MS + ITL_MS * (TOKENS - 1)) / 1000
    t0 = time.perf_counter()

    async def delayed(i: int) -> tuple[float, float, int]:
        await asyncio.sleep(max(0.0, t0 + i * period / n - time.perf_counter()))
        return await one_stream(port, body)

    results = await asyncio.gather(*(delayed(i) for i in range(n * rounds)))
    return results[n:]  # the first period ramps up


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def run(concurrencies: list[int], repeats: int, itl_ms: float = 10.0) -> list[dict[str, float]]:
    global ITL_MS
    ITL_MS = itl_ms
    taskset = shutil.which("taskset")
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "port"
        cmd = [
            sys.executable,
            "-m",
            "servecheck",
            "reference-server",
            "--port",
            "0",
            "--ready-file",
            str(ready),
            "--ttft-ms",
            str(TTFT_MS),
            "--itl-ms",
            str(ITL_MS),
            "--default-max-tokens",
            str(TOKENS),
            "--max-num-seqs",
            "4096",
        ]
        if taskset:
            cmd = [taskset, "-c", "0", *cmd]
            os.sched_setaffinity(0, {1})
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 20
            while not ready.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            port = int(ready.read_text())
            server = psutil.Process(proc.pid)
            if taskset:
                server = (
                    next((c for c in server.children(recursive=True)), server)
                    if server.name() == "taskset"
                    else server
                )
            rows = []
            for n in concurrencies:
                ttft_late, e2e_late, cpu_share = [], [], []
                for _ in range(repeats):
                    c0 = sum(server.cpu_times()[:2])
                    t0 = time.perf_counter()
                    results = asyncio.run(wave(port, n))
                    wall = time.perf_counter() - t0
                    cpu_share.append((sum(server.cpu_times()[:2]) - c0) / wall)
                    ttft_late += [r[0] - TTFT_MS for r in results]
                    e2e_late += [r[1] - (TTFT_MS + ITL_MS * (TOKENS - 1)) for r in results]
                rows.append(
                    {
                        "itl_ms": ITL_MS,
                        "streams": n,
                        "ttft_late_p50": statistics.median(ttft_late),
                        "ttft_late_p99": pct(ttft_late, 99),
                        "e2e_late_p50": statistics.median(e2e_late),
                        "e2e_late_p99": pct(e2e_late, 99),
                        "server_cpu": statistics.median(cpu_share),
                        "tokens_per_s": n * TOKENS / ((TTFT_MS + ITL_MS * (TOKENS - 1)) / 1000),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
            return rows
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def write_section(rows: list[dict[str, float]]) -> None:
    path = ROOT / "docs" / "benchmarks.md"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = [
        "<!-- reference:start -->",
        "## Reference server: concurrent streams on one core",
        "",
        f"`python benchmarks/bench_reference.py`, {time.strftime('%Y-%m-%d')}, 2-core machine, server pinned to CPU 0,",
        f"raw-socket client on CPU 1; configured TTFT {TTFT_MS:.0f} ms, {TOKENS} tokens, inter-token delay as in the table.",
        "Streams start evenly spread over one stream's duration, so about N are open at any time (the first",
        "period, the ramp, is dropped). Lateness = observed minus configured; medians over repeats.",
        "",
        "| ITL (ms) | streams | TTFT late p50 (ms) | TTFT late p99 (ms) | E2E late p50 (ms) | E2E late p99 (ms) | server CPU (cores) | tokens/s offered |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['itl_ms']:.0f} | {r['streams']} | {r['ttft_late_p50']:.1f} | {r['ttft_late_p99']:.1f} | {r['e2e_late_p50']:.1f} |"
            f" {r['e2e_late_p99']:.1f} | {r['server_cpu']:.2f} | {r['tokens_per_s']:.0f} |"
        )
    lines += [
        "",
        "Reading (medians, noisy shared machine): the server stays within ~3 ms (p50) of its configured",
        "timings up to about 6k chunks/s on its core (256 streams at 40 ms per token; 64 at 10 ms), within",
        "~12 ms at 11k chunks/s (128 streams at 10 ms), and saturates near 20k chunks/s (server CPU ~0.9).",
        "As a calibration target keep its offered chunk rate under ~6k/s per core; above that, load benchmarks use"
        " the calibration server (`servecheck.reference.fast`), whose own lateness is shown beside every load figure.",
        "",
        "<!-- reference:end -->",
    ]
    block = "\n".join(lines)
    if "<!-- reference:start -->" in text:
        head, rest = text.split("<!-- reference:start -->", 1)
        tail = rest.split("<!-- reference:end -->", 1)[1]
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sweep, print only")
    args = parser.parse_args()
    if args.quick:
        run([16, 128], 1)
        return
    write_section(run([16, 64, 128, 256], 3, itl_ms=10.0) + run([256, 512], 3, itl_ms=40.0))


if __name__ == "__main__":
    main()
