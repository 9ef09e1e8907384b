"""The cold-start stage of ``servecheck accept`` and ``servecheck cutover``: the
launched process's lifetime and the stage dict (the measurement is :mod:`servecheck.probes.coldstart`,
the report section :mod:`servecheck.report.coldstart_html`). ``spec`` is an accept or cutover
spec: anything with ``launch``, ``cold_start``, ``cold_start_requests`` and ``cold_start_slos``.

The stage's SLOs are ``--cold-start-slo`` (source ``cli``) and the cold-start metrics of the
measured target's targets.yaml ``slo:`` list; they are parsed before any traffic
(:func:`validate`). The stage holds when the server became ready, a request succeeded and every
SLO held; a figure an SLO needs that was not measured makes it INCONCLUSIVE (never a pass)."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servecheck.analysis.verdict import Stage
from servecheck.config.model import Target
from servecheck.errors import SpecError


def validate(spec: Any) -> None:
    """Before any traffic: every ``--cold-start-slo`` parses, is a cold-start metric and has a
    cold start to judge; an accept ``--slo`` that is a cold-start metric points here."""
    from servecheck.analysis.slo import COLD, reject_cold

    given = list(getattr(spec, "cold_start_slos", None) or [])
    for slo in given:
        if not slo.cold:
            raise SpecError(
                "{cold_start_slos} {text!r}: not a cold-start metric ({cold}); "
                "a load SLO goes to {slos}",
                text=slo.text,
                cold=", ".join(COLD),
            )
    if given and not enabled(spec):
        raise SpecError("{cold_start_slos} needs a cold start: {launch} CMD or {cold_start}")
    reject_cold(getattr(spec, "slos", None) or [], "the smoke load")


def stage_slos(spec: Any, target: Target) -> list[Any]:
    """The cold-start SLOs of this stage: the command line's, then the target's (deduplicated)."""
    slos = [
        *(getattr(spec, "cold_start_slos", None) or []),
        *(s for s in target.slos if s.cold),
    ]
    seen: set[tuple[str, str, float]] = set()
    out = []
    for slo in slos:
        if (slo.name, slo.op, slo.bound) not in seen:
            seen.add((slo.name, slo.op, slo.bound))
            out.append(slo)
    return out


@dataclass(slots=True)
class Launch:
    """The server this command started (``--launch``), if any."""

    command: str | None
    run_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0


def enabled(spec: Any) -> bool:
    return bool(getattr(spec, "launch", None) or getattr(spec, "cold_start", False))


@contextlib.contextmanager
def launched(spec: Any, run_dir: Path) -> Iterator[Launch]:
    """Start ``--launch`` (if given) now, stop it when the command is done."""
    from servecheck.probes import coldstart

    launch = Launch(getattr(spec, "launch", None), run_dir)
    if launch.command:
        launch.started = time.monotonic()
        launch.proc = coldstart.launch(launch.command, run_dir / "launch.log")
        from servecheck.redact import redact
        from servecheck.workflows.support import say

        say(f"cold start: launched {redact(launch.command)} (pid {launch.proc.pid})")
    try:
        yield launch
    finally:
        if launch.proc is not None:
            coldstart.stop(launch.proc)


def run_stage(spec: Any, target: Target, launch: Launch, ready_s: float) -> tuple[Stage, Stage]:
    """Wait for readiness and time the first requests: ``(ready stage, cold_start stage)``."""
    from servecheck.checks.health import wait_ready
    from servecheck.client.http import ServeClient
    from servecheck.client.models import model_for_target
    from servecheck.probes import coldstart
    from servecheck.workflows.support import say

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
        lambda: model_for_target(target, None).model,
        ready,
        ready_s,
        started=t0,
        launched=launch.proc is not None,
        requests=spec.cold_start_requests,
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
    verdicts = coldstart.cold_start_verdicts(stage_slos(spec, target), cold)
    for v in verdicts:
        say(f"cold start SLO: {v.line()}")
    unmeasured = [v for v in verdicts if v.observed is None]
    breached = [v for v in verdicts if v.observed is not None and not v.passed]
    ok = cold.ok and not unmeasured and not breached
    verdict = "pass" if ok else "inconclusive" if cold.ok and not breached else "fail"
    why = [
        *(f"SLO breached: {v.slo.text} observed {_seen(v)}" for v in breached),
        *(f"SLO {v.slo.text} {v.note}" for v in unmeasured),
    ]
    stage = {
        "ok": ok,
        "verdict": verdict,
        "detail": (f"{verdict.upper()}: " + "; ".join(why) + "; " if why else "") + cold.line(),
        "seconds": round(time.monotonic() - t0, 3),
        **{k: v for k, v in d.items() if k != "ok"},
        "slo": [v.as_dict() for v in verdicts],
    }
    return Stage.judged("ready", ready_stage), Stage.judged("cold_start", stage)


def _seen(v: Any) -> str:
    """The observed value as the SLO line writes it (``7.2 s`` reads better than ms here)."""
    unit = v.slo.unit
    if unit == "ms":
        return f"{v.observed / 1000:.2f} s" if v.observed >= 1000 else f"{v.observed:.1f} ms"
    return f"{v.observed:.2f}x" if unit == "x" else f"{v.observed:g} requests"
