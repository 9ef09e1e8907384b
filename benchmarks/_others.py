"""How much CPU other work took while a benchmark level ran: the machine's busy time minus the
benchmark's own processes' (this process and every process under it: the calibration server, the
client, Locust's workers).

Why not the load average: a benchmark's own server and client keep it near 1.5 on two cores, so
a threshold on it calls every run loaded; and it is a minute-long decaying average, so a level
also carries the levels before it. This is measured over the level itself, from ``/proc``: the
busy ticks of ``/proc/stat`` and ``utime + stime + cutime + cstime`` of each process of the tree
(a child that exited and was reaped moves into its parent's ``cutime``, so it stays counted).
Linux only; elsewhere :attr:`OtherCpu.cores` is None.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PERIOD_S = 0.5


def _busy_ticks() -> int:
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return user + nice + system + irq + softirq + steal


def _tree_ticks(root: int) -> int:
    """CPU ticks of ``root`` and all its live descendants (with what they reaped)."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        f = raw[raw.rindex(")") + 2 :].split()
        pid = int(name)
        children.setdefault(int(f[1]), []).append(pid)
        ticks[pid] = int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


class OtherCpu:
    """``with OtherCpu() as other: run_level()``; then ``other.cores``: the mean number of cores
    that processes outside this benchmark kept busy meanwhile (None where ``/proc`` is missing)."""

    def __init__(self) -> None:
        self.cores: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._other_ticks = 0.0
        self._span_s = 0.0

    def _sample(self) -> tuple[float, int, int]:
        return time.monotonic(), _busy_ticks(), _tree_ticks(os.getpid())

    def _run(self) -> None:
        last = self._sample()
        while not self._stop.wait(PERIOD_S):
            now = self._sample()
            # A process of ours that exited unreaped between two samples would look like others'
            # work for one interval: never below zero, and small against a whole level.
            self._other_ticks += max(0, (now[1] - last[1]) - (now[2] - last[2]))
            self._span_s += now[0] - last[0]
            last = now

    def __enter__(self) -> OtherCpu:
        if Path("/proc/stat").exists():
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=5)
        if self._span_s > 0:
            self.cores = round(self._other_ticks / _TICK / self._span_s, 2)
