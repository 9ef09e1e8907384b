"""How accurate and how cheap is ``servecheck load``? Measured against a server with known timings.

The reference server streams with TTFT 100 ms and 10 ms between tokens, 64 tokens per answer
(``ignore_eos``), on an absolute schedule from each request's arrival; so every request's true
TTFT is 100 ms and its true E2E 100 + 63 x 10 = 730 ms, and the true ITL is 10 ms. The server is
pinned to one core (``taskset -c 1``) and the generator (Locust) to the other (``--cpus 0``).

Reported, per level of concurrent streams: the error of each request's TTFT and E2E against that
truth (p50/p99), ITL p50/p99, output tokens/s, generator CPU seconds per 10k streamed tokens and
the generator's own lag (event-loop delay) with the run's "behind" flag. A sweep finds the
highest streamed-token rate one generator core sustains with ITL p50 within 20 % of the truth.

Caveat printed with the results: if the server's core is saturated its tokens are late too, and
that lateness is (correctly) in the measured numbers; this bench cannot split the two.

    python benchmarks/bench_load.py                 # full: 16 and 256 streams, sweep
    python benchmarks/bench_load.py --quick         # short runs (a smoke test of the bench)

Writes ``docs/benchmarks.md`` between the ``load`` markers; the rest of the file is left alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servecheck.commands.load import LoadSpec, run_load  # noqa: E402
from servecheck.config.model import Target  # noqa: E402
from servecheck.load.records import read_files  # noqa: E402

START, END = "<!-- load:start -->", "<!-- load:end -->"
TTFT_S, ITL_S, TOKENS = 0.100, 0.010, 64
E2E_S = TTFT_S + (TOKENS - 1) * ITL_S
SCENARIO = '''"""Benchmark scenario: 64-token answers to a short prompt."""
import locust  # noqa: F401,I001
from servecheck.load.locust_user import LLMUser, scenario_shape
from servecheck.load.prompts import PromptSpec


class BenchUser(LLMUser):
    scenario = "bench"
    mix = [PromptSpec(prompt_tokens=32, output_tokens=64)]


LoadShape = scenario_shape()
'''


def start_server(tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    ready = tmp / "port"
    cmd = [sys.executable, "-m", "servecheck", "reference-server", "--port", "0", "--ready-file", str(ready),
           "--ttft-ms", str(TTFT_S * 1000), "--itl-ms", str(ITL_S * 1000), "--default-max-tokens", str(TOKENS),
           "--max-model-len", "4096", "--kv-blocks", "100000", "--max-num-seqs", "4096"]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "1", *cmd]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(300):
        if ready.exists():
            return proc, int(ready.read_text())
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("reference server did not start within 30 s")


def one_level(target: Target, scenario: Path, out: Path, users: int, duration: float) -> dict[str, Any]:
    spec = LoadSpec(target=target, scenario=str(scenario), users=users, duration_s=duration, out_dir=out,
                    extra_body={"ignore_eos": True}, use_tokenize=False, cpus="0", progress=False, allow_lag=True,
                    drain_s=10.0)
    load_before = os.getloadavg()[0]
    res = run_load(spec)
    recs = [r for r in read_files([res.records_path]).records if not r.get("error")]
    s = res.summary
    if not recs:
        return {"users": users, "ok": 0, "errors": s["requests"]["errors"]}
    ttft_err = np.array([r["ttft"] - TTFT_S for r in recs]) * 1000
    e2e_err = np.array([r["e2e"] - E2E_S for r in recs]) * 1000
    itl = np.array([x for r in recs for x in r["itls"]]) * 1000
    full = sum(1 for r in recs if r.get("output_tokens") == TOKENS)
    return {
        "users": users,
        "ok": len(recs),
        "errors": s["requests"]["errors"],
        "full_answers": full,
        "ttft_err_p50": float(np.percentile(ttft_err, 50)), "ttft_err_p99": float(np.percentile(ttft_err, 99)),
        "e2e_err_p50": float(np.percentile(e2e_err, 50)), "e2e_err_p99": float(np.percentile(e2e_err, 99)),
        "itl_p50": float(np.percentile(itl, 50)) if len(itl) else None,
        "itl_p99": float(np.percentile(itl, 99)) if len(itl) else None,
        "tokens_per_s": s["throughput"]["output_tokens_per_s"],
        "cpu_per_10k": s["generator"]["cpu_s_per_10k_tokens"],
        "loop_lag_p99": s["schedule"]["loop_lag_ms"].get("p99"),
        "behind": s["schedule"]["behind"],
        "loadavg": round(load_before, 2),
    }


def httpx_baseline(port: int, users: int, per_user: int = 6) -> dict[str, Any]:
    """The project's own asyncio/httpx timing client at the same concurrency, pinned to CPU 0: a
    same-machine, same-moment reference for what a general-purpose async client reports."""
    code = f"""
