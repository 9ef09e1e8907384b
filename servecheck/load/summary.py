"""The summary half of a load run: merged records -> statistics, SLO verdicts and the run's
verdict -> ``summary.json`` (typed: :mod:`servecheck.analysis.sections`) and ``summary.txt``
(:func:`summarise`; its text comes from :mod:`servecheck.report.load_sections`, imported inside
the function, as report is the layer on top of load). The Locust-process half is :mod:`servecheck.load.run`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servecheck.analysis.agent_stats import agent_section
from servecheck.analysis.agent_stats import judge as judge_agent
from servecheck.analysis.aggregate import Aggregate, Rule, aggregate_of, read_aggregates, steady_of
from servecheck.analysis.aggregate import Measured as SteadyMeasured
from servecheck.analysis.breakdown import read_engine_file, scenario_sections
from servecheck.analysis.budget import SOURCE as BUDGET
from servecheck.analysis.budget import budget_summary, percent
from servecheck.analysis.host import HostLoad
from servecheck.analysis.image_stats import image_section
from servecheck.analysis.sections import (
    SCHEMA_VERSION,
    AgentSection,
    AggregateSource,
    ErrorBudget,
    Generator,
    Head,
    Images,
    LengthsAsked,
    PrefixCache,
    ProfileSection,
    Reader,
    ReaderThread,
    RecordsKept,
    Requests,
    ScheduleSection,
    ServerSection,
    Slices,
    SloResult,
    Steady,
    Summary,
    Throughput,
    Tokens,
    Turns,
    WarmupSection,
)
from servecheck.analysis.slo import COUNTS, SLO, Verdict, evaluate
from servecheck.analysis.stats import RunStats, Schedule
from servecheck.analysis.steady import steady_section
from servecheck.analysis.typed_json import from_json
from servecheck.analysis.verdict import load_run_verdict
from servecheck.analysis.warmup import Warmup
from servecheck.load import server_watch
from servecheck.load.faults import fault_sections
from servecheck.load.generator.transport import read_transport, transport_reasons
from servecheck.load.plan import RunConfig
from servecheck.load.stats_csv import write_stats_csv
from servecheck.load.workload import phased
from servecheck.records.parquet import keep_records
from servecheck.records.record import (
    RECORDS_PARQUET,
    MergeResult,
    merge_records,
    worker_files,
)
from servecheck.redact import redact

if TYPE_CHECKING:
    from servecheck.load.spec import LoadSpec


@dataclass(slots=True)
class LoadResult:
    """The outcome of :func:`run_load`; ``summary`` is what summary.json holds."""

    run_id: str
    run_dir: Path
    summary: dict[str, Any]
    stats: RunStats
    verdicts: list[Verdict]
    passed: bool
    behind: bool
    exit_code: int
    locust_rc: int | None

    @property
    def records_path(self) -> Path:
        return self.run_dir / RECORDS_PARQUET


def warmup_of(spec: LoadSpec) -> Warmup:
    return Warmup(spec.warmup_s, spec.warmup_requests)


def _last_error(path: Path) -> str:
    """The last exception line Locust printed (e.g. an import error in the scenario), redacted."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        text = line.strip()
        if text and (
            "Error" in text.split(":", 1)[0] or text.startswith(("Exception", "Traceback"))
        ):
            return redact(text[:300])
    return ""


def _reader_summary(infos: list[dict[str, Any]]) -> Reader:
    """How tokens were timed across workers: ``kernel`` (receive timestamps from the kernel),
    ``reader`` (the reader's clock when it got the bytes) or ``mixed``."""
    readers = [i.get("reader") or {} for i in infos]
    kinds = sorted({str(r.get("kind")) for r in readers if r.get("kind")})
    kernel = sum(int(r.get("kernel_stamps") or 0) for r in readers)
    user = sum(int(r.get("user_stamps") or 0) for r in readers)
    clock = (
        "kernel"
        if kernel and not user and "blocking" not in kinds
        else ("reader" if not kernel else "mixed")
    )
    out = Reader(
        kinds=kinds, clock=clock if kinds else None, kernel_stamps=kernel, reader_stamps=user
    )
    threads = [r["thread"] for r in readers if isinstance(r.get("thread"), dict)]
    if threads:
        # The native reader threads' own cost: their CPU is inside generator.cpu_s too.
        reads = sum(int(t.get("reads") or 0) for t in threads)
        cpu = sum(float(t.get("cpu_s") or 0.0) for t in threads)
        passes = sum(int(t.get("passes") or 0) for t in threads)
        out.thread = ReaderThread(
            reads=reads,
            passes=passes,
            cpu_s=round(cpu, 4),
            us_per_read=round(cpu / reads * 1e6, 2) if reads else None,
            reads_per_pass=round(reads / passes, 2) if passes else None,
            slice_us=_common_slice(threads),
            late_reads=sum(int(t.get("late_reads") or 0) for t in threads),
            held_s=_lane_sum(threads, "held_s"),
            busy_s=_lane_sum(threads, "busy_s"),
            long_passes=_lane_count(threads, "long_passes"),
        )
    return out


