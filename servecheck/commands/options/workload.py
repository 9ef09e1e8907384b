"""Options that more than one command gives its requests: ``--model``, ``--max-tokens``,
``--ready-timeout``; one declaration each, so that the flag, its type and metavar read the same
(a command chooses the default and, for ``--max-tokens``, says what it bounds)."""

from __future__ import annotations

import argparse


def add_ready_timeout_argument(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, default: str
) -> None:
    """``--ready-timeout TIME``: how long a command waits for the target's readiness first."""
    parser.add_argument(
        "--ready-timeout",
        default=default,
        metavar="TIME",
        help="how long to wait for readiness (default: %(default)s)",
    )


def add_model_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--model NAME``, the one model a load sends to (load, soak)."""
    parser.add_argument(
        "--model", metavar="NAME", help="model (default: the target's first, else /v1/models)"
    )


def add_max_tokens_argument(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, default: int, what: str
) -> None:
    """``--max-tokens N``, the requests' ``max_tokens``; ``what`` says what it bounds there."""
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=default,
        metavar="N",
        help=f"{what} (default: %(default)s)",
    )
