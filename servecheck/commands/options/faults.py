"""The fault options of ``servecheck load`` and ``capacity``: cancellation injection
(load/workload/cancel.py) and its drain bound; the outage breaker (analysis/outage.py) has none, it is always
on. :func:`fault_options` parses them at the edge."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from servecheck.load.workload.cancel import DRAIN_BOUND_S, parse_cancel
from servecheck.load.workload.schedule import parse_duration


def add_fault_arguments(g: argparse._ActionsContainer) -> None:
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


def fault_options(
    options: Mapping[str, Any], plan: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``--cancel`` (else the plan's ``cancel:``) and ``--cancel-drain`` as a spec's ``cancel``
    and ``cancel_drain_s``; a bad value is a usage error naming it."""
    text = options.get("cancel")
    drain = options.get("cancel_drain")
    return {
        "cancel": parse_cancel(text if text is not None else (plan or {}).get("cancel")),
        "cancel_drain_s": parse_duration(drain) if drain else DRAIN_BOUND_S,
    }
