"""A bounded Locust load run with exact percentiles and SLO verdicts: :func:`run_load`.

Locust runs as a subprocess (``python -m locust --headless``) so gevent's monkey-patching never
touches this process. Each Locust process writes its own ``records-<worker>.jsonl`` as the run
goes; at the end they are merged into ``reports/<run-id>/records.jsonl`` and summarised
(``summary.json``, ``summary.txt``, Locust's CSVs). Exit code: 0 when every SLO held, 1 when one
was breached (or the generator fell behind, or nothing finished), 2 for a usage error.

``servecheck load`` (``servecheck/commands/load.py``) parses options into a :class:`LoadSpec`
and calls :func:`run_load`; accept, capacity and cutover call it the same way. The summary
schema (``summary.json``, :data:`SCHEMA_VERSION`) is defined here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.client.models import ModelChoice, model_for_target
from servecheck.config.model import Target
from servecheck.errors import UsageError
from servecheck.load import engine_cache, shipped
from servecheck.load.breakdown import ENGINE_FILE, format_breakdown, scenario_breakdown
from servecheck.load.dataset import check_dataset
from servecheck.load.down import DownRule, DownWatch, parse_down_after
from servecheck.load.phases import phase_lines
from servecheck.load.plan import ENV_API_KEY, ENV_CONFIG, RunConfig, load_plan
from servecheck.load.reach import target_down
from servecheck.load.records import MERGED_NAME, merge_records, refuse_used_run_dir, worker_files
from servecheck.load.schedule import StageShape, parse_duration, parse_rate, shape_from_spec
from servecheck.load.slo import (
    SLO,
    Verdict,
    evaluate,
    parse_slos,
    reject_cold,
    request_predicate,
)
from servecheck.load.stats import RunStats, Schedule, compute_stats
from servecheck.load.stream import parse_retry_after_cap
from servecheck.load.trace import trace_duration
from servecheck.load.transport import LOCAL_DIR, read_transport, transport_reasons
from servecheck.load.verdict import judge
from servecheck.load.warmup import Warmup, extend_bounds, format_warmup
from servecheck.redact import redact
from servecheck.signals import Interrupted, signum_of, stoppable_child

SCHEMA_VERSION = 1


@dataclass(slots=True)
class LoadSpec:
    """What to run. Exactly one of ``users``, ``rate`` or ``shape``; at least one bound.

    ``slos`` are expressions; the target's ``slo`` list from targets.yaml is added to them.
    ``role`` is ``local`` (default; with ``processes`` > 1 Locust forks workers), ``master`` or
    ``worker`` (``expect_workers`` is the number of workers in both of the latter).
    """

    target: Target
    scenario: str = "chat"
    users: int | None = None
    rate: float | None = None
    poisson: bool = False
    seed: int = 0
    shape: StageShape | None = None
    duration_s: float | None = None
    max_requests: int | None = None
    slos: list[str] = field(default_factory=list)
    model: str | None = None
    processes: int | None = None
    role: str = "local"  # local | master | worker
    expect_workers: int = 1
    master_host: str = "127.0.0.1"
    master_port: int = 5557
    out_dir: Path = Path("reports")
    run_id: str | None = None
    max_lag_ms: float = 25.0
    max_inflight: int = 1024
    drain_s: float | None = None
    retry_after_max_s: float = 0.0  # > 0: closed-loop users wait Retry-After (capped) after a 429
    extra_body: dict[str, Any] = field(default_factory=dict)
    use_tokenize: bool = True
    cpus: str | None = None  # taskset CPU list for the generator, e.g. "0"
    progress: bool = True
    allow_lag: bool = False  # do not fail the run when the generator fell behind
    trace: str | None = None  # replay this trace file on its schedule (mode "trace")
    trace_format: str = "auto"
    trace_speed: float = 1.0  # 2.0 replays twice as fast
    warmup_s: float | None = None  # sent on top of the bounds, kept out of the statistics
    warmup_requests: int | None = None
    dataset: str | None = None  # prompts from this local file (JSONL / ShareGPT, load/dataset.py)
    dataset_format: str = "auto"
    # Stop early when the target goes down mid-run (load/down.py); DownRule(0) turns it off.
    down_after: DownRule = field(default_factory=DownRule)


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
        return self.run_dir / MERGED_NAME


# ------------------------------------------------------------------ helpers


def scenario_path(name: str) -> Path:
    """``chat`` -> ./scenarios/chat.py, else the packaged one; a .py path as given (load/shipped.py)."""
    return shipped.scenario_path(name)


def plan_path(name: str) -> Path:
    """``smoke`` -> ./loadtests/smoke.yaml, else the packaged one; a path as given."""
    return shipped.plan_path(name)


def _new_run_id(scenario: str) -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{Path(scenario).stem}-{os.getpid() % 10000:04d}"


def validate(spec: LoadSpec) -> list[SLO]:
    """Check a spec before anything starts; returns the parsed SLOs (CLI first, then targets.yaml)."""
    modes = [
        m
        for m, v in (
            ("--users", spec.users),
            ("--rate", spec.rate),
            ("shape", spec.shape),
            ("--trace", spec.trace),
        )
        if v
    ]
    if spec.role != "worker":
        if len(modes) != 1:
            raise UsageError(
                "give exactly one of --users N (closed loop), --rate R/s (open loop) or a plan with a shape"
                + (f"; got {' and '.join(modes)}" if modes else "")
            )
        bounded = spec.shape is not None or spec.trace is not None  # a trace ends by itself
        if spec.duration_s is None and spec.max_requests is None and not bounded:
            raise UsageError(
                "refusing to start an unbounded load test: give --duration (e.g. 5m) or --max-requests N"
            )
    if spec.users is not None and spec.users < 1:
        raise UsageError("--users must be >= 1")
    if spec.max_requests is not None and spec.max_requests < 1:
        raise UsageError("--max-requests must be >= 1")
    if spec.role not in ("local", "master", "worker"):
        raise UsageError(f"role {spec.role!r}: local, master or worker")
    if spec.role != "local" and not spec.run_id:
        raise UsageError(
            "--master/--worker need --run-id ID (the same on the master and every worker, so every request id names the run)"
        )
    cli = parse_slos(spec.slos, "cli")
    reject_cold(cli)
    # targets.yaml may list cold-start SLOs too: accept/cutover judge those, a load run cannot.
    slos = [*cli, *(s for s in parse_slos(spec.target.slo, "targets.yaml") if not s.cold)]
    # The same bound from --slo and targets.yaml is one SLO (judged and printed once, as "cli").
    seen: set[tuple[str, str, float]] = set()
    unique = []
    for slo in slos:
        key = (slo.name, slo.op, slo.bound)
        if key not in seen:
            seen.add(key)
            unique.append(slo)
    return unique


def _mode(spec: LoadSpec) -> str:
    if spec.shape is not None:
        return "shape"
    if spec.trace is not None:
        return "trace"
    if spec.rate is not None:
        return "poisson" if spec.poisson else "fixed"
    return "closed"


def _workers(spec: LoadSpec) -> int:
    if spec.role in ("master", "worker"):
        return max(1, spec.expect_workers)
    return max(1, spec.processes or 1)


def build_config(spec: LoadSpec, run_id: str, run_dir: Path, model: str) -> RunConfig:
    duration = spec.duration_s
    if spec.shape is not None:
        duration = min(duration, spec.shape.duration) if duration else spec.shape.duration
    if spec.trace is not None and duration is None:  # the trace's span, its last send inside
        duration = trace_duration(spec.trace, spec.trace_format, spec.trace_speed)
    duration, max_requests = extend_bounds(duration, spec.max_requests, _warmup(spec))
    return RunConfig(
        run_id=run_id,
        target=spec.target.name,
        scenario=Path(spec.scenario).stem,
        base_url=spec.target.base_url,
        model=model,
        records_dir=str(run_dir),
        mode=_mode(spec),
        users=spec.users or 1,
        rate=spec.rate,
        seed=spec.seed,
        duration_s=duration,
        max_requests=max_requests,
        workers=_workers(spec),
        max_inflight=spec.max_inflight,
        drain_s=_drain(spec),
        retry_after_max_s=spec.retry_after_max_s,
        timeout_s=spec.target.timeout_s,
        connect_timeout_s=spec.target.connect_timeout_s,
        api_key_header=spec.target.api_key_header,
        headers=dict(spec.target.headers),
        shape=[
            {"end": s.end, "users": s.users, "spawn_rate": s.spawn_rate} for s in spec.shape.stages
        ]
        if spec.shape
        else [],
        extra_body=dict(spec.extra_body),
        use_tokenize=spec.use_tokenize,
        context_length=spec.target.context_length,
        trace=str(shipped.trace_path(spec.trace)) if spec.trace else None,
        trace_format=spec.trace_format,
        trace_speed=spec.trace_speed,
        dataset=str(Path(spec.dataset).resolve()) if spec.dataset else None,
        dataset_format=spec.dataset_format,
    )


def _warmup(spec: LoadSpec) -> Warmup:
    return Warmup(spec.warmup_s, spec.warmup_requests)


def _drain(spec: LoadSpec) -> float:
    return spec.drain_s if spec.drain_s is not None else min(spec.target.timeout_s, 60.0)


def locust_command(spec: LoadSpec, cfg: RunConfig, run_dir: Path) -> list[str]:
    """The Locust command line for this spec (headless, CSVs and log in the run directory)."""
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(scenario_path(spec.scenario)),
        "--headless",
        "--host",
        spec.target.base_url,
        "--csv",
        str(run_dir / "locust"),
        "--exit-code-on-error",
        "0",
        "--logfile",
        str(run_dir / "locust.log"),
        "--loglevel",
        "INFO",
        "--only-summary",
    ]
    if spec.role == "worker":
        cmd += [
            "--worker",
            "--master-host",
            spec.master_host,
            "--master-port",
            str(spec.master_port),
        ]
    else:
        bound = cfg.duration_s or 24 * 3600.0
        # Locust's own timer is only a backstop: our controller ends the run at the bound and
        # lets in-flight requests finish (drain).
        cmd += ["-t", f"{int(bound + cfg.drain_s + 10)}s", "--stop-timeout", f"{int(cfg.drain_s)}"]
        if cfg.mode in ("fixed", "poisson", "trace"):
            n = _workers(spec)
            cmd += ["-u", str(n), "-r", str(n)]
        elif cfg.mode == "closed":
            cmd += ["-u", str(cfg.users), "-r", str(max(1, cfg.users))]
        if spec.role == "master":
            cmd += [
                "--master",
                "--expect-workers",
                str(spec.expect_workers),
                "--master-bind-port",
                str(spec.master_port),
            ]
        elif spec.processes and spec.processes > 1:
            cmd += ["--processes", str(spec.processes)]
    if spec.cpus:
        cmd = ["taskset", "-c", spec.cpus, *cmd]
    return cmd


class _Tail:
    """Reads new lines of the worker record files as they grow (for live progress)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.offsets: dict[Path, int] = {}
        self.total = self.errors = self.tokens = 0
        self.ttfts: list[float] = []

    def poll(self) -> list[dict[str, Any]]:
        """Read what the workers wrote since the last poll; returns those records."""
        new: list[dict[str, Any]] = []
        for p in worker_files(self.run_dir):
            off = self.offsets.get(p, 0)
            try:
                with open(p, "rb") as fh:
                    fh.seek(off)
                    data = fh.read()
            except OSError:
                continue
            cut = data.rfind(b"\n") + 1
            self.offsets[p] = off + cut
            for line in data[:cut].splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(r, dict):
                    continue
                new.append(r)
                self.total += 1
                if r.get("error"):
                    self.errors += 1
                elif r.get("ttft") is not None:
                    self.ttfts.append(r["ttft"])
                self.tokens += int(r.get("output_tokens") or r.get("output_tokens_client") or 0)
        if len(self.ttfts) > 2000:
            self.ttfts = self.ttfts[-1000:]
        return new

    def line(self, elapsed: float, bound: float | None) -> str:
        recent = sorted(self.ttfts[-200:])
        p50 = f"{recent[len(recent) // 2] * 1000:.0f} ms" if recent else "-"
        of = f"/{bound:.0f}s" if bound else ""
        return (
            f"load {elapsed:5.0f}s{of}  done {self.total}  errors {self.errors}  "
            f"tokens {self.tokens}  ttft p50 (recent) {p50}"
        )


