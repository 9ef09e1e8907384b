"""``servecheck check``: run the conformance catalogue (pytest + xdist) and write a report.

With no ``--target`` it checks the embedded default target: the reference server, started on a
free port for the duration of the run. The run is :func:`servecheck.workflows.conformance.run_check`.
"""

from __future__ import annotations

import argparse
import os

from servecheck import api
from servecheck.commands.options import (
    ENV_TARGET,
    add_catalogue_arguments,
    add_run_arguments,
    add_strict_argument,
    add_target_arguments,
    add_trials_argument,
    checked_reference_args,
    out_dir,
    reference_targets_file,
    target_names,
)
from servecheck.workflows.conformance import SURFACE_FILES, CheckSpec

# Spec field -> option beyond those named by their dest (``--target`` fills ``targets``),
# for showing the library's SpecError (servecheck/cli.py).
FIELD_OPTIONS = {"targets": "--target"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_arguments(parser, target="many", target_default="the embedded reference")
    parser.add_argument(
        "--model", action="append", metavar="NAME", help="check only this served model; repeatable"
    )
    add_catalogue_arguments(parser)
    add_strict_argument(parser)
    add_trials_argument(parser)
    add_run_arguments(
        parser,
        "check",
        "<targets>",
        " (it always runs with --itl-ms 2, so that streaming checks can see tokens arrive over time)",
    )
    parser.add_argument(
        "--no-embedded", action="store_true", help="do not start the embedded reference server"
    )
    parser.add_argument(
        "pytest_args", nargs=argparse.REMAINDER, help="after --: passed to pytest as they are"
    )


def spec_from_args(args: argparse.Namespace) -> CheckSpec:
    """The :class:`CheckSpec` for the options (targets: ``--target``, else SERVECHECK_TARGET,
    else the embedded reference)."""
    targets = target_names(args)
    asked = bool(args.target or os.environ.get(ENV_TARGET, "").strip())
    return CheckSpec(
        targets=list(targets),
        targets_file=reference_targets_file(args, asked),
        models=list(args.model or []),
        surfaces=list(args.surface or []),
        keyword=args.keyword,
        strict=args.strict,
        trials=args.trials,
        workers=str(args.workers),
        out=out_dir(args),
        run_id=args.run_id,
        embedded=not args.no_embedded,
        reference_args=checked_reference_args(args.reference_arg),
        pytest_args=list(args.pytest_args or []),
    )


def run(args: argparse.Namespace) -> int:
    """Run the catalogue; exit with pytest's code (3 when no check was selected)."""
    return api.check(spec_from_args(args)).exit_code


__all__ = ["FIELD_OPTIONS", "SURFACE_FILES", "add_arguments", "run", "spec_from_args"]
