"""Where does a request's CPU go inside the Locust child? Thread CPU per step, us per request.

Issue 46 asks for the generator's per-request cost before and after each change, step by step.
A sampler cannot say it well (the native reader thread's CPU lands on whatever the main thread
runs), so this times the steps themselves: each tree's ``servecheck load`` runs the calibration
server's closed loop (``benchmarks/_truth.py``: TTFT 100 ms, a token every 10 ms, 64 tokens;
server on core 1, the command and Locust on core 0, as ``bench_tree``) with a scenario that wraps
the per-request steps in the Locust child (the record keeper, the reactor's pass or the native
lane's hand-off and the response parser inside it, filling the record, Locust's request event,
the send, the garbage collector after the run's start, whose one collection is a fixed cost)
with ``time.thread_time_ns`` before and after: the main thread's own CPU in each, not the reader
thread's, not another greenlet's (none of the wrapped steps yields). The process's whole CPU and
the reader thread's (``generator.reader.thread.cpu_s``) come from summary.json.

    python benchmarks/bench_steps.py --trees /tmp/base,. --users 256 --duration 20 --runs 2

Trees run interleaved, each with its own code (``PYTHONPATH``); medians over the runs. The
wrappers cost about a microsecond per call, so a step's figure carries that much of them. Nothing
is written to docs/: quote the table (docs/benchmarks.md, the tree-cost section's breakdown).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _truth import start_truth_server, stop, truth_targets  # noqa: E402
from bench_load import ITL_S, TOKENS, TTFT_S  # noqa: E402

PATCH = '''"""Thread CPU per step of the Locust child (bench_steps.py), dumped at exit."""
import atexit, gc, json, os, time
from servecheck.load.generator import keeper, locust_user, reactor, wire
try:  # the native lane's hand-off (a tree before it has none)
    from servecheck.load.generator import lane
except ImportError:
    lane = None

ACC, CNT = {}, {}
_t = time.thread_time_ns


def wrap(owner, name, label):
    f = getattr(owner, name)

    def timed(*a, **k):
        s = _t()
        try:
            return f(*a, **k)
        finally:
            ACC[label] = ACC.get(label, 0) + _t() - s
            CNT[label] = CNT.get(label, 0) + 1

    setattr(owner, name, timed)


wrap(keeper.RecordKeeper, "keep", "keep: aggregate, records line")
wrap(reactor.StreamReactor, "_drain", "reactor pass (_drain)")
wrap(reactor.StreamReactor, "_sendall", "send the request (_sendall)")
wrap(reactor.StreamReactor, "_done", "hand-off to the request (_done)")
for m, what in (("feed", "parse a read (feed)"), ("tokens", "take a token batch (tokens)"),
                ("_head", "parse the response head (_head)")):
    wrap(wire.ResponseParser, m, "  of which " + what)
wrap(reactor._ThreadReads, "take", "  of which take from the thread")
if lane is not None:
    wrap(lane.Lane, "take", "lane hand-off (Lane.take)")
wrap(locust_user._Controller, "_record", "fill the record (_record)")
wrap(locust_user._Controller, "_fire", "Locust request event (_fire)")
wrap(wire.Origin, "request", "request head (Origin.request)")
_gc = [0]


def _collect(phase, info):
    if phase == "start":
        _gc[0] = _t()
    else:
        ACC["garbage collector"] = ACC.get("garbage collector", 0) + _t() - _gc[0]


gc.callbacks.append(_collect)
_begin = locust_user._Controller.begin


def _begun(self):
    """The run's start collects once on purpose (then freezes): a fixed cost, not a request's."""
    _begin(self)
    ACC.pop("garbage collector", None)


locust_user._Controller.begin = _begun


def _dump():
    with open(os.environ["BENCH_STEPS_OUT"], "w") as f:
        json.dump({"ns": ACC, "calls": CNT, "main_thread_s": time.thread_time()}, f)


atexit.register(_dump)
'''

SCENARIO = '''"""Benchmark scenario: 64-token answers to a short prompt, its steps timed."""
import locust  # noqa: F401,I001
import bench_steps_patch  # noqa: F401
from servecheck.load.generator.locust_user import LLMUser, scenario_shape
from servecheck.load.workload.prompts import PromptSpec


class BenchUser(LLMUser):
    scenario = "bench"
    mix = [PromptSpec(prompt_tokens=32, output_tokens=64)]


LoadShape = scenario_shape()
'''
KEEP = "keep: aggregate, records line"
ORDER = (  # the table's rows: the whole, then each step, a step's parts under it
    "Locust process, first to last request",
    "  of which the reader thread",
    "  of which the main thread",
    KEEP,
    "reactor pass (_drain)",
    "lane hand-off (Lane.take)",
    "  of which parse a read (feed)",
    "  of which parse the response head (_head)",
    "  of which take a token batch (tokens)",
    "  of which take from the thread",
    "fill the record (_record)",
    "Locust request event (_fire)",
    "send the request (_sendall)",
    "hand-off to the request (_done)",
    "request head (Origin.request)",
    "garbage collector",
)


def one(tree: Path, tmp: Path, base: str, users: int, duration: float) -> dict[str, Any]:
    """One run of ``tree``: us per request per step, the process's and the reader's."""
    out = tmp / f"steps-{time.monotonic_ns()}.json"
    run_id = f"s{time.monotonic_ns()}"
    cmd = [
        "taskset", "-c", "0", sys.executable, "-m", "servecheck", "load",
        "--targets-file", str(truth_targets(tmp, base)), "--target", "bench",
        "--out", str(tmp / "reports"), "--run-id", run_id, "--scenario", str(tmp / "scenario.py"),
        "--users", str(users), "--duration", f"{duration:g}s", "--no-tokenize", "--cpus", "0",
        "--allow-lag", "--quiet",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{tree}:{tmp}", "BENCH_STEPS_OUT": str(out)}
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    if not out.exists():
        raise RuntimeError(
            f"{tree}: exited {done.returncode} without its steps: {done.stderr[-800:]}"
        )
    d = json.loads(out.read_text())
    gen = json.loads((tmp / "reports" / run_id / "summary.json").read_text())["generator"]
    n = max(1, d["calls"].get(KEEP, 0))
    reader = ((gen.get("reader") or {}).get("thread") or {}).get("cpu_s") or 0.0
    row = {k: v / n / 1000.0 for k, v in d["ns"].items()}
    row["Locust process, first to last request"] = float(gen["cpu_s"]) / n * 1e6
    row["  of which the reader thread"] = float(reader) / n * 1e6
    row["  of which the main thread"] = (float(gen["cpu_s"]) - float(reader)) / n * 1e6
    return {"requests": n, "us": row}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", default=str(ROOT), help="comma-separated checkouts (default: this)")
    ap.add_argument("--users", type=int, default=256)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-steps-"))
    (tmp / "bench_steps_patch.py").write_text(PATCH, encoding="utf-8")
    (tmp / "scenario.py").write_text(SCENARIO, encoding="utf-8")
    rows: dict[Path, list[dict[str, Any]]] = {t: [] for t in trees}
    proc, base = start_truth_server(tmp, TTFT_S, ITL_S, TOKENS, cpu="1")
    try:
        for _ in range(args.runs):
            for tree in trees:
                load = os.getloadavg()[0]
                r = one(tree, tmp, base, args.users, args.duration)
                rows[tree].append(r)
                print(json.dumps({"tree": str(tree), "loadavg": load, **r}), flush=True)
    finally:
        stop(proc)
    seen = {k for rs in rows.values() for r in rs for k in r["us"]}
    names = [k for k in ORDER if k in seen] + sorted(seen - set(ORDER))
    print(
        "\n| step (us per request, main thread CPU) | " + " | ".join(t.name for t in trees) + " |"
    )
    print("| --- |" + " --- |" * len(trees))
    for k in names:
        cells = [statistics.median(r["us"].get(k, 0.0) for r in rows[t]) for t in trees]
        name = k.replace("  of which ", "- of which ")
        print(f"| {name} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