def _lane_count(threads: list[dict[str, Any]], key: str) -> int | None:
    """A lane count summed over the Locust processes that ran one (None where none did)."""
    vals = [int(t[key]) for t in threads if t.get(key) is not None]
    return sum(vals) if vals else None


def _lane_sum(threads: list[dict[str, Any]], key: str) -> float | None:
    """A lane counter summed over the Locust processes that ran one (None where none did)."""
    vals = [float(t[key]) for t in threads if t.get(key) is not None]
    return round(sum(vals), 4) if vals else None


def _common_slice(threads: list[dict[str, Any]]) -> float | None:
    """The reader threads' scheduler slice when every one got the same short one, else None."""
    slices = {t.get("slice_us") for t in threads}
    only = slices.pop() if len(slices) == 1 else None
    return float(only) if isinstance(only, (int, float)) else None


def _worker_infos(run_dir: Path) -> list[dict[str, Any]]:
    infos = []
    for p in sorted(run_dir.glob("worker-*.json")):
        try:
            infos.append(json.loads(p.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return infos


def _planned(cfg: RunConfig, infos: list[dict[str, Any]]) -> int | None:
    """The requests the workers planned to send (None: not every worker said)."""
    planned_parts = [i.get("planned") for i in infos]
    planned = (
        sum(int(p) for p in planned_parts if p is not None)
        if infos and all(p is not None for p in planned_parts)
        else None
    )
    if (
        cfg.mode in ("fixed", "poisson", "gamma")
        and planned is None
        and cfg.duration_s
        and cfg.rate
        and not infos
    ):
        planned = int(
            cfg.rate * cfg.duration_s
        )  # no worker reported (killed): judge against the plan
    return planned


def _unmeasured(
    spec: LoadSpec,
    stats: RunStats,
    run_dir: Path,
    locust_rc: int | None,
    transport: dict[str, Any] | None,
    partial: str | None,
) -> list[str]:
    """Why the run's figures cannot be trusted: a lagging generator, Locust that died before
    any record, lost worker records, a partial run (each makes the verdict INCONCLUSIVE)."""
    unmeasured: list[str] = []
    if stats.behind and not spec.allow_lag and stats.ok:
        unmeasured += stats.behind_reasons  # with nothing ok the server is to blame, not the CPU
    if stats.total == 0:
        tail = _last_error(run_dir / "locust.stdout")
        if locust_rc not in (0, None) or tail:
            unmeasured.append(
                f"locust exited with code {locust_rc}"
                + (f": {tail}" if tail else "")
                + f" (see {run_dir / 'locust.stdout'})"
            )
    if transport is not None:
        unmeasured += transport_reasons(transport)
    elif spec.role == "master" or (spec.role == "local" and (spec.processes or 1) > 1):
        unmeasured.append(
            "the master kept no ledger of its workers (transport.json): see locust.log"
        )
    if partial:
        unmeasured.insert(0, f"partial run: {partial}")
    return unmeasured


def _ran_for(
    duration_s: float | None, origin: float | None, ended: float, partial: str | None
) -> float | None:
    """The run's length for its steady window: the planned duration, or, for a run cut short,
    the time it ran (its window ends where the run did, not where it was meant to)."""
    if not partial or origin is None or duration_s is None:
        return duration_s
    return max(0.0, min(duration_s, ended - origin))


def _how_far(duration_s: float | None, origin: float, ended: float) -> str:
    """How far a run cut short got: "it ran 30.6 s of 60 s"."""
    of = f" of {duration_s:g} s" if duration_s else ""
    return f"it ran {max(0.0, ended - origin):.1f} s{of}"


def _generator(infos: list[dict[str, Any]], locust_rc: int | None) -> Generator:
    """summary.json's ``generator``: the load generator's own cost and reader."""
    cpu = sum(float(i.get("cpu_s", 0.0)) for i in infos)
    tokens_client = sum(int(i.get("tokens_client", 0)) for i in infos)
    return Generator(
        cpu_s=round(cpu, 3),
        tokens_streamed=tokens_client,
        cpu_s_per_10k_tokens=round(cpu / tokens_client * 10_000, 4) if tokens_client else None,
        locust_rc=locust_rc,
        reader=_reader_summary(infos),
        host=HostLoad.from_infos(infos),
    )


def _over_budget(stats: RunStats, verdicts: Sequence[Verdict]) -> str | None:
    """The reason the run broke its error budget (None: it held, or none was judged)."""
    return next(
        (
            f"error budget exceeded: {stats.failed} of {stats.total} requests failed "
            f"({stats.error_rate:.2%}; the budget is {percent(v.slo.bound)})"
            for v in verdicts
            if v.slo.source == BUDGET and not v.passed
        ),
        None,
    )


def rule_of(spec: LoadSpec, cfg: RunConfig) -> Rule:
    """What every worker's aggregate must know before its first record (the run config's
    ``aggregate``): the whole run's figures; each worker takes its share (Rule.share)."""
    return Rule(
        slice_s=spec.slice_s,
        window=spec.steady_window.text,
        mode=cfg.mode,
        users=cfg.users,
        duration_s=cfg.duration_s,
        slos=tuple(s.text for s in spec.slos),
        warmup_s=spec.warmup_s,
        warmup_requests=spec.warmup_requests,
        request_id_header=cfg.request_id_header,
    )


@dataclass(slots=True)
class _Measured:
    """The run's merged aggregate and where it came from."""

    agg: Aggregate
    source: str  # "workers": their aggregates; "records": rebuilt from the records files
    missing: list[str]  # what is wrong with a worker's aggregate (a checkpoint, unreadable)


class _Records:
    """The run's record files, merged by send time only when something needs them in that
    order (a rebuild, the conversation and image sections): the usual run never reads them."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.lines = {_worker_of(p): _complete_lines(p) for p in worker_files(run_dir)}
        self.merged: MergeResult | None = None

    def iter_records(self) -> Iterator[dict[str, Any]]:
        if self.merged is None:
            self.merged = merge_records(self.run_dir)
        return self.merged.iter_records()


def _worker_of(p: Path) -> str:
    return p.name[len("records-") : -len(".jsonl")]


def _complete_lines(p: Path) -> int:
    """Newline-ended lines of a file, counted in blocks (no parsing)."""
    n = 0
    with open(p, "rb") as fh:
        while block := fh.read(1 << 20):
            n += block.count(b"\n")
    return n


def _aggregate(run_dir: Path, rule: Rule, recs: _Records) -> _Measured:
    """The workers' aggregates, merged; rebuilt from the records (in send order: exact) when a
    worker's records file holds more requests than its aggregate (killed before its end) or
    there are records and no aggregate at all."""
    agg, counts, bad = read_aggregates(run_dir, rule)
    short = [w for w, n in recs.lines.items() if n > counts.get(w, 0)]
    if agg is not None and not short and not bad:
        return _Measured(agg, "workers", [])
    if recs.lines and (short or not bad):  # every record is on disk: they are the truth
        return _Measured(aggregate_of(recs.iter_records(), rule), "records", [])
    return _Measured(agg or Aggregate(rule, ordered=True), "workers", bad)


def _judge(slos: Sequence[SLO], stats: RunStats, window: RunStats | None) -> list[Verdict]:
    """Every SLO but the error budget on the steady window (when one applies), the budget on
    the whole run. With no request finished the budget measures nothing, and a window that
    held no request judges nothing: the other rules judge the run."""
    out: list[Verdict] = []
    for s in slos:
        if s.source == BUDGET or s.metric in COUNTS:  # lost_requests: the whole run's outages
            if stats.total:
                out += evaluate([s], stats)
        elif window is None:
            out += evaluate([s], stats)
        elif window.total:
            out += evaluate([s], window)
    return out


def _cause(
    stats: RunStats, records: Callable[[], Any], timeout_s: float, unlisted: str | None
) -> str | None:
    """Why nothing succeeded, where the records and the run know more than the error class:
    a model /v1/models does not list (``unlisted``) answered with a 4xx, or timeouts."""
    if unlisted and stats.ok == 0 and len(stats.errors) == 1:
        (kind,) = stats.errors
        if kind.startswith("http-4"):
            return f"the server answered HTTP {kind[5:]}: {unlisted}"
    return _timeout_cause(stats, records, timeout_s)


def _timeout_cause(stats: RunStats, records: Callable[[], Any], timeout_s: float) -> str | None:
    """What the timeouts of a run in which nothing succeeded were, when they are all it saw:
    streams whose tokens kept coming and never ended (never ``data: [DONE]``), or answers that
    never began. Both read "timeout", but they name different faults of the server."""
    if stats.ok or stats.total == 0 or set(stats.errors) != {"timeout"}:
        return None
    firsts = [r.get("ttft") is not None for r in records() if r.get("error") == "timeout"]
    if not firsts:
        return None
    streamed, silent = sum(firsts), len(firsts) - sum(firsts)
    within = f"within the target's timeout_s ({timeout_s:g} s)"
    if silent == 0:
        return (
            "responses never complete: every request streamed tokens and none ended "
            f"(no data: [DONE]) {within}"
        )
    if streamed == 0:
        return f"no response completed: no request got a token {within}"
    return (
        f"responses never complete: {streamed} streamed tokens without an end and {silent} got "
        f"no token {within}"
    )


def summarise(
    spec: LoadSpec,
    cfg: RunConfig,
    slos: Sequence[SLO],
    run_dir: Path,
    locust_rc: int | None,
    started: float,
    ended: float,
    down: str | None = None,
    partial: str | None = None,
    unlisted: str | None = None,
    hung: dict[str, Any] | None = None,
) -> LoadResult:
    """Merge the worker records, compute statistics and verdicts, write summary.json/.txt.
    ``down``: why the target could not be reached before the load started (then FAIL).
    ``partial``: why the run stopped early (the summary is marked; never a pass).
    ``unlisted``: the given model is not among those /v1/models lists (client/models.py).
    ``hung``: the hung-but-healthy finding and its evidence (analysis/hung.py), which stopped it."""
    recs = _Records(run_dir)
    infos = _worker_infos(run_dir)
    # --web: a run its UI stopped is partial (never a pass), unless a stop was already named
    partial = partial or next((str(i["stopped"]) for i in infos if i.get("stopped")), None)
    planned = _planned(cfg, infos)
    loop_lag = [x for i in infos for x in i.get("loop_lag_s", [])]
    measured = _aggregate(run_dir, rule_of(spec, cfg), recs)
    agg = measured.agg
    warm = agg.warm
    if warm.active:  # the warm-up's own figures count for nothing else
        planned = None if planned is None else max(0, planned - warm.count)

    def records() -> Any:  # the sections still made from records (conversations, images)
        its = recs.iter_records()
        return warmup_of(spec).measured(its) if warm.active else its

    host = HostLoad.from_infos(infos)
    reader = _reader_summary(infos)
    sched = Schedule(
        mode=cfg.mode,
        planned=planned,
        max_lag_ms=spec.max_lag_ms,
        kernel_clock=reader.clock == "kernel",
        cause=host.cause() if host is not None else "",
        reads=reader.thread.reads if reader.thread else 0,
        late_reads=reader.thread.late_reads if reader.thread else 0,
        held_s=(reader.thread.held_s or 0.0) if reader.thread else 0.0,
        busy_s=(reader.thread.busy_s or 0.0) if reader.thread else 0.0,
    )
    stats = agg.stats(sched, loop_lag)
    agg.write_samples(run_dir)  # the values compare and the report read (bounded)
    write_stats_csv(run_dir, agg.whole, cfg.api, stats.window_s)  # Locust's CSV layout
    steady = steady_of(
        agg,
        spec.steady_window,
        mode=cfg.mode,
        users=cfg.users,
        duration_s=_ran_for(cfg.duration_s, agg.edges.origin, ended, partial),
        max_lag_ms=spec.max_lag_ms,
    )
    verdicts = _judge([s for s in slos if not s.profile and not s.agent], stats, steady.stats)
    profile = _profile_section(spec, cfg, agg)
    judged_profile, unmeasured_profile = phased.judge([s for s in slos if s.profile], profile)
    verdicts += judged_profile
    agent = _agent_part(agg, records, run_dir)  # agent sessions (load/workload/agent.py)
    verdicts += judge_agent([s for s in slos if s.agent], agent)
    slo_ok = all(v.passed for v in verdicts)
    over_budget = _over_budget(stats, verdicts)
    transport = read_transport(run_dir)  # workers' records came over Locust's channel
    ran = _how_far(cfg.duration_s, agg.edges.origin or started, ended) if partial else ""
    if partial:
        partial = f"{partial}; {ran}"
    unmeasured = _unmeasured(spec, stats, run_dir, locust_rc, transport, partial)
    unmeasured += [f"worker {why}" for why in measured.missing] + unmeasured_profile
    if steady.empty and stats.total:
        unmeasured.append(f"the steady window ({steady.bounds.how}) held no request")
    judged = load_run_verdict(
        total=stats.total,
        ok=stats.ok,
        # Shed requests are not failures, but a run in which every answer was a 429 still
        # served nobody: the rule sees them beside the error classes.
        errors={
            **stats.errors,
            **({"rate-limited": stats.rate_limited} if stats.rate_limited else {}),
        },
        slo_ok=slo_ok,
        unmeasured=unmeasured,
        down=down,
        over_budget=over_budget,
        partial=f"partial run: {ran}" if partial else None,
        cause=_cause(stats, records, cfg.timeout_s, unlisted),
    )
    behind = stats.behind  # even with --allow-lag: the lag is inside the client TTFT
    server = server_watch.section(spec, run_dir, agg.client, behind)
    faults, judged = fault_sections(spec, agg, stats, slos, run_dir, server, judged, ended)
    reasons, passed, verdict = judged.reasons, judged.passed, judged.status
    exit_code = judged.exit_code
    sections = _record_sections(agg, records, run_dir)
    kept = keep_records(run_dir, cfg.records, recs.merged)  # one copy, as --records says
    typed = Summary(
        head=_what_ran(cfg, infos, started, ended),
        records=RecordsKept(
            merged=agg.count,
            bad_lines=kept.pop("bad_lines", 0),
            per_worker={f"records-{w}.jsonl": n for w, n in recs.lines.items()},
            kept=kept,
            transport=transport,
        ),
        **_stats_part(stats.as_dict()),
        slo=[from_json(SloResult, v.as_dict()) for v in verdicts],
        error_budget=from_json(ErrorBudget, budget_summary(slos, verdicts)),
        verdict=verdict,
        partial=bool(partial),
        reasons=reasons,
        exit_code=exit_code,
        generator=_generator(infos, locust_rc),
        files=sorted(p.name for p in run_dir.iterdir() if p.is_file()),
        steady=_steady_part(spec, steady),
        slices=Slices(
            slice_s=steady.scan.slice_s,
            t0=steady.scan.first_sent,  # wall clock of start_s 0 (the server series' clock)
            rows=steady.scan.as_list(),
        ),
        turns=sections.turns,
        prefix_cache=sections.prefix_cache,
        images=sections.images,
        agent=agent,
        cancel=faults.cancel,
        outages=faults.outages,
        timings=agg.timings.section(),  # TTFT decomposition, slowest requests
        profile=None if profile is None else from_json(ProfileSection, profile),
        server=None if server is None else from_json(ServerSection, server),
        warmup=from_json(WarmupSection, warm.as_dict()) if warm.active else None,
        aggregate=AggregateSource(source=measured.source, samples=agg.samples_section()),
        hung=hung,
    )
    summary = typed.to_json()
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    from servecheck.report.load_sections import format_summary  # the text renderers

    text = format_summary(typed, verdicts)
    (run_dir / "summary.txt").write_text(text + "\n", encoding="utf-8")
    return LoadResult(
        cfg.run_id, run_dir, summary, stats, verdicts, passed, stats.behind, exit_code, locust_rc
    )


def _profile_section(spec: LoadSpec, cfg: RunConfig, agg: Aggregate) -> dict[str, Any] | None:
    """summary.json's ``profile`` (load/workload/phased.py), from the merged slices and timings."""
    if spec.profile is None:
        return None
    timings = agg.timings.as_dict().get("timings")
    return phased.section(spec.profile, agg.scan, cfg.duration_s, timings)


def _what_ran(cfg: RunConfig, infos: list[dict[str, Any]], started: float, ended: float) -> Head:
    """summary.json's head: what ran, against what, how, when."""
    methods = sorted({str(i.get("prompt_method")) for i in infos if i.get("prompt_method")})
    return Head(
        schema_version=SCHEMA_VERSION,
        run_id=cfg.run_id,
        target=cfg.target,
        base_url=redact(cfg.base_url),
        model=cfg.model,
        scenario=cfg.scenario,
        api=cfg.api,
        mode=cfg.mode,
        users=cfg.users if cfg.mode == "closed" else None,
        rate=cfg.rate,
        burstiness=cfg.burstiness,  # gamma arrivals' shape, else null
        lengths=_lengths_section(cfg),
        seed=cfg.seed,
        duration_s=cfg.duration_s,
        max_requests=cfg.max_requests,
        workers=len(infos) or cfg.workers,
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        ended_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ended)),
        prompt_method=",".join(methods) or None,
        engine=cfg.engine or None,
        engine_version=cfg.engine_version,
    )


