"""``servecheck cutover``: checks before (and during) a hot model swap.

Before the swap, ``servecheck cutover --from OLD --to NEW``: the catalogue on NEW, greedy-output
agreement between OLD and NEW, latency/throughput deltas at the same load. During the swap,
``servecheck cutover --swap-under-load --via ALIAS --duration 60s``: a steady load on the alias
while the operator swaps the model behind it. The run is
:func:`servecheck.workflows.cutover.run_cutover`.

Exit codes: 0 when every part held, 1 when one did not, 2 for a usage error.
"""

from __future__ import annotations

import argparse

from servecheck import api
from servecheck.commands.options import (
    add_catalogue_arguments,
    add_cold_start_arguments,
    add_max_tokens_argument,
    add_run_arguments,
    add_target_arguments,
    checked_reference_args,
    cold_start_fields,
    out_dir,
)
from servecheck.workflows.cutover import CutoverSpec

# Spec field -> option where the names differ beyond an option's dest (and dest + "_s"),
# for showing the library's SpecError (servecheck/cli.py).
FIELD_OPTIONS = {
    "thresholds": "--threshold",
    "cold_start_slos": "--cold-start-slo",
    "slos": "--slo",
    "swap_slos": "--swap-slo",
    "probe_models": "--probe-model",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck cutover``."""
    parser.add_argument(
        "--from", dest="old", metavar="OLD", help="target serving the current model"
    )
    parser.add_argument(
        "--to", dest="new", metavar="NEW", help="target serving the candidate model"
    )
    add_target_arguments(parser, target=None)
    g = parser.add_argument_group("pre-cutover")
    g.add_argument(
        "--prompts", metavar="FILE", help="prompt set, one per line (default: a built-in set of 12)"
    )
    add_max_tokens_argument(g, 64, "answer length for the agreement")
    g.add_argument(
        "--min-agreement",
        type=float,
        default=0.8,
        metavar="SHARE",
        help="fail when fewer answers than this share are identical (default: %(default)s)",
    )
    g.add_argument(
        "--skip-conformance", action="store_true", help="do not run the catalogue on NEW"
    )
    add_catalogue_arguments(g)
    g.add_argument("--no-load", action="store_true", help="skip the latency/throughput comparison")
    g.add_argument(
        "--users",
        type=int,
        default=2,
        metavar="N",
        help="users of each comparison load (default: %(default)s)",
    )
    g.add_argument(
        "--load-duration",
        default="20s",
        metavar="TIME",
        help="length of each comparison load (default: %(default)s)",
    )
    g.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="METRIC=CHANGE",
        help="allowed worsening NEW vs OLD, as in servecheck compare (repeatable)",
    )
    s = parser.add_argument_group("swap under load")
    s.add_argument(
        "--swap-under-load",
        action="store_true",
        help="probe an alias target while the operator swaps the model",
    )
    s.add_argument("--via", metavar="ALIAS", help="the alias/gateway target the clients use")
    s.add_argument(
        "--duration", default="60s", metavar="TIME", help="how long to probe (default: %(default)s)"
    )
    s.add_argument(
        "--rate", default="10/s", metavar="R/s", help="probe request rate (default: %(default)s)"
    )
    s.add_argument(
        "--max-failed",
        type=int,
        default=0,
        metavar="N",
        help="failed requests allowed (default: %(default)s)",
    )
    s.add_argument(
        "--max-gap",
        default="2s",
        metavar="TIME",
        help="longest time without a success allowed (default: %(default)s)",
    )
    parser.add_argument(
        "--drain",
        action="store_true",
        help="last, send OLD SIGTERM mid-stream and judge its drain, as servecheck drain does "
        "(OLD launched by servecheck, or its targets.yaml drain: {command: ...})",
    )
    s.add_argument(
        "--swap",
        metavar="ACTION",
        help="do the swap with the engine's own mechanism, under the probe: lora-load:NAME=PATH, "
        "lora-unload:NAME or xinference-relaunch:MODEL (implies --swap-under-load)",
    )
    s.add_argument(
        "--swap-at",
        default="10s",
        metavar="TIME",
        help="when the swap starts, from the probe's start (default: %(default)s)",
    )
    s.add_argument(
        "--swap-slo",
        action="append",
        default=[],
        metavar="EXPR",
        help="swap SLO, checked before any traffic: swap_failed_requests<=N, "
        "swap_ttft_spike<=TIME (repeatable)",
    )
    s.add_argument(
        "--probe-model",
        action="append",
        default=[],
        metavar="NAME[=WEIGHT]",
        help="split the probe's traffic across models (base, adapters) by weight (repeatable; "
        "default: the target's model)",
    )
    add_run_arguments(parser, "cutover", "<names>")
    add_cold_start_arguments(parser)  # --launch / --cold-start: the candidate (NEW) starts now


def spec_from_args(args: argparse.Namespace) -> CutoverSpec:
    """The :class:`CutoverSpec` for the options."""
    from servecheck.analysis.slo import parse_slos
    from servecheck.load.workload.mix import parse_model_mix
    from servecheck.load.workload.schedule import parse_duration, parse_rate
    from servecheck.probes.swap import parse_swap

    return CutoverSpec(
        old=args.old,
        new=args.new,
        targets_file=args.targets_file,
        prompts=args.prompts,
        max_tokens=args.max_tokens,
        min_agreement=args.min_agreement,
        conformance=not args.skip_conformance,
        surfaces=list(args.surface or []),
        keyword=args.keyword,
        workers=str(args.workers),
        load=not args.no_load,
        users=args.users,
        load_duration_s=parse_duration(args.load_duration),
        thresholds=list(args.threshold),
        swap_under_load=args.swap_under_load,
        via=args.via,
        duration_s=parse_duration(args.duration),
        rate=parse_rate(args.rate),
        max_failed=args.max_failed,
        max_gap_s=parse_duration(args.max_gap),
        swap=parse_swap(args.swap) if args.swap else None,
        swap_at_s=parse_duration(args.swap_at),
        swap_slos=parse_slos(args.swap_slo, "cli"),
        probe_models=parse_model_mix(",".join(args.probe_model), "--probe-model"),
        out=out_dir(args),
        run_id=args.run_id,
        reference_args=checked_reference_args(args.reference_arg),
        drain=args.drain,
        **cold_start_fields(args),
    )


def run(args: argparse.Namespace) -> int:
    """Pre-cutover checks, or the swap-under-load probe; one report; exit 0 only if all held."""
    return api.cutover(spec_from_args(args)).exit_code


__all__ = ["add_arguments", "run", "spec_from_args"]