import asyncio, json, resource
from servecheck.client.http import AsyncServeClient, ClientSettings
async def main():
    c = AsyncServeClient(ClientSettings(base_url="http://127.0.0.1:{port}/v1", headers={{}}))
    body = {{"model": "ref-tiny", "messages": [{{"role": "user", "content": "hi"}}], "max_tokens": {TOKENS},
            "ignore_eos": True, "stream": True, "stream_options": {{"include_usage": True}}}}
    out = []
    async def user():
        for _ in range({per_user}):
            ex = await c.post("/chat/completions", body, stream=True)
            if ex.ok and ex.timing.ttft is not None:
                out.append((ex.timing.ttft, ex.timing.e2e, len(ex.timing.token_times)))
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    await asyncio.gather(*[user() for _ in range({users})])
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    await c.aclose()
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    print(json.dumps({{"rows": out, "cpu": cpu}}))
asyncio.run(main())
"""
    cmd = [sys.executable, "-c", code]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    load_before = os.getloadavg()[0]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    rows = data["rows"]
    ttft = np.array([r[0] - TTFT_S for r in rows]) * 1000
    e2e = np.array([r[1] - E2E_S for r in rows]) * 1000
    tokens = sum(r[2] for r in rows)
    return {"users": users, "ok": len(rows), "ttft_err_p50": float(np.percentile(ttft, 50)),
            "ttft_err_p99": float(np.percentile(ttft, 99)), "e2e_err_p50": float(np.percentile(e2e, 50)),
            "e2e_err_p99": float(np.percentile(e2e, 99)), "cpu_per_10k": data["cpu"] / tokens * 1e4 if tokens else None,
            "loadavg": round(load_before, 2)}


def fmt(x: Any, spec: str = ".1f") -> str:
    if x is None:
        return "-"
    return format(x, spec) if isinstance(x, float) else str(x)


def render(levels: list[dict[str, Any]], sweep: list[dict[str, Any]], best: dict[str, Any] | None, meta: dict[str, Any],
           baseline: dict[str, Any] | None = None) -> str:
    lines = [
        START,
        "## Load generator (`servecheck load`)",
        "",
        f"`benchmarks/bench_load.py` on {meta['machine']}, Python {meta['python']}, {meta['cpus']} CPUs, {meta['date']}.",
        "Reference server: TTFT 100 ms, ITL 10 ms, 64 tokens (`ignore_eos`), pinned to CPU 1; Locust generator pinned"
        " to CPU 0 (`--cpus 0`), closed loop. Truth per request: TTFT 100 ms, E2E 730 ms, ITL 10 ms.",
        f"Errors are measured minus truth, in ms. Load average (1 min) of the shared machine when each run started is"
        f" given ({meta['note']}).",
        "",
        "| streams | ok | TTFT err p50 | TTFT err p99 | E2E err p50 | E2E err p99 | ITL p50 | ITL p99 | tokens/s | CPU-s / 10k tokens | gen. loop lag p99 | behind | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in levels:
        lines.append(
            f"| {r['users']} | {r['ok']} | {fmt(r.get('ttft_err_p50'))} | {fmt(r.get('ttft_err_p99'))} | {fmt(r.get('e2e_err_p50'))}"
            f" | {fmt(r.get('e2e_err_p99'))} | {fmt(r.get('itl_p50'))} | {fmt(r.get('itl_p99'))} | {fmt(r.get('tokens_per_s'), '.0f')}"
            f" | {fmt(r.get('cpu_per_10k'), '.2f')} | {fmt(r.get('loop_lag_p99'))} | {'yes' if r.get('behind') else 'no'} | {fmt(r.get('loadavg'), '.1f')} |"
        )
    if baseline:
        b = baseline
        lines += ["", f"Same server, same machine, right after: the project's own asyncio/httpx timing client"
                      f" (`AsyncServeClient`, pinned to CPU 0) at {b['users']} streams: TTFT err p50 {b['ttft_err_p50']:.1f} ms,"
                      f" p99 {b['ttft_err_p99']:.1f} ms; E2E err p50 {b['e2e_err_p50']:.1f} ms, p99 {b['e2e_err_p99']:.1f} ms;"
                      f" {fmt(b.get('cpu_per_10k'), '.2f')} CPU-s per 10k tokens ({b['ok']} requests, load avg {b['loadavg']:.1f}).",
                  "It is the conformance client, built for exactness of what it records, not for load; the gap is what"
                  " a general-purpose async client costs at this concurrency on one shared core."]
    lines += ["", "Sweep for the highest streamed-token rate with ITL p50 within 20 % of 10 ms (8-12 ms):", "",
              "| streams | tokens/s | ITL p50 | ITL p99 | CPU-s / 10k tokens | behind |", "| --- | --- | --- | --- | --- | --- |"]
    for r in sweep:
        lines.append(f"| {r['users']} | {fmt(r.get('tokens_per_s'), '.0f')} | {fmt(r.get('itl_p50'))} | {fmt(r.get('itl_p99'))}"
                     f" | {fmt(r.get('cpu_per_10k'), '.2f')} | {'yes' if r.get('behind') else 'no'} |")
    if best:
        lines += ["", f"Highest sustained: **{best['tokens_per_s']:.0f} streamed tokens/s** on one generator core"
                      f" ({best['users']} streams, ITL p50 {best['itl_p50']:.1f} ms)."]
    else:
        lines += ["", "No level kept ITL p50 within 20 % of the truth."]
    lines += [
        "",
        "Peer tools were not rerun here. Figures measured earlier on this machine class against the same server"
        " (from `/work/shared/notes/load-measurement-pitfalls.md`, not rerun): `vllm bench serve` chat backend TTFT -99 ms"
        " (stops the clock at the role-only chunk); a Locust `FastHttpUser` reading `iter_content(1024)` TTFT +41 ms, the"
        " same user on `HttpUser` +1.4 ms; at 256 streams on one core, tools with heavy per-event Python work TTFT p50"
        " +48 to +177 ms and p99 +250 to +310 ms; CPU 0.12-0.27 CPU-s per 10k tokens for a minimal Locust user, ~1.8 for"
        " the heaviest tool; open-loop schedule lag 0.14 ms p50 at 50 req/s for the best tool.",
        "",
        "Reading: the generator is accurate to a few ms at p50 up to ~15k streamed tokens/s on one core (the"
        " sweep). At 256 streams (20k tokens/s) the errors grow while the generator's loop lag stays bounded: the"
        " reference server's own core saturates near 20k chunks/s (see its section below), so those tokens really are"
        " late. When the generator is the limit instead, the run is flagged `behind` and `servecheck load` reports it"
        " `inconclusive` (exit 1) rather than presenting those latencies as the server's. CPU per token falls as"
        " concurrency rises because one wake-up then reads several events. The CPU goal (<= 0.3 CPU-s per 10k"
        " tokens) is not met: 0.56-1.1 measured; the parsing path alone costs ~0.2 (tests/load), the rest is one"
        " gevent wake-up per token.",
        "",
        "Caveat: when the server's own core saturates, its tokens are late too and that shows in these errors; the"
        " generator's loop lag and the `behind` flag say whether the generator was the limit.",
        END,
    ]
    return "\n".join(lines) + "\n"


def write_docs(block: str) -> None:
    path = ROOT / "docs" / "benchmarks.md"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        _, tail = rest.split(END, 1)
        text = head + block.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text, encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short runs; do not write docs")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--levels", default="16,256")
    ap.add_argument("--sweep", default="16,32,64,96,128,192")
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    duration = 5.0 if args.quick else args.duration
    tmp = Path(tempfile.mkdtemp(prefix="bench-load-"))
    scenario = tmp / "bench_scenario.py"
    scenario.write_text(SCENARIO)
    server, port = start_server(tmp)
    try:
        target = Target(name="bench", base_url=f"http://127.0.0.1:{port}/v1", engine="reference", models=["ref-tiny"], timeout_s=120)
        levels = []
        for users in (int(x) for x in args.levels.split(",")):
            r = one_level(target, scenario, tmp / "reports", users, duration)
            print(json.dumps(r), flush=True)
            levels.append(r)
        baseline = httpx_baseline(port, int(args.levels.split(",")[0]))
        print(json.dumps(baseline), flush=True)
        sweep: list[dict[str, Any]] = []
        best: dict[str, Any] | None = None
        if not args.quick:
            for users in (int(x) for x in args.sweep.split(",")):
                known = [lv for lv in levels if lv["users"] == users]
                r = known[0] if known else one_level(target, scenario, tmp / "reports", users, duration / 2)
                print(json.dumps(r), flush=True)
                sweep.append(r)
                ok = r.get("itl_p50") is not None and abs(r["itl_p50"] - ITL_S * 1000) <= 0.2 * ITL_S * 1000 and not r.get("errors")
                if ok and (best is None or r["tokens_per_s"] > best["tokens_per_s"]):
                    best = r
                if not ok:
                    break
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    meta = {"machine": platform.machine(), "python": platform.python_version(), "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d"), "note": "last column; above ~2 other work shared the CPUs"}
    block = render(levels, sweep, best, meta, baseline)
    print(block)
    if not args.quick and not args.no_docs:
        write_docs(block)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
