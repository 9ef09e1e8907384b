"""``servecheck wait-ready``: poll a target's readiness with back-off, up to a bound.

Exit 0 when ready; 1 when the bound passed, naming the last state seen (loading: the server
answers 503 while loading weights; down: nothing answers; unhealthy: another status).
"""

from __future__ import annotations

import argparse
import os
import time

from servecheck.checks.health import HealthState, health_url, wait_ready
from servecheck.client.http import ServeClient
from servecheck.config import load_targets


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", required=True, metavar="NAME", help="target from targets.yaml")
    parser.add_argument(
        "--targets-file",
        default=os.environ.get("SERVECHECK_TARGETS_FILE", "targets.yaml"),
        metavar="PATH",
        help="targets file (default: %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="give up after S seconds (default: %(default)s)",
    )
    parser.add_argument(
        "--max-interval",
        type=float,
        default=5.0,
        metavar="S",
        help="longest wait between polls (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    target = load_targets(args.targets_file).get(args.target)
    last: list[str] = []
    start = time.monotonic()

    def on_poll(state: HealthState) -> None:
        if not last or last[-1] != state.state:
            print(
                f"{time.monotonic() - start:6.1f}s  {target.name}: {state.state}: {state.detail}",
                flush=True,
            )
            last.append(state.state)

    with ServeClient.for_target(target) as client:
        print(f"waiting up to {args.timeout:.0f} s for {health_url(target)}", flush=True)
        state = wait_ready(
            client,
            target,
            timeout_s=args.timeout,
            max_interval_s=args.max_interval,
            on_poll=on_poll,
        )
    elapsed = time.monotonic() - start
    if state.state == "ready":
        print(f"{elapsed:6.1f}s  {target.name}: ready ({state.detail})")
        return 0
    print(
        f"{elapsed:6.1f}s  {target.name}: NOT READY after {args.timeout:.0f} s; last state {state.state}: {state.detail}"
    )
    return 1
