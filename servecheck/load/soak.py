"""The soak run: identical load cycles with telemetry, then leak and drain verdicts.

A run is: an idle baseline, then ``cycles`` x (load ``cycle_s`` at a fixed concurrency of
streaming chat completions, idle ``idle_s``), with the target's metrics (and the engine's RSS)
sampled throughout by :class:`~servecheck.telemetry.TelemetryRecorder`. With ``abandon`` a
share of each cycle's streams is dropped mid-generation, and after the cycles the
abandoned-stream probe (:mod:`servecheck.probes.abandon`) runs and the server must drain within
``drain_bound_s``. Verdicts: :func:`~servecheck.telemetry.analyse_leak` for ``kv_usage``,
``requests_running`` and ``rss_tree_bytes`` (whichever were sampled), and
:func:`~servecheck.telemetry.check_drain` after the probe.

With a mix (``mix``, issue 45: :mod:`servecheck.load.workload.soak_mix`) each cycle runs one
member, the members in turn, ``cycles`` of each; the verdicts are made over all the cycles as
before, and each metric's drift is then put down to the members by each cycle's step
(:mod:`servecheck.telemetry.attribution`), so a leak's reason names the member whose own cycles
leak (:func:`member_sections`).

``servecheck soak`` (``servecheck/commands/soak.py``) parses the options into a
:class:`SoakPlan` and calls :func:`run_soak`; the run folder's ``records.jsonl`` (one line per
request, written as it finishes) and ``telemetry/`` are written here, ``soak.json`` (keys in
docs/telemetry.md), ``soak.png``, ``report.html`` and ``summary.md`` by
:mod:`servecheck.report.soak_html`; the console lines (each cycle's, each verdict's) are
:mod:`servecheck.report.soak_text`'s. Telemetry is imported inside functions (ARCHITECTURE.md).
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servecheck.analysis.verdict import INCONCLUSIVE, PASS, RunVerdict, compose
from servecheck.errors import SpecError, UsageError
from servecheck.load.hung_watch import OpenStreams
from servecheck.signals import Interrupted, run_async, signum_of

if TYPE_CHECKING:
    import pandas as pd
    from rich.progress import Progress

    from servecheck.analysis.down import DownWatch
    from servecheck.config.model import Target
    from servecheck.load.cache_flush import CacheFlush
    from servecheck.load.hung_watch import HungMonitor
    from servecheck.load.workload.soak_mix import MixContext
    from servecheck.probes.abandon import ProbeResult, ProbeSettings
    from servecheck.records.record import RecordWriter, RequestRecord
    from servecheck.telemetry import Cycle, DrainVerdict, LeakVerdict, Phases, TelemetryRecorder
    from servecheck.telemetry.attribution import MemberLeak

MIN_CYCLES = 5  # the fewest for which a one-sided Mann-Kendall test can reach p < 0.05
MAX_CYCLES = 1000
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# metric -> default tolerance (in the metric's unit); judged when sampled
LEAK_METRICS: dict[str, float | None] = {
    "kv_usage": 0.02,
    "requests_running": 0.5,
    "rss_tree_bytes": None,  # no fixed default: scales with the series (leak.auto_tolerance)
}


@dataclass(slots=True)
class SoakPlan:
    """What one soak run does; checked by :meth:`validate` before anything starts."""

    model: str
    cycles: int
    cycle_s: float
    idle_s: float
    baseline_s: float
    settle_s: float
    concurrency: int
    max_tokens: int = 128
    prompt_words: int = 60
    shared_prefix_words: int = 0  # > 0: requests open with one of 4 shared system prompts
    interval_s: float = 0.5
    tolerance: float = 0.02
    rss_tolerance: float | None = None  # None: derived from the series (leak.auto_tolerance)
    abandon: bool = False
    abandon_share: float = 0.25
    abandon_chunks: int = 3
    drain_bound_s: float = 30.0
    probe_streams: int = 8
    probe_rounds: int = 3
    fail_on_retention: bool = False
    max_total_s: float = 24 * 3600.0
    extra: dict[str, Any] = field(default_factory=dict)
    # A target down this long (analysis/down.py) ends the soak: no more cycles against a dead target.
    down_errors: int = 10
    down_window_s: float = 5.0
    # Hung but healthy (analysis/hung.py): N (None: 30 s, a soak has no latency budget; 0: off),
    # and a canary every K s of each idle phase (0: none) that must get its token within T.
    hung_after_s: float | None = None
    canary_every_s: float = 10.0
    canary_within_s: float | None = None
    # Flush the prefix cache before each drain measurement (load/cache_flush.py).
    cache_flush: bool = True
    # The members the cycles take turns over (load/workload/soak_mix.py): ``cycles`` rounds of
    # one cycle each, so every member has ``cycles`` cycles of its own to attribute a leak to.
    mix: tuple[str, ...] = ("chat",)
    context_length: int | None = None  # the target's, for the errors member's over-long prompts

    @property
    def total_cycles(self) -> int:
        """Load cycles in all: ``cycles`` for each member of the mix."""
        return self.cycles * len(self.mix)

    def member_of(self, index: int) -> str:
        """The member cycle ``index`` (1-based) runs: the mix in turn."""
        return self.mix[(index - 1) % len(self.mix)]

    @property
    def abandon_every(self) -> int:
        """Every n-th request of a cycle is dropped mid-stream (0: none)."""
        return (
            max(1, round(1 / self.abandon_share)) if self.abandon and self.abandon_share > 0 else 0
        )

    def planned_s(self) -> float:
        """Planned wall time (the probe counted at one stream timeout per round at most)."""
        total = self.baseline_s + self.total_cycles * (self.cycle_s + self.idle_s)
        if self.abandon:
            total += self.probe_rounds * 2.0 + self.drain_bound_s
        return total

    def validate(self) -> None:
        """Raise :class:`UsageError` naming the option when the plan cannot give a verdict."""
        if not MIN_CYCLES <= self.cycles <= MAX_CYCLES:
            raise SpecError(
                f"{{cycles}} {self.cycles}: between {MIN_CYCLES} and {MAX_CYCLES} "
                f"(a trend test needs at least {MIN_CYCLES} cycles to show a leak)"
            )
        if not 1 <= self.concurrency <= 1024:
            raise SpecError(f"{{concurrency}} {self.concurrency}: between 1 and 1024")
        self._validate_mix()
        if not 0 <= self.shared_prefix_words <= 100_000:
            raise SpecError(
                f"{{shared_prefix_words}} {self.shared_prefix_words}: between 0 and 100000"
            )
        if not 1 <= self.max_tokens <= 100_000 or not 1 <= self.prompt_words <= 100_000:
            raise SpecError("{max_tokens} and {prompt_words} must be between 1 and 100000")
        if not 0 <= self.settle_s < self.idle_s:
            raise SpecError(
                f"{{settle_s}} {self.settle_s:g}s: must be shorter than {{idle_s}} {self.idle_s:g}s"
            )
        window = self.idle_s - self.settle_s
        if window < 3 * self.interval_s:
            raise SpecError(
                f"{{idle_s}} {self.idle_s:g}s with {{settle_s}} {self.settle_s:g}s leaves {window:g}s to measure each drain: fewer "
                f"than 3 samples at {{interval_s}} {self.interval_s:g}s; lengthen {{idle_s}} or shorten {{interval_s}}"
            )
        if self.baseline_s < 3 * self.interval_s:
            raise SpecError(
                f"{{baseline_s}} {self.baseline_s:g}s: fewer than 3 samples at {{interval_s}} {self.interval_s:g}s"
            )
        if not 0 < self.tolerance < 1:
            raise SpecError(
                f"{{tolerance}} {self.tolerance}: a KV-usage fraction in (0, 1), e.g. 0.02"
            )
        if self.abandon:
            if not 0 <= self.abandon_share <= 1:
                raise SpecError(f"{{abandon_share}} {self.abandon_share}: between 0 and 1")
            if not 1 <= self.abandon_chunks < self.max_tokens:
                raise SpecError(
                    f"{{abandon_chunks}} {self.abandon_chunks}: at least 1 and below {{max_tokens}} {self.max_tokens}"
                )
            if not 0 < self.drain_bound_s <= 3600:
                raise SpecError(f"{{drain_bound_s}} {self.drain_bound_s:g}s: between 0 and 1h")
        planned = self.planned_s()
        if planned > self.max_total_s:
            raise SpecError(
                f"the plan takes {_dur(planned)}, more than {{max_total_s}} {_dur(self.max_total_s)}: "
                "fewer or shorter cycles, or raise {max_total_s}"
            )

    def _validate_mix(self) -> None:
        """The mix names known members, once each; dropping streams has one way to ask for it."""
        from servecheck.load.workload.soak_mix import MEMBERS, parse_mix

        self.mix = parse_mix(self.mix)
        if "cancel" in self.mix and self.abandon:
            raise SpecError(
                "{mix} member `cancel` drops streams in cycles of its own; {abandon} drops a "
                "share of every member's cycles, so a leak on dropped streams could not be put "
                "down to one member: use one of the two"
            )
        if (
            any(MEMBERS[m].drops for m in self.mix)
            and not 1 <= self.abandon_chunks < self.max_tokens
        ):
            raise SpecError(
                f"{{abandon_chunks}} {self.abandon_chunks}: at least 1 and below {{max_tokens}} "
                f"{self.max_tokens} (the `cancel` member drops its streams after that many chunks)"
            )

    def mix_context(self, target: Target) -> MixContext:
        """What the mix's request bodies are made from (load/workload/soak_mix.py)."""
        from servecheck.load.workload.soak_mix import MixContext

        return MixContext(
            self.model,
            self.max_tokens,
            self.prompt_words,
            dict(self.extra),
            self.context_length,
            None if target.reasoning is None else dict(target.reasoning.thinking_on),
        )

    def check_target(self, target: Target, skip: tuple[str, ...] = ()) -> None:
        """Refuse, before any request, a member the target cannot serve (naming it and why);
        ``skip``: members not checked yet."""
        from servecheck.load.workload.soak_mix import refusal

        mix = [m for m in self.mix if m not in skip]
        why = refusal(mix, target, self.mix_context(target))
        if why:
            raise SpecError("{mix}: {why}", why=why)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dur(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.3g} s"


