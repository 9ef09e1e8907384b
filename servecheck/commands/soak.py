"""``servecheck soak``: identical load cycles with telemetry, then leak and drain verdicts.

A run is: an idle baseline, then ``--cycles`` x (load ``--cycle`` at a fixed concurrency of
streaming chat completions, idle ``--idle``), with the target's metrics (and the engine's RSS)
sampled throughout by :class:`~servecheck.telemetry.TelemetryRecorder`. With ``--abandon`` a
share of each cycle's streams is dropped mid-generation, and after the cycles the
abandoned-stream probe (:mod:`servecheck.load.abandon`) runs and the server must drain within
``--drain-bound``. Verdicts: :func:`~servecheck.telemetry.analyse_leak` for ``kv_usage``,
``requests_running`` and ``rss_tree_bytes`` (whichever were sampled), and
:func:`~servecheck.telemetry.check_drain` after the probe.

Everything goes to ``<out>/<run-id>/``: ``records.jsonl`` (one line per request, written as it
finishes), ``telemetry/`` (series, markers), ``soak.json`` (keys in docs/telemetry.md),
``soak.png`` and ``report.html`` (the figure inline as SVG) plus ``summary.md``.

Exit codes: 0 no leak (and drained, with ``--abandon``); 1 a leak, not drained, or the primary
metric could not be judged; 2 a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from servecheck.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

    from servecheck.config.model import Target
    from servecheck.load.abandon import ProbeSettings
    from servecheck.load.records import RecordWriter
    from servecheck.telemetry import DrainVerdict, LeakVerdict, Phases, TelemetryRecorder

MIN_CYCLES = 5  # the fewest for which a one-sided Mann-Kendall test can reach p < 0.05
MAX_CYCLES = 1000
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# metric -> default tolerance (in the metric's unit); judged when sampled
LEAK_METRICS: dict[str, float] = {
    "kv_usage": 0.02,
    "requests_running": 0.5,
    "rss_tree_bytes": 256 * 2**20,
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
    interval_s: float = 0.5
    tolerance: float = 0.02
    rss_tolerance: float = 256 * 2**20
    abandon: bool = False
    abandon_share: float = 0.25
    abandon_chunks: int = 3
    drain_bound_s: float = 30.0
    probe_streams: int = 8
    probe_rounds: int = 3
    fail_on_retention: bool = False
    max_total_s: float = 24 * 3600.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def abandon_every(self) -> int:
        """Every n-th request of a cycle is dropped mid-stream (0: none)."""
        return (
            max(1, round(1 / self.abandon_share)) if self.abandon and self.abandon_share > 0 else 0
        )

    def planned_s(self) -> float:
        """Planned wall time (the probe counted at one stream timeout per round at most)."""
        total = self.baseline_s + self.cycles * (self.cycle_s + self.idle_s)
        if self.abandon:
            total += self.probe_rounds * 2.0 + self.drain_bound_s
        return total

    def validate(self) -> None:
        """Raise :class:`UsageError` naming the option when the plan cannot give a verdict."""
        if not MIN_CYCLES <= self.cycles <= MAX_CYCLES:
            raise UsageError(
                f"--cycles {self.cycles}: between {MIN_CYCLES} and {MAX_CYCLES} "
                f"(a trend test needs at least {MIN_CYCLES} cycles to show a leak)"
            )
        if not 1 <= self.concurrency <= 1024:
            raise UsageError(f"--concurrency {self.concurrency}: between 1 and 1024")
        if not 1 <= self.max_tokens <= 100_000 or not 1 <= self.prompt_words <= 100_000:
            raise UsageError("--max-tokens and --prompt-words must be between 1 and 100000")
        if not 0 <= self.settle_s < self.idle_s:
            raise UsageError(
                f"--settle {self.settle_s:g}s: must be shorter than --idle {self.idle_s:g}s"
            )
        window = self.idle_s - self.settle_s
        if window < 3 * self.interval_s:
            raise UsageError(
                f"--idle {self.idle_s:g}s with --settle {self.settle_s:g}s leaves {window:g}s to measure each drain: fewer "
                f"than 3 samples at --interval {self.interval_s:g}s; lengthen --idle or shorten --interval"
            )
        if self.baseline_s < 3 * self.interval_s:
            raise UsageError(
                f"--baseline {self.baseline_s:g}s: fewer than 3 samples at --interval {self.interval_s:g}s"
            )
        if not 0 < self.tolerance < 1:
            raise UsageError(
                f"--tolerance {self.tolerance}: a KV-usage fraction in (0, 1), e.g. 0.02"
            )
        if self.abandon:
            if not 0 <= self.abandon_share <= 1:
                raise UsageError(f"--abandon-share {self.abandon_share}: between 0 and 1")
            if not 1 <= self.abandon_chunks < self.max_tokens:
                raise UsageError(
                    f"--abandon-chunks {self.abandon_chunks}: at least 1 and below --max-tokens {self.max_tokens}"
                )
            if not 0 < self.drain_bound_s <= 3600:
                raise UsageError(f"--drain-bound {self.drain_bound_s:g}s: between 0 and 1h")
        planned = self.planned_s()
        if planned > self.max_total_s:
            raise UsageError(
                f"the plan takes {_dur(planned)}, more than --max-total {_dur(self.max_total_s)}: "
                "fewer or shorter cycles, or raise --max-total"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dur(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.3g} s"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck soak``."""
    env = os.environ.get
    parser.add_argument(
        "--target",
        default=env("SERVECHECK_TARGET", "reference"),
        metavar="NAME",
        help="target (default: %(default)s, env SERVECHECK_TARGET)",
    )
    parser.add_argument(
        "--targets-file",
        default=env("SERVECHECK_TARGETS_FILE", "targets.yaml"),
        metavar="PATH",
        help="targets file (default: %(default)s, env SERVECHECK_TARGETS_FILE)",
    )
    g = parser.add_argument_group("schedule (required: --cycles, --cycle, --idle)")
    g.add_argument(
        "--cycles", type=int, metavar="K", help=f"identical load cycles ({MIN_CYCLES}-{MAX_CYCLES})"
    )
    g.add_argument("--cycle", metavar="TIME", help="load time per cycle, e.g. 10m")
    g.add_argument("--idle", metavar="TIME", help="idle (drain) time after each cycle, e.g. 2m")
    g.add_argument(
        "--baseline", metavar="TIME", help="idle baseline before the first cycle (default: --idle)"
    )
    g.add_argument(
        "--settle",
        metavar="TIME",
        help="part of each idle not measured, so queues empty first (default: half of --idle)",
    )
    g.add_argument(
        "--max-total",
        default="24h",
        metavar="TIME",
        help="refuse a plan longer than this (default: %(default)s)",
    )
    w = parser.add_argument_group("load")
    c = w.add_mutually_exclusive_group()
    c.add_argument(
        "--concurrency",
        "--users",
        dest="concurrency",
        type=int,
        default=4,
        metavar="N",
        help="streams in flight during a cycle (closed loop; default: %(default)s)",
    )
    w.add_argument(
        "--model", metavar="NAME", help="model (default: the target's first, else /v1/models)"
    )
    w.add_argument(
        "--max-tokens",
        type=int,
        default=128,
        metavar="N",
        help="max_tokens per request (default: %(default)s)",
    )
    w.add_argument(
        "--prompt-words",
        type=int,
        default=60,
        metavar="N",
        help="prompt length in words (default: %(default)s)",
    )
    a = parser.add_argument_group("abandoned streams")
    a.add_argument(
        "--abandon",
        action="store_true",
        help="drop a share of each cycle's streams mid-generation, then run the abandoned-stream probe and the drain check",
    )
    a.add_argument(
        "--probe-only",
        action="store_true",
        help="no load cycles: idle baseline (--baseline, default 5s), the abandoned-stream probe, the drain check",
    )
    a.add_argument(
        "--abandon-share",
        type=float,
        default=0.25,
        metavar="SHARE",
        help="share of streams dropped per cycle (default: %(default)s)",
    )
    a.add_argument(
        "--abandon-chunks",
        type=int,
        default=3,
        metavar="N",
        help="token chunks read before dropping (default: %(default)s)",
    )
    a.add_argument(
        "--probe-streams",
        type=int,
        default=8,
        metavar="N",
        help="concurrent streams per probe round (default: %(default)s)",
    )
    a.add_argument(
        "--probe-rounds",
        type=int,
        default=3,
        metavar="N",
        help="probe rounds (default: %(default)s)",
    )
    a.add_argument(
        "--drain-bound",
        default="30s",
        metavar="TIME",
        help="time allowed to drain after the probe (default: %(default)s)",
    )
    v = parser.add_argument_group("telemetry and verdicts")
    v.add_argument(
        "--tolerance",
        type=float,
        default=0.02,
        metavar="F",
        help="KV-usage tolerance above baseline (default: %(default)s)",
    )
    v.add_argument(
        "--rss-tolerance",
        default="256MiB",
        metavar="SIZE",
        help="RSS tolerance (default: %(default)s)",
    )
    v.add_argument(
        "--fail-on-retention",
        action="store_true",
        help="treat a flat KV plateau above baseline as a failure (when prefix caching is off)",
    )
    v.add_argument(
        "--interval",
        metavar="TIME",
        help="sampling interval (default: the target's telemetry.interval_s, else 0.5s)",
    )
    v.add_argument(
        "--pid", type=int, metavar="PID", help="engine process for RSS (default: telemetry.pid)"
    )
    v.add_argument(
        "--port",
        type=int,
        metavar="PORT",
        help="find the engine process by its port (default: telemetry.port, "
        "else a loopback target's port)",
    )
    v.add_argument("--no-rss", action="store_true", help="do not sample process RSS")
    v.add_argument("--no-nvml", action="store_true", help="do not sample NVML GPU memory")
    parser.add_argument(
        "--out",
        default=env("SERVECHECK_REPORTS", "reports"),
        metavar="DIR",
        help="reports folder (default: %(default)s)",
    )
    parser.add_argument(
        "--run-id", metavar="ID", help="run folder name (default: <time>-soak-<target>)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--reference-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for the embedded reference server (e.g. --fault=kv-leak)",
    )


