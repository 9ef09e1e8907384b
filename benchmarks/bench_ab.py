"""A/B the load generator between two checkouts on this machine: ``bench_load``'s accuracy level
(``one_level``) run in each tree in turn, interleaved, for a few rounds, so that both see the
same machine noise; prints each run and the medians with their ratio.

    python benchmarks/bench_ab.py ../servecheck-before . --levels 16,256 --rounds 3 --duration 10

Each tree runs with its own code (``PYTHONPATH`` set to it) and this interpreter's packages; a
tree without the native reader built uses the pure-Python one, so build both alike. Nothing is
written to docs/: quote the medians, and the calibration server's own lateness beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ONE = """
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, str(Path.cwd() / "benchmarks"))
import bench_load as b
tmp = Path(tempfile.mkdtemp(prefix="bench-ab-"))
scenario = tmp / "bench_scenario.py"
scenario.write_text(b.SCENARIO)
print(json.dumps(b.one_level(tmp, scenario, int(sys.argv[1]), float(sys.argv[2]))))
"""
KEYS = ("ttft_err_p50", "ttft_err_p99", "e2e_err_p99", "itl_p99", "tokens_per_s", "cpu_per_10k")


def one(tree: Path, users: int, duration: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", ONE, str(users), str(duration)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=duration * 10 + 120,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--levels", default="16,256")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0)
    args = ap.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs: list[tuple[str, int, dict[str, Any]]] = []
    for _ in range(args.rounds):
        for name, tree in trees.items():
            for users in (int(x) for x in args.levels.split(",")):
                row = one(tree, users, args.duration)
                runs.append((name, users, row))
                late = row["server"]["late_p99_ms"]
                print(name, users, {k: row[k] for k in KEYS}, f"server late p99 {late} ms")
    for users in (int(x) for x in args.levels.split(",")):
        med = {
            name: {
                k: statistics.median(r[k] for n, u, r in runs if n == name and u == users)
                for k in KEYS
            }
            for name in trees
        }
        ratio = {k: med["after"][k] / med["before"][k] if med["before"][k] else None for k in KEYS}
        print(
            f"{users} streams, medians: before {med['before']}\n  after {med['after']}\n  ratio {ratio}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