def parse_size(text: str) -> float:
    """``256MiB``, ``1GiB``, ``1e9`` -> bytes; a clear error otherwise."""
    units = {
        "": 1,
        "b": 1,
        "kib": 2**10,
        "mib": 2**20,
        "gib": 2**30,
        "kb": 1e3,
        "mb": 1e6,
        "gb": 1e9,
    }
    s = text.strip().lower()
    num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = s[len(num) :]
    try:
        value = float(num) * units[unit]
    except (ValueError, KeyError):
        raise UsageError(f"size {text!r}: write e.g. 256MiB, 1GiB or a number of bytes") from None
    if value <= 0:
        raise UsageError(f"size {text!r}: must be positive")
    return value


def probe_settings(plan: SoakPlan) -> ProbeSettings:
    """The abandoned-stream probe's settings for a soak plan with ``--abandon``."""
    from servecheck.probes.abandon import ProbeSettings

    return ProbeSettings(
        streams=plan.probe_streams,
        rounds=plan.probe_rounds,
        chunks=plan.abandon_chunks,
        max_tokens=plan.max_tokens,
        prompt_words=plan.prompt_words,
        extra=dict(plan.extra),
    )


# ---------------------------------------------------------------------------------------------
# The load driver: a closed loop of streaming chat completions, one record per request


