"""``servecheck capacity``: a bounded load sweep to find the highest load that meets the SLOs.

Each step is one load run at the next level of ``--users`` (closed loop), ``--rates`` (open
loop) or, with ``--trace FILE``, ``--speeds`` (the trace replayed faster each step); the sweep stops early past saturation and never runs more than ``--max-steps`` steps. The
sweep is :func:`servecheck.workflows.capacity.run_capacity` (docs/workflows.md).

Exit codes: 0 when at least one level met the SLOs (and, with ``--target-rate``, replicas could
be computed), 1 when none did, 2 for a usage error.
"""

from __future__ import annotations

import argparse

from servecheck import api
from servecheck.analysis.budget import DEFAULT_ERROR_BUDGET, percent
from servecheck.commands.options import (
    add_api_arguments,
    add_dataset_arguments,
    add_fault_arguments,
    add_ready_timeout_argument,
    add_run_arguments,
    add_target_arguments,
    checked_reference_args,
    fault_options,
    out_dir,
)
from servecheck.errors import UsageError
from servecheck.load.workload.images import normalise_images
from servecheck.load.workload.trace import FORMATS as TRACE_FORMATS
from servecheck.workflows.capacity import CapacitySpec


def parse_levels(text: str, rates: bool, speeds: bool = False) -> list[float]:
    """``1,2,4,8`` (users), ``1/s,2/s`` (rates) or ``0.5,1,2`` (trace speeds) -> increasing
    positive levels."""
    from servecheck.load.workload.schedule import parse_rate

    option, example = (
        ("--speeds", "0.5,1,2,4")
        if speeds
        else ("--rates", "1/s,2/s,5/s")
        if rates
        else ("--users", "1,2,4,8")
    )
    try:
        vals = [
            float(p) if speeds else parse_rate(p) if rates else float(int(p))
            for p in text.split(",")
            if p.strip()
        ]
    except (ValueError, UsageError) as exc:
        raise UsageError(f"{option} {text!r}: a comma-separated list ({example}): {exc}") from None
    if not vals or any(v <= 0 for v in vals):
        raise UsageError(f"{option} {text!r}: give positive levels")
    if vals != sorted(vals):
        raise UsageError(f"{option} {text!r}: levels must increase")
    return vals


