"""A bounded Locust load run with exact percentiles and SLO verdicts: :func:`run_load`.

Locust runs as a subprocess (``python -m locust --headless``) so gevent's monkey-patching never
touches this process. Each Locust process writes its own ``records-<worker>.jsonl`` as the run
goes; at the end they are merged into ``reports/<run-id>/records.jsonl`` and summarised
(``summary.json``, ``summary.txt``, Locust's CSVs). Exit code: 0 when every SLO held, 1 when one
was breached (or the generator fell behind, or nothing finished), 2 for a usage error.

``servecheck load`` (``servecheck/commands/load``) parses options into a :class:`LoadSpec`
and calls :func:`run_load`; accept, capacity and cutover call it the same way. This module is
the run's Locust-process half (the spec, the command line, the child process and its progress);
the summary half (``summary.json``, :data:`SCHEMA_VERSION`, the verdict) is
:mod:`servecheck.load.summary`, re-exported here.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servecheck.analysis import engine_cache
from servecheck.analysis.aggregate import parse_records, resolve_records
from servecheck.analysis.breakdown import ENGINE_FILE
from servecheck.analysis.budget import with_error_budget
from servecheck.analysis.down import DownWatch
from servecheck.analysis.slo import (
    SLO,
    reject_cold,
)
from servecheck.analysis.stats import RunStats
from servecheck.analysis.timings import request_id_header
from servecheck.analysis.warmup import extend_bounds
from servecheck.client.models import ModelChoice, NoAnswer, model_for_target, unlisted_model
from servecheck.client.version import probe_engine_version
from servecheck.config.model import Target
from servecheck.errors import SpecError, UsageError
from servecheck.load import server_watch
from servecheck.load.generator.apis import resolve_api
from servecheck.load.generator.live import check_free, live_config
from servecheck.load.generator.transport import LOCAL_DIR
from servecheck.load.hung_watch import Heartbeats, HungMonitor
from servecheck.load.plan import CONTEXT_FILE, ENV_CONFIG, RunConfig, load_plan
from servecheck.load.progress import ChildExit, RecordTail
from servecheck.load.spec import LoadSpec
from servecheck.load.summary import (
    SCHEMA_VERSION,
    LoadResult,
    rule_of,
    summarise,
    warmup_of,
)
from servecheck.load.workload import shipped
from servecheck.load.workload.cancel import wait_after_run
from servecheck.load.workload.dataset import check_dataset
from servecheck.load.workload.images import check_images, normalise_images
from servecheck.load.workload.lengths import exact_output
from servecheck.load.workload.phased import check_slos
from servecheck.load.workload.trace import trace_duration
from servecheck.probes.reach import target_down
from servecheck.records.record import refuse_used_run_dir
from servecheck.redact import redact
from servecheck.redact import register as redact_register
from servecheck.signals import Interrupted, signum_of, stoppable_child

# A side probe (the engine's /metrics before and after, /tokenize) waits at most this share of
# the run's duration (and at least PROBE_MIN_S): a target that accepts and never answers must not
# make the probes outlast the run (issue 24.6: an 8 s run took 32 s).
PROBE_SHARE = 0.05
PROBE_MIN_S = 1.0
ENGINE_CACHE_S = 2.0  # the /metrics scrape's own cap: a nicety, never worth a long wait


# ------------------------------------------------------------------ helpers


def scenario_path(name: str) -> Path:
    """``chat`` -> ./scenarios/chat.py, else the packaged one; a .py path as given (load/workload/shipped.py)."""
    return shipped.scenario_path(name)


def plan_path(name: str) -> Path:
    """``smoke`` -> ./loadtests/smoke.yaml, else the packaged one; a path as given."""
    return shipped.plan_path(name)


def _new_run_id(scenario: str) -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{Path(scenario).stem}-{os.getpid() % 10000:04d}"


def validate(spec: LoadSpec) -> list[SLO]:
    """Check a spec before anything starts; returns the parsed SLOs (CLI first, then targets.yaml)."""
    _validate_profile(spec)
    modes = [
        m
        for m, v in (
            ("{users}", spec.users),
            ("{rate}", spec.rate),
            ("shape", spec.shape),
            ("{trace}", spec.trace),
            ("{profile}", spec.profile is not None and spec.profile.schedules),
        )
        if v
    ]
    if spec.role != "worker":
        if len(modes) != 1:
            raise SpecError(
                "give exactly one of {users} N (closed loop), {rate} R/s (open loop) or a plan with a shape"
                + (f"; got {' and '.join(modes)}" if modes else "")
            )
        # a trace ends by itself, and so do a step and a recovery profile
        bounded = (
            spec.shape is not None
            or spec.trace is not None
            or (spec.profile is not None and spec.profile.duration is not None)
        )
        if spec.duration_s is None and spec.max_requests is None and not bounded:
            raise SpecError(
                "refusing to start an unbounded load test: give {duration_s} (e.g. 5m) or {max_requests} N"
            )
    if spec.burstiness is not None:
        if spec.rate is None:
            raise SpecError("{burstiness} shapes open-loop arrivals: give {rate} R/s with it")
        if spec.poisson:
            raise SpecError("{burstiness} (gamma arrivals) and {poisson} exclude each other")
        if not (spec.burstiness > 0 and math.isfinite(spec.burstiness)):
            raise SpecError(
                "{burstiness} {n:g}: a positive number (1 is Poisson)", n=spec.burstiness
            )
    if (spec.input_tokens or spec.output_tokens) and (spec.dataset or spec.trace):
        raise SpecError(
            "{input_tokens} / {output_tokens} replace a scenario's lengths; "
            + ("{dataset}" if spec.dataset else "{trace}")
            + " brings its own"
        )
    if spec.users is not None and spec.users < 1:
        raise SpecError("{users} must be >= 1")
    if spec.metrics_interval_s is not None and not spec.metrics_interval_s > 0:
        raise SpecError("{metrics_interval_s} must be > 0 (seconds between /metrics scrapes)")
    if not spec.slice_s >= 0.1:
        raise SpecError("{slice_s} {n:g} s: at least 0.1 s", n=spec.slice_s)
    if spec.max_requests is not None and spec.max_requests < 1:
        raise SpecError("{max_requests} must be >= 1")
    request_id_header(spec.request_id_header)  # a name that cannot split the request head
    live_config(spec.web, spec.web_auth, spec.metrics_port, spec.role, spec.otlp)
    if spec.role not in ("local", "master", "worker"):
        raise UsageError(f"role {spec.role!r}: local, master or worker")
    if spec.role != "local" and not spec.run_id:
        raise SpecError(
            "{master}/{worker} need {run_id} ID (the same on the master and every worker, so every request id names the run)"
        )
    cli = list(spec.slos)
    reject_cold(cli)
    check_slos(cli, spec.profile)  # recovery_s needs a recovery profile
    # targets.yaml may list cold-start, drain and swap SLOs too: accept/cutover/drain judge
    # those, a load run cannot; and a profile's SLO judges only a run with that profile.
    slos = [
        *cli,
        *(s for s in spec.target.slos if not (s.cold or s.drain or s.swap)),
    ]
    measured = () if spec.profile is None else spec.profile.measures
    slos = [s for s in slos if not s.profile or s.source == "cli" or s.metric in measured]
    # The same bound from --slo and targets.yaml is one SLO (judged and printed once, as "cli").
    seen: set[tuple[str, str, float]] = set()
    unique = []
    for slo in slos:
        key = (slo.name, slo.op, slo.bound)
        if key not in seen:
            seen.add(key)
            unique.append(slo)
    return with_error_budget(unique, spec.error_budget)


def _validate_profile(spec: LoadSpec) -> None:
    """A profile's arrivals are its own; churn without a rate needs the run's loop."""
    prof = spec.profile
    if prof is None:
        return
    if prof.schedules and spec.burstiness is not None:
        raise SpecError("{burstiness} shapes a steady rate; a {profile} sets its own arrivals")
    if not prof.schedules and spec.users is None and spec.rate is None:
        raise SpecError("{profile} churn: give {users} N or {rate} R/s, or churn:rate=R")
    if spec.warmup_s or spec.warmup_requests:
        raise SpecError(
            "{profile}: its phases start with the run; a warm-up would shift them "
            "(recovery has its own before= phase)"
        )


def _mode(spec: LoadSpec) -> str:
    if spec.profile is not None and spec.profile.schedules:
        return "profile"
    if spec.shape is not None:
        return "shape"
    if spec.trace is not None:
        return "trace"
    if spec.rate is not None:
        if spec.burstiness is not None:
            return "gamma"
        return "poisson" if spec.poisson else "fixed"
    return "closed"


def _exact_output(spec: LoadSpec) -> tuple[dict[str, Any], str | None]:
    """``ignore_eos`` where it makes ``--output-tokens`` exact, and how the length is held."""
    if spec.output_tokens is None:
        return {}, None
    if resolve_api(spec.api, spec.scenario) != "chat":
        return {}, "a ceiling: ignore_eos is sent on chat completions only"
    return exact_output(spec.target.engine, spec.extra_body)


def _extra_body(spec: LoadSpec) -> dict[str, Any]:
    return {**spec.extra_body, **_exact_output(spec)[0]}


def _lengths_config(spec: LoadSpec) -> dict[str, Any]:
    return {
        "input_tokens": spec.input_tokens,
        "output_tokens": spec.output_tokens,
        "output_length": _exact_output(spec)[1],
    }


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
    if spec.profile is not None and spec.profile.duration is not None:
        own = spec.profile.duration
        duration = min(duration, own) if duration else own
    duration, max_requests = extend_bounds(duration, spec.max_requests, warmup_of(spec))
    cfg = RunConfig(
        run_id=run_id,
        target=spec.target.name,
        scenario=Path(spec.scenario).stem,
        base_url=spec.target.base_url,
        model=model,
        records_dir=str(run_dir),
        verify_tls=spec.target.verify_tls,
        engine=spec.target.engine,
        api_key=_api_key(spec.target),
        web_auth=spec.web_auth,
        mode=_mode(spec),
        users=spec.users or 1,
        rate=spec.rate,
        burstiness=spec.burstiness,
        **_lengths_config(spec),
        seed=spec.seed,
        duration_s=duration,
        max_requests=max_requests,
        workers=_workers(spec),
        max_inflight=spec.max_inflight,
        drain_s=_drain(spec),
        retry_after_max_s=spec.retry_after_max_s,
        cancel=spec.cancel,
        timeout_s=spec.target.timeout_s,
        connect_timeout_s=spec.target.connect_timeout_s,
        probe_timeout_s=probe_timeout(spec.target, duration),
        api_key_header=spec.target.api_key_header,
        request_id_header=request_id_header(spec.request_id_header),
        headers=dict(spec.target.headers),
        shape=[
            {"end": s.end, "users": s.users, "spawn_rate": s.spawn_rate} for s in spec.shape.stages
        ]
        if spec.shape
        else [],
        extra_body=_extra_body(spec),
        use_tokenize=spec.use_tokenize,
        context_length=spec.target.context_length,
        trace=str(shipped.trace_path(spec.trace)) if spec.trace else None,
        trace_format=spec.trace_format,
        trace_speed=spec.trace_speed,
        dataset=str(Path(spec.dataset).resolve()) if spec.dataset else None,
        dataset_format=spec.dataset_format,
        api=resolve_api(spec.api, spec.scenario),
        images=normalise_images(spec.images),
        profile=spec.profile,
        profile_poisson=spec.poisson and spec.profile is not None,
        model_mix=list(spec.model_mix),
        agent=None if spec.agent is None else spec.agent.to_dict(),
    )
    cfg.aggregate = rule_of(spec, cfg).as_dict()
    cfg.live = live_config(spec.web, spec.web_auth, spec.metrics_port, spec.role, spec.otlp)
    planned = max_requests
    if planned is None and spec.rate and duration:
        planned = int(spec.rate * duration)
    cfg.records = resolve_records(parse_records(spec.records), planned)
    return cfg


def _api_key(target: Target) -> str | None:
    """The target's key as its auth header carries it (``Bearer`` taken off)."""
    auth = target.auth_headers()
    return next(iter(auth.values())).removeprefix("Bearer ") if auth else None