@dataclass(slots=True)
class CycleStats:
    """What one load cycle did (``soak.json`` ``cycles[]``)."""

    index: int
    start: float
    end: float
    requests: int = 0
    ok: int = 0
    failed: int = 0
    abandoned: int = 0
    tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    first_error: str = ""
    e2e_p50: float | None = None
    ttft_p50: float | None = None
    down: str | None = None  # the target went down during this cycle (analysis/down.py): why
    member: str = "chat"  # the mix's member this cycle ran (load/workload/soak_mix.py)
    refused: int = 0  # the errors member's requests refused with a 4xx, as they must be


SHARED_GROUPS = 4


def shared_system_message(words: int, k: int) -> dict[str, str]:
    """Request ``k``'s system prompt: one of :data:`SHARED_GROUPS` texts of ``words`` words."""
    from servecheck.load.workload.prompts import words_text

    g = k % SHARED_GROUPS
    return {"role": "system", "content": f"Group {g}. " + words_text(words, 7_000_001 + g)}


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


async def load_cycle(
    target: Target,
    plan: SoakPlan,
    index: int,
    writer: RecordWriter,
    seq: itertools.count[int],
    tick: Callable[[], None] | None = None,
    watch: DownWatch | None = None,
    streams: OpenStreams | None = None,
) -> CycleStats:
    """One load cycle: ``plan.concurrency`` workers send streams back to back for ``plan.cycle_s``;
    requests in flight at the end finish (bounded by the target's timeout). Prompts repeat the
    same seeded sequence every cycle, so cycles are identical. Every request becomes a
    :class:`~servecheck.records.record.RequestRecord` in ``writer`` as it finishes; a dropped
    stream (``--abandon``) is recorded with ``abandoned=True``, ``kind="abandon"``, no error; the
    cycle sends what its member of the mix sends (``plan.member_of(index)``), each record's
    ``kind`` naming the member. With
    ``watch``, the cycle ends as soon as the records say the target went down (``down``); with
    ``streams`` (load/hung_watch.py) its streams are shown to the hung-but-healthy watch, and the
    cycle ends as soon as that finds the target hung (``down`` then holds the finding)."""
    import httpx

    from servecheck.client.factory import ClientSettings, async_client
    from servecheck.load.workload.soak_mix import MEMBERS
    from servecheck.probes.abandon import stream_chat
    from servecheck.records.record import RequestRecord

    settings = ClientSettings.for_target(target)
    url = target.base_url + "/chat/completions"
    headers = dict(settings.headers)
    member = MEMBERS[plan.member_of(index)]
    ctx = plan.mix_context(target)
    stats = CycleStats(index, time.time(), 0.0, member=member.name)
    e2es: list[float] = []
    ttfts: list[float] = []
    local = itertools.count()
    every = plan.abandon_every
    stop_at = time.monotonic() + plan.cycle_s
    watched = OpenStreams() if streams is None else streams  # None: no watch looks (never hung)

    async def worker(client: httpx.AsyncClient) -> None:
        while time.monotonic() < stop_at and stats.down is None:
            k = next(local)
            drop = member.drops or (bool(every) and k % every == every - 1)
            body = member.body(ctx, k)
            if plan.shared_prefix_words and isinstance(body["messages"], list):
                body["messages"].insert(0, shared_system_message(plan.shared_prefix_words, k))
            rec = await watched.watch(
                stream_chat,
                client,
                url,
                body,
                headers,
                abandon_after=plan.abandon_chunks if drop else None,
                timeout_s=target.timeout_s,
                rec=RequestRecord(
                    target=target.name,
                    scenario="soak",
                    worker=f"cycle-{index}",
                    seq=next(seq),
                    t_intended=0.0,  # stream_chat: due when sent
                    t_sent=0.0,
                    kind=member.name,
                ),
            )
            if rec.abandoned and member.name == "chat":
                rec.kind = "abandon"  # --abandon's share of a chat cycle, as before mixes
            writer.write(rec)
            if watch is not None and stats.down is None:
                stats.down = watch.feed(
                    {
                        "t_sent": rec.t_sent,
                        "error": rec.error,
                        "abandoned": rec.abandoned,
                        "status": rec.status,
                        "error_message": rec.error_message,
                    }
                )
            pause = _tally(stats, rec, member.refused, e2es, ttfts)
            if pause:
                await asyncio.sleep(min(pause, max(0.0, stop_at - time.monotonic())))

    async with async_client(
        settings.with_(max_connections=plan.concurrency), default_headers=False
    ) as client:
        workers = asyncio.gather(*(worker(client) for _ in range(plan.concurrency)))
        await _ticking(workers, stats, tick, watched)
    stats.end = time.time()
    stats.e2e_p50, stats.ttft_p50 = _median(e2es), _median(ttfts)
    return stats