def _size(text: str) -> float:
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


def plan_from_args(args: argparse.Namespace, target: Target, model: str | None = None) -> SoakPlan:
    """Build and validate the plan from the options (``model`` resolved by the caller)."""
    from servecheck.load.schedule import parse_duration

    missing = [
        opt
        for opt, value in (
            ("--cycles", args.cycles),
            ("--cycle", args.cycle),
            ("--idle", args.idle),
        )
        if value is None
    ]
    if missing:
        raise UsageError(
            f"a soak is bounded: give {', '.join(missing)} (e.g. --cycles 6 --cycle 10m --idle 2m)"
        )
    cycle_s, idle_s = parse_duration(args.cycle), parse_duration(args.idle)
    settings = target.telemetry
    interval = parse_duration(args.interval) if args.interval else (settings.interval_s or 0.5)
    if not 0.01 <= interval <= 60:
        raise UsageError(f"--interval {interval:g}s: between 10ms and 60s")
    plan = SoakPlan(
        model=model or "",
        cycles=args.cycles,
        cycle_s=cycle_s,
        idle_s=idle_s,
        baseline_s=parse_duration(args.baseline) if args.baseline else idle_s,
        settle_s=parse_duration(args.settle) if args.settle else idle_s / 2,
        concurrency=args.concurrency,
        max_tokens=args.max_tokens,
        prompt_words=args.prompt_words,
        interval_s=interval,
        tolerance=args.tolerance,
        rss_tolerance=_size(args.rss_tolerance),
        abandon=args.abandon,
        abandon_share=args.abandon_share,
        abandon_chunks=args.abandon_chunks,
        drain_bound_s=parse_duration(args.drain_bound),
        probe_streams=args.probe_streams,
        probe_rounds=args.probe_rounds,
        fail_on_retention=args.fail_on_retention,
        max_total_s=parse_duration(args.max_total),
        # A random tiny model may stop at once; vLLM can be told to ignore EOS so cycles stay identical.
        extra={"ignore_eos": True} if target.engine == "vllm" else {},
    )
    plan.validate()
    if plan.abandon:
        _probe_settings(plan).validate()
    return plan


