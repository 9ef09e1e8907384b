"""``servecheck accept``: the post-deploy acceptance gate for one target.

Readiness, the conformance catalogue and a smoke load into one run folder; the run is
:func:`servecheck.workflows.accept.run_accept` (stages and files described there).

Exit codes: 0 when every stage held, 1 when one did not, 2 for a usage error, 130 / 143 when
interrupted (SIGINT / SIGTERM; the report of what ran is written, marked partial).
"""

from __future__ import annotations

import argparse
import os
import sys

from servecheck import api
from servecheck.commands.options import (
    add_catalogue_arguments,
    add_cold_start_arguments,
    add_dataset_arguments,
    add_error_budget_argument,
    add_ready_timeout_argument,
    add_run_arguments,
    add_strict_argument,
    add_target_arguments,
    add_trials_argument,
    checked_reference_args,
    cold_start_fields,
    error_budget,
    out_dir,
)
from servecheck.workflows.accept import AcceptSpec

# Spec field -> option where the names differ beyond an option's dest (and dest + "_s"),
# for showing the library's SpecError (servecheck/cli.py).
FIELD_OPTIONS = {"slos": "--slo", "cold_start_slos": "--cold-start-slo"}

# How long accept waits for a listening target's readiness when --ready-timeout is not given.
READY_TIMEOUT = "300s"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck accept`` (defaults from SERVECHECK_* variables where noted)."""
    env = os.environ.get
    add_target_arguments(parser, target="one", target_default="reference, the embedded server")
    parser.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="EXPR",
        help="SLO for the smoke load, e.g. ttft_p95<=500ms (repeatable; the target's slo list is added)",
    )
    add_error_budget_argument(parser, "SERVECHECK_ACCEPT_ERROR_BUDGET", "the smoke load")
    parser.add_argument(
        "--smoke-duration",
        default=env("SERVECHECK_SMOKE_DURATION", "20s"),
        metavar="TIME",
        help="length of the smoke load (default: %(default)s)",
    )
    parser.add_argument(
        "--smoke-users",
        type=int,
        default=2,
        metavar="N",
        help="concurrent users of the smoke load (default: %(default)s)",
    )
    parser.add_argument(
        "--scenario", default="chat", metavar="NAME", help="load scenario (default: %(default)s)"
    )
    add_dataset_arguments(parser)
    parser.add_argument(
        "--no-load", action="store_true", help="skip the smoke load (conformance only)"
    )
    parser.add_argument(
        "--allow-lag",
        action="store_true",
        help="report a lagging load generator as a warning instead of failing the smoke load",
    )
    add_ready_timeout_argument(
        parser,
        READY_TIMEOUT,
        "without it, a target where nothing accepts a connection is 'target down' at once",
    )
    add_catalogue_arguments(parser)
    add_strict_argument(parser)
    add_trials_argument(parser)
    add_run_arguments(parser, "accept", "<target>")
    add_cold_start_arguments(parser)


def spec_from_args(args: argparse.Namespace) -> AcceptSpec:
    """The :class:`AcceptSpec` for the options."""
    from servecheck.analysis.slo import parse_slos
    from servecheck.load.workload.schedule import parse_duration

    return AcceptSpec(
        target=args.target or "reference",
        targets_file=args.targets_file,
        slos=parse_slos(args.slo, "cli"),
        error_budget=error_budget(args.error_budget),
        smoke_duration_s=parse_duration(args.smoke_duration),
        smoke_users=args.smoke_users,
        scenario=args.scenario,
        dataset=args.dataset,
        dataset_format=args.dataset_format,
        load=not args.no_load,
        allow_lag=args.allow_lag,
        ready_timeout_s=parse_duration(args.ready_timeout or READY_TIMEOUT),
        wait_for_listener=args.ready_timeout is not None,  # a wait asked for: wait for the port too
        surfaces=list(args.surface or []),
        keyword=args.keyword,
        strict=args.strict,
        trials=args.trials,
        workers=str(args.workers),
        out=out_dir(args),
        run_id=args.run_id,
        reference_args=checked_reference_args(args.reference_arg),
        **cold_start_fields(args),
    )


def run(args: argparse.Namespace) -> int:
    """Readiness, conformance, smoke load; one report; exit 0 only if everything held."""
    spec = spec_from_args(args)
    result = api.accept(spec)
    ready = result.data.get("stages", {}).get("ready", {})
    asked_to_wait = spec.wait_for_listener or spec.launch or spec.cold_start
    if str(ready.get("detail", "")).startswith("target down:") and not asked_to_wait:
        print(
            "servecheck accept: nothing listens at the target; --ready-timeout TIME waits for it "
            "to come up",
            file=sys.stderr,
        )
    return result.exit_code


__all__ = ["add_arguments", "run", "spec_from_args"]
