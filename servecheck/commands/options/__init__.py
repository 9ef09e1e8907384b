"""The options every target-facing command shares: ``--target``, ``--targets-file``, ``--out``.

One definition, so that the names, the environment variables and the help read the same in
every command (``--help`` is pinned by tests/test_cli_help.py). Defaults are ``None`` (the
variable's value when it is set): a command says what ``None`` means, e.g. the embedded
``reference`` target, ``./targets.yaml`` (else the built-in file with the reference alone,
:data:`servecheck.config.loader.BUILTIN_FILE`) and ``./reports``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from servecheck.commands.options.budget import (
    add_error_budget_argument as add_error_budget_argument,
)
from servecheck.commands.options.budget import error_budget as error_budget

# --error-budget, the --reference-arg option table and check (re-exported: commands import
# them from here).
from servecheck.commands.options.coldstart import (
    add_cold_start_arguments as add_cold_start_arguments,
)
from servecheck.commands.options.coldstart import cold_start_fields as cold_start_fields
from servecheck.commands.options.faults import add_fault_arguments as add_fault_arguments
from servecheck.commands.options.faults import fault_options as fault_options
from servecheck.commands.options.reference import add_option_table as add_option_table
from servecheck.commands.options.reference import (
    checked_reference_args as checked_reference_args,
)
from servecheck.commands.options.workload import add_api_arguments as add_api_arguments
from servecheck.commands.options.workload import (
    add_max_tokens_argument as add_max_tokens_argument,
)
from servecheck.commands.options.workload import add_model_argument as add_model_argument
from servecheck.commands.options.workload import (
    add_ready_timeout_argument as add_ready_timeout_argument,
)
from servecheck.config.loader import ENV_TARGETS_FILE
from servecheck.errors import UsageError

ENV_TARGET = "SERVECHECK_TARGET"
ENV_OUT = "SERVECHECK_REPORTS"
ENV_DATASET = "SERVECHECK_DATASET"  # --dataset's default (plain locust -f: scenarios/_options.py)
DEFAULT_OUT = "reports"


def add_target_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    *,
    target: str | None = "one",
    target_default: str = "the embedded reference",
    out: bool = True,
) -> None:
    """Add ``--target`` (``target``: ``"one"``, ``"many"`` (repeatable) or ``None`` for none),
    ``--targets-file`` and, with ``out``, ``--out``."""
    env = os.environ.get
    if target == "many":
        parser.add_argument(
            "--target",
            action="append",
            metavar="NAME",
            default=None,
            help=f"target from the targets file; repeatable; 'all' for every one "
            f"(env {ENV_TARGET}, comma-separated; default: {target_default})",
        )
    elif target == "one":
        parser.add_argument(
            "--target",
            metavar="NAME",
            default=env(ENV_TARGET),
            help=f"target from the targets file (env {ENV_TARGET}; default: {target_default})",
        )
    parser.add_argument(
        "--targets-file",
        metavar="PATH",
        default=env(ENV_TARGETS_FILE),
        help=f"targets file (env {ENV_TARGETS_FILE}; default: ./targets.yaml, "
        "else the built-in file with only the reference target)",
    )
    if out:
        parser.add_argument(
            "--out",
            metavar="DIR",
            default=env(ENV_OUT),
            help=f"where run folders go (env {ENV_OUT}; default: ./{DEFAULT_OUT})",
        )


def add_catalogue_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--surface``, ``-k`` and ``-n/--workers``: which checks of the catalogue run, how wide."""
    from servecheck.workflows.conformance import SURFACE_FILES

    parser.add_argument(
        "--surface",
        action="append",
        choices=sorted(SURFACE_FILES),
        metavar="NAME",
        help=f"run only these surfaces; repeatable ({', '.join(SURFACE_FILES)})",
    )
    parser.add_argument(
        "-k",
        dest="keyword",
        metavar="EXPR",
        help="pytest -k expression over case ids, e.g. 'STREAM-DONE or CHAT-'",
    )
    parser.add_argument(
        "-n",
        "--workers",
        default=os.environ.get("SERVECHECK_WORKERS", "auto"),
        metavar="N",
        help="pytest-xdist workers, 'auto' or a number; 0 runs in-process "
        "(env SERVECHECK_WORKERS; default: %(default)s)",
    )


def add_strict_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--strict``: the strict schema profile's findings fail the checks (checks/schema.py)."""
    parser.add_argument(
        "--strict",
        action="store_true",
        default=os.environ.get("SERVECHECK_STRICT", "").strip().lower()
        in ("1", "true", "yes", "on"),
        help="strict schema profile: a check whose answers break the openai SDK's types (a "
        "missing required field, an enum value outside the set, a number sent as a string) "
        "fails instead of being reported non-strict (env SERVECHECK_STRICT; default: off)",
    )


