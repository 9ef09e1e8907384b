"""``servecheck soak``: identical load cycles with telemetry, then leak and drain verdicts.

Parse the options into a :class:`~servecheck.load.soak.SoakPlan`, call
:func:`~servecheck.load.soak.run_soak` (the run, :mod:`servecheck.load.soak`), write the report
(:mod:`servecheck.report.soak_html`), print the verdict lines
(:mod:`servecheck.report.soak_text`). Everything goes to
``<out>/<run-id>/``: ``records.jsonl``, ``telemetry/``, ``soak.json`` (keys in
docs/telemetry.md), ``soak.png``, ``report.html``, ``summary.md`` and ``junit.xml``.

``--mix chat,errors,cancel`` makes the cycles take turns over members (``--cycles`` of each) and
names the member whose own cycles leak; a member the target cannot serve is a usage error.

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
from servecheck.commands.soak.arguments import (
    add_abandon_arguments,
    add_load_arguments,
    add_schedule_arguments,
    add_telemetry_arguments,
)
from servecheck.commands.soak.plans import (
    FIELD_OPTIONS,
    plan_from_options,
    probe_plan_from_options,
    telemetry_overrides,
)
from servecheck.load.soak import (
    SoakPlan,
    SoakResult,
    _dur,
    run_probe_only,
)
from servecheck.report.soak_text import member_lines, verdict_line
from servecheck.signals import Interrupted

if TYPE_CHECKING:
    from servecheck.config.model import Target


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck soak``."""
    add_target_arguments(parser, target="one", target_default="reference, the embedded server")
    add_schedule_arguments(parser)
    add_load_arguments(parser)
    add_abandon_arguments(parser)
    add_telemetry_arguments(parser)
    add_run_arguments(parser, "soak", "<target>")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def plan_from_args(args: argparse.Namespace, target: Target, model: str | None = None) -> SoakPlan:
    """Build and validate the plan from the options (``model`` resolved by the caller)."""
    return plan_from_options(vars(args), target, model)


def _probe_only(args: argparse.Namespace, target: Target) -> int:
    """``--probe-only``: baseline, abandoned-stream probe, drain verdict; ``soak.json`` with
    ``kind: "abandon-probe"`` and ``probe.png``. Exit 0 drained, 1 not, 2 usage."""
    from servecheck.probes.abandon import discover_model
    from servecheck.report.soak_html import write_probe_report
    from servecheck.workflows.support import new_run_dir, say, write_soak_junit

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
    write_soak_junit(run_dir, result.data)
    print(verdict_line("drain", result.drain.status, result.drain.message))
    word = str(result.data["verdict"]).upper()
    for reason in result.failures:
        print(f"{word} {reason}")
    print(f"probe {word}: {path}")
    return result.exit_code


def run(args: argparse.Namespace) -> int:
    """Run the soak; print the verdict lines; exit 0 no leak, 1 leak / not drained, 2 usage;
    interrupted, the partial verdicts and where the files are, exit 128 + the signal."""
    from servecheck.config import load_targets
    from servecheck.probes.abandon import discover_model
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
            f"servecheck soak: target {target.name} ({target.engine}), model {plan.model}; {plan.total_cycles} x "
            f"({_dur(plan.cycle_s)} load at {plan.concurrency} streams, {_dur(plan.idle_s)} idle)"
            f"{' with abandoned streams' if plan.abandon else ''}{_mix_text(plan)}; about {_dur(plan.planned_s())}; report {run_dir}"
        )
        try:
            result = api.soak(
                target,
                plan,
                run_dir,
                telemetry_overrides=telemetry_overrides(vars(args), target, plan),
                progress=not args.no_progress and sys.stderr.isatty(),
                say=say,
            )
        except Interrupted as stop:
            if stop.partial is None:
                raise
            _print_verdicts(stop.partial)
            print(
                f"report (partial): {run_dir} (soak.json, junit.xml, report.html); "
                f"records: {run_dir / 'records.jsonl'}; telemetry: {run_dir / 'telemetry'}"
            )
            return stop.exit_code
    _print_verdicts(result)
    print(f"soak {str(result.data['verdict']).upper()}: {result.run_dir / 'report.html'}")
    return result.exit_code


def _mix_text(plan: SoakPlan) -> str:
    """The mix in the opening line, where there is more than chat alone."""
    if len(plan.mix) == 1:
        return "" if plan.mix == ("chat",) else f"; member {plan.mix[0]}"
    return f"; members {', '.join(plan.mix)} in turn, {plan.cycles} cycles each"


def _print_verdicts(result: SoakResult) -> None:
    """The leak and drain verdict lines, then the run's verdict with each reason."""
    for metric, v in result.leak.items():
        print(verdict_line(metric, v.status, v.message))
    moved = {m for m, v in result.leak.items() if v.status in ("leak", "growth")}
    for line in member_lines(result.data.get("members") or [], moved):
        print(line)  # which member's cycles leak, beside the members whose cycles do not
    if result.drain is not None:
        print(verdict_line("drain", result.drain.status, result.drain.message))
    word = str(result.data["verdict"]).upper()
    for reason in result.data["failures"]:
        print(f"{word} {reason}")


__all__ = ["FIELD_OPTIONS", "add_arguments", "plan_from_args", "run", "verdict_line"]
