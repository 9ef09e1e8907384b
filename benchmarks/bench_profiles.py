"""What does each phased load profile cost the generator, per streamed token? Whole-tree CPU.

Each profile (``servecheck load --profile``, servecheck/load/workload/phased.py) runs against the
calibration server (``benchmarks/_truth.py``: TTFT 100 ms, a token every 10 ms, 64 tokens; the
server on core 1, the command and Locust on core 0) for two durations, and its cost splits as in
``bench_tree.py``: MARGINAL = (CPU(long) - CPU(short)) / (tokens(long) - tokens(short)) per 10k
streamed tokens of the whole process tree (``os.wait4``'s rusage: the command, its Locust child,
the summary and report), and FIXED = CPU(short) - marginal x tokens(short). Beside them the plain
open loop (``--rate``) at about the same mean rate, so a profile's own cost (its schedule, its
bursts, churn's connection per request) shows as the difference.

    python benchmarks/bench_profiles.py            # 6 s and 16 s, one run each, writes the doc
    python benchmarks/bench_profiles.py --quick    # 4 s and 8 s, no docs

Writes ``docs/benchmarks.md`` between the ``profiles`` markers; the rest is left alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _docs import write_section  # noqa: E402
from _truth import server_stats, start_truth_server, stop, truth_targets  # noqa: E402
from bench_load import ITL_S, SCENARIO, TOKENS, TTFT_S  # noqa: E402
from bench_tree import _timed  # noqa: E402

START, END = "<!-- profiles:start -->", "<!-- profiles:end -->"
# (label, options): mean rates near 40 req/s (about 30 streams in flight at the truth's 0.73 s).
# step and recovery have lengths of their own, longer than any duration here: --duration cuts them.
VARIANTS: list[tuple[str, list[str]]] = [
    ("open loop --rate 40/s (baseline)", ["--rate", "40/s"]),
    ("burst:n=40,every=1s", ["--profile", "burst:n=40,every=1s"]),
    ("zigzag:min=10,max=70,period=4s", ["--profile", "zigzag:min=10,max=70,period=4s"]),
    ("microburst:rate=30,n=10,every=1s", ["--profile", "microburst:rate=30,n=10,every=1s"]),
    ("step:20,60,20,60@2s (repeated)", ["--profile", "step:" + ",".join(["20,60"] * 30) + "@2s"]),
    (
        "recovery:normal=30,overload=60,for=3s",
        ["--profile", "recovery:normal=30,overload=60,for=3s,before=3s,after=120s"],
    ),
    ("churn:rate=40 (a connection per request)", ["--profile", "churn:rate=40"]),
]


def run_one(tmp: Path, base: str, options: list[str], duration: float) -> dict[str, Any]:
    """One ``servecheck load`` of this checkout; its whole tree's CPU and streamed tokens."""
    out = tmp / "reports"
    run_id = f"p{time.monotonic_ns()}"
    cmd = [
        sys.executable, "-m", "servecheck", "load", "--targets-file", str(truth_targets(tmp, base)),
        "--target", "bench", "--out", str(out), "--run-id", run_id,
        "--scenario", str(tmp / "bench_scenario.py"), *options,
        "--duration", f"{duration:g}s", "--no-tokenize", "--cpus", "0", "--allow-lag", "--quiet",
        "--records", "none",
    ]  # fmt: skip
    rc, cpu, wall, tail = _timed(cmd, ROOT, {**os.environ, "PYTHONPATH": str(ROOT)})
    summary = out / run_id / "summary.json"
    if not summary.exists():
        raise RuntimeError(
            f"servecheck load {' '.join(options)} exited {rc} without a summary: {tail}"
        )
    s = json.loads(summary.read_text(encoding="utf-8"))
    gen = s.get("generator") or {}
    row = {
        "rc": rc,
        "tokens": int(gen.get("tokens_streamed") or 0),
        "requests": int((s.get("requests") or {}).get("total") or 0),
        "cpu_s": cpu,
        "wall_s": wall,
        "lag_p99_ms": ((s.get("latency_ms") or {}).get("lag") or {}).get("p99"),
        "new_conns": ((s.get("timings") or {}).get("connections") or {}).get("new"),
    }
    shutil.rmtree(out / run_id, ignore_errors=True)
    return row