def _tally(
    stats: CycleStats, rec: RequestRecord, refused: bool, e2es: list[float], ttfts: list[float]
) -> float:
    """Count one finished request into its cycle; return how long its worker pauses before the
    next (a failing server is not hammered; refusals come back in milliseconds)."""
    from servecheck.load.workload.soak_mix import ERROR_PAUSE_S

    stats.requests += 1
    stats.tokens += rec.tokens
    if refused:
        if rec.status is not None and 400 <= rec.status < 500:
            stats.refused += 1
            return ERROR_PAUSE_S
        why = (
            f"HTTP {rec.status}" if rec.error is None else f"{rec.error}: {rec.error_message[:200]}"
        )
        stats.failed += 1
        name = "not-refused" if rec.error is None else rec.error
        stats.errors[name] = stats.errors.get(name, 0) + 1
        stats.first_error = (
            stats.first_error or f"a request that must be refused with a 4xx got {why}"
        )
        return 0.5
    if rec.abandoned:
        stats.abandoned += 1
    elif rec.error is None:
        stats.ok += 1
        if rec.e2e is not None:
            e2es.append(rec.e2e)
        if rec.ttft is not None:
            ttfts.append(rec.ttft)
    else:
        stats.failed += 1
        stats.errors[rec.error] = stats.errors.get(rec.error, 0) + 1
        stats.first_error = stats.first_error or f"{rec.error}: {rec.error_message[:200]}"
        return 0.5
    return 0.0


async def _ticking(
    workers: asyncio.Future[Any],
    stats: CycleStats,
    tick: Callable[[], None] | None,
    streams: OpenStreams,
) -> None:
    """Await a cycle's workers, ticking the progress bar; cancel them when the hung-but-healthy
    watch speaks (no stream would end: the cycle's ``down`` holds the finding)."""

    async def ticker() -> None:
        while True:
            if tick is not None:
                tick()
            if stats.down is None and (found := streams.finding()):
                stats.down = found
                workers.cancel()
            await asyncio.sleep(0.25)

    ticking = asyncio.create_task(ticker())
    try:
        await workers
    except asyncio.CancelledError:
        if stats.down is None:  # not ours: a signal's
            raise
    finally:
        ticking.cancel()


# ---------------------------------------------------------------------------------------------
# The run


@dataclass(slots=True)
class SoakResult:
    """Everything a soak produced; ``data`` is what ``soak.json`` holds.

    ``frame`` (the telemetry) and ``phases`` are what the report's figure is drawn from:
    :func:`servecheck.report.soak_html.write_soak_report` writes soak.json, soak.png and report.html.
    """

    run_dir: Path
    data: dict[str, Any]
    leak: dict[str, LeakVerdict]
    drain: DrainVerdict | None
    exit_code: int
    frame: pd.DataFrame | None = None
    phases: Phases | None = None


def leak_verdicts(
    frame: pd.DataFrame,
    phases: Phases,
    plan: SoakPlan,
    drain: DrainVerdict | None,
    prefix_cache: bool | str | None = None,
    device: str = "auto",
) -> tuple[dict[str, LeakVerdict], str, list[RunVerdict]]:
    """Leak verdicts for every sampled metric of :data:`LEAK_METRICS` and every device memory
    series (``telemetry/device.py``), the primary metric (``kv_usage``, else
    ``requests_running``) and the run's stage verdicts (a leak and a drain that did not finish
    fail; a sampled series that could not be judged, or read, is inconclusive).
    ``prefix_cache``: the target's ``capabilities.prefix_cache`` (a kv_usage plateau is
    retention only where a prefix cache is declared or seen); ``device``: the target's
    ``telemetry.device`` (a declared GPU whose memory cannot be read is inconclusive)."""
    from servecheck.telemetry.leak import analyse_leak, inconclusive_reason, prefix_cache_evidence
    from servecheck.telemetry.leak import unjudged as unjudged_series

    present = set(frame.loc[frame["kind"] == "sample", "metric"]) if len(frame) else set()
    tolerances: dict[str, float | None] = {
        **LEAK_METRICS,
        "kv_usage": plan.tolerance,
        "rss_tree_bytes": plan.rss_tolerance,
    }
    cache = prefix_cache_evidence(frame, prefix_cache)
    verdicts = {
        m: analyse_leak(
            frame,
            phases,
            m,
            tol,
            min_cycles=MIN_CYCLES,
            prefix_cache=cache if m == "kv_usage" else None,
            unloaded=_refused_cycles(plan, len(phases.cycles)),
        )
        for m, tol in tolerances.items()
        if m in present
    }
    primary = "kv_usage" if "kv_usage" in present else "requests_running"
    stages = _device_memory(frame, phases, device, verdicts)
    for metric, v in verdicts.items():
        if v.status == "leak":
            stages.append(RunVerdict.of(False, f"{metric}: leak"))
        elif v.status == "growth":
            # A significant rise that flattened: not a leak, but a memory verdict never made.
            why = f"{metric}: inconclusive: rose significantly, then flattened (see its verdict)"
            stages.append(RunVerdict.of(False, why, otherwise=INCONCLUSIVE))
        elif v.status == "retention" and plan.fail_on_retention and metric == "kv_usage":
            stages.append(RunVerdict.of(False, f"{metric}: retention (fail_on_retention is set)"))
    unjudged = (
        f"{primary}: not sampled (check the metrics URL and the engine's metric names)"
        if primary not in verdicts
        else f"{primary}: insufficient data"
        if verdicts[primary].status == "insufficient_data"
        else f"{primary}: inconclusive ({inconclusive_reason(verdicts[primary])})"
        if verdicts[primary].status == "inconclusive"
        else ""
    )
    stages.append(RunVerdict.of(not unjudged, unjudged, otherwise=INCONCLUSIVE))
    # Any other sampled series without a verdict: no PASS on a memory verdict never made.
    stages += [
        RunVerdict.of(False, reason, otherwise=INCONCLUSIVE)
        for reason in unjudged_series(verdicts, skip=primary)
    ]
    if drain is not None:
        stages.append(RunVerdict.of(drain.status == "ok", f"drain: {drain.status}"))
    return verdicts, primary, stages