def trials_count(text: str) -> int:
    """``--trials K``: a whole number from 1 to :data:`MAX_TRIALS` (an argparse type)."""
    from servecheck.workflows.conformance import MAX_TRIALS

    try:
        value = int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 1 <= value <= MAX_TRIALS:
        raise argparse.ArgumentTypeError(f"expected 1 to {MAX_TRIALS}, got {value}")
    return value


def add_trials_argument(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, default: int = 1
) -> None:
    """``--trials K``: each model-dependent check runs K times and is judged by its rate."""
    parser.add_argument(
        "--trials",
        metavar="K",
        type=trials_count,
        # a string, so that argparse checks a bad $SERVECHECK_TRIALS as it checks the option
        default=os.environ.get("SERVECHECK_TRIALS", "").strip() or str(default),
        help="run each model-dependent check (tool calls, JSON schema, reasoning separation, "
        "stop handling) K times and report k/K; it passes at its threshold, e.g. 4/5 "
        f"(docs/checks.md#repeated-trials) (env SERVECHECK_TRIALS; default: {default})",
    )


def add_run_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    kind: str,
    label: str = "<target>",
    reference_note: str = "",
) -> None:
    """``--run-id`` (the run folder's name) and ``--reference-arg`` (for the embedded server)."""
    parser.add_argument(
        "--run-id", metavar="ID", help=f"run folder name (default: <time>-{kind}-{label})"
    )
    parser.add_argument(
        "--reference-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for the embedded reference server, "
        "e.g. --reference-arg=--fault=stream-no-done" + reference_note,
    )


def add_dataset_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--dataset FILE`` and ``--dataset-format``: prompts from the user's own file (the
    ``dataset`` scenario's requests, the ``multi_turn`` scenario's conversations)."""
    from servecheck.load.workload.dataset import FORMATS

    parser.add_argument(
        "--dataset",
        metavar="FILE",
        default=os.environ.get(ENV_DATASET) or None,
        help=f"prompts from this local JSONL / ShareGPT file, sampled with the seed "
        f"(scenarios dataset, multi_turn; env {ENV_DATASET}); a distributed worker needs the "
        "file at the path given to its own --dataset",
    )
    parser.add_argument(
        "--dataset-format",
        choices=FORMATS,
        default="auto",
        help="record shape: auto (per record), sharegpt (conversations), openai (messages), "
        "prompt (default: %(default)s)",
    )


def out_dir(args: argparse.Namespace) -> Path:
    """``--out``, else ``./reports``."""
    return Path(args.out or DEFAULT_OUT)


def reference_targets_file(args: argparse.Namespace, asked: bool) -> str | None:
    """The targets file of a command that falls back to the embedded ``reference`` target
    (check, soak): ``--targets-file`` as given, else ``./targets.yaml``; but when no target was
    asked for (``asked`` False) and ./targets.yaml has no ``reference``, the built-in file with
    the embedded reference alone, as where there is no ./targets.yaml (said on stderr)."""
    import sys

    from servecheck.config.loader import BUILTIN_FILE, DEFAULT_FILE, load_targets

    if asked or args.targets_file or os.environ.get(ENV_TARGETS_FILE):
        return args.targets_file
    try:
        names = load_targets(None).names
    except UsageError:
        return None  # a broken ./targets.yaml is reported by the run, with its file:line
    if "reference" in names:
        return None
    print(
        f"{DEFAULT_FILE} has no 'reference' target: using the embedded reference server "
        "(name one of its targets with --target)",
        file=sys.stderr,
    )
    return str(BUILTIN_FILE)


def target_names(args: argparse.Namespace, default: str = "reference") -> list[str]:
    """A repeatable ``--target``: the options, else ``$SERVECHECK_TARGET`` (comma-separated),
    else ``[default]``."""
    return (
        list(args.target or [])
        or [t for t in os.environ.get(ENV_TARGET, "").split(",") if t.strip()]
        or [default]
    )


__all__ = [
    "DEFAULT_OUT",
    "ENV_OUT",
    "ENV_TARGET",
    "add_api_arguments",
    "add_catalogue_arguments",
    "add_strict_argument",
    "add_cold_start_arguments",
    "add_dataset_arguments",
    "add_max_tokens_argument",
    "add_model_argument",
    "add_ready_timeout_argument",
    "add_run_arguments",
    "add_target_arguments",
    "out_dir",
    "target_names",
]