def probe_timeout(target: Target, duration_s: float | None) -> float:
    """A side probe's timeout: the target's own timeouts, bounded by a share of the run."""
    bound = min(target.timeout_s, target.connect_timeout_s)
    if duration_s:
        bound = min(bound, max(PROBE_MIN_S, PROBE_SHARE * duration_s))
    return bound


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
        *_ui_args(cfg),
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
        if cfg.mode in ("fixed", "poisson", "gamma", "trace", "profile"):
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
            # Locust's forked workers reach their master on 5557 unless told otherwise: two runs
            # with several processes on one host then collided ("Address already in use").
            port = str(_loopback_port())
            cmd += ["--processes", str(spec.processes), "--master-bind-host", "127.0.0.1"]
            cmd += ["--master-bind-port", port, "--master-port", port]
    if spec.cpus:
        cmd = ["taskset", "-c", spec.cpus, *cmd]
    return cmd


def _loopback_port() -> int:
    """A port free on the loopback now (the master binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ui_args(cfg: RunConfig) -> list[str]:
    """``--headless``, or with ``--web`` Locust's UI on its address, the run started at once and
    Locust gone when it ends (the live view: load/generator/live_web.py)."""
    web = (cfg.live or {}).get("web")
    if not web:
        return ["--headless"]
    return ["--autostart", "--autoquit", "0", "--web-host", web[0], "--web-port", str(web[1])]


def _run_locust(
    cmd: list[str],
    env: dict[str, str],
    run_dir: Path,
    wall_limit: float,
    progress: bool,
    bound: float | None,
    watch: DownWatch | None = None,
    records_dir: Path | None = None,
    drain: float | None = None,
    hung: HungMonitor | None = None,
) -> int | None:
    """Run Locust, show progress, enforce a wall-clock limit; return its exit code. With
    ``watch``, Locust is stopped as soon as the records say the target went down
    (``watch.down`` then holds why), and as soon as ``hung`` finds the target hung but healthy
    (``hung.finding``). ``records_dir``: where the records are written (default ``run_dir``)."""
    console: Any = None
    live: Any = None
    if progress:
        from rich.console import Console
        from rich.live import Live

        console = Console(stderr=True)
        if console.is_terminal:
            live = Live(console=console, refresh_per_second=2, transient=True)
            live.start()
    tail = RecordTail(records_dir or run_dir)
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
    child = ChildExit(proc)
    try:
        while True:
            rc = child.wait(0.25)
            if rc is not None:
                break
            elapsed = time.monotonic() - t0
            if elapsed - last_poll >= 1.0:
                last_poll = elapsed
                if _told_to_stop(tail.poll(), watch, hung):
                    _stop(proc)  # the master stops its workers too
                    return proc.returncode
            if live is not None and elapsed - last_print >= 0.5:
                live.update(tail.line(elapsed, bound, drain))
                last_print = elapsed
            elif live is None and console is not None and elapsed - last_print >= 10:
                console.print(tail.line(elapsed, bound, drain))
                last_print = elapsed
            if elapsed > wall_limit:
                _stop(proc)
                return proc.returncode
    except KeyboardInterrupt:
        _stop(proc)
        raise
    finally:
        child.close()
        if live is not None:
            live.stop()
        out.close()
    return rc


def _told_to_stop(
    new: list[dict[str, Any]], watch: DownWatch | None, hung: HungMonitor | None
) -> bool:
    """Whether the run must stop now: the target went down, or is hung but healthy."""
    if watch is not None and watch.feed_batch(new) is not None:
        return True
    return hung is not None and hung.finding is not None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT first (Locust writes its CSVs), then SIGKILL the process group after 10 s."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=10)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


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
    resolve_api(spec.api, spec.scenario)  # an unknown API, or one the scenario cannot speak
    check_images(spec.images)  # bad sizes, a folder without readable images
    down = target_down(spec.target.base_url, spec.target.connect_timeout_s)
    if down:
        choice = ModelChoice(
            spec.model or (spec.target.models or ["(not discovered: target down)"])[0],
            "given" if spec.model else "not discovered: target down",
        )
    else:
        try:
            choice = model_for_target(spec.target, spec.model)
        except NoAnswer as exc:  # connected, then silence: the target is down, not the input
            down = str(exc)
            choice = ModelChoice("(not discovered: no answer)", "not discovered: no answer")
    model = choice.model
    run_id = spec.run_id or _new_run_id(spec.scenario)
    run_dir = Path(spec.out_dir) / run_id
    if spec.role != "worker":
        refuse_used_run_dir(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = build_config(spec, run_id, run_dir, model)
    if not down and spec.role != "worker":  # what check's discovery asks too (history keeps it)
        cfg.engine_version = probe_engine_version(spec.target, cfg.probe_timeout_s)
    own = "" if spec.role != "worker" else f"-worker-{os.getpid()}"
    cfg.dump(run_dir / f"load-config{own}.json")  # the report's copy, secrets masked
    if spec.web_auth:
        redact_register(spec.web_auth.split(":", 1)[1])
    check_free(cfg.live)
    if down and spec.role != "worker":
        say(down)
        now = time.time()
        return summarise(spec, cfg, slos, run_dir, None, now, now, down=down)
    # The one thing the Locust processes are given: the whole config, secrets included, in a
    # file only we may read (never their environment or command line), removed when they end.
    context = cfg.write_private(run_dir / f"{CONTEXT_FILE}{own}")
    try:
        return _run(spec, cfg, slos, run_dir, choice, context, say)
    finally:
        context.unlink(missing_ok=True)


def _run(
    spec: LoadSpec,
    cfg: RunConfig,
    slos: list[SLO],
    run_dir: Path,
    choice: ModelChoice,
    context: Path,
    say: Callable[[str], None],
) -> LoadResult:
    """Locust over the run's config file ``context``, then the summary."""
    env = dict(os.environ)
    env[ENV_CONFIG] = str(context)
    env["PYTHONUNBUFFERED"] = "1"
    cmd = locust_command(spec, cfg, run_dir)
    say(
        f"run {cfg.run_id}: {cfg.mode} load on {spec.target.name} ({redact(spec.target.base_url)}), scenario {cfg.scenario}, {choice.line()}"
    )
    for what, bind in (("web UI (LLM tab; charts at /llm)", "web"), ("OpenMetrics", "metrics")):
        if (cfg.live or {}).get(bind):
            host, port = cfg.live[bind]  # type: ignore[index]
            say(f"live {what}: http://{'[' + host + ']' if ':' in host else host}:{port}/")
    # A --model the target does not list: said now, and named as the cause if every request
    # is refused (a bare "HTTP 404" sent a user looking everywhere but at the model's name).
    unlisted = (
        unlisted_model(spec.target, choice.model, cfg.probe_timeout_s)
        if choice.source == "given" and spec.role != "worker"
        else None
    )
    if unlisted:
        say(f"warning: {unlisted}; the run goes on (a gateway may serve models it does not list)")
    started = time.time()
    bound = cfg.duration_s
    wall = (bound or 3600.0) + cfg.drain_s + 120.0
    probe_s = min(ENGINE_CACHE_S, cfg.probe_timeout_s)
    server = server_watch.ServerWatch.start(spec, run_dir, probe_s, say)
    # A metrics URL that did not answer at all is not asked again for the prefix-cache counters
    # (each scrape would wait its whole timeout on a target that accepts and never answers).
    dead = server.unreachable()
    cache0 = (
        engine_cache.snapshot(spec.target, probe_s) if spec.role != "worker" and not dead else {}
    )
    # A worker watches its own records too: it stops by itself when the target is gone, even
    # when its master's quit message never comes (a master killed after a slow shutdown).
    watch = DownWatch(
        spec.down_after.backstop() if spec.role == "worker" else spec.down_after, started
    )
    # A worker's records go to its own copy (local/); the master's come over the wire.
    records_dir = run_dir / LOCAL_DIR if spec.role == "worker" else run_dir
    beats = Heartbeats(records_dir)
    hung = _hung_monitor(spec, cfg, slos, choice.model, started, beats, server.prometheus())
    try:
        rc = _run_locust(
            cmd, env, run_dir, wall, spec.progress, bound, watch, records_dir, cfg.drain_s, hung
        )
    except KeyboardInterrupt as exc:
        # Ctrl-C or SIGTERM: Locust has been stopped; what finished is summarised, marked.
        server.stop()
        if spec.role == "worker":
            raise
        signum = signum_of(exc)
        why = f"interrupted by {signal.Signals(signum).name} after {time.time() - started:.1f} s"
        partial = summarise(spec, cfg, slos, run_dir, None, started, time.time(), partial=why)
        say(f"{why}: partial summary in {run_dir / 'summary.json'}; records in {run_dir}")
        raise Interrupted(signum, partial) from None
    finally:
        if hung is not None:
            hung.stop()
        beats.remove()
    ended = time.time()
    if spec.cancel is not None and server.recorder is not None:  # back down after cancels?
        wait_after_run(server.recorder, run_dir, started, spec.cancel_drain_s)
    server.finish()  # the engine's own counts over the run (analysis/server_truth.py)
    if spec.role != "worker":  # the engine's prefix-cache counters over the run (breakdown.py)
        after0 = {"note": "the metrics URL did not answer"} if dead else None
        delta = engine_cache.run_delta(
            cache0, after0 or engine_cache.snapshot(spec.target, probe_s)
        )
        (run_dir / ENGINE_FILE).write_text(json.dumps(delta) + "\n", encoding="utf-8")
    if spec.role == "worker":
        # The master merges and judges; a worker only reports where its records are.
        if watch.down is not None:
            say(f"{watch.down}: worker stopped; its records are in {run_dir / LOCAL_DIR}")
        empty = RunStats()
        return LoadResult(cfg.run_id, run_dir, {}, empty, [], True, False, 0, rc)
    finding = None if hung is None else hung.finding
    # hung but healthy, or gone: the run stopped early, its summary partial and failed
    stopped = finding.line if finding is not None else watch.down
    if stopped is not None:
        say(f"{stopped}: run stopped; partial summary in {run_dir / 'summary.json'}")
        evidence = None if finding is None else finding.to_dict()
        return summarise(
            spec,
            cfg,
            slos,
            run_dir,
            rc,
            started,
            ended,
            down=stopped,
            partial=stopped,
            hung=evidence,
        )
    return summarise(spec, cfg, slos, run_dir, rc, started, ended, unlisted=unlisted)


