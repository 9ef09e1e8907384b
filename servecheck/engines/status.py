"""What ``servecheck engine status`` lists: one row per recorded server that is still alive.

The state folder is shared by every servecheck on the machine (another branch, another version):
a state file naming an engine this one does not know is listed as ``unknown`` with a note, never
probed with a guess and never a reason for the listing to stop.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import psutil

from servecheck.errors import UsageError


def status_rows() -> tuple[list[dict[str, Any]], list[str]]:
    """``(rows, notes)``: a row per live server (name, port, pid, state, detail, base_url,
    model, context_length, rss_mb, uptime_s, ready_s, log) and notes on those it cannot probe."""
    from servecheck.engines.base import describe, orphaned, running_states, server_processes
    from servecheck.engines.registry import get_engine

    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for state in running_states():
        try:
            engine = get_engine(state.name)
        except UsageError:
            state_value, detail = "unknown", f"not an engine of this servecheck ({state.path()})"
            notes.append(
                f"note: {state.name} (pid {state.pid}, port {state.port}) was started by another "
                f"servecheck; this one cannot probe or stop it by name (`engine down all` does)"
            )
        else:
            readiness, detail = engine.probe(state.port)
            state_value = readiness.value
        procs = server_processes(state)
        if orphaned(state):
            # The API server died and left its engine core / workers running: say so, and
            # how to stop them, rather than drop the record of processes that hold memory.
            state_value = "orphaned"
            detail = f"server pid {state.pid} exited; still running: {describe(procs)}"
            notes.append(
                f"note: {state.name} (port {state.port}): its server exited but "
                f"{len(procs)} process(es) of it still run; `servecheck engine down "
                f"{state.name}` stops them"
            )
        rows.append(
            {
                "name": state.name,
                "port": state.port,
                "pid": state.pid,
                "state": state_value,
                "detail": detail if state_value != "ready" else "",
                "base_url": state.base_url,
                "model": state.served_model,
                "context_length": state.context_length,
                "rss_mb": round(_rss_mb(procs)),
                "uptime_s": round(time.time() - state.started_at),
                "ready_s": state.ready_s,
                "log": state.log,
            }
        )
    return rows, notes


def _rss_mb(procs: list[psutil.Process]) -> float:
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total / 2**20


__all__ = ["status_rows"]