def _refused_cycles(plan: SoakPlan, cycles: int) -> set[int]:
    """The cycles (1-based) of a member whose requests are refused before they run (the error
    path): their load moves no engine gauge by design, so they do not count against the check
    that the load moved it (a clean chat,errors soak on vLLM CPU: 11 of its 135 load samples
    moved the gauges, 8 %, INCONCLUSIVE; its chat cycles' alone 11 of 55, ok; 2026-12-06)."""
    from servecheck.load.workload.soak_mix import MEMBERS

    return {i for i in range(1, cycles + 1) if MEMBERS[plan.member_of(i)].refused}


def member_sections(
    frame: pd.DataFrame,
    phases: Phases,
    plan: SoakPlan,
    cycles: list[CycleStats],
    verdicts: dict[str, LeakVerdict],
    stages: list[RunVerdict],
) -> list[dict[str, Any]]:
    """soak.json's ``members``: each member's cycles and counts and, with more than one member,
    its share of each judged metric (telemetry/attribution.py). A leak's stage reason and its
    verdict's message then name the member whose own cycles leak (``kv_usage: leak on member
    `errors```), so every output says it from the same verdict."""
    from servecheck.telemetry.attribution import attribute, leaking

    ran = [c.member for c in cycles][: len(phases.cycles)]
    shares: dict[str, list[MemberLeak]] = {}
    if len(plan.mix) > 1:
        for metric, v in verdicts.items():
            if metric in LEAK_METRICS and v.baseline is not None:
                shares[metric] = attribute(frame, phases, v, ran, min_cycles=MIN_CYCLES)
                _name_members(metric, v, shares[metric], leaking(shares[metric]), stages)
    out = []
    for member in plan.mix:
        own = [c for c in cycles if c.member == member]
        out.append(
            {
                "member": member,
                "cycles": [c.index for c in own],
                "requests": sum(c.requests for c in own),
                "ok": sum(c.ok for c in own),
                "failed": sum(c.failed for c in own),
                "refused": sum(c.refused for c in own),
                "abandoned": sum(c.abandoned for c in own),
                "leak": {
                    m: s.to_dict() for m, ss in shares.items() for s in ss if s.member == member
                },
            }
        )
    return out


def _name_members(
    metric: str,
    verdict: LeakVerdict,
    shares: list[MemberLeak],
    names: list[str],
    stages: list[RunVerdict],
) -> None:
    """Name the leaking members in ``metric``'s stage reason and its verdict's message."""
    if verdict.status not in ("leak", "growth"):
        return
    who = ", ".join(f"`{n}`" for n in names)
    said = f"on member{'s' if len(names) > 1 else ''} {who}" if names else "on no one member"
    short = [f"`{s.member}` {len(s.steps)}" for s in shares if s.status == "insufficient_data"]
    if not names and short:  # a lost drain window costs its cycle's step and the next one's
        said += f" (too few cycles with a readable step to judge: {', '.join(short)})"
    by = {s.member: s for s in shares}
    verdict.message += "; " + "; ".join(
        f"{'LEAK on' if n in names else 'clean:'} member `{n}`: {s.message}" for n, s in by.items()
    )
    for stage in stages:
        stage.reasons = [
            f"{r} {said}"
            if r == f"{metric}: leak"
            else r.replace(f"{metric}: inconclusive: rose", f"{metric}: inconclusive {said}: rose")
            for r in stage.reasons
        ]


def _device_memory(
    frame: pd.DataFrame, phases: Phases, device: str, verdicts: dict[str, LeakVerdict]
) -> list[RunVerdict]:
    """Add the device memory verdicts to ``verdicts`` (with a ``device_memory`` note where there
    is one); return the INCONCLUSIVE stages of what could not be read."""
    from servecheck.telemetry.device import NOTE, UNREADABLE, judge_device_memory
    from servecheck.telemetry.leak import LeakVerdict

    judged = judge_device_memory(frame, phases, declared=device, min_cycles=MIN_CYCLES)
    verdicts.update(judged.verdicts)
    if judged.notes:
        verdicts["device_memory"] = LeakVerdict(
            NOTE, "device_memory", "; ".join(judged.notes), float("nan")
        )
    reasons = [
        f"{name}: inconclusive: {v.message.removeprefix('UNREADABLE: ')}"
        for name, v in judged.verdicts.items()
        if v.status == UNREADABLE
    ]
    return [RunVerdict.of(False, r, otherwise=INCONCLUSIVE) for r in reasons + judged.problems]