def split(short: dict[str, Any], long: dict[str, Any]) -> dict[str, Any]:
    """Marginal CPU-s per 10k tokens and the fixed part, from a short and a long run."""
    dt = long["tokens"] - short["tokens"]
    marginal = (long["cpu_s"] - short["cpu_s"]) / dt * 10_000 if dt > 0 else None
    fixed = short["cpu_s"] - (marginal or 0.0) * short["tokens"] / 10_000
    return {"marginal": marginal, "fixed": fixed}


def _f(x: Any, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        START,
        "## Generator cost of the phased load profiles (`bench_profiles.py`)",
        "",
        f"Calibration server (TTFT {TTFT_S * 1000:g} ms, a token every {ITL_S * 1000:g} ms, "
        f"{TOKENS} tokens) on core 1, the whole `servecheck load` tree on core 0, "
        f"`--records none`; {meta['durations'][0]:g} s and {meta['durations'][1]:g} s runs, "
        f"{meta['machine']}, {meta['date']}. CPU from the kernel (`os.wait4`); marginal is "
        "CPU-s per 10k streamed tokens, fixed is the rest of the short run (start-up, summary, "
        "report). A shared machine reads noisy: compare rows of one run, not across runs.",
        "",
        "| profile | requests (long) | tokens (long) | marginal CPU-s / 10k tokens | fixed CPU-s "
        "| lag p99 ms | new connections |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['long']['requests']} | {r['long']['tokens']} | "
            f"{_f(r['marginal'])} | {_f(r['fixed'], 2)} | {_f(r['long']['lag_p99_ms'], 1)} | "
            f"{r['long']['new_conns'] if r['long']['new_conns'] is not None else '-'} |"
        )
    if meta.get("server_late_p99_ms") is not None:
        lines += [
            "",
            f"The calibration server's own lateness, p99 over every write: "
            f"{meta['server_late_p99_ms']:.2f} ms (above a few ms its truth did not hold).",
        ]
    if meta.get("reading"):
        lines += ["", meta["reading"]]
    lines.append(END)
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--durations", default="6,16")
    ap.add_argument("--quick", action="store_true", help="4 s and 8 s, no docs")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--from-log", type=Path, help="render the section from a run's output")
    ap.add_argument("--reading", type=Path, help="a file with the reading paragraph for the doc")
    args = ap.parse_args()
    if args.quick:
        args.durations, args.no_docs = "4,8", True
    d = [float(x) for x in args.durations.split(",")]
    meta: dict[str, Any] = {
        "durations": (d[0], d[1]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
    }
    if args.reading:
        meta["reading"] = args.reading.read_text(encoding="utf-8").strip()
    if args.from_log:  # the JSON rows a run printed, and its server lateness line
        text = args.from_log.read_text(encoding="utf-8")
        rows = [json.loads(x) for x in text.splitlines() if x.startswith('{"variant"')]
        late = [x for x in text.splitlines() if "p99 over every write" in x]
        if late:
            meta["server_late_p99_ms"] = float(late[-1].split(": ")[1].split(" ms")[0])
        return _write(rows, meta, args.no_docs)
    tmp = Path(tempfile.mkdtemp(prefix="bench-profiles-"))
    (tmp / "bench_scenario.py").write_text(SCENARIO, encoding="utf-8")
    proc, base = start_truth_server(tmp, TTFT_S, ITL_S, TOKENS)
    rows: list[dict[str, Any]] = []
    try:
        for label, options in VARIANTS:
            short, long = (run_one(tmp, base, options, x) for x in meta["durations"])
            row = {"variant": label, "short": short, "long": long, **split(short, long)}
            print(json.dumps(row), flush=True)
            rows.append(row)
        meta["server_late_p99_ms"] = server_stats(base).get("late_p99_ms")
    finally:
        stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)
    return _write(rows, meta, args.no_docs)


def _write(rows: list[dict[str, Any]], meta: dict[str, Any], no_docs: bool) -> int:
    block = render(rows, meta)
    print(block)
    if not no_docs:
        write_section(START, END, block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
