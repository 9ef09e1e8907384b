"""``servecheck soak``: identical load cycles with telemetry, then leak and drain verdicts.

Parse the options into a :class:`~servecheck.load.soak.SoakPlan`, call
:func:`~servecheck.load.soak.run_soak` (the run, :mod:`servecheck.load.soak`), write the report
(:mod:`servecheck.report.soak_html`), print the verdict lines. Everything goes to
``<out>/<run-id>/``: ``records.jsonl``, ``telemetry/``, ``soak.json`` (keys in
docs/telemetry.md), ``soak.png``, ``report.html`` and ``summary.md``.

Exit codes: 0 no leak (and drained, with ``--abandon``); 1 a leak, not drained, or the primary
metric could not be judged; 2 a usage error.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from servecheck import api
from servecheck.commands.options import (
    add_run_arguments,
    add_target_arguments,
    checked_reference_args,
    out_dir,
    reference_targets_file,
)
from servecheck.commands.soak.plans import (
    FIELD_OPTIONS,
    plan_from_options,
    probe_plan_from_options,
    telemetry_overrides,
)
from servecheck.load.soak import (
    MAX_CYCLES,
    MIN_CYCLES,
    SoakPlan,
    _dur,
    run_probe_only,
    verdict_line,
)

if TYPE_CHECKING:
    from servecheck.config.model import Target


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck soak``."""
    add_target_arguments(parser, target="one", target_default="reference, the embedded server")
    g = parser.add_argument_group("schedule (required: --cycles, --cycle, --idle)")
    g.add_argument(
        "--cycles", type=int, metavar="K", help=f"identical load cycles ({MIN_CYCLES}-{MAX_CYCLES})"
    )
    g.add_argument("--cycle", metavar="TIME", help="load time per cycle, e.g. 10m")
    g.add_argument("--idle", metavar="TIME", help="idle (drain) time after each cycle, e.g. 2m")
    g.add_argument(
        "--baseline", metavar="TIME", help="idle baseline before the first cycle (default: --idle)"
    )
    g.add_argument(
        "--settle",
        metavar="TIME",
        help="part of each idle not measured, so queues empty first (default: half of --idle)",
    )
    g.add_argument(
        "--max-total",
        default="24h",
        metavar="TIME",
        help="refuse a plan longer than this (default: %(default)s)",
    )
    w = parser.add_argument_group("load")
    c = w.add_mutually_exclusive_group()
    c.add_argument(
        "--concurrency",
        "--users",
        dest="concurrency",
        type=int,
        default=4,
        metavar="N",
        help="streams in flight during a cycle (closed loop; default: %(default)s)",
    )
    w.add_argument(
        "--model", metavar="NAME", help="model (default: the target's first, else /v1/models)"
    )
    w.add_argument(
        "--max-tokens",
        type=int,
        default=128,
        metavar="N",
        help="max_tokens per request (default: %(default)s)",
    )
    w.add_argument(
        "--prompt-words",
        type=int,
        default=60,
        metavar="N",
        help="prompt length in words (default: %(default)s)",
    )
    w.add_argument(
        "--shared-prefix",
        type=int,
        default=0,
        metavar="WORDS",
        help="every request opens with one of 4 shared system prompts of WORDS words, so the "
        "engine's prefix cache is in play (a retained cache must read as retention, not a leak)",
    )
    a = parser.add_argument_group("abandoned streams")
    a.add_argument(
        "--abandon",
        action="store_true",
        help="drop a share of each cycle's streams mid-generation, then run the abandoned-stream probe and the drain check",
    )
    a.add_argument(
        "--probe-only",
        action="store_true",
        help="no load cycles: idle baseline (--baseline, default 5s), the abandoned-stream probe, the drain check",
    )
    a.add_argument(
        "--abandon-share",
        type=float,
        default=0.25,
        metavar="SHARE",
        help="share of streams dropped per cycle (default: %(default)s)",
    )
    a.add_argument(
        "--abandon-chunks",
        type=int,
        default=3,
        metavar="N",
        help="token chunks read before dropping (default: %(default)s)",
    )
    a.add_argument(
        "--probe-streams",
        type=int,
        default=8,
        metavar="N",
        help="concurrent streams per probe round (default: %(default)s)",
    )
    a.add_argument(
        "--probe-rounds",
        type=int,
        default=3,
        metavar="N",
        help="probe rounds (default: %(default)s)",
    )
    a.add_argument(
        "--drain-bound",
        default="30s",
        metavar="TIME",
        help="time allowed to drain after the probe (default: %(default)s)",
    )
    v = parser.add_argument_group("telemetry and verdicts")
    v.add_argument(
        "--tolerance",
        type=float,
        default=0.02,
        metavar="F",
        help="KV-usage tolerance above baseline (default: %(default)s)",
    )
    v.add_argument(
        "--rss-tolerance",
        default="256MiB",
        metavar="SIZE",
        help="RSS tolerance (default: %(default)s)",
    )
    v.add_argument(
        "--fail-on-retention",
        action="store_true",
        help="treat a flat KV plateau above baseline as a failure (when prefix caching is off)",
    )
    v.add_argument(
        "--interval",
        metavar="TIME",
        help="sampling interval (default: the target's telemetry.interval_s, else 0.5s)",
    )
    v.add_argument(
        "--pid", type=int, metavar="PID", help="engine process for RSS (default: telemetry.pid)"
    )
    v.add_argument(
        "--port",
        type=int,
        metavar="PORT",
        help="find the engine process by its port (default: telemetry.port, "
        "else a loopback target's port)",
    )
    v.add_argument("--no-rss", action="store_true", help="do not sample process RSS")
    v.add_argument("--no-nvml", action="store_true", help="do not sample NVML GPU memory")
    add_run_arguments(parser, "soak", "<target>")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def plan_from_args(args: argparse.Namespace, target: Target, model: str | None = None) -> SoakPlan:
    """Build and validate the plan from the options (``model`` resolved by the caller)."""
    return plan_from_options(vars(args), target, model)