def _progress_bar(progress: bool) -> Progress:
    """The soak's transient progress bar on stderr (disabled without ``progress``)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=not progress,
    )


def _abandon_and_drain(
    target: Target,
    plan: SoakPlan,
    rec: TelemetryRecorder,
    baseline: tuple[float, float],
    tick: Callable[..., None],
    say: Callable[[str], None],
) -> tuple[ProbeResult, DrainVerdict]:
    """The abandoned-stream probe after the cycles, then the wait for the engine to drain."""
    return _probe_and_drain(
        target,
        plan.model,
        probe_settings(plan),
        rec,
        baseline,
        bound_s=plan.drain_bound_s,
        tolerance=plan.tolerance,
        interval_s=plan.interval_s,
        say=say,
        tick=tick,
    )


def _probe_and_drain(
    target: Target,
    model: str,
    settings: ProbeSettings,
    rec: TelemetryRecorder,
    baseline: tuple[float, float],
    *,
    bound_s: float,
    tolerance: float,
    interval_s: float,
    say: Callable[[str], None],
    tick: Callable[..., None] | None = None,
) -> tuple[ProbeResult, DrainVerdict]:
    """Abandon streams (``run_probe``), then wait for the engine to drain back to ``baseline``;
    marks both phases on the recorder's clock (a soak's tail and ``--probe-only`` alike)."""
    from servecheck.probes.abandon import run_probe, wait_drained

    rec.mark("abandon-probe")
    if tick:
        tick("soak: abandoned-stream probe")
    probe = run_async(run_probe(target, model, settings))
    say(probe.line())
    rec.mark("drain")
    if tick:
        tick("soak: waiting for the drain")
    drain = wait_drained(
        rec,
        probe.t_end,
        bound_s,
        baseline_window=baseline,
        tolerance=tolerance,
        poll_s=max(interval_s, 0.25),
        on_poll=(lambda _s: tick()) if tick else None,
    )
    return probe, drain


def run_soak(
    target: Target,
    plan: SoakPlan,
    run_dir: Path,
    *,
    telemetry_overrides: dict[str, Any] | None = None,
    progress: bool = True,
    say: Callable[[str], None] | None = None,
) -> SoakResult:
    """Run a validated plan against ``target``; return the verdicts.

    Writes ``records.jsonl`` and ``telemetry/`` into ``run_dir`` as the run goes; the report files
    are written by :func:`servecheck.report.soak_html.write_soak_report`.
    """
    from servecheck.analysis.down import DownRule, DownWatch
    from servecheck.load.cache_flush import CacheFlush
    from servecheck.records.record import RecordWriter
    from servecheck.report.soak_text import cycle_line  # the console's text (ARCHITECTURE.md)
    from servecheck.telemetry import Cycle, Phases, TelemetryRecorder

    say = say or (lambda text: None)
    plan.check_target(target)  # a member the target cannot serve: refused before any request
    run_dir.mkdir(parents=True, exist_ok=True)
    rec: TelemetryRecorder = TelemetryRecorder.for_target(
        target, run_dir, target.telemetry.as_settings(), **(telemetry_overrides or {})
    )
    seq = itertools.count()
    cycles: list[CycleStats] = []
    probe = None
    drain = None
    bar = _progress_bar(progress)
    version = _engine_version(target)
    started = time.time()
    watch = DownWatch(DownRule(plan.down_errors, plan.down_window_s), started)
    idling = threading.Event()  # the canary asks in idle phases only
    streams = OpenStreams()
    hung = _hung_monitor(target, plan, started, streams, idling)
    flush = CacheFlush(target, enabled=plan.cache_flush)
    baseline: tuple[float, float] | None = None
    phase_cycles: list[Cycle] = []
    try:
        with rec, RecordWriter(run_dir / "records.jsonl") as writer, bar:
            task = bar.add_task("soak: starting telemetry", total=plan.planned_s())
            t_origin = time.monotonic()

            def tick(description: str | None = None) -> None:
                bar.update(
                    task,
                    completed=min(plan.planned_s(), time.monotonic() - t_origin),
                    description=description,
                )

            def idle(seconds: float, description: str) -> None:
                end = time.monotonic() + seconds
                tick(description)
                idling.set()
                while (left := end - time.monotonic()) > 0 and not streams.finding():
                    time.sleep(min(0.25, left))
                    tick()
                idling.clear()

            if not rec.wait_ready(timeout_s=max(10.0, 4 * plan.interval_s)):
                say(
                    "telemetry: not every sampler answered within 10 s; going on (gaps are recorded)"
                )
            t_origin = time.monotonic()
            flush.flush("baseline")  # the baseline too starts from an empty cache
            rec.mark("baseline")
            b0 = time.time()
            idle(plan.baseline_s, "soak: idle baseline")
            baseline = (b0, time.time())
            for i in range(1, plan.total_cycles + 1):
                rec.mark("load", cycle=str(i), member=plan.member_of(i))
                tick(f"soak: cycle {i}/{plan.total_cycles} {plan.member_of(i)} load")
                stats = run_async(
                    load_cycle(
                        target, plan, i, writer, seq, tick=tick, watch=watch, streams=streams
                    )
                )
                cycles.append(stats)
                if stats.down is not None:
                    # No idle, no more cycles, no probe: every one would fail to connect.
                    say(cycle_line(plan, stats))
                    stats.end = time.time()
                    phase_cycles.append(Cycle(stats.start, stats.end, stats.end, stats.end))
                    break
                flush.flush(f"cycle {i}")  # retained cache and a leak read apart (cache_flush.py)
                rec.mark("idle", cycle=str(i))
                idle(plan.idle_s, f"soak: cycle {i}/{plan.total_cycles} idle")
                drain_end = time.time()
                phase_cycles.append(
                    Cycle(
                        stats.start, stats.end, drain_end, min(stats.end + plan.settle_s, drain_end)
                    )
                )
                say(cycle_line(plan, stats))
                if streams.finding():  # hung in the idle phase: the canary or the counters said so
                    break
            phases = Phases(baseline, phase_cycles)
            if plan.abandon and watch.down is None and not streams.finding():
                probe, drain = _abandon_and_drain(target, plan, rec, baseline, tick, say)
            rec.mark("end")
    except KeyboardInterrupt as exc:
        # Ctrl-C or SIGTERM: what was measured is on disk already (records.jsonl, telemetry/);
        # the caller writes the partial soak.json, report and a JUnit file marked partial.
        cut = _Cut(started, baseline, phase_cycles, cycles, signum_of(exc), version)
        raise Interrupted(cut.signum, _interrupted(target, plan, run_dir, rec, cut)) from None
    finally:
        if hung is not None:
            hung.stop()
    ended = time.time()
    frame = rec.frame()
    verdicts, primary, stages = leak_verdicts(
        frame, phases, plan, drain, target.capabilities.prefix_cache, target.telemetry.device
    )
    members = member_sections(frame, phases, plan, cycles, verdicts, stages)
    finding = None if hung is None else hung.finding
    stages += _flush_note(flush, verdicts)
    verdict = compose(
        [
            RunVerdict.of(finding is None, "" if finding is None else finding.line),
            RunVerdict.of(watch.down is None, watch.down or ""),  # down first
            *stages,
        ]
    )
    data = _soak_data(target, plan, run_dir, (started, ended), phases, cycles, primary, version)
    data.update(
        leak={m: v.to_dict() for m, v in verdicts.items()},
        drain=None if drain is None else drain.to_dict(),
        probe=None if probe is None else probe.to_dict(),
        telemetry=[x.to_dict() for x in rec.summaries()],
        hung=None if finding is None else finding.to_dict(),
        cache_flush=flush.to_dict(),
        members=members,
        failures=verdict.reasons,
        verdict=verdict.status,
        ok=verdict.passed,
        exit_code=verdict.exit_code,
    )
    return SoakResult(run_dir, data, verdicts, drain, verdict.exit_code, frame, phases)


def _hung_monitor(
    target: Target, plan: SoakPlan, started: float, streams: OpenStreams, idling: threading.Event
) -> HungMonitor | None:
    """The hung-but-healthy watch over the whole soak (analysis/hung.py): the cycles' streams
    and the engine's counters always, the canary in idle phases."""
    from servecheck.analysis.hung import HungRule
    from servecheck.load.hung_watch import HungMonitor

    rule = HungRule(plan.hung_after_s, plan.canary_every_s, plan.canary_within_s)
    if not rule.active:
        return None
    monitor = HungMonitor.for_target(
        target, plan.model, rule.resolved(None, None), started, streams, idling.is_set
    )
    streams.finding = lambda: None if monitor.finding is None else monitor.finding.line
    return monitor.start()


