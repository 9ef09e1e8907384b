"""``servecheck load``'s measurement options: request ids, engine metrics, the steady window,
time slices, records kept and repeats (one function, as the other option groups in arguments.py)."""

from __future__ import annotations

import argparse
import os

from servecheck.commands.options import add_fault_arguments
from servecheck.commands.options.hung import add_hung_arguments


def add_measurement_arguments(g: argparse._ArgumentGroup) -> None:
    """What a run measures beside the requests and which part of it the SLOs judge: the request
    id header (analysis/timings.py), the engine's /metrics (load/server_watch.py), the steady window,
    the time slices (analysis/steady.py), the records kept (analysis/aggregate.py), repeated runs
    (workflows/repeat.py)."""
    env = os.environ.get
    g.add_argument(
        "--request-id-header",
        metavar="NAME|off",
        default=os.environ.get("SERVECHECK_REQUEST_ID_HEADER"),
        help="the header each request's id is sent in, so a slow request can be found in the "
        "engine's log; 'off' sends none (a gateway that rejects unknown headers) "
        "(default: X-Request-Id; env SERVECHECK_REQUEST_ID_HEADER)",
    )
    g.add_argument(
        "--server-metrics",
        metavar="INTERVAL|off",
        default=None,
        help="sample the engine's /metrics every INTERVAL beside the run and reconcile its "
        "counters with the client's (summary.json 'server'); off: neither (default: the "
        "target's telemetry.interval_s, else 1s)",
    )
    g.add_argument(
        "--steady-window",
        metavar="auto|START:END|none",
        default=env("SERVECHECK_LOAD_STEADY_WINDOW"),
        help="the part of the run the SLOs judge: auto (default: ramp-up and the drain after the "
        "stop left out), START:END seconds from the first send (10s:50s, 10s:), or none (the whole "
        "run); env SERVECHECK_LOAD_STEADY_WINDOW",
    )
    g.add_argument(
        "--slice-s",
        metavar="TIME",
        default=env("SERVECHECK_LOAD_SLICE"),
        help="width of summary.json's time slices (default: 5s; at most 120 slices, wider when "
        "the run is longer); env SERVECHECK_LOAD_SLICE",
    )
    g.add_argument(
        "--records",
        metavar="auto|all|sample:N|none",
        default=env("SERVECHECK_LOAD_RECORDS"),
        help="per-request records kept in the run folder: all, a uniform sample of N, or none "
        "(the summary and its verdict come from each worker's aggregate either way); auto "
        "(default): all below 200,000 planned requests, else sample:20000; env "
        "SERVECHECK_LOAD_RECORDS",
    )
    g.add_argument(
        "--repeat",
        type=int,
        metavar="N",
        default=None,
        help="run the same load N times (run-01 ... in the run folder) and report confidence "
        "intervals over the runs (default: 1)",
    )
    add_fault_arguments(g)  # --cancel, --cancel-drain (commands/options/faults.py)
    add_hung_arguments(g, "load")  # --hung-after, --canary (commands/options/hung.py)