def _run_locust(
    cmd: list[str],
    env: dict[str, str],
    run_dir: Path,
    wall_limit: float,
    progress: bool,
    bound: float | None,
    watch: DownWatch | None = None,
    records_dir: Path | None = None,
) -> int | None:
    """Run Locust, show progress, enforce a wall-clock limit; return its exit code. With
    ``watch``, Locust is stopped as soon as the records say the target went down
    (``watch.down`` then holds why). ``records_dir``: where the records are written (default
    ``run_dir``)."""
    console: Any = None
    live: Any = None
    if progress:
        from rich.console import Console
        from rich.live import Live

        console = Console(stderr=True)
        if console.is_terminal:
            live = Live(console=console, refresh_per_second=2, transient=True)
            live.start()
    tail = _Tail(records_dir or run_dir)
    out = open(run_dir / "locust.stdout", "wb")  # noqa: SIM115
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=stoppable_child,  # _stop() sends SIGINT: Locust must not inherit SIG_IGN
    )  # noqa: PLW1509 - only calls prctl and signal
    last_print = last_poll = 0.0
    try:
        while True:
            try:
                rc = proc.wait(timeout=0.25)
                break
            except subprocess.TimeoutExpired:
                pass
            elapsed = time.monotonic() - t0
            if elapsed - last_poll >= 1.0:
                new = tail.poll()
                last_poll = elapsed
                if watch is not None and watch.feed_batch(new) is not None:
                    _stop(proc)  # the master stops its workers too
                    return proc.returncode
            if live is not None and elapsed - last_print >= 0.5:
                live.update(tail.line(elapsed, bound))
                last_print = elapsed
            elif live is None and console is not None and elapsed - last_print >= 10:
                console.print(tail.line(elapsed, bound))
                last_print = elapsed
            if elapsed > wall_limit:
                _stop(proc)
                return proc.returncode
    except KeyboardInterrupt:
        _stop(proc)
        raise
    finally:
        if live is not None:
            live.stop()
        out.close()
    return rc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT first (Locust writes its CSVs), then SIGKILL the process group after 10 s."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=10)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


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


