"""Wall time of the full conformance catalogue against the embedded reference server.

Runs ``servecheck check`` (which starts the reference server, runs every suite under
``-n auto`` and writes its report) several times and writes the median and spread to the
``suite`` section of docs/benchmarks.md. Goal from the issue: under 30 s on a 2-core machine.

    python benchmarks/bench_suite_time.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(workers: str) -> tuple[float, dict[str, int]]:
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "servecheck",
                "check",
                "-n",
                workers,
                "--out",
                out,
                "--run-id",
                "bench",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        wall = time.perf_counter() - t0
        summary = Path(out) / "bench" / "summary.json"
        counts = json.loads(summary.read_text())["counts"] if summary.exists() else {}
        if proc.returncode != 0:
            print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
        return wall, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for workers in ("auto", "0"):
        walls = []
        counts: dict[str, int] = {}
        for _ in range(args.repeats):
            wall, counts = one_run(workers)
            walls.append(wall)
            print(f"-n {workers}: {wall:.1f} s {counts}", flush=True)
        rows.append((workers, statistics.median(walls), min(walls), max(walls), counts))
    block = [
        "<!-- suite:start -->",
        "## Conformance catalogue wall time (reference server)",
        "",
        f"`python benchmarks/bench_suite_time.py`, {time.strftime('%Y-%m-%d')}, 2-core machine: `servecheck check` end to end",
        "(embedded reference server start, pytest collection, every check, report files), median of",
        f"{args.repeats} runs. Goal: under 30 s with `-n auto`.",
        "",
        "| workers | median (s) | min (s) | max (s) | outcomes |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for workers, med, lo, hi, counts in rows:
        block.append(
            f"| `-n {workers}` | {med:.1f} | {lo:.1f} | {hi:.1f} | {', '.join(f'{v} {k}' for k, v in sorted(counts.items()))} |"
        )
    block += ["", "<!-- suite:end -->"]
    path = ROOT / "docs" / "benchmarks.md"
    text = path.read_text()
    new = "\n".join(block)
    if "<!-- suite:start -->" in text:
        head, rest = text.split("<!-- suite:start -->", 1)
        text = head + new + rest.split("<!-- suite:end -->", 1)[1]
    else:
        text = text.rstrip() + "\n\n" + new + "\n"
    path.write_text(text)


if __name__ == "__main__":
    main()
