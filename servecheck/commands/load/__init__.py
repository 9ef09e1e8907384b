"""``servecheck load``: a bounded Locust load test with exact percentiles and SLO verdicts.

Parse the options, call :func:`servecheck.load.run.run_load`, print the summary. Exit code: 0
when every SLO held, 1 when one was breached (or the generator fell behind, or nothing
finished), 2 for a usage error. The run itself (Locust subprocesses, records, summary schema)
is in ``servecheck/load/run.py``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from servecheck.commands.load.arguments import FIELD_OPTIONS, add_arguments
from servecheck.commands.load.spec import spec_from_options
from servecheck.errors import SpecError, UsageError

# Re-exported: callers wrote ``from servecheck.commands.load import LoadSpec, run_load`` before
# the run moved into the library; new code imports servecheck.load.run and servecheck.load.spec.
from servecheck.load.run import (
    LoadResult,
    read_plan,
    run_load,
    summarise,
)
from servecheck.load.spec import LoadSpec
from servecheck.report.load_sections import format_summary
from servecheck.signals import Interrupted


def spec_from_args(args: argparse.Namespace) -> LoadSpec:
    """Build a :class:`LoadSpec` from CLI options layered over an optional load plan."""
    from servecheck.config.loader import load_targets

    plan = read_plan(args.plan)
    if not args.target:
        raise UsageError("--target is required (or set SERVECHECK_TARGET)")
    target = load_targets(args.targets_file).get(args.target)
    return spec_from_options(target, vars(args), plan)


def run(args: argparse.Namespace) -> int:
    """``servecheck load``: run, print the summary, exit 0 (SLOs held) / 1 (breach) / 2 (usage).
    ``--target reference`` starts the embedded reference server for the run, as check, soak,
    accept and capacity do (unless ``SERVECHECK_REF_URL`` names a running one)."""
    from servecheck.workflows.support import reference_env

    spec = spec_from_args(args)  # every usage error before a server starts
    repeat = _repeat(args, spec)
    # Distributed runs share one target: each process starting its own would split it.
    with reference_env([args.target], enabled=not (args.master or args.worker)) as started:
        if started:  # its address is known now
            spec = spec_from_args(args)
            repeat = _repeat(args, spec)
        return _run(spec) if repeat is None else _run_repeat(repeat)


def _repeat(args: argparse.Namespace, spec: LoadSpec) -> Any:
    """``--repeat N`` (or a plan's ``repeat``) as a checked RepeatSpec; None for one run."""
    from servecheck.workflows.repeat import RepeatSpec

    n = args.repeat if args.repeat is not None else read_plan(args.plan).get("repeat")
    if n is None or (n == 1 and args.repeat is not None):
        return None
    if isinstance(n, bool) or not isinstance(n, int):
        raise UsageError(f"repeat {n!r}: a whole number of runs")
    if n == 1:
        return None
    rs = RepeatSpec(spec, n)
    try:
        rs.validate()
    except SpecError as exc:
        raise UsageError(
            exc.render(
                {**FIELD_OPTIONS, "repeat": "--repeat", "master": "--master", "worker": "--worker"}
            )
        ) from None
    return rs


def _run_repeat(rs: Any) -> int:
    from servecheck import api
    from servecheck.workflows.repeat import format_repeat

    result = api.load_repeat(rs, on_log=lambda s: print(s, file=sys.stderr, flush=True))
    for one in result.runs:
        print(format_summary(one.summary, one.verdicts))
    print(format_repeat(result.summary))
    print(f"report: {result.run_dir} (run-01 ... run-{len(result.runs):02d}, summary.json)")
    return result.exit_code


def _run(spec: LoadSpec) -> int:
    from servecheck import api

    try:
        result = api.load(spec, on_log=lambda s: print(s, file=sys.stderr, flush=True))
    except Interrupted as stop:
        if stop.partial is None:
            raise
        result = stop.partial
        print(format_summary(result.summary, result.verdicts))
        print(
            f"report (partial): {result.run_dir} (summary.json, junit.xml, report.html); "
            f"records: {result.run_dir}/records*.jsonl"
        )
        return stop.exit_code
    if spec.role == "worker":
        print(f"worker done: records sent to the master, local copy in {result.run_dir / 'local'}")
        return 0
    print(format_summary(result.summary, result.verdicts))
    print(f"report: {result.run_dir}")
    if result.summary:
        # One page a person reads instead of the CSVs (plots inline), written by api.load.
        print(f"HTML: {result.run_dir / 'report.html'}")
    return result.exit_code


__all__ = [
    "FIELD_OPTIONS",
    "LoadResult",
    "LoadSpec",
    "add_arguments",
    "format_summary",
    "run",
    "run_load",
    "spec_from_args",
    "summarise",
]
