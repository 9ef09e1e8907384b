"""``servecheck.signals.run_async``: SIGTERM stops an event loop as cleanly as Ctrl-C does.

The SIGTERM handler (``install_sigterm_handler``) raises where the main thread is; in an event
loop that is inside a task, which died with the exception unretrieved: asyncio printed "Task
exception was never retrieved" and a traceback on every interrupted soak cycle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from servecheck.signals import Interrupted, install_sigterm_handler, run_async

    install_sigterm_handler()
    before = signal.getsignal(signal.SIGTERM)

    async def work():
        async def sleeper():
            await asyncio.sleep(30)
        tasks = [asyncio.create_task(sleeper()) for _ in range(3)]
        await asyncio.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.gather(*tasks)
        return "finished"

    try:
        run_async(work())
    except Interrupted as stop:
        print("interrupted", stop.signum, signal.getsignal(signal.SIGTERM) is before)
    print("ok", run_async(asyncio.sleep(0, result=7)))
    """
)


def test_sigterm_in_an_event_loop_is_interrupted_without_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The signal's number, and our handler back in place after the loop closed.
    assert done.stdout.splitlines() == [f"interrupted {int(signal.SIGTERM)} True", "ok 7"]
    assert "Traceback" not in done.stderr and "never retrieved" not in done.stderr, done.stderr
