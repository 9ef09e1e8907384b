"""``servecheck load``: a bounded Locust load test with exact percentiles and SLO verdicts.

Parse the options, call :func:`servecheck.load.run.run_load`, print the summary. Exit code: 0
when every SLO held, 1 when one was breached (or the generator fell behind, or nothing
finished), 2 for a usage error. The run itself (Locust subprocesses, records, summary schema)
is in ``servecheck/load/run.py``.
"""

from __future__ import annotations

import argparse
import os
import sys

from servecheck.commands.load.spec import spec_from_options

# Re-exported: callers wrote ``from servecheck.commands.load import LoadSpec, run_load`` before
# the run moved into the library; new code imports servecheck.load.run.
from servecheck.commands.options import add_dataset_arguments, add_target_arguments
from servecheck.errors import UsageError
from servecheck.load.run import (
    LoadResult,
    LoadSpec,
    format_summary,
    read_plan,
    run_load,
    summarise,
)
from servecheck.load.trace import FORMATS as TRACE_FORMATS
from servecheck.signals import Interrupted


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck load`` (each also readable from a SERVECHECK_LOAD_* variable)."""
    env = os.environ.get
    g = parser.add_argument_group("load")
    add_target_arguments(g, target="one", target_default="none: required")
    g.add_argument(
        "--plan",
        metavar="NAME|FILE",
        default=env("SERVECHECK_LOAD_PLAN"),
        help="load plan from loadtests/ (e.g. smoke); options override it",
    )
    g.add_argument(
        "--scenario",
        metavar="NAME",
        default=None,
        help="scenario in scenarios/ or a locustfile path (default: chat)",
    )
    g.add_argument(
        "--users", type=int, metavar="N", default=None, help="closed loop: N concurrent users"
    )
    g.add_argument(
        "--rate",
        metavar="R/s",
        default=None,
        help="open loop: R requests per second (5/s, 300/min)",
    )
    g.add_argument(
        "--poisson",
        action="store_true",
        default=None,
        help="open loop with Poisson (exponential) gaps instead of a fixed rate",
    )
    g.add_argument(
        "--seed",
        type=int,
        metavar="N",
        default=None,
        help="seed for prompts and Poisson gaps (default: 0)",
    )
    g.add_argument(
        "--duration",
        metavar="TIME",
        default=env("SERVECHECK_LOAD_DURATION"),
        help="how long to send (30s, 5m); env SERVECHECK_LOAD_DURATION",
    )
    g.add_argument(
        "--max-requests", type=int, metavar="N", default=None, help="stop after N requests"
    )
    g.add_argument(
        "--slo",
        action="append",
        metavar="EXPR",
        default=[],
        help="SLO such as ttft_p95<=500ms (repeatable; the target's slo list is added)",
    )
    g.add_argument(
        "--error-budget",
        metavar="PCT",
        default=env("SERVECHECK_LOAD_ERROR_BUDGET"),
        help="fail the run when more than PCT of the requests failed (default: 1%%; 'none' for "
        "no budget; an error_rate SLO replaces it); env SERVECHECK_LOAD_ERROR_BUDGET",
    )
    g.add_argument(
        "--model",
        metavar="NAME",
        default=None,
        help="model (default: the target's first, else GET /models)",
    )
    g.add_argument(
        "--processes",
        type=int,
        metavar="N",
        default=None,
        help="Locust --processes N: N worker processes on this machine",
    )
    g.add_argument(
        "--master",
        action="store_true",
        help="distributed: run the Locust master and merge the workers' records",
    )
    g.add_argument("--worker", action="store_true", help="distributed: run one Locust worker")
    g.add_argument(
        "--expect-workers",
        type=int,
        metavar="N",
        default=1,
        help="distributed: number of workers (give it to the master and to each worker)",
    )
    g.add_argument(
        "--master-host",
        metavar="HOST",
        default="127.0.0.1",
        help="distributed: master address for a worker (default: %(default)s)",
    )
    g.add_argument(
        "--master-port",
        type=int,
        metavar="PORT",
        default=5557,
        help="distributed: master port (default: %(default)s)",
    )
    g.add_argument(
        "--run-id",
        metavar="ID",
        default=None,
        help="run directory name (give master and workers the same one)",
    )
    g.add_argument(
        "--max-lag",
        metavar="TIME",
        default="25ms",
        help="flag the run when schedule or generator lag p99 exceeds this (default: %(default)s)",
    )
    g.add_argument(
        "--allow-lag",
        action="store_true",
        help="report a lagging generator as a warning, not a failed run",
    )
    g.add_argument(
        "--down-after",
        metavar="N,WINDOW",
        default=None,
        help="stop the run and fail it when N consecutive requests over WINDOW failed to connect "
        "(the target went down mid-run; an HTTP error is not down); 'off' never stops "
        "(default: 10,5s)",
    )
    g.add_argument(
        "--honour-retry-after",
        metavar="MAX",
        default=None,
        help="closed loop: after a rate-limited answer (429, 503 with Retry-After) a user waits "
        "the Retry-After it was given, at most MAX (e.g. 10s); default: no wait",
    )
    g.add_argument(
        "--max-inflight",
        type=int,
        metavar="N",
        default=None,
        help="open loop: cap on requests in flight per process (default: 1024)",
    )
    g.add_argument(
        "--no-tokenize",
        action="store_true",
        help="size prompts with the chars-per-token estimate even when the target has /tokenize",
    )
    g.add_argument(
        "--cpus",
        metavar="LIST",
        default=None,
        help="pin the generator to these CPUs (taskset -c LIST)",
    )
    g.add_argument(
        "--trace",
        metavar="FILE",
        default=None,
        help="replay a trace file on its schedule (Mooncake, BurstGPT, Azure or servecheck JSONL)",
    )
    g.add_argument(
        "--trace-format",
        choices=TRACE_FORMATS,
        default="auto",
        help="trace file format (default: detected from the file)",
    )
    g.add_argument(
        "--speed",
        type=float,
        metavar="F",
        default=None,
        help="trace replay speed factor: 2 sends twice as fast (default: 1)",
    )
    add_dataset_arguments(g)
    g.add_argument(
        "--warmup",
        metavar="TIME",
        default=None,
        help="send this long first (on top of --duration), recorded but kept out of the figures and SLOs",
    )
    g.add_argument(
        "--warmup-requests",
        type=int,
        metavar="N",
        default=None,
        help="the first N requests (on top of --max-requests) are warm-up",
    )
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
    """``servecheck load``: run, print the summary, exit 0 (SLOs held) / 1 (breach) / 2 (usage).
    ``--target reference`` starts the embedded reference server for the run, as check, soak,
    accept and capacity do (unless ``SERVECHECK_REF_URL`` names a running one)."""
    from servecheck.report.workflow import reference_env

    spec = spec_from_args(args)  # every usage error before a server starts
    # Distributed runs share one target: each process starting its own would split it.
    with reference_env([args.target], enabled=not (args.master or args.worker)) as started:
        if started:  # its address is known now
            spec = spec_from_args(args)
        return _run(spec)


def _run(spec: LoadSpec) -> int:
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
