"""What does watching a run live cost the generator? ``servecheck load`` with the live view off,
with ``--metrics-port`` scraped once a second, and with ``--web`` + ``--metrics-port`` while a
poller asks for what Locust's UI and the /llm page ask for (``/stats/requests``,
``/llm/live.json``) and for ``/metrics``, each once a second.

The whole tree's CPU (the command and its Locust child: user + sys from the kernel, ``os.wait4``
as in ``bench_tree.py``) on core 0 against the calibration server (``benchmarks/_truth.py``, core
1: TTFT 100 ms, a token every 10 ms, 64 tokens) at a closed loop of N streams, per 10k streamed
tokens, and the Locust child's own CPU from its first request (``generator.cpu_s``). The poller
runs in this process, outside the measured tree. The three configurations alternate, run by run,
so a machine that grows busier meets each alike.

    python benchmarks/bench_live.py            # 256 streams, 10 s, 3 runs of each
    python benchmarks/bench_live.py --quick    # 1 run of each, 6 s, no docs
    python benchmarks/bench_live.py --from-log LOG   # the section from a run's printed rows

Writes ``docs/benchmarks.md`` between the ``live-view`` markers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _docs import write_section  # noqa: E402
from _truth import start_truth_server, stop, truth_targets  # noqa: E402
from bench_load import ITL_S, SCENARIO, TOKENS, TTFT_S  # noqa: E402
from bench_tree import _timed  # noqa: E402

START, END = "<!-- live-view:start -->", "<!-- live-view:end -->"
CONFIGS = ("off", "metrics", "web+metrics")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Poller(threading.Thread):
    """GET each URL once a second until stopped; counts the answers that came back."""

    def __init__(self, urls: list[str]) -> None:
        super().__init__(daemon=True)
        self.urls, self.ok, self.done = urls, 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(1.0):
            for url in self.urls:
                try:
                    with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - loopback
                        r.read()
                        self.ok += 1
                except OSError:
                    pass


def run_one(tmp: Path, base: str, users: int, duration: float, config: str) -> dict[str, Any]:
    out, run_id = tmp / "reports", f"live{time.monotonic_ns()}"
    cmd = [
        sys.executable, "-m", "servecheck", "load", "--targets-file", str(truth_targets(tmp, base)),
        "--target", "bench", "--out", str(out), "--run-id", run_id,
        "--scenario", str(tmp / "bench_scenario.py"), "--users", str(users),
        "--duration", f"{duration:g}s", "--no-tokenize", "--cpus", "0", "--allow-lag", "--quiet",
        "--records", "none",
    ]  # fmt: skip
    urls: list[str] = []
    if config != "off":
        mp = _port()
        cmd += ["--metrics-port", str(mp)]
        urls.append(f"http://127.0.0.1:{mp}/metrics")
    if config == "web+metrics":
        wp = _port()
        cmd += ["--web", f"127.0.0.1:{wp}"]
        urls += [f"http://127.0.0.1:{wp}/stats/requests", f"http://127.0.0.1:{wp}/llm/live.json"]
    poller = Poller(urls)
    poller.start()
    try:
        rc, cpu, wall, tail = _timed(cmd, ROOT, {**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        poller.done.set()
        poller.join()
    summary = out / run_id / "summary.json"
    if not summary.exists():
        raise RuntimeError(f"servecheck load ({config}) exited {rc} without a summary: {tail}")
    gen = json.loads(summary.read_text(encoding="utf-8")).get("generator") or {}
    shutil.rmtree(out / run_id, ignore_errors=True)
    return {
        "config": config,
        "rc": rc,
        "cpu_s": cpu,
        "locust_cpu_s": gen.get("cpu_s"),
        "tokens": int(gen.get("tokens_streamed") or 0),
        "wall_s": wall,
        "polls": poller.ok,
    }


def _per10k(r: dict[str, Any], key: str) -> float:
    return float(r[key] or 0.0) / max(1, r["tokens"]) * 1e4


def in_process(rate: int = 300, seconds: int = 60) -> dict[str, float]:
    """The live view's own work, timed in this process on a synthetic aggregate: ``rate``
    requests a second of 64 tokens, 5 s slices, one tick (piece + merge) and one scrape (the
    snapshot and the exposition) a second; the milliseconds of the last second, the longest."""
    import random

    from prometheus_client import generate_latest

    from servecheck.analysis.aggregate import Aggregate, Rule
    from servecheck.load.generator.live import LiveFeed, LiveView, registry_for

    rng = random.Random(7)
    agg = Aggregate(Rule(slice_s=5.0, window="none"))
    feed, view = LiveFeed(agg, "w0"), LiveView()
    t0, tick_ms, scrape_ms = 1_000_000.0, 0.0, 0.0
    for sec in range(seconds):
        for k in range(rate):
            t = t0 + sec + k / rate
            itls = [0.01 + rng.random() * 0.001 for _ in range(63)]
            agg.add(
                {"t_sent": t - 0.73, "t_done": t, "ttft": 0.1 + rng.random() * 0.01,
                 "e2e": 0.73, "itls": itls, "output_tokens": 64}
            )  # fmt: skip
        a = time.perf_counter()
        view.feed(feed.tick(now=t0 + sec + 1, in_flight=256))
        b = time.perf_counter()
        generate_latest(registry_for(view))
        c = time.perf_counter()
        view._cache = None  # the next second's scrape computes anew
        tick_ms, scrape_ms = (b - a) * 1e3, (c - b) * 1e3
    return {"rate": rate, "seconds": seconds, "tick_ms": tick_ms, "scrape_ms": scrape_ms}


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        START,
        "## Live view cost (`servecheck load --web` / `--metrics-port`)",
        "",
        f"`python benchmarks/bench_live.py` on {meta['machine']}, {meta['when']}: {meta['users']}"
        f" streams for {meta['duration']:g} s against the calibration server (TTFT {TTFT_S * 1000:g} ms,"
        f" a token every {ITL_S * 1000:g} ms, {TOKENS} tokens; server on CPU 1, the command and Locust"
        f" on CPU 0), `--records none`, {meta['runs']} run(s) of each configuration, alternating."
        " Tree CPU is the whole tree's user + sys from the kernel (`os.wait4`: start-up, the run, the"
        " summary and report); Locust CPU is the child's own from its first request to its end, the"
        " part the live view runs in. With the view on, a poller outside the tree fetched each"
        " endpoint once a second (`/metrics`; with `--web` also `/stats/requests` and"
        " `/llm/live.json`, what Locust's UI and the /llm page ask for). Figures are medians.",
        "",
        "| configuration | tree CPU s | Locust CPU s | tokens streamed | tree CPU s / 10k tokens | Locust CPU s / 10k tokens | polls answered |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    med: dict[str, dict[str, float]] = {}
    for config in CONFIGS:
        mine = [r for r in rows if r["config"] == config]
        if not mine:
            continue
        m = med[config] = {
            "cpu": statistics.median(r["cpu_s"] for r in mine),
            "loc": statistics.median(float(r["locust_cpu_s"] or 0.0) for r in mine),
            "tok": statistics.median(r["tokens"] for r in mine),
            "tree10k": statistics.median(_per10k(r, "cpu_s") for r in mine),
            "loc10k": statistics.median(_per10k(r, "locust_cpu_s") for r in mine),
            "polls": statistics.median(r["polls"] for r in mine),
        }
        lines.append(
            f"| {config} | {m['cpu']:.2f} | {m['loc']:.2f} | {m['tok']:,.0f} | {m['tree10k']:.3f}"
            f" | {m['loc10k']:.3f} | {m['polls']:.0f} |"
        )
    off = [r for r in rows if r["config"] == "off"]
    reading = []
    for key, what in (("cpu_s", "tree"), ("locust_cpu_s", "Locust")):
        vals = [_per10k(r, key) for r in off]
        lo, hi = min(vals, default=0.0), max(vals, default=0.0)
        mk = "tree10k" if key == "cpu_s" else "loc10k"
        parts = [
            f"{c} {med[c][mk]:.3f} ({(med[c][mk] / med['off'][mk] - 1) * 100:+.0f}%,"
            f" {'inside' if lo <= med[c][mk] <= hi else 'outside'} it)"
            for c in med
            if c != "off" and med["off"][mk]
        ]
        reading.append(
            f"{what} CPU per 10k tokens: the off runs spread over {lo:.3f}-{hi:.3f}; "
            + ", ".join(parts)
        )
    lines += [
        "",
        "Reading: the live view reads each process's aggregate once a second (no per-request"
        " work), so what it adds is the ticks, the scrapes and the page polls. "
        + "; ".join(reading)
        + (
            ". With one run of each there is no spread to judge a difference by."
            if len(off) < 2
            else ". A difference inside the off runs' own spread is not a measured cost; this"
            " machine (2 CPUs) was shared with other jobs while it ran, so read the spread first."
        )
        + " In-process, on a synthetic aggregate of {rate} requests a second (64 tokens, 5 s"
        " slices) after {seconds} s, one tick (the piece and its merge) took {tick_ms:.2f} ms and"
        " one scrape (snapshot and exposition) {scrape_ms:.2f} ms, {share:.2f}% of each second"
        " at one of each a second; the end-to-end figures above also hold the HTTP servers"
        " answering the polls, and this machine's noise.".format(
            **meta["in_process"],
            share=(meta["in_process"]["tick_ms"] + meta["in_process"]["scrape_ms"]) / 10.0,
        )
        + " Every run (tree CPU s / tokens): "
        + ", ".join(f"{r['config']} {r['cpu_s']:.2f} / {r['tokens']:,}" for r in rows)
        + ".",
        END,
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 run of each, 6 s, no docs")
    ap.add_argument("--users", type=int, default=256)
    ap.add_argument("--duration", type=float, default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--from-log", type=Path, help="re-render the section from a run's rows")
    args = ap.parse_args()
    if args.from_log:
        lines = args.from_log.read_text(encoding="utf-8").splitlines()
        rows = [json.loads(x) for x in lines if x.startswith("{")]
        meta = json.loads(next(x for x in lines if x.startswith("#meta "))[6:])
        meta["in_process"] = in_process()
        write_section(START, END, render(rows, meta))
        return 0
    duration = args.duration or (6.0 if args.quick else 10.0)
    runs = args.runs or (1 if args.quick else 3)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-live-") as t:
        tmp = Path(t)
        (tmp / "bench_scenario.py").write_text(SCENARIO, encoding="utf-8")
        proc, base = start_truth_server(tmp, TTFT_S, ITL_S, TOKENS)
        try:
            for i in range(runs):
                for config in CONFIGS:
                    row = run_one(tmp, base, args.users, duration, config)
                    rows.append(row)
                    print(json.dumps({"run": i, **row}), flush=True)
        finally:
            stop(proc)
    meta = {
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "when": time.strftime("%Y-%m-%d"),
        "users": args.users,
        "duration": duration,
        "runs": runs,
        "in_process": in_process(),
    }
    print("#meta " + json.dumps(meta), flush=True)
    text = render(rows, meta)
    print(text)
    if not args.quick:
        write_section(START, END, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
