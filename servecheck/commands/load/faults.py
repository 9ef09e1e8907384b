"""``servecheck load``'s fault options: cancellation injection (load/cancel.py); the outage
breaker (load/outage.py) has none, it is always on (one function, as the other option groups in
arguments.py)."""

from __future__ import annotations

import argparse


def add_fault_arguments(g: argparse._ArgumentGroup) -> None:
    """Requests the client cancels on purpose, and how long the engine has to drain after."""
    g.add_argument(
        "--cancel",
        metavar="SHARE@POINT",
        default=None,
        help="cancel SHARE of the requests at POINT: headers, tokens:K (after K tokens) or ms:T "
        "(T ms after the send), e.g. 10%%@tokens:8; the engine's running requests and KV usage "
        "must come back down after the load (default: none; plan key cancel)",
    )
    g.add_argument(
        "--cancel-drain",
        metavar="DURATION",
        default=None,
        help="with --cancel: how long the engine has to come back to idle after the load "
        "(default: 30s)",
    )