def _reader_summary(infos: list[dict[str, Any]]) -> dict[str, Any]:
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
    out: dict[str, Any] = {
        "kinds": kinds,
        "clock": clock if kinds else None,
        "kernel_stamps": kernel,
        "reader_stamps": user,
    }
    threads = [r["thread"] for r in readers if isinstance(r.get("thread"), dict)]
    if threads:
        # The native reader threads' own cost: their CPU is inside generator.cpu_s too.
        reads = sum(int(t.get("reads") or 0) for t in threads)
        cpu = sum(float(t.get("cpu_s") or 0.0) for t in threads)
        passes = sum(int(t.get("passes") or 0) for t in threads)
        out["thread"] = {
            "reads": reads,
            "passes": passes,
            "cpu_s": round(cpu, 4),
            "us_per_read": round(cpu / reads * 1e6, 2) if reads else None,
            "reads_per_pass": round(reads / passes, 2) if passes else None,
        }
    return out


def _worker_infos(run_dir: Path) -> list[dict[str, Any]]:
    infos = []
    for p in sorted(run_dir.glob("worker-*.json")):
        try:
            infos.append(json.loads(p.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return infos


# ------------------------------------------------------------------ the reusable entry point


def run_load(spec: LoadSpec, on_log: Callable[[str], None] | None = None) -> LoadResult:
    """Run one bounded load test and evaluate its SLOs. Raises :class:`UsageError` on bad input.

    Safe to call repeatedly (a capacity sweep): each call gets its own run directory under
    ``spec.out_dir`` and its own Locust process; nothing global is kept between calls.
    """
    say = on_log or (lambda s: None)
    slos = validate(spec)
    scenario_path(spec.scenario)  # fail early on an unknown scenario
    if spec.trace is not None:  # a trace that is nowhere: a usage error before any probe
        shipped.trace_path(spec.trace)
    # A bad dataset file is a usage error before any load (its file and line named).
    check_dataset(spec.dataset, spec.dataset_format, spec.scenario)
    down = target_down(spec.target.base_url, spec.target.connect_timeout_s)
    if down:
        choice = ModelChoice(
            spec.model or (spec.target.models or ["(not discovered: target down)"])[0],
            "given" if spec.model else "not discovered: target down",
        )
    else:
        choice = model_for_target(spec.target, spec.model)
    model = choice.model
    run_id = spec.run_id or _new_run_id(spec.scenario)
    run_dir = Path(spec.out_dir) / run_id
    if spec.role != "worker":
        refuse_used_run_dir(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = build_config(spec, run_id, run_dir, model)
    cfg_path = cfg.dump(
        run_dir
        / (
            "load-config.json"
            if spec.role != "worker"
            else f"load-config-worker-{os.getpid()}.json"
        )
    )
    env = dict(os.environ)
    env[ENV_CONFIG] = str(cfg_path)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(cfg.secret_env())
    auth = spec.target.auth_headers()
    if auth:
        env[ENV_API_KEY] = next(iter(auth.values())).removeprefix("Bearer ")
    if down and spec.role != "worker":
        say(down)
        now = time.time()
        return summarise(spec, cfg, slos, run_dir, None, now, now, down=down)
    cmd = locust_command(spec, cfg, run_dir)
    say(
        f"run {run_id}: {cfg.mode} load on {spec.target.name} ({redact(spec.target.base_url)}), scenario {cfg.scenario}, {choice.line()}"
    )
    started = time.time()
    bound = cfg.duration_s
    wall = (bound or 3600.0) + cfg.drain_s + 120.0
    cache0 = engine_cache.snapshot(spec.target, 2.0) if spec.role != "worker" else {}
    # A worker watches its own records too: it stops by itself when the target is gone, even
    # when its master's quit message never comes (a master killed after a slow shutdown).
    watch = DownWatch(spec.down_after, started)
    try:
        # A worker's records go to its own copy (local/); the master's come over the wire.
        records_dir = run_dir / LOCAL_DIR if spec.role == "worker" else run_dir
        rc = _run_locust(cmd, env, run_dir, wall, spec.progress, bound, watch, records_dir)
    except KeyboardInterrupt as exc:
        # Ctrl-C or SIGTERM: Locust has been stopped; what finished is summarised, marked.
        if spec.role == "worker":
            raise
        signum = signum_of(exc)
        why = f"interrupted by {signal.Signals(signum).name} after {time.time() - started:.1f} s"
        partial = summarise(spec, cfg, slos, run_dir, None, started, time.time(), partial=why)
        say(f"{why}: partial summary in {run_dir / 'summary.json'}; records in {run_dir}")
        raise Interrupted(signum, partial) from None
    ended = time.time()
    if spec.role != "worker":  # the engine's prefix-cache counters over the run (breakdown.py)
        delta = engine_cache.run_delta(cache0, engine_cache.snapshot(spec.target, 2.0))
        (run_dir / ENGINE_FILE).write_text(json.dumps(delta) + "\n", encoding="utf-8")
    if spec.role == "worker":
        # The master merges and judges; a worker only reports where its records are.
        if watch.down is not None:
            say(f"{watch.down}: worker stopped; its records are in {run_dir / LOCAL_DIR}")
        empty = RunStats()
        return LoadResult(run_id, run_dir, {}, empty, [], True, False, 0, rc)
    if watch.down is not None:
        say(f"{watch.down}: run stopped; partial summary in {run_dir / 'summary.json'}")
        return summarise(
            spec, cfg, slos, run_dir, rc, started, ended, down=watch.down, partial=watch.down
        )
    return summarise(spec, cfg, slos, run_dir, rc, started, ended)


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
) -> LoadResult:
    """Merge the worker records, compute statistics and verdicts, write summary.json/.txt.
    ``down``: why the target could not be reached before the load started (then FAIL).
    ``partial``: why the run stopped early (the summary is marked; never a pass)."""
    read = merge_records(run_dir)
    infos = _worker_infos(run_dir)
    planned_parts = [i.get("planned") for i in infos]
    planned = (
        sum(int(p) for p in planned_parts if p is not None)
        if infos and all(p is not None for p in planned_parts)
        else None
    )
    if (
        cfg.mode in ("fixed", "poisson")
        and planned is None
        and cfg.duration_s
        and cfg.rate
        and not infos
    ):
        planned = int(
            cfg.rate * cfg.duration_s
        )  # no worker reported (killed): judge against the plan
    loop_lag = [x for i in infos for x in i.get("loop_lag_s", [])]
    warm = _warmup(spec)
    if warm.active:  # a first pass takes the warm-up's own figures; they count for nothing else
        for _ in warm.measured(read.iter_records()):
            pass
        planned = None if planned is None else max(0, planned - warm.count)

    def records() -> Any:
        its = read.iter_records()
        return _warmup(spec).measured(its) if warm.active else its

    sched = Schedule(mode=cfg.mode, planned=planned, max_lag_ms=spec.max_lag_ms)
    stats = compute_stats(records(), sched, request_predicate(slos), loop_lag)
    verdicts = evaluate(slos, stats)
    slo_ok = all(v.passed for v in verdicts)
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
    transport = read_transport(run_dir)  # workers' records came over Locust's channel
    if transport is not None:
        unmeasured += transport_reasons(transport)
    elif spec.role == "master" or (spec.role == "local" and (spec.processes or 1) > 1):
        unmeasured.append(
            "the master kept no ledger of its workers (transport.json): see locust.log"
        )
    if partial:
        unmeasured.insert(0, f"partial run: {partial}")
    judged = judge(
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
    )
    reasons, passed, verdict = judged.reasons, judged.passed, judged.status
    exit_code = judged.exit_code
    cpu = sum(float(i.get("cpu_s", 0.0)) for i in infos)
    tokens_client = sum(int(i.get("tokens_client", 0)) for i in infos)
    methods = sorted({str(i.get("prompt_method")) for i in infos if i.get("prompt_method")})
    summary: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "run_id": cfg.run_id,
        "target": cfg.target,
        "base_url": redact(cfg.base_url),
        "model": cfg.model,
        "scenario": cfg.scenario,
        "mode": cfg.mode,
        "users": cfg.users if cfg.mode == "closed" else None,
        "rate": cfg.rate,
        "seed": cfg.seed,
        "duration_s": cfg.duration_s,
        "max_requests": cfg.max_requests,
        "workers": len(infos) or cfg.workers,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "ended_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ended)),
        "prompt_method": ",".join(methods) or None,
        "records": {
            "merged": read.count,
            "bad_lines": read.bad_lines,
            "per_worker": {Path(k).name: v for k, v in read.per_file.items()},
            **({"transport": transport} if transport is not None else {}),
        },
        **stats.as_dict(),
        "slo": [v.as_dict() for v in verdicts],
        "verdict": verdict,
        "partial": bool(partial),
        "reasons": reasons,
        "exit_code": exit_code,
        "generator": {
            "cpu_s": round(cpu, 3),
            "tokens_streamed": tokens_client,
            "cpu_s_per_10k_tokens": round(cpu / tokens_client * 10_000, 4)
            if tokens_client
            else None,
            "locust_rc": locust_rc,
            "reader": _reader_summary(infos),
        },
        "files": sorted(p.name for p in run_dir.iterdir() if p.is_file()),
    }
    summary.update(scenario_breakdown(records(), run_dir))  # turns, prefix cache
    if warm.active:
        summary["warmup"] = warm.as_dict()
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    text = format_summary(summary, verdicts)
    (run_dir / "summary.txt").write_text(text + "\n", encoding="utf-8")
    return LoadResult(
        cfg.run_id, run_dir, summary, stats, verdicts, passed, stats.behind, exit_code, locust_rc
    )


def _ms(d: dict[str, Any], key: str) -> str:
    v = d.get(key)
    return "-" if v is None else f"{v:.1f}"


def format_summary(summary: dict[str, Any], verdicts: Sequence[Verdict]) -> str:
    """The short text summary printed at the end and kept as summary.txt."""
    req, thr, lat = summary["requests"], summary["throughput"], summary["latency_ms"]
    lines = [
        f"run {summary['run_id']}  target {summary['target']}  scenario {summary['scenario']}  mode {summary['mode']}",
        f"requests {req['total']}  ok {req['ok']}  failed {req['failed']} ({req['error_rate']:.2%})"
        + (f"  abandoned on purpose {req['abandoned']}" if req.get("abandoned") else "")
        + (f"  rate-limited {req['rate_limited']}" if req.get("rate_limited") else "")
        + (f"  errors {req['errors']}" if req["errors"] else ""),
        f"throughput {thr['requests_per_s']:.2f} req/s  {thr['output_tokens_per_s']:.1f} output tokens/s"
        f"  over {summary['window_s']:.1f} s  goodput {'-' if summary['goodput'] is None else format(summary['goodput'], '.1%')}",
        f"{'ms':<20}{'p50':>9}{'p90':>9}{'p95':>9}{'p99':>9}{'p99.9':>9}{'max':>9}",
    ]
    reasoned = bool(summary["tokens"].get("reasoning_requests"))
    for name in ("ttft", "itl", "tpot", "e2e", "ttft_from_intended", "e2e_from_intended", "lag"):
        d = lat.get(name) or {}
        if not d.get("count"):
            continue
        lines.append(
            f"{name:<20}"
            + "".join(f"{_ms(d, k):>9}" for k in ("p50", "p90", "p95", "p99", "p99.9", "max"))
        )
    lines += phase_lines(lat) if reasoned else []
    tok = summary["tokens"]
    if reasoned:
        lines.append(
            f"tokens: reasoning {tok['reasoning']}, answer {tok['answer']} "
            f"({tok['reasoning_requests']} requests reasoned"
            + (
                f"; usage said 0 reasoning tokens for {tok['reasoning_usage_zero']}: counted from the stream)"
                if tok.get("reasoning_usage_zero")
                else ")"
            )
        )
    if tok["discrepant_requests"] or tok["usage_missing"]:
        lines.append(
            f"tokens: usage {tok['output_usage']}, client chunks {tok['output_client']}, "
            f"{tok['discrepant_requests']} requests differ, {tok['usage_missing']} without usage"
        )
    lines += format_breakdown(summary) + format_warmup(summary)
    for v in verdicts:
        lines.append(v.line())
    sched = summary["schedule"]
    if sched["behind"] and req["ok"]:  # with nothing ok the server is to blame (the verdict says)
        lines += [f"WARNING: {r}" for r in sched["reasons"]]
    breached = [str(v.get("slo")) for v in summary.get("slo") or [] if not v.get("passed")]
    why = [*summary["reasons"], *([f"SLO breached: {', '.join(breached)}"] if breached else [])]
    lines.append(f"verdict: {summary['verdict'].upper()}" + (f" ({'; '.join(why)})" if why else ""))
    return "\n".join(lines)


# ------------------------------------------------------------------ options and plans


def read_plan(name: str | None) -> dict[str, Any]:
    """The values of the load plan ``name`` (loadtests/<name>.yaml or a path); ``{}`` for none."""
    return dict(load_plan(plan_path(name)).values) if name else {}


def spec_from_options(
    target: Target, options: Mapping[str, Any], plan: Mapping[str, Any] | None = None
) -> LoadSpec:
    """A :class:`LoadSpec` from ``servecheck load``'s options layered over a load plan.

    ``options`` uses the option names of the command (``users``, ``rate``, ``duration``,
    ``max_lag`` ..., as in ``vars(args)``); an option that is ``None`` takes the plan's value.
    """
    plan = dict(plan or {})
    o: Callable[[str], Any] = options.get  # Any: the options are argparse values

    def pick(name: str) -> Any:
        v = o(name)
        return v if v is not None else plan.get(name)

    users, rate = o("users"), o("rate")
    shape = None
    if o("speed") is not None and o("speed") <= 0:
        raise UsageError(f"--speed {o('speed'):g}: must be > 0")
    if users is None and rate is None and o("trace") is None:
        users, rate = plan.get("users"), plan.get("rate")
        if plan.get("shape"):
            shape = shape_from_spec(dict(plan["shape"]))
    duration = pick("duration")
    max_lag_text = o("max_lag") or "25ms"
    max_lag = parse_duration(max_lag_text) * 1000.0
    role = "master" if o("master") else "worker" if o("worker") else "local"
    warm_plan: dict[str, Any] = dict(plan.get("warmup") or {})  # load_plan normalised both
    data_plan: dict[str, Any] = dict(plan.get("dataset") or {})
    if o("master") and o("worker"):
        raise UsageError("--master and --worker exclude each other")
    return LoadSpec(
        target=target,
        scenario=pick("scenario") or ("trace" if o("trace") else "chat"),
        users=int(users) if users is not None else None,
        rate=parse_rate(rate) if rate is not None else None,
        poisson=bool(pick("poisson")),
        seed=int(pick("seed") or 0),
        shape=shape,
        duration_s=parse_duration(duration) if duration is not None else None,
        max_requests=pick("max_requests"),
        slos=[*(o("slo") or []), *(plan.get("slo") or [])],
        model=o("model"),
        processes=pick("processes"),
        role=role,
        expect_workers=o("expect_workers") or 1,
        master_host=o("master_host") or "127.0.0.1",
        master_port=o("master_port") or 5557,
        out_dir=Path(o("out") or "reports"),
        run_id=o("run_id"),
        max_lag_ms=max_lag
        if max_lag_text != "25ms" or "max_lag" not in plan
        else parse_duration(plan["max_lag"]) * 1000.0,
        max_inflight=int(pick("max_inflight") or 1024),
        retry_after_max_s=parse_retry_after_cap(pick("honour_retry_after")),
        extra_body=dict(plan.get("extra_body") or {}),
        use_tokenize=not o("no_tokenize"),
        cpus=o("cpus"),
        progress=not o("quiet"),
        allow_lag=bool(o("allow_lag")),
        trace=o("trace"),
        trace_format=o("trace_format") or "auto",
        trace_speed=float(o("speed") or 1.0),
        warmup_s=parse_duration(o("warmup")) if o("warmup") else warm_plan.get("seconds"),
        warmup_requests=o("warmup_requests")
        if o("warmup_requests") is not None
        else warm_plan.get("requests"),
        dataset=o("dataset") or data_plan.get("path"),
        dataset_format=o("dataset_format")
        if o("dataset") or o("dataset_format") not in (None, "auto")
        else data_plan.get("format", "auto"),
        down_after=parse_down_after(o("down_after")),
    )


__all__ = [
    "SCHEMA_VERSION",
    "LoadResult",
    "LoadSpec",
    "format_summary",
    "plan_path",
    "read_plan",
    "run_load",
    "scenario_path",
    "spec_from_options",
    "summarise",
]
