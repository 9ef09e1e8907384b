"""The cold-start options of ``accept`` and ``cutover`` (``--launch``, ``--cold-start``...) and
the spec fields they become."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from servecheck.analysis.slo import SLO


def add_cold_start_arguments(parser: argparse.ArgumentParser) -> None:
    """``--launch CMD``, ``--cold-start``, ``--cold-start-requests N``, ``--cold-start-slo``
    (accept and cutover; the stage is :mod:`servecheck.workflows.coldstart`)."""
    parser.add_argument(
        "--launch",
        metavar="CMD",
        default=None,
        help="start the server with this command line first and measure its cold start "
        "(stopped at the end; output in launch.log)",
    )
    parser.add_argument(
        "--cold-start",
        action="store_true",
        help="measure a cold start of a server that is starting now: time to ready, the first "
        "requests against the warm median, requests to warm up",
    )
    parser.add_argument(
        "--cold-start-requests",
        type=int,
        default=30,
        metavar="N",
        help="sequential requests timed after readiness (default: %(default)s)",
    )
    parser.add_argument(
        "--cold-start-slo",
        action="append",
        default=[],
        metavar="EXPR",
        help="cold-start SLO, e.g. time_to_ready<=120s, first_ttft<=5s, first_ttft_ratio<=10, "
        "requests_to_warm<=5 (repeatable; the target's slo entries for cold starts are added)",
    )


class ColdStartFields(TypedDict):
    """The spec fields of :func:`add_cold_start_arguments` (AcceptSpec and CutoverSpec)."""

    launch: str | None
    cold_start: bool
    cold_start_requests: int
    cold_start_slos: list[SLO]


def cold_start_fields(args: argparse.Namespace) -> ColdStartFields:
    """The cold-start options as spec fields, the SLOs parsed (``**`` them into the spec)."""
    from servecheck.analysis.slo import parse_slos

    return ColdStartFields(
        launch=args.launch,
        cold_start=args.cold_start,
        cold_start_requests=args.cold_start_requests,
        cold_start_slos=parse_slos(args.cold_start_slo, "cli"),
    )
