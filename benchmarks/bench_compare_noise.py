"""The false-alarm rate of ``servecheck compare``: pairs of identical short load runs on the
reference server, each pair compared at the default settings by one or more checkouts.

    python benchmarks/bench_compare_noise.py make /tmp/noise --pairs 20
    python benchmarks/bench_compare_noise.py judge /tmp/noise before=../servecheck-old after=.

``make`` runs ``servecheck load --target reference`` twice back to back per pair (the same
plan, seed and server settings: a 20 ms TTFT and 5 ms between tokens, 4 users, 10 s, about
300 requests a run) into ``DIR/pair-NN/{baseline,current}``. ``judge`` compares every pair
with each named checkout's code (``PYTHONPATH`` set to it, this interpreter's packages) and
prints a line a pair and the share of pairs called a regression, per checkout; the pairs are
the same for every checkout, so the shares differ only by the code. ``--json FILE`` keeps the
rows. Nothing is written to docs/: quote the shares, with the date and the machine.

Both sides of a pair measure one unchanged server, so every REGRESSION here is a false alarm,
whatever the machine's noise did between the two runs (that noise is what a nightly job on a
shared runner sees too).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LOAD = ["load", "--target", "ref-noise", "--users", "4", "--duration", "10s"]
SERVER = ["reference-server", "--port", "0", "--ttft-ms", "20", "--itl-ms", "5"]
TARGETS = """targets:
  - name: ref-noise
    base_url: http://127.0.0.1:{port}/v1
    engine: reference
    models: [ref-tiny]
    context_length: 512
    metrics_url: http://127.0.0.1:{port}/metrics
    timeout_s: 20
"""


def _run_dir(out: Path) -> Path:
    """The run folder ``servecheck load --out OUT`` made (OUT/<run-id>)."""
    return next(p for p in sorted(out.iterdir()) if (p / "summary.json").exists())


def make(root: Path, pairs: int, tree: Path) -> int:
    """One reference server for all the pairs (as a nightly job sees one deployment)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    ready = root / "server.port"
    ready.unlink(missing_ok=True)
    server = subprocess.Popen(
        [sys.executable, "-m", "servecheck", *SERVER, "--ready-file", str(ready)],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() or not ready.read_text().strip():
            if time.monotonic() > deadline or server.poll() is not None:
                print("the reference server did not start", file=sys.stderr)
                return 1
            time.sleep(0.2)
        targets = root / "targets.yaml"
        targets.write_text(TARGETS.format(port=int(ready.read_text().strip())), encoding="utf-8")
        return _pairs(root, pairs, tree, env, targets)
    finally:
        server.terminate()
        server.wait(timeout=30)


def _pairs(root: Path, pairs: int, tree: Path, env: dict[str, str], targets: Path) -> int:
    for i in range(pairs):
        pair = root / f"pair-{i:02d}"
        for side in ("baseline", "current"):
            if (pair / side).exists():
                continue
            started = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "-m", "servecheck", *LOAD, "--targets-file", str(targets)]
                + ["--out", str(pair / side)],
                cwd=tree,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
            summary = json.loads((_run_dir(pair / side) / "summary.json").read_text())
            print(
                f"{pair.name} {side}: rc {proc.returncode}, {summary['requests']['total']} "
                f"requests, verdict {summary['verdict']}, "
                f"{time.monotonic() - started:.0f} s",
                flush=True,
            )
    return 0


def judge_pair(tree: Path, base: Path, cur: Path, name: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "servecheck", "compare", str(base), str(cur)]
            + ["--json", "--out", tmp],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    doc = json.loads(proc.stdout)
    metrics = doc.get("metrics") or []
    thin = [m["name"] for m in metrics if m.get("status") == "inconclusive"]
    return {
        "pair": name,
        "rc": proc.returncode,
        "verdict": doc.get("verdict"),
        "regressions": doc.get("regressions") or [],
        "inconclusive": thin,
        "requests": [
            json.loads((d / "summary.json").read_text())["requests"]["total"] for d in (base, cur)
        ],
        "run_verdicts": [
            json.loads((d / "summary.json").read_text())["verdict"] for d in (base, cur)
        ],
    }


def _couples(root: Path, chain: bool) -> list[tuple[str, Path, Path]]:
    """Each pair's baseline and current run; with ``chain`` also each pair's current run and the
    next pair's baseline, which ran right after it (back to back as well)."""
    pairs = sorted(p for p in root.glob("pair-*") if (p / "current").exists())
    out = [(p.name, _run_dir(p / "baseline"), _run_dir(p / "current")) for p in pairs]
    if chain:
        out += [
            (f"{a.name}+{b.name}", _run_dir(a / "current"), _run_dir(b / "baseline"))
            for a, b in zip(pairs, pairs[1:], strict=False)
        ]
    return out


def judge(root: Path, trees: dict[str, Path], chain: bool = False) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    couples = _couples(root, chain)
    for label, tree in trees.items():
        flagged = 0
        for name, base, cur in couples:
            row = {"code": label, **judge_pair(tree, base, cur, name)}
            rows.append(row)
            flagged += row["verdict"] == "regression"
            print(
                f"{label} {row['pair']}: rc {row['rc']} {row['verdict']} "
                f"requests {row['requests']} runs {row['run_verdicts']} "
                f"regressions {','.join(row['regressions']) or '-'} "
                f"inconclusive {','.join(row['inconclusive']) or '-'}",
                flush=True,
            )
        print(f"{label}: {flagged} of {len(couples)} pairs called a regression", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    mk = sub.add_parser("make", help="run the pairs of identical loads")
    mk.add_argument("root", type=Path)
    mk.add_argument("--pairs", type=int, default=20)
    mk.add_argument("--tree", type=Path, default=Path.cwd(), help="checkout that runs the loads")
    jd = sub.add_parser("judge", help="compare every pair with each checkout's code")
    jd.add_argument("root", type=Path)
    jd.add_argument("trees", nargs="+", metavar="LABEL=TREE")
    jd.add_argument("--json", type=Path, default=None, help="write the rows here")
    jd.add_argument(
        "--chain",
        action="store_true",
        help="also compare each pair's current run with the next pair's baseline",
    )
    args = ap.parse_args()
    if args.step == "make":
        args.root.mkdir(parents=True, exist_ok=True)
        return make(args.root, args.pairs, args.tree.resolve())
    trees = {label: Path(tree).resolve() for label, tree in (t.split("=", 1) for t in args.trees)}
    rows = judge(args.root, trees, args.chain)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