def _probe_settings(plan: SoakPlan) -> ProbeSettings:
    from servecheck.load.abandon import ProbeSettings

    return ProbeSettings(
        streams=plan.probe_streams,
        rounds=plan.probe_rounds,
        chunks=plan.abandon_chunks,
        max_tokens=plan.max_tokens,
        prompt_words=plan.prompt_words,
        extra=dict(plan.extra),
    )


def _telemetry_overrides(
    args: argparse.Namespace, target: Target, plan: SoakPlan
) -> dict[str, Any]:
    settings = target.telemetry
    out: dict[str, Any] = {"interval_s": plan.interval_s}
    if args.no_nvml:
        out["nvml"] = False
    if args.no_rss:
        out["pid"], out["port"] = None, None
    elif args.pid is not None or args.port is not None:
        out["pid"], out["port"] = args.pid, args.port
    elif settings.pid is None and settings.port is None:
        parts = urlsplit(target.base_url)
        if parts.hostname in LOOPBACK:
            out["port"] = parts.port or (443 if parts.scheme == "https" else 80)
    return out


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
) -> CycleStats:
    """One load cycle: ``plan.concurrency`` workers send streams back to back for ``plan.cycle_s``;
    requests in flight at the end finish (bounded by the target's timeout). Prompts repeat the
    same seeded sequence every cycle, so cycles are identical. Every request becomes a
    :class:`~servecheck.load.records.RequestRecord` in ``writer`` as it finishes; a dropped
    stream (``--abandon``) is recorded with ``error="abandoned"``, ``kind="abandon"``."""
    import httpx

    from servecheck.client.http import ClientSettings
    from servecheck.load.abandon import chat_body, stream_chat
    from servecheck.load.records import RequestRecord

    settings = ClientSettings.for_target(target)
    url = target.base_url + "/chat/completions"
    headers = dict(settings.headers)
    stats = CycleStats(index, time.time(), 0.0)
    e2es: list[float] = []
    ttfts: list[float] = []
    local = itertools.count()
    every = plan.abandon_every
    stop_at = time.monotonic() + plan.cycle_s
    limits = httpx.Limits(
        max_connections=plan.concurrency, max_keepalive_connections=plan.concurrency
    )
    timeout = httpx.Timeout(target.timeout_s, connect=target.connect_timeout_s)

    async def worker(client: httpx.AsyncClient) -> None:
        while time.monotonic() < stop_at:
            k = next(local)
            drop = bool(every) and k % every == every - 1
            body = chat_body(
                plan.model,
                max_tokens=plan.max_tokens,
                prompt_words=plan.prompt_words,
                seed=k % 64,
                extra=plan.extra,
            )
            out = await stream_chat(
                client,
                url,
                body,
                headers,
                abandon_after=plan.abandon_chunks if drop else None,
                timeout_s=target.timeout_s,
            )
            usage = out.usage or {}
            n_out = (
                usage.get("completion_tokens")
                if isinstance(usage.get("completion_tokens"), int)
                else None
            )
            tokens = n_out if n_out is not None else out.tokens_client
            rec = RequestRecord(
                target=target.name,
                scenario="soak",
                worker=f"cycle-{index}",
                seq=next(seq),
                t_intended=out.t_sent,
                t_sent=out.t_sent,
                t_done=out.t_done,
                ttft=out.ttft,
                e2e=out.e2e,
                tpot=(out.e2e - out.ttft) / (tokens - 1)
                if out.e2e is not None and out.ttft is not None and tokens > 1
                else None,
                itls=out.itls,
                output_tokens=n_out,
                output_tokens_client=out.tokens_client,
                prompt_tokens=usage.get("prompt_tokens")
                if isinstance(usage.get("prompt_tokens"), int)
                else None,
                status=out.status,
                kind="abandon" if out.abandoned else "chat",
                error="abandoned" if out.abandoned else out.error,
                error_message=f"dropped on purpose after {plan.abandon_chunks} chunk(s)"
                if out.abandoned
                else out.error_message,
            )
            writer.write(rec)
            stats.requests += 1
            stats.tokens += tokens
            if out.abandoned:
                stats.abandoned += 1
            elif out.error is None:
                stats.ok += 1
                if out.e2e is not None:
                    e2es.append(out.e2e)
                if out.ttft is not None:
                    ttfts.append(out.ttft)
            else:
                stats.failed += 1
                stats.errors[out.error] = stats.errors.get(out.error, 0) + 1
                stats.first_error = stats.first_error or f"{out.error}: {out.error_message[:200]}"
                await asyncio.sleep(
                    min(0.5, max(0.0, stop_at - time.monotonic()))
                )  # a failing server is not hammered

    async def ticker() -> None:
        while tick is not None:
            tick()
            await asyncio.sleep(0.25)

    async with httpx.AsyncClient(
        timeout=timeout, limits=limits, verify=target.verify_tls, trust_env=False
    ) as client:
        ticking = asyncio.create_task(ticker())
        try:
            await asyncio.gather(*(worker(client) for _ in range(plan.concurrency)))
        finally:
            ticking.cancel()
    stats.end = time.time()
    stats.e2e_p50, stats.ttft_p50 = _median(e2es), _median(ttfts)
    return stats


