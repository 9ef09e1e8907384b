"""Why a generator fell behind: its own CPU, or a busy machine.

The generator's event loop and send times run late for two different reasons that call for
different fixes. When a Locust process uses most of a core, the generator itself is the limit
(more processes, a bigger machine). When the generator is nearly idle but the machine's cores
are busy (the engine on the same host, a neighbour, a hypervisor that steals time), the
generator waits for a core: the way out is another machine for the client, or judging the
figures anyway (``--allow-lag``). Each Locust process records its own CPU seconds and the
machine's CPU times over its run; this module names the cause from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SATURATED_CORE_SHARE = 0.85  # a Locust process using this much of one core is the limit
BUSY_MACHINE_SHARE = 0.80  # the machine's cores busy this much of the run
STEAL_SHARE = 0.10  # a hypervisor taking this much of the run's CPU time


@dataclass(slots=True, frozen=True)
class HostLoad:
    """The generator's CPU and the machine's over a run."""

    cores: int
    busy: float  # share of all the machine's cores busy over the run (0-1)
    steal: float  # share of CPU time the hypervisor took
    generator_cores: float  # the generator's processes' CPU seconds / the run's wall seconds
    busiest_process: float  # the largest one process used of one core

    @classmethod
    def from_infos(cls, infos: Iterable[Mapping[str, Any]]) -> HostLoad | None:
        """From the Locust processes' end-of-run infos (``cpu_s``, ``started``, ``ended``,
        ``host_cpu``); None when none recorded the machine."""
        shares: list[float] = []
        hosts: list[Mapping[str, Any]] = []
        for info in infos:
            wall = float(info.get("ended") or 0.0) - float(info.get("started") or 0.0)
            if wall > 0:
                shares.append(float(info.get("cpu_s") or 0.0) / wall)
            host = info.get("host_cpu")
            if isinstance(host, Mapping) and host.get("cores"):
                hosts.append(host)
        if not hosts:
            return None
        # Every process of one machine saw the same cores: the busiest reading stands for it.
        worst = max(hosts, key=lambda h: float(h.get("busy") or 0.0))
        return cls(
            cores=int(worst["cores"]),
            busy=float(worst.get("busy") or 0.0),
            steal=float(worst.get("steal") or 0.0),
            generator_cores=round(sum(shares), 3),
            busiest_process=round(max(shares, default=0.0), 3),
        )

    def cause(self) -> str:
        """The cause of a generator that ran late, and the way out, in one clause."""
        if self.busiest_process >= SATURATED_CORE_SHARE:
            return (
                f"the generator's CPU is saturated (a Locust process used "
                f"{self.busiest_process:.2f} of a core): add --processes, or run it on a bigger "
                f"machine"
            )
        stolen = f", {self.steal:.0%} stolen by the hypervisor" if self.steal >= 0.01 else ""
        if self.busy >= BUSY_MACHINE_SHARE or self.steal >= STEAL_SHARE:
            return (
                f"the machine is busy, not the generator ({self.busy:.0%} of {self.cores} cores "
                f"busy{stolen}; the generator used {self.generator_cores:.2f} cores): the engine "
                f"or a neighbour shares this host; run servecheck on another machine, or pass "
                f"--allow-lag to judge the figures anyway"
            )
        return (
            f"neither the generator ({self.generator_cores:.2f} cores) nor the machine "
            f"({self.busy:.0%} of {self.cores} cores{stolen}) was CPU-bound: a paused VM or "
            f"a blocking call; --allow-lag judges the figures anyway"
        )


def machine_cpu(before: Any, after: Any, cores: int) -> dict[str, float | int]:
    """``host_cpu`` of a process's info from two ``psutil.cpu_times()`` readings: the share of
    the machine's CPU time that was busy, and the share stolen."""
    # Linux counts guest time inside user and nice already.
    fields = [f for f in before._fields if f not in ("guest", "guest_nice")]
    total = sum(getattr(after, f) - getattr(before, f) for f in fields)
    if total <= 0:
        return {"cores": cores, "busy": 0.0, "steal": 0.0}
    idle = sum(getattr(after, f) - getattr(before, f) for f in ("idle", "iowait") if f in fields)
    steal = getattr(after, "steal", 0.0) - getattr(before, "steal", 0.0)
    return {
        "cores": cores,
        "busy": round(max(0.0, 1.0 - idle / total), 4),
        "steal": round(max(0.0, steal / total), 4),
    }


__all__ = ["HostLoad", "machine_cpu"]