def _hung_monitor(
    spec: LoadSpec,
    cfg: RunConfig,
    slos: list[SLO],
    model: str,
    started: float,
    beats: Heartbeats,
    sampler: Any = None,
) -> HungMonitor | None:
    """The hung-but-healthy watch (analysis/hung.py) of a run that is not a worker's: N from the
    run's TTFT / ITL SLOs where ``--hung-after`` is not given; the canary only in a long load (one
    that lasts two canary periods at least), where a stuck engine would otherwise go unasked.
    ``sampler``: the run's Prometheus sampler, whose scrapes the watch reads rather than scraping
    the same page again."""
    if spec.role == "worker" or not spec.hung.active:
        return None
    budget = {
        s.metric: s.bound / 1000 for s in slos if s.metric in ("ttft", "itl") and s.op == "<="
    }
    rule = spec.hung.resolved(budget.get("ttft"), budget.get("itl"))
    long_load = cfg.duration_s is None or cfg.duration_s >= 2 * rule.canary_every_s
    monitor = HungMonitor.for_target(
        spec.target, model, rule, started, client=beats, canary_due=lambda: long_load
    )
    if sampler is not None:
        monitor.share(sampler)
    return monitor.start()


# ------------------------------------------------------------------ options and plans


def read_plan(name: str | None) -> dict[str, Any]:
    """The values of the load plan ``name`` (loadtests/<name>.yaml or a path); ``{}`` for none."""
    return dict(load_plan(plan_path(name)).values) if name else {}


__all__ = [
    "SCHEMA_VERSION",
    "LoadResult",
    "LoadSpec",
    "plan_path",
    "read_plan",
    "run_load",
    "scenario_path",
    "summarise",
]