# ---------------------------------------------------------------------------------------------
# The run


@dataclass(slots=True)
class SoakResult:
    """Everything a soak produced; ``data`` is what ``soak.json`` holds."""

    run_dir: Path
    data: dict[str, Any]
    leak: dict[str, LeakVerdict]
    drain: DrainVerdict | None
    exit_code: int


def judge(
    frame: pd.DataFrame, phases: Phases, plan: SoakPlan, drain: DrainVerdict | None
) -> tuple[dict[str, LeakVerdict], str, list[str]]:
    """Leak verdicts for every sampled metric of :data:`LEAK_METRICS`, the primary metric
    (``kv_usage``, else ``requests_running``) and the reasons the run fails (empty: it passed)."""
    from servecheck.telemetry import analyse_leak

    present = set(frame.loc[frame["kind"] == "sample", "metric"]) if len(frame) else set()
    tolerances = {**LEAK_METRICS, "kv_usage": plan.tolerance, "rss_tree_bytes": plan.rss_tolerance}
    verdicts = {
        m: analyse_leak(frame, phases, m, tol, min_cycles=MIN_CYCLES)
        for m, tol in tolerances.items()
        if m in present
    }
    primary = "kv_usage" if "kv_usage" in present else "requests_running"
    failures: list[str] = []
    for metric, v in verdicts.items():
        if v.status == "leak":
            failures.append(f"{metric}: leak")
        elif v.status == "retention" and plan.fail_on_retention and metric == "kv_usage":
            failures.append(f"{metric}: retention (--fail-on-retention)")
    if primary not in verdicts:
        failures.append(
            f"{primary}: not sampled (check the metrics URL and the engine's metric names)"
        )
    elif verdicts[primary].status == "insufficient_data":
        failures.append(f"{primary}: insufficient data")
    elif verdicts[primary].status == "inconclusive":
        failures.append(
            f"{primary}: inconclusive (the load never moved it, so a leak could not show)"
        )
    if drain is not None and drain.status != "ok":
        failures.append(f"drain: {drain.status}")
    return verdicts, primary, failures