# Spec field -> option beyond dest and dest + "_s", for the library's SpecError (cli.py).
FIELD_OPTIONS = {"slos": "--slo"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck capacity``."""
    add_target_arguments(parser, target="one", target_default="reference, the embedded server")
    parser.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="EXPR",
        help="SLO each step must meet (repeatable; the target's are added)",
    )
    g = parser.add_mutually_exclusive_group()
    g.add_argument(
        "--users",
        default=None,
        metavar="LIST",
        help="closed-loop levels, e.g. 1,2,4,8,16 (default)",
    )
    g.add_argument(
        "--rates",
        default=None,
        metavar="LIST",
        help="open-loop levels in requests/s, e.g. 1,2,5,10",
    )
    g.add_argument(
        "--speeds",
        default=None,
        metavar="LIST",
        help="with --trace: replay speeds, e.g. 1,2,4,8 (default with --trace)",
    )
    parser.add_argument(
        "--trace",
        metavar="FILE",
        default=None,
        help="sweep a trace's replay speed: each step replays it (Mooncake, BurstGPT, Azure or "
        "servecheck JSONL) at the next --speeds factor, for at most --step-duration",
    )
    parser.add_argument(
        "--trace-format",
        choices=TRACE_FORMATS,
        default="auto",
        help="trace file format (default: detected from the file)",
    )
    parser.add_argument(
        "--step-duration",
        default="20s",
        metavar="TIME",
        help="length of each step (default: %(default)s)",
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=8,
        metavar="N",
        help="never run more than N steps (default: %(default)s)",
    )
    parser.add_argument(
        "--throughput-drop",
        type=float,
        default=10.0,
        metavar="PCT",
        help="stop when throughput falls this many %% below the best step (default: %(default)s)",
    )
    parser.add_argument(
        "--target-rate",
        default=None,
        metavar="R/s",
        help="request rate to plan replicas for, e.g. 50/s",
    )
    parser.add_argument(
        "--headroom",
        type=float,
        default=1.0,
        metavar="F",
        help="use this fraction of a replica's sustained rate when planning (default: %(default)s)",
    )
    parser.add_argument(
        "--knee-metric",
        default="e2e_p95",
        metavar="NAME",
        help="latency for the knee (default: %(default)s)",
    )
    parser.add_argument(
        "--scenario",
        default=None,
        metavar="NAME",
        help="load scenario (default: chat; trace with --trace)",
    )
    add_dataset_arguments(parser)
    add_api_arguments(parser)
    add_fault_arguments(parser)
    parser.add_argument(
        "--max-error-rate",
        default=percent(DEFAULT_ERROR_BUDGET),
        metavar="PCT",
        help="adds the SLO error_rate<=PCT unless an error_rate SLO is given (default: %(default)s; 'none' to drop it)",
    )
    _add_stop_arguments(parser)
    parser.add_argument(
        "--allow-lag",
        action="store_true",
        help="count a step whose load generator lagged as judged by its SLOs (default: such a step does not pass)",
    )
    add_ready_timeout_argument(parser, "60s")
    add_run_arguments(parser, "capacity", "<target>")


def _add_stop_arguments(parser: argparse.ArgumentParser) -> None:
    """The sweep's early stops beyond the SLOs, and the prefix-cache reset between levels."""
    parser.add_argument(
        "--stop-error-rate",
        default="5%",
        metavar="PCT",
        help="stop the sweep at a level failing more than PCT of its requests (default: %(default)s; 'none': never)",
    )
    parser.add_argument(
        "--saturation-margin",
        default="10%",
        metavar="PCT",
        help="over-saturated, stop: two levels running achieved more than PCT below the load asked "
        "while latency or the engine's queue grew (default: %(default)s)",
    )
    parser.add_argument(
        "--reset-prefix-cache",
        action="store_true",
        help="reset the engine's prefix cache before every level (vLLM POST /reset_prefix_cache in "
        "its dev mode, SGLang POST /flush_cache); where it cannot, the report says so",
    )


def spec_from_args(args: argparse.Namespace) -> CapacitySpec:
    """The :class:`CapacitySpec` for the options (default levels: 1,2,4,8,16 users)."""
    from servecheck.analysis.slo import parse_slos
    from servecheck.load.workload.schedule import parse_duration, parse_rate

    rates = args.rates is not None
    if args.speeds is not None and not args.trace:
        raise UsageError("--speeds sweeps a trace's replay speed: give --trace FILE")
    if args.trace and (rates or args.users is not None):
        raise UsageError("--trace sweeps replay speeds (--speeds 1,2,4), not --users or --rates")
    levels = (
        parse_levels(args.speeds or "1,2,4,8", rates=False, speeds=True)
        if args.trace
        else parse_levels(args.rates if rates else (args.users or "1,2,4,8,16"), rates)
    )
    return CapacitySpec(
        target=args.target or "reference",
        targets_file=args.targets_file,
        slos=parse_slos(args.slo, "cli"),
        levels=levels,
        rates=rates,
        step_duration_s=parse_duration(args.step_duration),
        max_steps=args.max_steps,
        throughput_drop_pct=args.throughput_drop,
        target_rate=parse_rate(args.target_rate) if args.target_rate else None,
        headroom=args.headroom,
        knee_metric=args.knee_metric,
        scenario=args.scenario or ("trace" if args.trace else "chat"),
        trace=args.trace,
        trace_format=args.trace_format,
        dataset=args.dataset,
        dataset_format=args.dataset_format,
        api=args.api,
        images=normalise_images(args.images),
        **fault_options(vars(args)),
        max_error_rate=args.max_error_rate,
        stop_error_rate=_share(args.stop_error_rate, "--stop-error-rate", none_ok=True),
        saturation_margin=_share(args.saturation_margin, "--saturation-margin") or 0.0,
        reset_prefix_cache=args.reset_prefix_cache,
        allow_lag=args.allow_lag,
        ready_timeout_s=parse_duration(args.ready_timeout),
        out=out_dir(args),
        run_id=args.run_id,
        reference_args=checked_reference_args(args.reference_arg),
    )


def _share(text: str, option: str, none_ok: bool = False) -> float | None:
    """``5%`` or ``0.05`` -> 0.05; ``none`` -> None where allowed."""
    raw = str(text).strip().lower()
    if none_ok and raw in ("none", "off"):
        return None
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"{option} {text!r}: a share such as 5% or 0.05") from None
    if not 0 <= value <= 1:
        raise UsageError(f"{option} {text!r}: between 0% and 100%")
    return value


def run(args: argparse.Namespace) -> int:
    """Sweep, write capacity.json + report.html + summary.md, print the findings."""
    return api.capacity(spec_from_args(args)).exit_code


__all__ = ["add_arguments", "run", "spec_from_args"]