def _flush_note(flush: CacheFlush, verdicts: dict[str, LeakVerdict]) -> list[RunVerdict]:
    """The verdict's note where kv_usage was judged from drains measured without a flush."""
    note = flush.note() if "kv_usage" in verdicts else ""
    return [RunVerdict(PASS, [note])] if note else []


@dataclass(slots=True)
class _Cut:
    """Where a soak was when a signal stopped it."""

    started: float
    baseline: tuple[float, float] | None
    phase_cycles: list[Cycle]  # the cycles whose idle (drain) finished
    cycles: list[CycleStats]
    signum: int
    engine_version: str | None = None


def _interrupted(
    target: Target, plan: SoakPlan, run_dir: Path, rec: TelemetryRecorder, cut: _Cut
) -> SoakResult:
    """The partial result of an interrupted soak: the leak verdicts over the cycles that
    finished (a leak they already show fails the run; too few cycles are insufficient data), and
    never a pass: the interruption itself is an inconclusive stage."""
    from servecheck.telemetry import Phases

    ended = time.time()
    why = (
        f"partial run: interrupted by {signal.Signals(cut.signum).name} after "
        f"{ended - cut.started:.1f} s, {len(cut.phase_cycles)} of {plan.cycles} cycles finished"
        " (records.jsonl and telemetry/ hold everything measured up to the signal)"
    )
    frame = rec.frame()
    phases = Phases(cut.baseline or (cut.started, ended), cut.phase_cycles)
    verdicts: dict[str, LeakVerdict] = {}
    stages: list[RunVerdict] = []
    primary = "kv_usage"
    members: list[dict[str, Any]] = []
    if cut.baseline is not None:
        verdicts, primary, stages = leak_verdicts(
            frame, phases, plan, None, target.capabilities.prefix_cache, target.telemetry.device
        )
        members = member_sections(frame, phases, plan, cut.cycles, verdicts, stages)
    verdict = compose([RunVerdict.of(False, why, otherwise=INCONCLUSIVE), *stages])
    data = _soak_data(
        target, plan, run_dir, (cut.started, ended), phases, cut.cycles, primary, cut.engine_version
    )
    data.update(
        leak={m: v.to_dict() for m, v in verdicts.items()},
        drain=None,
        probe=None,
        telemetry=[x.to_dict() for x in rec.summaries()],
        members=members,
        failures=verdict.reasons,
        verdict=verdict.status,
        ok=False,
        exit_code=verdict.exit_code,
        partial=True,
    )
    return SoakResult(run_dir, data, verdicts, None, verdict.exit_code, frame, phases)


