"""The record keeper's cost per finished request (issue 46): ``RecordKeeper.keep`` and its checkpoint.

Every finished request goes through ``RecordKeeper.keep`` on the Locust process's main thread:
its line (``--records all``), the aggregate's tallies, slices, reservoirs. This bench builds
records as a run makes them (a streamed chat answer of 64 tokens: 63 ITLs of about 10 ms with
jitter, the TTFT decomposition's stamps, the echoed request id, the body's id, a finish reason)
and times ``keep()`` over all of them in each ``--records`` mode, then the checkpoint
(``Aggregate.write``, every 10 s of a run), in a fresh process per tree. "before" is another
revision of ``servecheck/`` (``git archive``, its C extensions built beside it; by default the
last one before the keeper's short paths), "after" this checkout; the two alternate, round after
round, and each figure is the median of the rounds.
Every round also checks that both trees wrote the same records lines and the same aggregate.

    python benchmarks/bench_keeper.py                  # the keeper before issue 46 against
                                                       # this checkout; writes docs
    python benchmarks/bench_keeper.py --quick          # fewer records and rounds, no docs
    python benchmarks/bench_keeper.py --before HEAD~3  # another baseline

Writes ``docs/benchmarks.md`` between the ``keeper`` markers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from _docs import write_section  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- keeper:start -->", "<!-- keeper:end -->"
MODES = ("all", "none", "sample:1000")
# The keeper before issue 46's short paths: a revision, not a branch, so that the figures stay
# "before and after" once this work is on main.
BEFORE = "9dd2a50691ca199c0afd0e929fa9b83365965036"

CHILD = r"""
import hashlib, json, os, random, statistics, sys, tempfile, time
from servecheck.analysis.aggregate import Rule
from servecheck.load.generator.keeper import RecordKeeper
from servecheck.records.record import RequestRecord

n, modes = int(sys.argv[1]), sys.argv[2].split(",")

def records(n, seed=1, worker="w0"):
    rng = random.Random(seed)
    t = 1_765_000_000.0
    out = []
    for seq in range(1, n + 1):
        t += rng.uniform(0.001, 0.004)
        itls = [max(1e-5, rng.gauss(0.010, 0.0015)) for _ in range(63)]
        ttft = rng.lognormvariate(-3.5, 0.3)
        e2e = ttft + sum(itls) + rng.uniform(0.0001, 0.0005)
        rid = f"sc-{worker}-{seq:08x}"
        rec = RequestRecord("reference", "chat", worker, seq, t, t + rng.uniform(0, 0.0004),
                            request_id=rid)
        rec.t_done, rec.ttft, rec.e2e, rec.itls = rec.t_sent + e2e, ttft, e2e, itls
        rec.output_tokens, rec.output_tokens_client, rec.prompt_tokens = 64, 64, 27
        rec.tpot, rec.status, rec.ttfa = (e2e - ttft) / 63, 200, ttft
        rec.new_conn = seq <= 64
        stamps = {"written": round(rng.uniform(0.02, 0.08), 3),
                  "headers": round(ttft * 400.0, 3), "body": round(ttft * 900.0, 3),
                  "last_token": round((e2e - 0.0002) * 1000.0, 3)}
        rec.stamps = {"connect": 0.12, **stamps} if rec.new_conn else stamps
        rec.request_id_echo, rec.response_id = rid, f"chatcmpl-{rid}"
        rec.finish_reason = "length"
        out.append(rec)
    return out

recs = records(n)
rule = Rule(mode="closed", users=64, duration_s=120.0, slos=("ttft_p95<=500ms",))
out = {}
for mode in modes:
    d = tempfile.mkdtemp()
    k = RecordKeeper(d, "w0", mode, rule, seed=1)
    k.begin(recs[0].t_sent)
    keep = k.keep
    t0 = time.perf_counter()
    for r in recs:
        keep(r)
    took = time.perf_counter() - t0
    cps = []
    for _ in range(5):
        t1 = time.perf_counter()
        p = k.checkpoint()
        cps.append(time.perf_counter() - t1)
    k.close()
    lines = os.path.join(d, "records-w0.jsonl")
    digest = hashlib.sha256(open(lines, "rb").read()).hexdigest() if os.path.exists(lines) else ""
    state = json.loads(p.read_text())
    out[mode] = {"keep_us": took / n * 1e6, "checkpoint_ms": statistics.median(cps) * 1e3,
                 "lines": digest,
                 "state": hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()}
