"""Production-like load against the calibration server: multi-turn accuracy and trace-replay lag.

1. **Multi-turn accuracy.** Conversations of 4 turns whose history (the server's real replies) is
   resent every turn, 64-token answers, closed loop at 16 and 256 streams, the generator on core
   0 and the calibration server (``servecheck.reference.fast``: TTFT 100 ms, a token every 10 ms,
   exactly ``max_tokens`` tokens) on core 1, as in ``bench_load.py``. Reported: each request's
   TTFT and E2E error against the truth (raw, and net of the server's own lateness per
   request), ITL p50, and the generator's CPU per 10k streamed tokens: a multi-turn request
   reads every byte through the parser (to keep the reply) instead of the reader thread's token
   shortcut, and resends a growing history.
2. **Trace replay.** A trace of 100 requests/s (fixed gaps, and Poisson gaps with the same mean)
   replayed with ``servecheck load --trace`` on one generator core; reported: schedule lag
   p50 / p99 / max (actual minus the trace's send time), event-loop lag p99, whether the run was
   flagged behind. Goal: lag p99 under 1 ms.

    python benchmarks/bench_production.py            # 20 s per multi-turn level, 30 s traces
    python benchmarks/bench_production.py --quick    # short runs (a smoke test of the bench)

Writes ``docs/benchmarks.md`` between the ``production`` markers. The machine's load average
before each run is shown: on a shared machine another process on the generator's core shows up
as lag that is not the generator's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _docs import write_section  # noqa: E402
from _truth import start_truth_server, stop  # noqa: E402
from bench_load import ITL_S, TTFT_S, fmt, one_level  # noqa: E402

from servecheck.commands.load import LoadSpec, run_load  # noqa: E402
from servecheck.config.model import Target  # noqa: E402

START, END = "<!-- production:start -->", "<!-- production:end -->"
RATE = 100.0
MULTI_TURN = '''"""Benchmark scenario: 4-turn conversations, 64-token answers, history resent."""
import locust  # noqa: F401,I001
from servecheck.load.workload.conversation import MultiTurnMixin
from servecheck.load.generator.locust_user import LLMUser, scenario_shape
from servecheck.load.workload.prompts import PromptSpec


class BenchTurns(MultiTurnMixin, LLMUser):
    scenario = "bench_multi_turn"
    turns = 4
    mix = [PromptSpec(prompt_tokens=32, output_tokens=64)]


LoadShape = scenario_shape()
'''


def write_trace(path: Path, seconds: float, poisson: bool) -> int:
    rng = random.Random(11)
    t, n = 0.0, 0
    with open(path, "w", encoding="utf-8") as fh:
        while t < seconds:
            fh.write(json.dumps({"t": round(t, 6), "input_tokens": 32, "output_tokens": 16}) + "\n")
            n += 1
            t += rng.expovariate(RATE) if poisson else 1.0 / RATE
    return n


def trace_level(tmp: Path, trace: Path, label: str) -> dict[str, Any]:
    proc, base = start_truth_server(tmp, TTFT_S, ITL_S, 16, cpu="1")
    try:
        target = Target(
            name="bench", base_url=base, engine="reference", models=["truth"], timeout_s=60
        )
        spec = LoadSpec(
            target=target,
            trace=str(trace),
            scenario="trace",
            out_dir=tmp / "reports",
            use_tokenize=False,
            cpus="0",
            progress=False,
            allow_lag=True,
            drain_s=10.0,
        )
        load_before = os.getloadavg()[0]
        res = run_load(spec)
    finally:
        stop(proc)
    s = res.summary
    lag = s["schedule"]["lag_ms"]
    return {
        "label": label,
        "sent": s["requests"]["total"],
        "planned": s["schedule"]["planned"],
        "errors": s["requests"]["errors"],
        "lag_p50": lag.get("p50"),
        "lag_p99": lag.get("p99"),
        "lag_max": lag.get("max"),
        "loop_p99": s["schedule"]["loop_lag_ms"].get("p99"),
        "behind": s["schedule"]["behind"],
        "cpu_s": s["generator"]["cpu_s"],
        "window_s": s["window_s"],
        "loadavg": round(load_before, 2),
    }


def render(turns: list[dict[str, Any]], traces: list[dict[str, Any]], quick: bool) -> str:
    lines = [
        START,
        "## Production-like load: multi-turn accuracy, trace-replay lag",
        "",
        f"`python benchmarks/bench_production.py{' --quick' if quick else ''}` on "
        f"{platform.machine()} ({os.cpu_count()} CPUs), {time.strftime('%Y-%m-%d')}. "
        "Generator on core 0, calibration server on core 1 (TTFT 100 ms, ITL 10 ms). "
        "Load average = the machine's before the run (other work on a shared machine).",
        "",
        "Multi-turn (4 turns, 64-token answers, history resent each turn; closed loop). Errors "
        "in ms against the truth; *net* takes out the server's own lateness per request:",
        "",
        "| streams | requests | TTFT err p50 / p99 | net p50 / p99 | E2E err p50 / p99 | net p50 / p99 | ITL p50 | CPU s / 10k tokens | loop lag p99 | load avg |",
        "| ---: | ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in turns:
        lines.append(
            f"| {r['users']} | {r['ok']} | {fmt(r.get('ttft_err_p50'), '.2f')} / {fmt(r.get('ttft_err_p99'), '.2f')} "
            f"| {fmt(r.get('ttft_net_p50'), '.2f')} / {fmt(r.get('ttft_net_p99'), '.2f')} "
            f"| {fmt(r.get('e2e_err_p50'), '.2f')} / {fmt(r.get('e2e_err_p99'), '.2f')} "
            f"| {fmt(r.get('e2e_net_p50'), '.2f')} / {fmt(r.get('e2e_net_p99'), '.2f')} "
            f"| {fmt(r.get('itl_p50'), '.2f')} | {fmt(r.get('cpu_per_10k'), '.2f')} "
            f"| {fmt(r.get('loop_lag_p99'), '.1f')} | {r['loadavg']} |"
        )
    lines += [
        "",
        f"Trace replay at {RATE:g} requests/s (16-token answers), one generator core; goal: "
        "schedule lag p99 < 1 ms:",
        "",
        "| trace | sent / planned | lag p50 | lag p99 | lag max | loop lag p99 | behind | generator CPU | load avg |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for r in traces:
        util = r["cpu_s"] / r["window_s"] if r["window_s"] else None
        lines.append(
            f"| {r['label']} | {r['sent']} / {r['planned']} | {fmt(r['lag_p50'], '.3f')} ms "
            f"| {fmt(r['lag_p99'], '.3f')} ms | {fmt(r['lag_max'], '.2f')} ms "
            f"| {fmt(r['loop_p99'], '.2f')} ms | {'yes' if r['behind'] else 'no'} "
            f"| {fmt(None if util is None else util * 100, '.0f')} % | {r['loadavg']} |"
        )
    worst = max((r["lag_p99"] or 0.0) for r in traces) if traces else None
    if worst is not None and worst >= 1.0:
        loop = max((r["loop_p99"] or 0.0) for r in traces)
        lines += [
            "",
            f"Goal not met in this run: lag p99 {worst:.2f} ms. The generator's own event-loop "
            f"probe (a 50 ms sleep) overshot by {loop:.2f} ms p99 while it used a small share of "
            "its core: the process was waiting for the CPU (other work on core 0; see the load "
            "average), not busy. Rerun on a quiet machine before reading it as the generator's.",
        ]
    lines += ["", END, ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="short runs")
    ap.add_argument("--no-write", action="store_true", help="print, do not touch the docs")
    args = ap.parse_args()
    level_s, trace_s = (5.0, 8.0) if args.quick else (20.0, 30.0)
    with tempfile.TemporaryDirectory(prefix="bench-production-") as d:
        tmp = Path(d)
        scenario = tmp / "bench_multi_turn.py"
        scenario.write_text(MULTI_TURN)
        turns = []
        for users in (16, 256):
            row = one_level(tmp, scenario, users, level_s)
            turns.append(row)
            print(json.dumps(row), file=sys.stderr)
        traces = []
        for poisson in (False, True):
            path = tmp / f"trace-{'poisson' if poisson else 'fixed'}.jsonl"
            write_trace(path, trace_s, poisson)
            row = trace_level(tmp, path, f"{'Poisson' if poisson else 'fixed'} gaps, {trace_s:g} s")
            traces.append(row)
            print(json.dumps(row), file=sys.stderr)
    block = render(turns, traces, args.quick)
    print(block)
    if not args.no_write:
        write_section(START, END, block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
