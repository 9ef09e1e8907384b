"""``servecheck records RUN_DIR``: what a load run kept of its requests, and the JSONL export.

A run keeps its records as one ``records.parquet`` (records/parquet.py); ``--jsonl OUT`` writes them
as JSON lines, in send order, one line per request as the run's workers wrote them (for tools that
read JSONL). Exit codes: 0 done, 2 usage error (no run folder, no records in it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from servecheck.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a load run's folder (reports/<run-id>)")
    parser.add_argument(
        "--jsonl",
        metavar="OUT",
        default=None,
        help="write the records as JSON lines to OUT, in send order (default: only describe them)",
    )


def run(args: argparse.Namespace) -> int:
    from servecheck.records.parquet import describe_records, export_jsonl, records_file

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run folder")
    path = records_file(run_dir)
    if path is None:
        raise UsageError(
            f"{run_dir}: no records.parquet or records.jsonl (was it run with --records none?)"
        )
    info = describe_records(path)
    print(
        f"{path}: {info['rows']} requests, {info['bytes']} bytes "
        f"({info['bytes_per_request']} per request)"
    )
    if args.jsonl:
        if path.suffix != ".parquet":
            raise UsageError(f"{path} is JSONL already")
        n = export_jsonl(path, args.jsonl)
        print(f"wrote {n} lines to {args.jsonl}")
    return 0
