"""Samplers: one thread each, one interval each, one JSONL series each.

A sampler calls :meth:`Sampler.sample` every ``interval_s`` until its stop event is set,
``max_samples`` ticks have run or ``max_duration_s`` has passed. A failing sample becomes a
gap record; nothing raises out of the thread, so telemetry never stops a load run. A sampler
whose source cannot work at all here (no NVML) raises :class:`SourceUnavailable` from
:meth:`Sampler.setup`: one gap record says why, and the thread ends quietly.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servecheck.telemetry.nvml import NvmlBackend, NvmlUnavailable, ProcessMemory, PynvmlBackend
from servecheck.telemetry.prometheus import MetricMap, extract, parse_samples
from servecheck.telemetry.series import Gap, Sample, SeriesWriter, gap_from_exception

if TYPE_CHECKING:
    import httpx
    import psutil

# httpx and psutil are imported where used: the NVML sampler must run where only the standard
# library and pynvml exist (scripts/device_nvml_check.py on a bare GPU machine).

DEFAULT_MAX_DURATION_S = 7 * 24 * 3600.0


def _default_timeout(interval_s: float) -> float:
    # A busy engine answers /metrics late; a slow scrape only skips ticks, a short timeout
    # would turn every one of them into a gap exactly when the data matters.
    return max(1.0, min(5.0, 4 * interval_s))


class SourceUnavailable(Exception):
    """The sampler's source cannot be used at all; sampling ends after one gap record."""


class MetricsMissing(Exception):
    """A scrape worked but held none of the metrics the mapping looks for."""


@dataclass(slots=True)
class SamplerSummary:
    """What a sampler did: counts, last error, why it stopped."""

    source: str
    path: str
    interval_s: float
    samples: int
    gaps: int
    ticks: int
    last_error: str | None
    stopped: str  # "stop event", "max_samples", "max_duration", "unavailable", "not started"

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "path": self.path,
            "interval_s": self.interval_s,
            "samples": self.samples,
            "gaps": self.gaps,
            "ticks": self.ticks,
            "last_error": self.last_error,
            "stopped": self.stopped,
        }


