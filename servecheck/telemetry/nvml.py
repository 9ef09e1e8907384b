"""A tiny interface over NVML, so samplers can be tested without a GPU.

:class:`PynvmlBackend` talks to the real library (``pynvml`` from nvidia-ml-py);
:class:`FakeNvml` is a scriptable stand-in for tests and dry runs. Samplers depend only on
:class:`NvmlBackend`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class NvmlUnavailable(Exception):
    """NVML cannot be used at all here (no library, no driver, no device)."""


@dataclass(slots=True)
class DeviceMemory:
    """Memory of one GPU, in bytes; ``unified``: NVML has no memory figures for it, because its
    memory is the host's (GH200, GB10): then ``used`` and ``total`` mean nothing."""

    index: int
    name: str
    uuid: str
    used: int
    total: int
    unified: bool = False


@dataclass(slots=True)
class ProcessMemory:
    """GPU memory one process holds on one device; ``used`` is None when NVML hides it."""

    gpu: int
    pid: int
    used: int | None


class NvmlBackend(Protocol):
    """What the NVML sampler needs. ``init`` raises :class:`NvmlUnavailable` when absent."""

    def init(self) -> None: ...

    def shutdown(self) -> None: ...

    def devices(self) -> list[DeviceMemory]: ...

    def processes(self, index: int) -> list[ProcessMemory]: ...


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class PynvmlBackend:
    """The real NVML through ``pynvml``."""

    def __init__(self) -> None:
        self._nvml: Any = None

    def init(self) -> None:
        try:
            import pynvml
        except ImportError as exc:  # nvidia-ml-py is a dependency, but be clear if it is gone
            raise NvmlUnavailable(f"pynvml not importable: {exc}") from exc
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"{type(exc).__name__}: {exc}") from exc
        self._nvml = pynvml

    def shutdown(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            finally:
                self._nvml = None

    def _handle(self, index: int) -> Any:
        return self._nvml.nvmlDeviceGetHandleByIndex(index)

    def devices(self) -> list[DeviceMemory]:
        nv = self._nvml
        out: list[DeviceMemory] = []
        for index in range(nv.nvmlDeviceGetCount()):
            handle = self._handle(index)
            name = _text(nv.nvmlDeviceGetName(handle))
            uuid = _text(nv.nvmlDeviceGetUUID(handle))
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(handle)
            except nv.NVMLError_NotSupported:
                # Unified memory (GH200, GB10): no device figures; host memory is the pool.
                out.append(DeviceMemory(index, name, uuid, 0, 0, unified=True))
                continue
            out.append(DeviceMemory(index, name, uuid, int(mem.used), int(mem.total)))
        return out

    def processes(self, index: int) -> list[ProcessMemory]:
        nv = self._nvml
        handle = self._handle(index)
        seen: dict[int, ProcessMemory] = {}
        for getter in (
            nv.nvmlDeviceGetComputeRunningProcesses,
            nv.nvmlDeviceGetGraphicsRunningProcesses,
        ):
            try:
                procs = getter(handle)
            except nv.NVMLError_NotSupported:
                continue
            for proc in procs:
                used = getattr(proc, "usedGpuMemory", None)
                pid = int(proc.pid)
                if pid not in seen:
                    seen[pid] = ProcessMemory(index, pid, int(used) if used is not None else None)
        return list(seen.values())


@dataclass(slots=True)
class FakeNvml:
    """A scriptable NVML for tests: set ``device_list`` / ``process_map``, or make calls fail.

    ``fail_init`` makes :meth:`init` raise :class:`NvmlUnavailable`; ``fail_next`` holds
    exceptions that the next :meth:`devices` calls raise, one each; ``on_devices`` runs before
    every :meth:`devices` call (to change memory over time).
    """

    device_list: list[DeviceMemory] = field(default_factory=list)
    process_map: dict[int, list[ProcessMemory]] = field(default_factory=dict)
    fail_init: str | None = None
    fail_next: list[Exception] = field(default_factory=list)
    on_devices: Callable[[FakeNvml], None] | None = None
    initialised: bool = False
    shutdowns: int = 0

    def init(self) -> None:
        if self.fail_init is not None:
            raise NvmlUnavailable(self.fail_init)
        self.initialised = True

    def shutdown(self) -> None:
        self.initialised = False
        self.shutdowns += 1

    def devices(self) -> list[DeviceMemory]:
        if self.on_devices is not None:
            self.on_devices(self)
        if self.fail_next:
            raise self.fail_next.pop(0)
        return [
            DeviceMemory(d.index, d.name, d.uuid, d.used, d.total, d.unified)
            for d in self.device_list
        ]

    def processes(self, index: int) -> list[ProcessMemory]:
        return list(self.process_map.get(index, []))