def _engine_version(target: Target) -> str | None:
    """The version the engine reports (client/version.py, as check's discovery asks it), so
    soak.json names it as every run kind does."""
    from servecheck.client.version import probe_engine_version

    return probe_engine_version(target)


def _soak_data(
    target: Target,
    plan: SoakPlan,
    run_dir: Path,
    span: tuple[float, float],
    phases: Phases,
    cycles: list[CycleStats],
    primary: str,
    engine_version: str | None = None,
) -> dict[str, Any]:
    """soak.json's keys up to the verdicts (docs/telemetry.md)."""
    return {
        "kind": "soak",
        "version": 1,
        "target": target.name,
        "engine": target.engine,
        "engine_version": engine_version,
        "run_id": run_dir.name,
        "started_at": span[0],
        "ended_at": span[1],
        "plan": plan.to_dict(),
        "phases": phases.to_dict(),
        "requests": {
            "total": sum(c.requests for c in cycles),
            "ok": sum(c.ok for c in cycles),
            "failed": sum(c.failed for c in cycles),
            "abandoned": sum(c.abandoned for c in cycles),
            "refused": sum(c.refused for c in cycles),  # the errors member's 4xx, as they must be
        },
        "cycles": [asdict(c) for c in cycles],
        "primary": primary,
    }


# ---------------------------------------------------------------------------------------------
# --probe-only: baseline, the abandoned-stream probe, the drain verdict; no load cycles


@dataclass(slots=True)
class ProbeOnlyPlan:
    """What ``servecheck soak --probe-only`` does (built and checked from the options by
    ``servecheck.commands.soak``)."""

    settings: ProbeSettings
    baseline_s: float
    bound_s: float
    interval_s: float
    tolerance: float

    def telemetry_plan(self, model: str) -> SoakPlan:
        """A stand-in soak plan for :func:`telemetry_overrides` (only its interval is read)."""
        return SoakPlan(
            model=model,
            cycles=MIN_CYCLES,
            cycle_s=1,
            idle_s=1,
            baseline_s=self.baseline_s,
            settle_s=0,
            concurrency=1,
            interval_s=self.interval_s,
        )


@dataclass(slots=True)
class ProbeOnlyResult:
    """What ``--probe-only`` produced; ``data`` is what ``soak.json`` holds
    (``kind: "abandon-probe"``)."""

    run_dir: Path
    data: dict[str, Any]
    drain: DrainVerdict
    failures: list[str]
    exit_code: int
    frame: pd.DataFrame | None = None
    baseline: tuple[float, float] = (0.0, 0.0)


def run_probe_only(
    target: Target,
    model: str,
    plan: ProbeOnlyPlan,
    run_dir: Path,
    *,
    telemetry_overrides: dict[str, Any] | None = None,
    say: Callable[[str], None] | None = None,
) -> ProbeOnlyResult:
    """Baseline, abandoned-stream probe, drain verdict. Drained: exit code 0; not: 1.

    :func:`servecheck.report.soak_html.write_probe_report` writes soak.json and probe.png."""
    from servecheck.telemetry import TelemetryRecorder

    say = say or (lambda text: None)
    settings = plan.settings
    rec = TelemetryRecorder.for_target(
        target, run_dir, target.telemetry.as_settings(), **(telemetry_overrides or {})
    )
    started = time.time()
    with rec:
        rec.wait_ready(timeout_s=max(10.0, 4 * plan.interval_s))
        rec.mark("baseline")
        b0 = time.time()
        time.sleep(plan.baseline_s)
        baseline = (b0, time.time())
        probe, drain = _probe_and_drain(
            target,
            model,
            settings,
            rec,
            baseline,
            bound_s=plan.bound_s,
            tolerance=plan.tolerance,
            interval_s=plan.interval_s,
            say=say,
        )
        rec.mark("end")
    verdict = compose(
        [
            RunVerdict.of(drain.passed, f"drain: {drain.status}"),
            RunVerdict.of(
                probe.abandoned > 0,
                f"probe: no stream was dropped mid-generation ({probe.line()})",
                otherwise=INCONCLUSIVE,  # nothing was abandoned, so nothing was tested
            ),
        ]
    )
    failures, code = verdict.reasons, verdict.exit_code
    data = {
        "kind": "abandon-probe",
        "version": 1,
        "target": target.name,
        "engine": target.engine,
        "run_id": run_dir.name,
        "started_at": started,
        "ended_at": time.time(),
        "model": model,
        "baseline": list(baseline),
        "probe": probe.to_dict(),
        "drain": drain.to_dict(),
        "telemetry": [s.to_dict() for s in rec.summaries()],
        "failures": failures,
        "verdict": verdict.status,
        "ok": verdict.passed,
        "exit_code": code,
    }
    return ProbeOnlyResult(run_dir, data, drain, failures, code, rec.frame(), baseline)


__all__ = [
    "LEAK_METRICS",
    "MAX_CYCLES",
    "MIN_CYCLES",
    "CycleStats",
    "ProbeOnlyPlan",
    "ProbeOnlyResult",
    "SoakPlan",
    "SoakResult",
    "leak_verdicts",
    "load_cycle",
    "member_sections",
    "parse_size",
    "probe_settings",
    "run_probe_only",
    "run_soak",
]