def _probe_only(args: argparse.Namespace, target: Target) -> int:
    """``--probe-only``: baseline, abandoned-stream probe, drain verdict; ``soak.json`` with
    ``kind: "abandon-probe"`` and ``probe.png``. Exit 0 drained, 1 not, 2 usage."""
    from servecheck.load.abandon import discover_model
    from servecheck.report.soak_html import write_probe_report
    from servecheck.workflows.support import new_run_dir, say

    plan = probe_plan_from_options(vars(args), target)
    model = args.model or discover_model(target)
    run_dir = new_run_dir(out_dir(args), "probe", target.name, args.run_id)
    s = plan.settings
    say(
        f"servecheck soak --probe-only: target {target.name}, model {model}; {s.rounds} x {s.streams} "
        f"streams dropped after {s.chunks} chunk(s); drain bound {plan.bound_s:g}s; report {run_dir}"
    )
    overrides = telemetry_overrides(vars(args), target, plan.telemetry_plan(model))
    result = run_probe_only(target, model, plan, run_dir, telemetry_overrides=overrides, say=say)
    path = write_probe_report(result, say)
    print(verdict_line("drain", result.drain.status, result.drain.message))
    word = str(result.data["verdict"]).upper()
    for reason in result.failures:
        print(f"{word} {reason}")
    print(f"probe {word}: {path}")
    return result.exit_code


def run(args: argparse.Namespace) -> int:
    """Run the soak; print the verdict lines; exit 0 no leak, 1 leak / not drained, 2 usage."""
    from servecheck.config import load_targets
    from servecheck.load.abandon import discover_model
    from servecheck.workflows.support import new_run_dir, reference_env, say

    name = args.target or "reference"
    targets_file = reference_targets_file(args, asked=bool(args.target))
    with reference_env([name], extra_args=checked_reference_args(args.reference_arg)):
        target = load_targets(targets_file).get(name)
        if args.probe_only:
            return _probe_only(args, target)
        plan_from_args(args, target, "-")  # usage errors before any request
        plan = plan_from_args(args, target, args.model or discover_model(target))
        run_dir = new_run_dir(out_dir(args), "soak", name, args.run_id)
        say(
            f"servecheck soak: target {target.name} ({target.engine}), model {plan.model}; {plan.cycles} x "
            f"({_dur(plan.cycle_s)} load at {plan.concurrency} streams, {_dur(plan.idle_s)} idle)"
            f"{' with abandoned streams' if plan.abandon else ''}; about {_dur(plan.planned_s())}; report {run_dir}"
        )
        result = api.soak(
            target,
            plan,
            run_dir,
            telemetry_overrides=telemetry_overrides(vars(args), target, plan),
            progress=not args.no_progress and sys.stderr.isatty(),
            say=say,
        )
    for metric, v in result.leak.items():
        print(verdict_line(metric, v.status, v.message))
    if result.drain is not None:
        print(verdict_line("drain", result.drain.status, result.drain.message))
    word = str(result.data["verdict"]).upper()
    for reason in result.data["failures"]:
        print(f"{word} {reason}")
    print(f"soak {word}: {result.run_dir / 'report.html'}")
    return result.exit_code


__all__ = ["FIELD_OPTIONS", "add_arguments", "plan_from_args", "run", "verdict_line"]