class Sampler:
    """Base class: subclasses set ``source`` and implement :meth:`sample`.

    ``stop_event`` may be shared by several samplers (one ``set()`` stops them all).
    """

    source = "sampler"

    def __init__(
        self,
        path: Path | str,
        interval_s: float = 0.5,
        *,
        stop_event: threading.Event | None = None,
        max_samples: int | None = None,
        max_duration_s: float = DEFAULT_MAX_DURATION_S,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.path = Path(path)
        self.interval_s = float(interval_s)
        self.stop_event = stop_event if stop_event is not None else threading.Event()
        self.max_samples = max_samples
        self.max_duration_s = max_duration_s
        self._samples = 0
        self._gaps = 0
        self._ticks = 0
        self._last_error: str | None = None
        self._stopped = "not started"
        self._thread: threading.Thread | None = None
        self.ready = (
            threading.Event()
        )  # set after the first tick (or when the source is unavailable)

    # -- subclass hooks -------------------------------------------------------------------
    def setup(self) -> None:
        """Prepare the source; raise :class:`SourceUnavailable` if it cannot work here."""

    def teardown(self) -> None:
        """Release the source."""

    def sample(self, t: float, t_mono: float) -> Sequence[Sample | Gap]:
        """Take one sample stamped ``t``/``t_mono``; raise on failure (it becomes a gap).

        A partial failure may return :class:`Gap` records among the samples.
        """
        raise NotImplementedError

    # -- running --------------------------------------------------------------------------
    def start(self) -> Sampler:
        """Start the sampling thread (a daemon) and return ``self``."""
        if self._thread is not None:
            raise RuntimeError(f"{self.source} sampler already started")
        self._thread = threading.Thread(
            target=self.run, name=f"telemetry-{self.source}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> SamplerSummary:
        """Set the stop event, wait up to ``timeout_s`` for the thread, return the summary."""
        self.stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self.summary()

    def summary(self) -> SamplerSummary:
        return SamplerSummary(
            self.source,
            str(self.path),
            self.interval_s,
            self._samples,
            self._gaps,
            self._ticks,
            self._last_error,
            self._stopped,
        )

    def _gap(self, writer: SeriesWriter, gap: Gap) -> None:
        self._gaps += 1
        self._last_error = f"{gap.error_class}: {gap.error}"
        with contextlib.suppress(OSError):  # a full disk must not kill the run either
            writer.write([gap])

    def run(self) -> None:
        """The thread body; also callable directly (it blocks until stopped)."""
        try:
            writer = SeriesWriter(self.path)
        except OSError as exc:  # no series file: nothing to record into, but do not raise
            self._last_error = f"{type(exc).__name__}: {exc}"
            self._stopped = "unwritable"
            self.ready.set()
            return
        try:
            try:
                self.setup()
            except Exception as exc:
                self._gap(
                    writer, gap_from_exception(time.time(), time.monotonic(), self.source, exc)
                )
                self._stopped = "unavailable"
                return
            try:
                self._loop(writer)
            finally:
                try:
                    self.teardown()
                except Exception as exc:
                    self._last_error = f"teardown: {type(exc).__name__}: {exc}"
        finally:
            self.ready.set()  # never leave a waiter hanging
            writer.close()

    def _loop(self, writer: SeriesWriter) -> None:
        start = time.monotonic()
        tick = 0
        while True:
            if self.stop_event.is_set():
                self._stopped = "stop event"
                return
            if self.max_samples is not None and self._ticks >= self.max_samples:
                self._stopped = "max_samples"
                return
            if time.monotonic() - start >= self.max_duration_s:
                self._stopped = "max_duration"
                return
            t, t_mono = time.time(), time.monotonic()
            self._ticks += 1
            try:
                records = self.sample(t, t_mono)
                writer.write(records)
                for record in records:
                    if isinstance(record, Gap):
                        self._gaps += 1
                        self._last_error = f"{record.error_class}: {record.error}"
                    else:
                        self._samples += 1
            except Exception as exc:  # every failure is data
                self._gap(writer, gap_from_exception(t, t_mono, self.source, exc))
            self.ready.set()
            # Next tick on the fixed grid; a slow sample skips ticks instead of bunching up.
            tick = max(tick + 1, int((time.monotonic() - start) / self.interval_s) + 1)
            delay = start + tick * self.interval_s - time.monotonic()
            if delay > 0:
                self.stop_event.wait(delay)


class _ScrapeSampler(Sampler):
    """A sampler that GETs one URL per tick through the factory's client (Prometheus, DCGM)."""

    def __init__(
        self,
        path: Path | str,
        url: str,
        interval_s: float,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(path, interval_s, **kwargs)
        self.url = url
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s if timeout_s is not None else _default_timeout(self.interval_s)
        self._client: httpx.Client | None = None

    def setup(self) -> None:
        from servecheck.client.factory import ClientSettings, sync_client

        settings = ClientSettings.for_url(
            self.url, self.headers, timeout_s=self.timeout_s, connect_timeout_s=self.timeout_s
        )
        # bound_body: a scrape that never ends would hold the sampler (and its stop) for ever
        self._client = sync_client(settings, bound_body=True)

    def teardown(self) -> None:
        if self._client is not None:
            self._client.close()

    def _scrape(self) -> str:
        """The body of one GET of the URL; an HTTP error status raises (a gap)."""
        assert self._client is not None
        response = self._client.get(self.url)
        response.raise_for_status()
        return response.text


class PrometheusSampler(_ScrapeSampler):
    """Scrapes a ``/metrics`` URL and records the canonical metrics of ``engine``.

    ``metric_map`` (``{canonical: sample name}``) extends or overrides the engine's mapping.
    A scrape that fails, is not valid exposition text, or holds none of the mapped metrics is a
    gap. Records carry ``labels={"from": <sample name>}``.
    """

    source = "prometheus"

    def __init__(
        self,
        path: Path | str,
        url: str,
        engine: str = "generic",
        *,
        metric_map: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        interval_s: float = 0.5,
        **kwargs: Any,
    ) -> None:
        super().__init__(path, url, interval_s, headers=headers, timeout_s=timeout_s, **kwargs)
        self.engine = engine
        self.mapping = MetricMap.for_engine(engine, metric_map)
        # The last scrape's canonical values and its wall-clock time, for another reader of the
        # same page in this process (load/hung_watch.py), so the engine is scraped once.
        self.latest: tuple[float, dict[str, float]] | None = None

    def setup(self) -> None:
        if not self.mapping.candidates:
            raise SourceUnavailable(
                f"no metric mapping for engine {self.engine!r}: give telemetry.metrics in targets.yaml"
            )
        super().setup()

    def sample(self, t: float, t_mono: float) -> Sequence[Sample | Gap]:
        found = extract(self._scrape(), self.mapping)
        if not found:
            wanted = ", ".join(sorted(self.mapping.all_names()))
            raise MetricsMissing(f"{self.url} has none of: {wanted}")
        self.latest = (t, {v.name: v.value for v in found.values()})
        return [
            Sample(t, t_mono, self.source, v.name, v.value, {"from": v.source_metric})
            for v in found.values()
        ]


class DcgmSampler(_ScrapeSampler):
    """Scrapes a DCGM exporter: framebuffer used/free per GPU, recorded in bytes.

    DCGM reports ``DCGM_FI_DEV_FB_USED`` / ``DCGM_FI_DEV_FB_FREE`` in MiB; records are
    ``gpu_mem_used_bytes`` / ``gpu_mem_free_bytes`` with labels ``gpu`` (and ``uuid``).
    """

    source = "dcgm"
    FIELDS = {
        "DCGM_FI_DEV_FB_USED": "gpu_mem_used_bytes",
        "DCGM_FI_DEV_FB_FREE": "gpu_mem_free_bytes",
    }

    def __init__(
        self,
        path: Path | str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        interval_s: float = 1.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(path, url, interval_s, headers=headers, timeout_s=timeout_s, **kwargs)

    def sample(self, t: float, t_mono: float) -> Sequence[Sample | Gap]:
        samples = parse_samples(self._scrape())
        out: list[Sample] = []
        for field_name, metric in self.FIELDS.items():
            for labels, value in samples.get(field_name, []):
                keep = {"gpu": labels.get("gpu", "")}
                if "UUID" in labels:
                    keep["uuid"] = labels["UUID"]
                out.append(Sample(t, t_mono, self.source, metric, value * 1024 * 1024, keep))
        if not out:
            raise MetricsMissing(f"{self.url} has no {' / '.join(self.FIELDS)}")
        return out


class NvmlSampler(Sampler):
    """Local GPUs through NVML: used/total memory per device and used memory per process.

    Records: ``gpu_mem_used_bytes`` and ``gpu_mem_total_bytes`` (labels ``gpu``, ``name``,
    ``uuid``) and ``gpu_proc_mem_bytes`` (labels ``gpu``, ``pid``). Given the engine (``pid``, or
    ``port`` to find it), also ``gpu_tree_mem_bytes``: the device memory its process tree holds
    (vLLM's engine core and workers are children of the API server), per GPU; NVML hiding every
    one of those processes (a container without the host's PID namespace) is a gap. A device
    without memory figures (unified memory) records ``gpu_unified_memory`` = 1 instead. Without
    NVML the sampler writes one gap "NVML not available: ..." and ends.
    """

    source = "nvml"

    def __init__(
        self,
        path: Path | str,
        *,
        backend: NvmlBackend | None = None,
        interval_s: float = 1.0,
        pid: int | None = None,
        port: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(path, interval_s, **kwargs)
        self.backend: NvmlBackend = backend if backend is not None else PynvmlBackend()
        self.engine = _ProcessTree(pid, port) if pid is not None or port is not None else None

    def setup(self) -> None:
        try:
            self.backend.init()
        except NvmlUnavailable as exc:
            raise SourceUnavailable(f"NVML not available: {exc}") from exc

    def teardown(self) -> None:
        self.backend.shutdown()

    def sample(self, t: float, t_mono: float) -> Sequence[Sample | Gap]:
        out: list[Sample | Gap] = []
        seen: list[ProcessMemory] = []
        for dev in self.backend.devices():
            labels = {"gpu": str(dev.index), "name": dev.name, "uuid": dev.uuid}
            if dev.unified:
                out.append(Sample(t, t_mono, self.source, "gpu_unified_memory", 1.0, labels))
                continue
            out.append(
                Sample(t, t_mono, self.source, "gpu_mem_used_bytes", float(dev.used), labels)
            )
            out.append(
                Sample(
                    t, t_mono, self.source, "gpu_mem_total_bytes", float(dev.total), dict(labels)
                )
            )
            try:
                procs = self.backend.processes(dev.index)
            except Exception as exc:  # keep the device numbers; per-process data is a bonus
                gap = gap_from_exception(t, t_mono, self.source, exc, prefix="per-process memory: ")
                gap.labels = {"gpu": str(dev.index)}
                out.append(gap)
                continue
            seen.extend(procs)
            out.extend(
                Sample(
                    t,
                    t_mono,
                    self.source,
                    "gpu_proc_mem_bytes",
                    float(p.used),
                    {"gpu": str(dev.index), "pid": str(p.pid)},
                )
                for p in procs
                if p.used is not None
            )
        if self.engine is not None and any(isinstance(r, Sample) for r in out):
            out.append(self._tree_record(t, t_mono, seen, self.engine.pids()))
        return out

    def _tree_record(
        self, t: float, t_mono: float, procs: Sequence[ProcessMemory], tree: set[int]
    ) -> Sample | Gap:
        """The memory the engine's tree holds on all GPUs; a gap when NVML shows none of its
        processes with a figure (hidden memory is not 0 bytes)."""
        mine = [p.used for p in procs if p.pid in tree and p.used is not None]
        if not mine:
            why = f"NVML shows no memory figure for the engine's processes ({len(tree)} pid(s))"
            return Gap(t, t_mono, self.source, "EngineNotVisible", why)
        return Sample(t, t_mono, self.source, "gpu_tree_mem_bytes", float(sum(mine)))


class _ProcessTree:
    """The pids of an engine's process tree (``pid``, or the process listening on ``port``),
    looked up again after the root goes away."""

    def __init__(self, pid: int | None, port: int | None) -> None:
        self.pid, self.port = pid, port
        self._root: psutil.Process | None = None

    def pids(self) -> set[int]:
        import psutil

        try:
            if self._root is None or not self._root.is_running():
                pid = self.pid if self.pid is not None else find_pid_listening(self.port or 0)
                self._root = None if pid is None else psutil.Process(pid)
            if self._root is None:
                return set()
            return {self._root.pid, *(c.pid for c in self._root.children(recursive=True))}
        except psutil.Error:
            self._root = None
            return set()


def find_pid_listening(port: int) -> int | None:
    """The pid of the process listening on TCP ``port`` on this machine, or None.

    Processes of other users may show no pid without privileges; then None.
    """
    import psutil

    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, PermissionError):
        return None
    for conn in conns:
        if (
            conn.status == psutil.CONN_LISTEN
            and conn.laddr
            and conn.laddr.port == port
            and conn.pid
        ):
            return int(conn.pid)
    return None


class RssSampler(Sampler):
    """Resident memory of an engine process and all its children (vLLM's engine core).

    Give ``pid``, or ``port`` to find the process listening there (looked up again after the
    process goes away, so a restarted engine is followed). Records ``rss_tree_bytes`` (sum over
    the tree; shared pages count once per process), ``rss_process_bytes`` per process (labels
    ``pid``, ``name``) and ``process_count``.
    """

    source = "rss"

    def __init__(
        self,
        path: Path | str,
        *,
        pid: int | None = None,
        port: int | None = None,
        interval_s: float = 1.0,
        **kwargs: Any,
    ) -> None:
        if pid is None and port is None:
            raise ValueError("RssSampler needs pid or port")
        super().__init__(path, interval_s, **kwargs)
        self.pid = pid
        self.port = port
        self._proc: psutil.Process | None = None

    def _process(self) -> psutil.Process:
        import psutil

        if self._proc is not None and self._proc.is_running():
            return self._proc
        pid = self.pid
        if pid is None and self.port is not None:
            pid = find_pid_listening(self.port)
            if pid is None:
                raise ProcessLookupError(f"no process listening on port {self.port}")
        assert pid is not None
        self._proc = psutil.Process(pid)
        return self._proc

    def sample(self, t: float, t_mono: float) -> Sequence[Sample | Gap]:
        import psutil

        root = self._process()
        procs = [root]
        try:
            procs.extend(root.children(recursive=True))
        except psutil.NoSuchProcess:
            self._proc = None
            raise
        out: list[Sample] = []
        total = 0
        for proc in procs:
            try:
                rss = int(proc.memory_info().rss)
                name = proc.name()
            except psutil.NoSuchProcess:
                if proc is root:
                    self._proc = None
                    raise
                continue  # a child that just exited
            total += rss
            out.append(
                Sample(
                    t,
                    t_mono,
                    self.source,
                    "rss_process_bytes",
                    float(rss),
                    {"pid": str(proc.pid), "name": name},
                )
            )
        count = len(out)
        root_label = {"pid": str(root.pid)}
        out.append(Sample(t, t_mono, self.source, "rss_tree_bytes", float(total), root_label))
        out.append(Sample(t, t_mono, self.source, "process_count", float(count), dict(root_label)))
        return out
