"""``python -m servecheck.commands.engine_matrix RUN...``: write docs/engines.md from real
conformance runs (the matrix itself is :mod:`servecheck.report.engine_matrix`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from servecheck.report.engine_matrix import render


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m servecheck.commands.engine_matrix",
        description="Write docs/engines.md from real conformance runs, one folder per target "
        "(results.jsonl + summary.json, as servecheck check writes them).",
    )
    parser.add_argument("runs", nargs="+", type=Path, help="run folders, one per target")
    parser.add_argument("--out", type=Path, default=Path("docs/engines.md"))
    parser.add_argument(
        "--notes",
        type=Path,
        default=Path("docs/engines-notes.json"),
        help="sections appended after the matrix (title -> markdown); skipped when absent",
    )
    args = parser.parse_args(argv)
    for run in args.runs:
        missing = [n for n in ("summary.json", "results.jsonl") if not (run / n).is_file()]
        if missing:
            parser.error(f"{run}: not a conformance run folder (no {' or '.join(missing)})")
    try:
        notes = json.loads(args.notes.read_text()) if args.notes.exists() else {}
    except json.JSONDecodeError as exc:
        parser.error(f"{args.notes}: not JSON ({exc})")
    args.out.write_text(render(args.runs, notes))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