print(json.dumps(out))
"""


def baseline(rev: str, into: Path) -> Path:
    """``servecheck/`` and its build hook at ``rev``, with its C extensions built in place."""
    archive = into / "before.tar"
    with open(archive, "wb") as fh:
        subprocess.run(
            ["git", "archive", rev, "servecheck", "setup.py", "pyproject.toml", "README.md"],
            cwd=ROOT,
            stdout=fh,
            check=True,
        )
    tree = into / "before"
    tree.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    env = {**os.environ, "SERVECHECK_BUILD_NATIVE": "1"}
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tree,
        env=env,
        check=True,
        capture_output=True,
    )
    return tree


def run_child(tree: Path, n: int) -> dict[str, dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(n), ",".join(MODES)],
        cwd=tree,  # `-c` puts the working folder first on sys.path: the tree's own servecheck
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return json.loads(out.stdout)


def measure(rev: str, n: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    got: dict[str, dict[str, list[float]]] = {
        side: {f"{m}/{k}": [] for m in MODES for k in ("keep_us", "checkpoint_ms")}
        for side in ("before", "after")
    }
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": baseline(rev, Path(tmp)), "after": ROOT}
        for i in range(rounds):
            order = ("before", "after") if i % 2 == 0 else ("after", "before")
            seen = {side: run_child(trees[side], n) for side in order}
            for mode in MODES:
                a, b = seen["before"][mode], seen["after"][mode]
                if (a["lines"], a["state"]) != (b["lines"], b["state"]):
                    raise SystemExit(f"{mode}: the trees wrote different lines or aggregates")
            for side, res in seen.items():
                for mode in MODES:
                    for k in ("keep_us", "checkpoint_ms"):
                        got[side][f"{mode}/{k}"].append(float(res[mode][k]))  # type: ignore[arg-type]
            print(f"round {i + 1}/{rounds} done", file=sys.stderr)
    return got


def table(got: dict[str, dict[str, list[float]]]) -> list[str]:
    rows = [
        "| mode | before: keep() (us) | after: keep() (us) | ratio | before: checkpoint (ms) "
        "| after: checkpoint (ms) | ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for mode in MODES:
        cells = [f"`{mode}`"]
        for k, fmt in (("keep_us", "{:.1f}"), ("checkpoint_ms", "{:.1f}")):
            b = statistics.median(got["before"][f"{mode}/{k}"])
            a = statistics.median(got["after"][f"{mode}/{k}"])
            cells += [fmt.format(b), fmt.format(a), f"{b / a:.2f}x"]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def reading(got: dict[str, dict[str, list[float]]]) -> str:
    """What the table says, with its own ratios (CPU figures move 2x between machines)."""

    def ratio(mode: str, k: str = "keep_us") -> str:
        before = statistics.median(got["before"][f"{mode}/{k}"])
        return f"{before / statistics.median(got['after'][f'{mode}/{k}']):.2f}x"

    return (
        f"Reading: `keep()` is {ratio('all')} cheaper with every line written, {ratio('none')} "
        f"with none and {ratio('sample:1000')} with a sample; a checkpoint "
        f"{ratio('all', 'checkpoint_ms')} (the same bytes). The line and the dict are one C call "
        "(`records/_line.c`: the rounded timestamps' and the ITLs' text were two thirds of the "
        "line), and a plain answer takes `Aggregate.add_plain`, its ITLs into their histograms "
        "in one C call and its reservoirs fed in C from the same `random.Random` draws. What "
        "is left of `none` is the aggregate's own Python work (the TTFT decomposition, the "
        "tallies, the slices, the goodput predicate: about 2 us each) and the reservoirs' "
        "replacements, which must draw from Python's generator to stay identical; a young run "
        "replaces more (here a few values a request at 20k records), an hour-long one fewer."
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--before", default=BEFORE, help=f"the baseline revision (default: {BEFORE[:9]})"
    )
    ap.add_argument("--records", type=int, default=20_000, help="records per mode (20000)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (5)")
    ap.add_argument("--quick", action="store_true", help="3000 records, 2 rounds, no docs")
    args = ap.parse_args()
    n, rounds = (3000, 2) if args.quick else (args.records, args.rounds)
    got = measure(args.before, n, rounds)
    rows = table(got)
    print("\n".join(rows))
    if args.quick:
        return
    today = datetime.date.today().isoformat()
    block = "\n".join(
        [
            START,
            "## Record keeper cost per request (issue 46)",
            "",
            f"`python benchmarks/bench_keeper.py`, {today}: `RecordKeeper.keep()` per finished "
            f"request over {n} records in each `--records` mode (a streamed chat answer of 64 "
            "tokens: 63 ITLs of ~10 ms, stamps, echoed ids; a goodput SLO), and a checkpoint "
            f"(`Aggregate.write`, the median of five) after them; `{args.before[:9]}` (before) "
            f"against this checkout, each in a fresh process, alternating, medians of {rounds} "
            "rounds; both wrote the same lines and aggregate in every round. This machine has 2 "
            "CPUs shared with other jobs: its figures move between runs, their ratios less.",
            "",
            *rows,
            "",
            reading(got),
            END,
            "",
        ]
    )
    write_section(START, END, block)


if __name__ == "__main__":
    main()