def _steady_part(spec: LoadSpec, steady: SteadyMeasured) -> Steady:
    """summary.json's ``steady``: the window the SLOs judged (analysis/steady.py)."""
    stats = None if steady.stats is None else steady.stats.as_dict()
    return from_json(
        Steady,
        steady_section(spec.steady_window, steady.bounds, steady.scan.first_sent, stats),
    )


def _stats_part(d: dict[str, Any]) -> dict[str, Any]:
    """RunStats.as_dict's keys (rounded there, once) as the typed summary's fields."""
    return {
        "requests": from_json(Requests, d["requests"]),
        "window_s": d["window_s"],
        "throughput": from_json(Throughput, d["throughput"]),
        "tokens": from_json(Tokens, d["tokens"]),
        "latency_ms": d["latency_ms"],
        "goodput": d["goodput"],
        "goodput_requests": d["goodput_requests"],
        "schedule": from_json(ScheduleSection, d["schedule"]),
    }


@dataclass(slots=True)
class _RecordSections:
    turns: Turns | None = None
    prefix_cache: PrefixCache | None = None
    images: Images | None = None


def _record_sections(agg: Aggregate, records: Callable[[], Any], run_dir: Path) -> _RecordSections:
    """The sections only the requests themselves tell (conversation turns, prefix groups and
    cached tokens, images): made from the records, and only when the aggregate saw such a
    field; else only the engine's own prefix-cache counters, when there are any."""
    if agg.extras:
        turns, prefix_cache = scenario_sections(records(), run_dir)
        # --images: tokens per image, TTFT by size
        return _RecordSections(turns, prefix_cache, image_section(records()))
    if read_engine_file(run_dir) is not None:
        return _RecordSections(prefix_cache=scenario_sections((), run_dir)[1])
    return _RecordSections()


def _agent_part(agg: Aggregate, records: Callable[[], Any], run_dir: Path) -> AgentSection | None:
    """summary.json's ``agent`` (analysis/agent_stats.py), when the records carry sessions."""
    if "session" not in agg.extras:
        return None
    return agent_section(records(), read_engine_file(run_dir))


def _lengths_section(cfg: RunConfig) -> LengthsAsked | None:
    """--input-tokens / --output-tokens as asked, and how the output length was held."""
    from servecheck.load.workload.lengths import section

    asked = section(cfg.input_tokens, cfg.output_tokens, cfg.output_length)
    return None if asked is None else from_json(LengthsAsked, asked)


__all__ = ["SCHEMA_VERSION", "LoadResult", "summarise", "warmup_of"]
