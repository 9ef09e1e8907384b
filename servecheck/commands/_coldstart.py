"""The cold-start stage of ``servecheck accept`` and ``servecheck cutover`` (thin: options, the
launched process's lifetime, the stage dict and its report section). The measurement is
:mod:`servecheck.load.coldstart`."""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servecheck.config.model import Target


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--launch CMD``, ``--cold-start``, ``--cold-start-requests N``."""
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


@dataclass(slots=True)
class Launch:
    """The server this command started (``--launch``), if any."""

    command: str | None
    run_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0


def enabled(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "launch", None) or getattr(args, "cold_start", False))


@contextlib.contextmanager
def launched(args: argparse.Namespace, run_dir: Path) -> Iterator[Launch]:
    """Start ``--launch`` (if given) now, stop it when the command is done."""
    from servecheck.load import coldstart

    launch = Launch(getattr(args, "launch", None), run_dir)
    if launch.command:
        launch.started = time.monotonic()
        launch.proc = coldstart.launch(launch.command, run_dir / "launch.log")
        from servecheck.redact import redact
        from servecheck.report.workflow import say

        say(f"cold start: launched {redact(launch.command)} (pid {launch.proc.pid})")
    try:
        yield launch
    finally:
        if launch.proc is not None:
            coldstart.stop(launch.proc)


def run_stage(
    args: argparse.Namespace, target: Target, launch: Launch, ready_s: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Wait for readiness and time the first requests: ``(ready stage, cold_start stage)``."""
    from servecheck.checks.health import wait_ready
    from servecheck.client.http import ServeClient
    from servecheck.load import coldstart
    from servecheck.load.run import _resolve_model as resolve_model
    from servecheck.report.workflow import say

    t0 = launch.started or time.monotonic()

    def ready(timeout_s: float) -> tuple[bool, str]:
        with ServeClient.for_target(target) as client:
            # Fine polling: the time to ready is a measurement here, not only a gate.
            state = wait_ready(client, target, timeout_s=timeout_s, max_interval_s=0.5)
        if launch.proc is not None and launch.proc.poll() is not None and state.state != "ready":
            return False, f"the launched command exited with code {launch.proc.returncode}"
        return state.state == "ready", f"{state.state}: {state.detail}"

    cold = coldstart.measure(
        target,
        lambda: resolve_model(target, None),
        ready,
        ready_s,
        started=t0,
        launched=launch.proc is not None,
        requests=args.cold_start_requests,
        on_log=say,
    )
    ready_stage = {
        "ok": cold.ready,
        "state": "ready" if cold.ready else "not-ready",
        "detail": cold.ready_detail,
        "seconds": cold.time_to_ready_s
        if cold.time_to_ready_s is not None
        else round(time.monotonic() - t0, 3),
    }
    d = cold.as_dict()
    stage = {
        "ok": cold.ok,
        "detail": cold.line(),
        "seconds": round(time.monotonic() - t0, 3),
        **{k: v for k, v in d.items() if k != "ok"},
    }
    return ready_stage, stage


def section(stage: dict[str, Any]) -> Any:
    """The cold-start section of an HTML report."""
    from servecheck.report.html import Section, esc, table

    def ms(v: Any) -> str:
        return "-" if v is None else f"{v:.1f} ms"

    rows = [
        ("time to ready", f"{stage.get('time_to_ready_s')} s"),
        ("first request TTFT", ms(stage.get("first_ttft_ms"))),
        ("first request E2E", ms(stage.get("first_e2e_ms"))),
        ("warm median TTFT", ms(stage.get("warm_ttft_median_ms"))),
        ("warm median E2E", ms(stage.get("warm_e2e_median_ms"))),
        ("first / warm TTFT", str(stage.get("first_vs_warm_ttft"))),
        ("first / warm E2E", str(stage.get("first_vs_warm_e2e"))),
        ("requests to warm up", str(stage.get("requests_to_warm"))),
        ("requests timed (failed)", f"{stage.get('requests')} ({stage.get('failed')})"),
    ]
    series = ", ".join(
        "-" if p.get("ttft_ms") is None else f"{p['ttft_ms']:.0f}"
        for p in stage.get("series") or []
    )
    return Section(
        "Cold start",
        table(("figure", "value"), rows)
        + f"<p>TTFT of each request after readiness (ms): {esc(series)}</p>",
        [f"- cold start: {stage.get('detail')}"],
        stage.get("ok"),
    )
