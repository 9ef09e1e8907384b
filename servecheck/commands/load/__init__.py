"""``servecheck load``: a bounded Locust load test with exact percentiles and SLO verdicts.

Parse the options, call :func:`servecheck.load.run.run_load`, print the summary. Exit code: 0
when every SLO held, 1 when one was breached (or the generator fell behind, or nothing
finished), 2 for a usage error. The run itself (Locust subprocesses, records, summary schema)
is in ``servecheck/load/run.py``.
"""

from __future__ import annotations

import argparse
import sys

from servecheck.commands.load.arguments import (
    add_distributed_arguments,
    add_guard_arguments,
    add_replay_arguments,
    add_workload_arguments,
)
from servecheck.commands.load.spec import spec_from_options

# Re-exported: callers wrote ``from servecheck.commands.load import LoadSpec, run_load`` before
# the run moved into the library; new code imports servecheck.load.run.
from servecheck.commands.options import add_target_arguments
from servecheck.errors import UsageError
from servecheck.load.run import (
    LoadResult,
    LoadSpec,
    format_summary,
    read_plan,
    run_load,
    summarise,
)
from servecheck.signals import Interrupted


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck load`` (each also readable from a SERVECHECK_LOAD_* variable)."""
    g = parser.add_argument_group("load")
    add_target_arguments(g, target="one", target_default="none: required")
    add_workload_arguments(g)
    add_distributed_arguments(g)
    add_guard_arguments(g)
    add_replay_arguments(g)
    g.add_argument("--quiet", action="store_true", help="no live progress")


def spec_from_args(args: argparse.Namespace) -> LoadSpec:
    """Build a :class:`LoadSpec` from CLI options layered over an optional load plan."""
    from servecheck.config.loader import load_targets

    plan = read_plan(args.plan)
    if not args.target:
        raise UsageError("--target is required (or set SERVECHECK_TARGET)")
    target = load_targets(args.targets_file).get(args.target)
    return spec_from_options(target, vars(args), plan)


def run(args: argparse.Namespace) -> int:
    """``servecheck load``: run, print the summary, exit 0 (SLOs held) / 1 (breach) / 2 (usage)."""
    spec = spec_from_args(args)
    from servecheck import api

    try:
        result = api.load(spec, on_log=lambda s: print(s, file=sys.stderr, flush=True))
    except Interrupted as stop:
        if stop.partial is None:
            raise
        result = stop.partial
        print(format_summary(result.summary, result.verdicts))
        print(f"report (partial): {result.run_dir}; records: {result.run_dir}/records*.jsonl")
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
    "LoadResult",
    "LoadSpec",
    "add_arguments",
    "format_summary",
    "run",
    "run_load",
    "spec_from_args",
    "summarise",
]
