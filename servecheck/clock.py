"""Placing the kernel's realtime stamps on the monotonic clock the project measures with.

Receive timestamps (``SO_TIMESTAMPNS``) are ``CLOCK_REALTIME``; durations are measured on
``time.perf_counter`` (``CLOCK_MONOTONIC``). :func:`clock_offset` is the difference, to be
refreshed now and then (a realtime step, NTP, moves it).
"""

from __future__ import annotations

import time

_perf = time.perf_counter


def clock_offset(tries: int = 5) -> float:
    """Realtime minus monotonic (``perf_counter``) clock, in seconds. Each try brackets one
    ``time.time()`` between two ``perf_counter()`` reads; the tightest bracket wins, so a thread
    switch (or anything else) landing between two reads cannot skew it by more than that bracket."""
    best, width = 0.0, float("inf")
    for _ in range(tries):
        a = _perf()
        r = time.time()
        b = _perf()
        if b - a < width:
            best, width = r - (a + b) / 2, b - a
    return best