def run_soak(
    target: Target,
    plan: SoakPlan,
    run_dir: Path,
    *,
    telemetry_overrides: dict[str, Any] | None = None,
    progress: bool = True,
    say: Callable[[str], None] | None = None,
) -> SoakResult:
    """Run a validated plan against ``target``; write the run folder; return the verdicts."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from servecheck.load.abandon import run_probe, wait_drained
    from servecheck.load.records import RecordWriter, to_dataframe
    from servecheck.telemetry import Cycle, Phases, TelemetryRecorder

    say = say or (lambda text: None)
    run_dir.mkdir(parents=True, exist_ok=True)
    rec: TelemetryRecorder = TelemetryRecorder.for_target(
        target, run_dir, target.telemetry.as_settings(), **(telemetry_overrides or {})
    )
    seq = itertools.count()
    cycles: list[CycleStats] = []
    probe = None
    drain = None
    console = Console(stderr=True)
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not progress,
    )
    started = time.time()
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
            while (left := end - time.monotonic()) > 0:
                time.sleep(min(0.25, left))
                tick()

        if not rec.wait_ready(timeout_s=max(10.0, 4 * plan.interval_s)):
            say("telemetry: not every sampler answered within 10 s; going on (gaps are recorded)")
        t_origin = time.monotonic()
        rec.mark("baseline")
        b0 = time.time()
        idle(plan.baseline_s, "soak: idle baseline")
        baseline = (b0, time.time())
        phase_cycles: list[Cycle] = []
        for i in range(1, plan.cycles + 1):
            rec.mark("load", cycle=str(i))
            tick(f"soak: cycle {i}/{plan.cycles} load")
            stats = asyncio.run(load_cycle(target, plan, i, writer, seq, tick=tick))
            cycles.append(stats)
            rec.mark("idle", cycle=str(i))
            idle(plan.idle_s, f"soak: cycle {i}/{plan.cycles} idle")
            drain_end = time.time()
            phase_cycles.append(
                Cycle(stats.start, stats.end, drain_end, min(stats.end + plan.settle_s, drain_end))
            )
            line = (
                f"cycle {i}/{plan.cycles}: {stats.requests} requests, {stats.ok} ok, {stats.failed} failed"
                + (f", {stats.abandoned} dropped" if plan.abandon else "")
                + (f" (first error {stats.first_error})" if stats.first_error else "")
            )
            say(line)
        phases = Phases(baseline, phase_cycles)
        if plan.abandon:
            rec.mark("abandon-probe")
            tick("soak: abandoned-stream probe")
            probe = asyncio.run(run_probe(target, plan.model, _probe_settings(plan)))
            say(probe.line())
            rec.mark("drain")
            tick("soak: waiting for the drain")
            drain = wait_drained(
                rec,
                probe.t_end,
                plan.drain_bound_s,
                baseline_window=baseline,
                tolerance=plan.tolerance,
                poll_s=max(plan.interval_s, 0.25),
                on_poll=lambda _s: tick(),
            )
        rec.mark("end")
    ended = time.time()
    frame = rec.frame()
    verdicts, primary, failures = judge(frame, phases, plan, drain)
    exit_code = 1 if failures else 0
    data: dict[str, Any] = {
        "kind": "soak",
        "version": 1,
        "target": target.name,
        "engine": target.engine,
        "run_id": run_dir.name,
        "started_at": started,
        "ended_at": ended,
        "plan": plan.to_dict(),
        "phases": phases.to_dict(),
        "requests": {
            "total": sum(c.requests for c in cycles),
            "ok": sum(c.ok for c in cycles),
            "failed": sum(c.failed for c in cycles),
            "abandoned": sum(c.abandoned for c in cycles),
        },
        "cycles": [asdict(c) for c in cycles],
        "primary": primary,
        "leak": {m: v.to_dict() for m, v in verdicts.items()},
        "drain": None if drain is None else drain.to_dict(),
        "probe": None if probe is None else probe.to_dict(),
        "telemetry": [s.to_dict() for s in rec.summaries()],
        "failures": failures,
        "ok": not failures,
        "exit_code": exit_code,
    }
    _write_outputs(
        run_dir, data, frame, phases, to_dataframe(run_dir / "records.jsonl"), verdicts, drain
    )
    return SoakResult(run_dir, data, verdicts, drain, exit_code)


def _write_outputs(
    run_dir: Path,
    data: dict[str, Any],
    frame: pd.DataFrame,
    phases: Phases,
    records: pd.DataFrame,
    verdicts: dict[str, LeakVerdict],
    drain: DrainVerdict | None,
) -> None:
    from servecheck.report import svg
    from servecheck.report.html import Section, esc, fmt, status_badge, table, write_page
    from servecheck.report.workflow import write_json
    from servecheck.telemetry import timeseries_figure

    write_json(run_dir / "soak.json", data)
    ok_records = records[records["ok"]] if len(records) else None
    title = f"soak {data['target']}: {len(phases.cycles)} cycles"
    try:
        # One figure for both files (what plot_timeseries does, without building it twice).
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        fig = timeseries_figure(frame, phases=phases, records=ok_records, title=title)
        FigureCanvasAgg(fig)
        fig.savefig(run_dir / "soak.png")
        figure = svg.to_svg(fig)
    except Exception as exc:  # noqa: BLE001 - a plot must not cost the verdicts
        figure = f"<p class='muted'>no plot: {esc(type(exc).__name__)}: {esc(exc)}</p>"
    lines = [(m, v.status, v.message) for m, v in verdicts.items()]
    if drain is not None:
        lines.append(("drain", drain.status, drain.message))
    rows = [(esc(m), status_badge(s), esc(msg)) for m, s, msg in lines]
    head = table(("metric", "verdict", "numbers"), rows, raw=(0, 1, 2))
    md = [f"- **{m}** {s}: {msg}" for m, s, msg in lines]
    cyc_rows = [
        (
            str(c["index"]),
            str(c["requests"]),
            str(c["ok"]),
            str(c["failed"]),
            str(c["abandoned"]),
            fmt(None if c["ttft_p50"] is None else c["ttft_p50"] * 1000),
            fmt(None if c["e2e_p50"] is None else c["e2e_p50"] * 1000),
        )
        for c in data["cycles"]
    ]
    cyc = table(
        ("cycle", "requests", "ok", "failed", "dropped", "TTFT p50 ms", "E2E p50 ms"),
        cyc_rows,
        numeric=range(1, 7),
    )
    legend = (
        "<p class='muted'>grey: idle baseline; orange: load; blue: drain window measured. "
        "Files: soak.json, records.jsonl, telemetry/*.jsonl, soak.png.</p>"
    )
    sections = [
        Section("Verdicts", head, md, data["ok"]),
        Section("Telemetry", figure + legend),
        Section("Cycles", cyc),
    ]
    write_page(
        run_dir,
        f"servecheck soak: {data['target']}",
        sections,
        ok=data["ok"],
        subtitle=run_dir.name,
    )


def run_probe_only(args: argparse.Namespace, target: Target) -> int:
    """``--probe-only``: baseline, abandoned-stream probe, drain verdict; ``soak.json`` with
    ``kind: "abandon-probe"`` (keys ``probe``, ``drain``, ``telemetry``, ``failures``, ``ok``,
    ``exit_code``) and ``probe.png``. Exit 0 drained, 1 not, 2 usage."""
    from servecheck.load.abandon import ProbeSettings, discover_model, run_probe, wait_drained
    from servecheck.load.schedule import parse_duration
    from servecheck.report.workflow import new_run_dir, say, write_json
    from servecheck.telemetry import Phases, TelemetryRecorder, plot_timeseries

    if args.cycles is not None or args.cycle is not None or args.abandon:
        raise UsageError(
            "--probe-only runs no load cycles: leave out --cycles, --cycle and --abandon"
        )
    interval = (
        parse_duration(args.interval) if args.interval else (target.telemetry.interval_s or 0.5)
    )
    baseline_s = parse_duration(args.baseline) if args.baseline else 5.0
    bound_s = parse_duration(args.drain_bound)
    if baseline_s < 3 * interval or not 0 < bound_s <= 3600 or not 0.01 <= interval <= 60:
        raise UsageError(
            f"--probe-only: --baseline {baseline_s:g}s must hold 3 samples at --interval {interval:g}s "
            f"(10ms-60s), and --drain-bound {bound_s:g}s be at most 1h"
        )
    settings = ProbeSettings(
        streams=args.probe_streams,
        rounds=args.probe_rounds,
        chunks=args.abandon_chunks,
        max_tokens=args.max_tokens,
        prompt_words=args.prompt_words,
        extra={"ignore_eos": True} if target.engine == "vllm" else {},
    )
    settings.validate()
    model = args.model or discover_model(target)
    run_dir = new_run_dir(args.out, "probe", args.target, args.run_id)
    say(
        f"servecheck soak --probe-only: target {target.name}, model {model}; {settings.rounds} x {settings.streams} "
        f"streams dropped after {settings.chunks} chunk(s); drain bound {bound_s:g}s; report {run_dir}"
    )
    dummy = SoakPlan(
        model=model,
        cycles=MIN_CYCLES,
        cycle_s=1,
        idle_s=1,
        baseline_s=baseline_s,
        settle_s=0,
        concurrency=1,
        interval_s=interval,
    )
    rec = TelemetryRecorder.for_target(
        target, run_dir, target.telemetry.as_settings(), **_telemetry_overrides(args, target, dummy)
    )
    started = time.time()
    with rec:
        rec.wait_ready(timeout_s=max(10.0, 4 * interval))
        rec.mark("baseline")
        b0 = time.time()
        time.sleep(baseline_s)
        baseline = (b0, time.time())
        rec.mark("abandon-probe")
        probe = asyncio.run(run_probe(target, model, settings))
        say(probe.line())
        rec.mark("drain")
        drain = wait_drained(
            rec,
            probe.t_end,
            bound_s,
            baseline_window=baseline,
            tolerance=args.tolerance,
            poll_s=max(interval, 0.25),
        )
        rec.mark("end")
    failures = [] if drain.passed else [f"drain: {drain.status}"]
    if probe.abandoned == 0:
        failures.append(f"probe: no stream was dropped mid-generation ({probe.line()})")
    code = 1 if failures else 0
    write_json(
        run_dir / "soak.json",
        {
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
            "ok": not failures,
            "exit_code": code,
        },
    )
    try:
        plot_timeseries(
            rec.frame(),
            run_dir / "probe.png",
            phases=Phases(baseline, []),
            title=f"abandoned-stream probe {target.name}",
        )
    except Exception as exc:  # noqa: BLE001 - a plot must not cost the verdict
        say(f"(no plot: {type(exc).__name__}: {exc})")
    print(verdict_line("drain", drain.status, drain.message))
    for reason in failures:
        print(f"FAIL {reason}")
    print(f"probe {'PASS' if code == 0 else 'FAIL'}: {run_dir / 'soak.json'}")
    return code


def verdict_line(name: str, status: str, message: str) -> str:
    """``name: STATUS: numbers``; messages that already start with their status keep one."""
    word = status.replace("_", " ").upper()
    return (
        f"{name}: {message}" if message.upper().startswith(word) else f"{name}: {word}: {message}"
    )


def run(args: argparse.Namespace) -> int:
    """Run the soak; print the verdict lines; exit 0 no leak, 1 leak / not drained, 2 usage."""
    from servecheck.config import load_targets
    from servecheck.load.abandon import discover_model
    from servecheck.report.workflow import new_run_dir, reference_env, say

    with reference_env([args.target], extra_args=args.reference_arg):
        target = load_targets(args.targets_file).get(args.target)
        if args.probe_only:
            return run_probe_only(args, target)
        plan_from_args(args, target, "-")  # usage errors before any request
        plan = plan_from_args(args, target, args.model or discover_model(target))
        run_dir = new_run_dir(args.out, "soak", args.target, args.run_id)
        say(
            f"servecheck soak: target {target.name} ({target.engine}), model {plan.model}; {plan.cycles} x "
            f"({_dur(plan.cycle_s)} load at {plan.concurrency} streams, {_dur(plan.idle_s)} idle)"
            f"{' with abandoned streams' if plan.abandon else ''}; about {_dur(plan.planned_s())}; report {run_dir}"
        )
        result = run_soak(
            target,
            plan,
            run_dir,
            telemetry_overrides=_telemetry_overrides(args, target, plan),
            progress=not args.no_progress and sys.stderr.isatty(),
            say=say,
        )
    for metric, v in result.leak.items():
        print(verdict_line(metric, v.status, v.message))
    if result.drain is not None:
        print(verdict_line("drain", result.drain.status, result.drain.message))
    for reason in result.data["failures"]:
        print(f"FAIL {reason}")
    print(f"soak {'PASS' if result.exit_code == 0 else 'FAIL'}: {result.run_dir / 'report.html'}")
    return result.exit_code


__all__ = [
    "CycleStats",
    "SoakPlan",
    "SoakResult",
    "add_arguments",
    "judge",
    "load_cycle",
    "plan_from_args",
    "run",
    "run_soak",
]
