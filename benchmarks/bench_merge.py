"""Memory of summarising a long load run: merge the workers' records, then compute statistics.

A run writes one JSON line per request (with every ITL). An hour at 50 requests/s is 180k
records; loading them all as dicts costs ~5 KB each. ``merge_records`` keeps only an index
(send time and byte range per line) and ``compute_stats`` streams over the merged file, so the
peak should stay near the index size. This bench writes N synthetic records (64 ITLs each) into
two worker files and measures, each in a fresh process, the peak RSS of

* ``streaming``: ``merge_records`` + ``compute_stats(result.iter_records())`` (what ``servecheck
  load`` does), and
* ``load-all``: ``read_files`` of both files into a list, sort, ``compute_stats`` on the list (the
  earlier implementation), for comparison.

    python benchmarks/bench_merge.py                 # 20k, 100k, 200k records; writes docs
    python benchmarks/bench_merge.py --quick         # 5k records, no docs

Writes ``docs/benchmarks.md`` between the ``merge`` markers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _docs import write_section  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- merge:start -->", "<!-- merge:end -->"

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from servecheck.records.record import merge_records, read_files, worker_files
from servecheck.analysis.stats import compute_stats
run_dir, mode = Path(sys.argv[1]), sys.argv[2]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
if mode == "streaming":
    res = merge_records(run_dir)
    st = compute_stats(res.iter_records())
else:
    got = read_files(worker_files(run_dir))
    got.records.sort(key=lambda r: r["t_sent"])
    st = compute_stats(got.records)
wall = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"total": st.total, "peak_mib": peak / 1024, "base_mib": base / 1024, "wall_s": wall}))
"""


def write_records(run_dir: Path, n: int, seed: int = 1) -> int:
    rng = random.Random(seed)
    size = 0
    for w in range(2):
        path = run_dir / f"records-w{w}.jsonl"
        with open(path, "w", encoding="utf-8") as fh:
            t = 1_800_000_000.0 + w * 0.01
            for i in range(n // 2):
                t += rng.expovariate(25.0)
                itls = [round(0.01 + rng.random() * 0.002, 6) for _ in range(63)]
                rec = {
                    "target": "bench",
                    "scenario": "chat",
                    "worker": f"w{w}",
                    "seq": i + 1,
                    "t_intended": t,
                    "t_sent": t,
                    "t_done": t + 0.73,
                    "kind": "chat",
                    "status": 200,
                    "error": None,
                    "error_message": "",
                    "ttft": 0.1 + rng.random() * 0.01,
                    "itls": itls,
                    "tpot": 0.01,
                    "e2e": 0.73,
                    "output_tokens": 64,
                    "output_tokens_client": 64,
                    "prompt_tokens": 32,
                }
                fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
        size += path.stat().st_size
    return size


def measure(run_dir: Path, mode: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(run_dir), mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def render(rows: list[dict[str, float]]) -> str:
    lines = [
        START,
        "## Summarising a long run: memory of merge + statistics",
        "",
        f"`python benchmarks/bench_merge.py`, {time.strftime('%Y-%m-%d')}: synthetic records (64 ITLs each) in two"
        " worker files; peak RSS of a fresh process doing the summary (interpreter and imports included, shown as"
        " `base`).",
        "",
        "| records | files (MiB) | streaming peak (MiB) | load-all peak (MiB) | base (MiB) | streaming wall (s) | load-all wall (s) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']} | {r['file_mib']:.0f} | {r['streaming']['peak_mib']:.0f} | {r['load_all']['peak_mib']:.0f}"
            f" | {r['streaming']['base_mib']:.0f} | {r['streaming']['wall_s']:.1f} | {r['load_all']['wall_s']:.1f} |"
        )
    lines += [
        "",
        "Reading: the streaming summary's peak grows with the index (~300 bytes a record), the load-all peak"
        " with the records themselves; an hour at 50 requests/s is 180k records.",
        END,
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", default="20000,100000,200000")
    args = ap.parse_args()
    sizes = [5000] if args.quick else [int(x) for x in args.sizes.split(",")]
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-merge-") as d:
            run_dir = Path(d)
            size = write_records(run_dir, n)
            row = {
                "n": n,
                "file_mib": size / 2**20,
                "streaming": measure(run_dir, "streaming"),
                "load_all": measure(run_dir, "load-all"),
            }
            os.remove(run_dir / "records.jsonl")
        print(json.dumps(row), flush=True)
        rows.append(row)
    block = render(rows)
    print(block)
    if not args.quick:
        write_section(START, END, block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
