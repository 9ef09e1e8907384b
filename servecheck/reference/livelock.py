"""The ``livelock`` fault: hung but healthy (analysis/hung.py catches it in load and soak).

After ``--livelock-after`` (a time since the start, ``20s``, or a request count, ``50``: the
first 50 are served; 20 requests unless given) the engine stops generating and answers everything else: ``/health`` and ``/v1/models``
say 200, /metrics reports the stuck requests as running and the generated-token counter stays
where it was (it counts a stream's tokens when the stream ends, and none ends), open streams get
no more tokens and new requests hang after their headers. A stuck request lets go when its client
hangs up (vLLM aborts a request whose client went), so a test's server stops promptly.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from servecheck.reference.http import State

FAULT = "livelock"
DEFAULT_AFTER_REQUESTS = 20
POLL_S = 0.2


def stuck(state: State) -> bool:
    """Whether the engine is livelocked now (once it is, it stays so)."""
    if FAULT not in state.faults:
        return False
    if not state.livelocked:
        cfg = state.config
        after_s, after_n = cfg.livelock_after_s, cfg.livelock_after_requests
        if not after_s and not after_n:
            after_n = DEFAULT_AFTER_REQUESTS
        state.livelocked = bool(
            (after_s and time.monotonic() - state.started >= after_s)
            or (after_n and state.request_count > after_n)
        )
    return state.livelocked


async def hold(request: Any) -> None:
    """Wait, generating nothing, until the client hangs up; then cancel the handler, as
    aiohttp does with a handler whose client went (its abort path releases the request's slot,
    quietly: a hung-up client is no server error)."""
    while True:
        transport = getattr(request, "transport", None)
        if transport is None or transport.is_closing():
            raise asyncio.CancelledError
        await asyncio.sleep(POLL_S)


def parse_after(text: str | None) -> tuple[float, int]:
    """``--livelock-after``: ``20s`` / ``2m`` (a time since the server started) or ``50`` (a
    request count). Raises ValueError on anything else."""
    from servecheck.load.workload.schedule import parse_duration

    if text is None or not str(text).strip():
        return 0.0, 0
    raw = str(text).strip().lower()
    if raw.isdigit():
        n = int(raw)
        if n < 1:
            raise ValueError(f"{text!r}: a request count is at least 1")
        return 0.0, n
    seconds = parse_duration(raw)
    if seconds <= 0:
        raise ValueError(f"{text!r}: give a time such as 20s or a request count such as 50")
    return seconds, 0


__all__ = ["DEFAULT_AFTER_REQUESTS", "FAULT", "hold", "parse_after", "stuck"]
