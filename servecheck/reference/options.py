"""The reference server's options, shared by ``servecheck reference-server`` and everything
that starts the embedded server with ``--reference-arg`` values (validated here before the
server starts, so a bad value is a usage error, not a traceback from the child)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import NoReturn

from servecheck.errors import UsageError, did_you_mean


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from servecheck.reference.faults import QUIRKS

    env = os.environ.get
    parser.add_argument(
        "--host",
        default=env("SERVECHECK_REF_HOST", "127.0.0.1"),
        help="bind address (default: %(default)s)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(env("SERVECHECK_REF_PORT", "8000")),
        metavar="P",
        help="port; 0 picks a free one (default: %(default)s, env SERVECHECK_REF_PORT)",
    )
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="NAME",
        help="served model name, repeatable (default: ref-tiny)",
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=512,
        metavar="N",
        help="context limit in tokens (default: %(default)s)",
    )
    parser.add_argument(
        "--default-max-tokens",
        type=int,
        default=16,
        metavar="N",
        help="output length when max_tokens is absent (default: %(default)s)",
    )
    parser.add_argument(
        "--ttft-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="delay before the first token (default: %(default)s)",
    )
    parser.add_argument(
        "--itl-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="delay between tokens (default: %(default)s)",
    )
    parser.add_argument(
        "--api-key",
        default=env("SERVECHECK_REF_API_KEY"),
        metavar="KEY",
        help="require this key (env SERVECHECK_REF_API_KEY)",
    )
    parser.add_argument(
        "--loading-s",
        type=float,
        default=0.0,
        metavar="S",
        help="answer 503 'loading' for the first S seconds",
    )
    parser.add_argument(
        "--kv-blocks",
        type=int,
        default=256,
        metavar="N",
        help="KV-cache blocks of 16 tokens (default: %(default)s)",
    )
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        default=512,
        metavar="N",
        help="requests running at once; more wait (default: %(default)s)",
    )
    parser.add_argument(
        "--max-inflight",
        type=int,
        default=0,
        metavar="N",
        help="shed generation requests above N in flight with 429 + Retry-After (default: 0, never)",
    )
    parser.add_argument(
        "--reasoning",
        metavar="SPEC",
        help="serve a reasoning model: tokens=N,field=reasoning_content|reasoning,markers=OPEN|CLOSE"
        " (each part optional; '' for the defaults: 12 tokens, reasoning_content, <think>|</think>)",
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME",
        help="switch on a defect (repeatable); see --list-faults",
    )
    parser.add_argument(
        "--quirk",
        action="append",
        default=[],
        metavar="NAME",
        help="switch on a legal variation a client must accept (repeatable): " + ", ".join(QUIRKS),
    )
    parser.add_argument(
        "--list-faults", action="store_true", help="list the fault catalogue and exit"
    )
    parser.add_argument(
        "--ready-file", metavar="PATH", help="write the bound port here once listening"
    )
    parser.add_argument(
        "--prefix-cache-blocks",
        type=int,
        default=0,
        metavar="N",
        help="a prefix cache of N blocks: cached_tokens in usage, prefix-cache metrics (default: off)",
    )
    parser.add_argument(
        "--prefix-cache-counted",
        action="store_true",
        help="idle cached prefix blocks count as KV usage (a soak sees a retained-cache plateau)",
    )


def check_names(args: argparse.Namespace) -> None:
    """Raise :class:`UsageError` for an unknown ``--fault`` or ``--quirk``, with a did-you-mean."""
    from servecheck.reference.faults import FAULTS, QUIRKS

    for name in args.fault:
        if name not in FAULTS:
            raise UsageError(
                f"--fault: unknown fault {name!r}{did_you_mean(name, FAULTS)}; see --list-faults"
            )
    for name in args.quirk:
        if name not in QUIRKS:
            raise UsageError(
                f"--quirk: unknown quirk {name!r}{did_you_mean(name, QUIRKS)}; choices: {', '.join(QUIRKS)}"
            )
    if getattr(args, "reasoning", None) is not None:
        from servecheck.reference.reasoning import parse_spec

        try:
            parse_spec(args.reasoning)
        except ValueError as exc:
            raise UsageError(f"--reasoning: {exc}") from None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"--reference-arg: {message}")


def validate_reference_args(extra_args: Sequence[str]) -> None:
    """Parse ``--reference-arg`` values as the embedded server will, before it starts: a bad
    value is a usage error naming it (rc 2), not a traceback from the child process."""
    if not extra_args:
        return
    parser = _Parser(prog="servecheck reference-server", add_help=False, exit_on_error=False)
    add_arguments(parser)
    try:
        args = parser.parse_args(list(extra_args))
    except argparse.ArgumentError as exc:
        raise UsageError(f"--reference-arg: {exc}") from None
    check_names(args)


__all__ = ["add_arguments", "check_names", "validate_reference_args"]
