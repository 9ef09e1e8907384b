"""The post-deploy acceptance gate for one target: :class:`AcceptSpec` -> :func:`run_accept`.

Stages, in one run folder ``<out>/<run-id>/``:

1. readiness: poll the health endpoint (bounded by ``ready_timeout_s``);
2. conformance: the check catalogue (:func:`~servecheck.workflows.conformance.run_check`) into
   ``conformance/``;
3. smoke load: a short closed-loop load with SLOs (:func:`~servecheck.load.run.run_load`) into
   ``load/``.

Top level: ``accept.json`` (stages and verdict), ``junit.xml`` (the checks plus one case per
stage and per SLO), ``allure-results/`` (checks with their exchanges, plus the SLOs),
``report.html`` (one page, :func:`servecheck.report.accept_html.write_accept_html`) and
``summary.md``. Exit code 0 when every stage held, 1 when one did not; interrupted, the same
files for what ran, marked partial and INCONCLUSIVE (``accept.json``'s ``exit_code`` 130 / 143).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servecheck.analysis.budget import DEFAULT_ERROR_BUDGET
from servecheck.analysis.slo import SLO, as_slos
from servecheck.analysis.verdict import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    RunVerdict,
    Stage,
    compose,
    stage_facts,
)
from servecheck.errors import SpecError
from servecheck.workflows import RunResult, coldstart
from servecheck.workflows.conformance import CheckSpec, run_check

if TYPE_CHECKING:
    from servecheck.checks.health import HealthState


def run_conformance(
    target: str,
    targets_file: str | None,
    run_dir: Path,
    name: str = "conformance",
    *,
    surface: Sequence[str] | None = None,
    keyword: str | None = None,
    workers: str = "auto",
    models: Sequence[str] | None = None,
    strict: bool = False,
    trials: int = 1,
) -> int:
    """Run the catalogue for one target into ``run_dir/name`` (the embedded server is the
    caller's: ``embedded=False``); returns its exit code."""
    spec = CheckSpec(
        targets=[target],
        targets_file=targets_file,
        models=list(models or []),
        surfaces=list(surface or []),
        keyword=keyword,
        strict=strict,
        trials=trials,
        workers=str(workers),
        out=run_dir,
        run_id=name,
        embedded=False,
    )
    return run_check(spec).exit_code


@dataclass(slots=True)
class AcceptSpec:
    """What ``servecheck accept`` checks; ``target`` ``reference`` starts the embedded server."""

    target: str = "reference"
    targets_file: str | None = None  # None: ./targets.yaml, else the built-in reference target
    slos: list[SLO] = field(default_factory=list)  # the smoke load's (expressions parsed once)
    error_budget: float | None = DEFAULT_ERROR_BUDGET  # of the smoke load (analysis/budget.py)
    smoke_duration_s: float = 20.0
    smoke_users: int = 2
    scenario: str = "chat"
    dataset: str | None = None  # the smoke load's prompts from this file (load/workload/dataset.py)
    dataset_format: str = "auto"
    load: bool = True
    allow_lag: bool = False
    ready_timeout_s: float = 300.0
    # Keep waiting while nothing accepts a TCP connection at the target (the user asked for a
    # wait: ``--ready-timeout``); else a closed port is "target down" at once, as for check and
    # load. A server that listens but is not ready yet (503 while loading) gets the wait either way.
    wait_for_listener: bool = False
    surfaces: list[str] = field(default_factory=list)
    keyword: str | None = None
    strict: bool = False  # the strict schema profile (CheckSpec.strict)
    trials: int = 1  # model-dependent checks run this often (CheckSpec.trials)
    workers: str = "auto"
    out: Path = Path("reports")
    run_id: str | None = None
    reference_args: list[str] = field(default_factory=list)
    launch: str | None = None  # start the server with this command line; measure its cold start
    cold_start: bool = False  # measure the cold start of a server starting now (no launch)
    cold_start_requests: int = 30
    cold_start_slos: list[SLO] = field(default_factory=list)  # time_to_ready<=120s ...

    def __post_init__(self) -> None:
        self.slos, self.cold_start_slos = as_slos(self.slos), as_slos(self.cold_start_slos)

    def validate(self) -> None:
        """Raise :class:`UsageError` naming the option when a bound is out of range, a dataset
        file is bad or a cold-start SLO cannot be judged (all before any traffic)."""
        from servecheck.load.workload.dataset import check_dataset

        coldstart.validate(self)
        if self.load:
            check_dataset(self.dataset, self.dataset_format, self.scenario)
        if not 1 <= self.smoke_duration_s <= 3600:
            raise SpecError(f"{{smoke_duration_s}} {self.smoke_duration_s:g}s: between 1s and 1h")
        if not 0 < self.ready_timeout_s <= 3 * 3600:
            raise SpecError(f"{{ready_timeout_s}} {self.ready_timeout_s:g}s: between 1s and 3h")


@dataclass(slots=True)
class AcceptResult(RunResult):
    """The outcome of :func:`run_accept`; ``data`` is what ``accept.json`` holds."""


def run_accept(spec: AcceptSpec) -> AcceptResult:
    """Readiness, conformance, smoke load; one report; exit code 0 only if everything held."""
    from servecheck.workflows.support import new_run_dir, reference_env, say, validate_before_run

    spec.validate()
    validate_before_run(
        targets_file=spec.targets_file,
        names=[spec.target],  # the SLOs were parsed with the spec
        reference_args=spec.reference_args,
    )
    run_dir = new_run_dir(spec.out, "accept", spec.target, spec.run_id)
    say(f"servecheck accept: target {spec.target}; report {run_dir}")
    with (
        reference_env(
            [spec.target], extra_args=spec.reference_args, log_path=run_dir / "reference-server.log"
        ),
        coldstart.launched(spec, run_dir) as launch,
    ):
        return _accept(spec, run_dir, launch)


def _accept(
    spec: AcceptSpec, run_dir: Path, launch: coldstart.Launch | None = None
) -> AcceptResult:
    from servecheck.config import load_targets
    from servecheck.signals import signum_of
    from servecheck.workflows.support import say

    target = load_targets(spec.targets_file).get(spec.target)
    stages: dict[str, Stage] = {}
    started = time.time()
    current = ["ready"]  # the stage under way, named in the report if the run is interrupted
    try:
        _run_stages(spec, target, run_dir, launch, stages, current)
    except KeyboardInterrupt as exc:
        # Interrupted (Ctrl-C, SIGINT or SIGTERM to us): the report of what ran, marked partial,
        # then the interrupt goes on (exit 130 / 143 from the command line).
        name = _signal_name(signum_of(exc))
        detail = f"interrupted by {name} after {time.time() - started:.1f} s"
        stages[current[0]] = Stage(
            current[0],
            {"ok": False, "verdict": INCONCLUSIVE, "detail": detail, "interrupted": True},
            RunVerdict(INCONCLUSIVE, [f"{current[0]}: {detail}"]),
        )
        result = _report(spec, target, run_dir, stages, started, interrupted=name)
        say(
            f"servecheck accept: PARTIAL: {detail} during {current[0]}; what ran is in "
            f"{result.page} (accept.json, junit.xml)"
        )
        raise
    return _report(spec, target, run_dir, stages, started)


def _run_stages(
    spec: AcceptSpec,
    target: Any,
    run_dir: Path,
    launch: coldstart.Launch | None,
    stages: dict[str, Stage],
    current: list[str],
) -> None:
    """Readiness, conformance, smoke load into ``stages``; ``current[0]`` names the stage under
    way (what an interrupt cut short)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    steps = 2 + (1 if spec.load else 0)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        transient=True,
    ) as progress:
        task = progress.add_task("accept: readiness", total=steps)
        if launch is not None and coldstart.enabled(spec):  # readiness, then the first requests
            current[0] = "cold_start"
            stages["ready"], stages["cold_start"] = coldstart.run_stage(
                spec, target, launch, spec.ready_timeout_s
            )
        else:
            stages["ready"] = _readiness(spec, target)
        progress.advance(task)
        if not stages["ready"].ok:
            return
        progress.update(task, description="accept: conformance")
        current[0] = "conformance"
        t0 = time.monotonic()
        code = run_conformance(
            spec.target,
            spec.targets_file,
            run_dir,
            surface=spec.surfaces,
            keyword=spec.keyword,
            workers=str(spec.workers),
            strict=spec.strict,
            trials=spec.trials,
        )
        stages["conformance"] = Stage.judged(
            "conformance",
            {
                "ok": code == 0,
                "exit_code": code,
                "seconds": round(time.monotonic() - t0, 3),
                "folder": "conformance",
            },
        )
        progress.advance(task)
        if spec.load:
            progress.update(task, description="accept: smoke load")
            current[0] = "load"
            stages["load"] = _smoke(spec, target, run_dir)
            progress.advance(task)


def _readiness(spec: AcceptSpec, target: Any) -> Stage:
    """The readiness stage: "target down" at once when nothing accepts a TCP connection and no
    wait was asked for, else the health endpoint polled until ready or the limit, saying what
    it waits for as it goes (:class:`_ReadinessNotes`)."""
    from servecheck.checks.health import wait_ready
    from servecheck.client.http import ServeClient
    from servecheck.probes.reach import target_down
    from servecheck.workflows.support import say

    t0 = time.monotonic()
    down = None if spec.wait_for_listener else target_down(target.base_url, 5.0)
    if down is not None:
        state, detail = "down", f"{down} (no readiness wait was asked for)"
    else:
        notes = _ReadinessNotes(spec.ready_timeout_s, t0, say)
        with ServeClient.for_target(target) as client:
            seen = wait_ready(client, target, timeout_s=spec.ready_timeout_s, on_poll=notes)
        state, detail = seen.state, seen.detail
    say(f"readiness: {state}: {detail}")
    facts = {
        "ok": state == "ready",
        "state": state,
        "detail": detail,
        "seconds": round(time.monotonic() - t0, 3),
    }
    return Stage.judged("ready", facts)


@dataclass(slots=True)
class _ReadinessNotes:
    """``wait_ready``'s ``on_poll``: one line on what readiness waits for (the state, the
    seconds waited of the limit) when the state changes and on every poll at least
    :data:`NOTE_EVERY_S` after the last line. The polls back off to 5 s apart and a probe takes
    at most 5 s, so a line comes at least every 10 s; a 300 s wait is never silent."""

    limit_s: float
    started: float
    say: Callable[[str], None]
    last_state: str | None = None
    last_said: float = float("-inf")

    def __call__(self, state: HealthState) -> None:
        now = time.monotonic()
        if state.state == self.last_state and now - self.last_said < NOTE_EVERY_S:
            return
        self.last_state, self.last_said = state.state, now
        self.say(
            f"readiness: waiting ({state.state}, {now - self.started:.0f} s of "
            f"{self.limit_s:g} s): {state.detail}"
        )


# The least time between two "readiness: waiting" lines of one state (see _ReadinessNotes).
NOTE_EVERY_S = 4.5


def _report(
    spec: AcceptSpec,
    target: Any,
    run_dir: Path,
    stages: dict[str, Stage],
    started: float,
    interrupted: str | None = None,
) -> AcceptResult:
    """accept.json, junit.xml, allure results, report.html and summary.md for ``stages``; an
    ``interrupted`` run (the signal's name) is partial and INCONCLUSIVE at best, exit 130."""
    from servecheck.workflows.support import (
        VERDICT_PROPERTY,
        Case,
        Suite,
        load_suite,
        say,
        verdict_case,
        write_json,
        write_junit,
    )

    run_verdict = compose(s.verdict for s in stages.values())
    ok = run_verdict.passed
    verdict: dict[str, Any] = {
        "kind": "accept",
        "target": spec.target,
        "base_url": target.base_url,
        "engine": target.engine,
        "started": started,
        "finished": time.time(),
        "stages": stage_facts(stages),
        "verdict": run_verdict.status,
        "reasons": run_verdict.reasons,
        "ok": ok,
        "exit_code": run_verdict.exit_code,
    }
    if interrupted is not None:
        verdict.update(
            partial=True, interrupted=interrupted, exit_code=_interrupted_code(interrupted)
        )
    write_json(run_dir / "accept.json", verdict)
    cases = []
    if "ready" in stages:
        ready = stages["ready"].facts
        cases.append(
            Case(
                "readiness",
                ready["ok"],
                ready["detail"],
                "servecheck.accept",
                float(ready.get("seconds") or 0.0),
            )
        )
    if "conformance" in stages:
        conformance = stages["conformance"]
        cases.append(
            Case(
                "conformance catalogue",
                conformance.ok,
                conformance.facts.get("detail")
                or f"servecheck check exit code {conformance.facts.get('exit_code')}",
                "servecheck.accept",
            )
        )
    # The run's one verdict in JUnit too (issue 42 item 4): a case that fails unless it passed,
    # its message starting with the verdict's word, and the word as the suite's property.
    cases.append(
        verdict_case(
            "accept run verdict", run_verdict.status, run_verdict.reasons, "servecheck.accept"
        )
    )
    load_summary = _load_summary(run_dir)
    suites = [Suite("servecheck.accept", cases, {VERDICT_PROPERTY: run_verdict.status})]
    if load_summary:
        suites.append(load_suite(load_summary))
    write_junit(run_dir / "junit.xml", suites, include=[run_dir / "conformance" / "junit.xml"])
    _allure(run_dir, load_summary)
    from servecheck.report.accept_html import write_accept_html

    page = write_accept_html(run_dir)
    say(
        f"servecheck accept: {'PARTIAL, ' if interrupted else ''}{run_verdict.status.upper()}; "
        + ", ".join(_stage_line(s) for s in stages.values())
        + f"; report {page}"
    )
    return AcceptResult(run_dir, verdict, page, int(verdict["exit_code"]))


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _interrupted_code(name: str) -> int:
    """128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as the command exits."""
    try:
        return 128 + int(signal.Signals[name])
    except KeyError:
        return 130


def _stage_line(stage: Stage) -> str:
    """``load ok``, ``load FAILED (why)``, ``load INCONCLUSIVE (why)``."""
    status, detail = stage.verdict.status, stage.facts.get("detail")
    if status == PASS:
        return f"{stage.name} ok"
    word = "FAILED" if status == FAIL else status.upper()
    return f"{stage.name} {word}" + (f" ({detail})" if detail else "")


def _smoke(spec: AcceptSpec, target: Any, run_dir: Path) -> Stage:
    from servecheck.load.run import run_load
    from servecheck.load.spec import LoadSpec
    from servecheck.report.html import write_load_html
    from servecheck.workflows.support import say

    t0 = time.monotonic()
    load_spec = LoadSpec(
        target=target,
        scenario=spec.scenario,
        dataset=spec.dataset,
        dataset_format=spec.dataset_format,
        users=max(1, spec.smoke_users),
        duration_s=spec.smoke_duration_s,
        slos=list(spec.slos),
        error_budget=spec.error_budget,
        out_dir=run_dir,
        run_id="load",
        progress=True,
        allow_lag=spec.allow_lag,
    )
    result = run_load(load_spec, on_log=say)
    write_load_html(result.run_dir)
    reasons = list(result.summary.get("reasons") or [])
    failed_slos = [v.get("slo") for v in result.summary.get("slo") or [] if not v.get("passed")]
    detail = (
        f"{result.summary.get('verdict')}"
        + (f": SLO breached: {', '.join(map(str, failed_slos))}" if failed_slos else "")
        + (f" ({'; '.join(reasons)})" if reasons else "")
    )
    facts = {
        "ok": result.passed,
        "verdict": result.summary.get("verdict"),
        "reasons": reasons,
        "detail": detail,
        "slo": result.summary.get("slo"),
        "exit_code": result.exit_code,
        "seconds": round(time.monotonic() - t0, 3),
        "folder": "load",
    }
    return Stage.judged("load", facts)


def _load_summary(run_dir: Path) -> dict[str, Any]:
    from servecheck.records.results import read_json

    s = read_json(run_dir / "load" / "summary.json")
    return s if "requests" in s else {}


def _allure(run_dir: Path, load_summary: dict[str, Any]) -> None:
    from servecheck.report.allure_glue import write_slo_results
    from servecheck.workflows.support import copy_allure

    dst = run_dir / "allure-results"
    copy_allure(run_dir / "conformance" / "allure-results", dst)
    if load_summary:
        text = (
            (run_dir / "load" / "summary.txt").read_text(encoding="utf-8")
            if (run_dir / "load" / "summary.txt").exists()
            else ""
        )
        write_slo_results(dst, load_summary.get("slo") or [], suite="smoke load", attachment=text)


__all__ = ["AcceptResult", "AcceptSpec", "run_accept", "run_conformance"]
