"""Options that more than one command gives its requests: ``--model``, ``--max-tokens``,
``--ready-timeout``, ``--api`` and ``--images``; one declaration each, so that the flag, its type and metavar read the same
(a command chooses the default and, for ``--max-tokens``, says what it bounds)."""

from __future__ import annotations

import argparse
import os

ENV_API = "SERVECHECK_LOAD_API"  # --api's default (plain locust -f: scenarios/_options.py)
ENV_IMAGES = "SERVECHECK_LOAD_IMAGES"  # --images' default


def add_ready_timeout_argument(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    default: str,
    when_unset: str | None = None,
) -> None:
    """``--ready-timeout TIME``: how long a command waits for the target's readiness first.
    With ``when_unset`` (what the command does without the option) its value is None unless
    given, so that the command can tell an asked-for wait from its default ``default``."""
    note = f"; {when_unset}" if when_unset else ""
    parser.add_argument(
        "--ready-timeout",
        default=None if when_unset else default,
        metavar="TIME",
        help=f"how long to wait for readiness (default: {default}{note})",
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


def add_api_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--api`` and ``--images``: which API a load speaks, images in its requests (load,
    capacity; servecheck/load/generator/apis.py, images.py)."""
    from servecheck.load.generator.apis import API_NAMES

    parser.add_argument(
        "--api",
        choices=API_NAMES,
        default=os.environ.get(ENV_API) or None,
        help="chat: /chat/completions; messages: Anthropic's /messages (default: chat, "
        "messages for the messages scenario); env SERVECHECK_LOAD_API",
    )
    parser.add_argument(
        "--images",
        metavar="SIZES|DIR",
        default=os.environ.get(ENV_IMAGES) or None,
        help="images in every request: sizes [COUNTx]WxH, comma-separated (1x512x512,2x256x256), "
        "or a folder of PNG/JPEG files; env SERVECHECK_LOAD_IMAGES",
    )
