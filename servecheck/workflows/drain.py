"""Drain on shutdown: :class:`DrainSpec` -> :func:`run_drain` (``servecheck drain``), and the
drain step of ``servecheck cutover --drain`` (:func:`drain_part`).

Which server is told to stop, and how (:func:`resolve_action`), in this order:

1. ``launch``: servecheck starts the command, waits until the target is ready, then sends
   SIGTERM to that process (as ``docker stop`` does: the process, not its group);
2. the target's ``drain: {command, timeout_s}`` in targets.yaml: the hook runs (``/bin/sh -c``)
   while the streams are read, for engines servecheck does not own;
3. the embedded reference server (``--target reference``): SIGTERM to it;
4. an engine ``servecheck engine up`` started on the target's loopback port: SIGTERM to it.

Anything else is a usage error naming the two ways to give one. The measurement is
:func:`servecheck.probes.drain.measure_drain`; the run folder gets ``drain.json`` and
``junit.xml``; the verdict is folded with the drain SLOs (``drain_ok``, ``drain_time``, from
``slos`` and the target's ``slo:``), parsed before any traffic.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from servecheck.analysis.slo import SLO, Verdict, as_slos
from servecheck.analysis.verdict import (
    INCONCLUSIVE,
    PASS,
    RunVerdict,
    Stage,
    compose,
    stage_verdict,
)
from servecheck.config.model import Target
from servecheck.errors import SpecError
from servecheck.load.workload.lengths import IGNORE_EOS_ENGINES
from servecheck.probes.drain import ActionOutcome, DrainAction, DrainOptions, DrainReport
from servecheck.workflows import RunResult


@dataclass(slots=True)
class DrainSpec:
    """What ``servecheck drain`` does: drain ``target`` and judge it."""

    target: str = "reference"
    targets_file: str | None = None
    model: str | None = None
    launch: str | None = None  # start this server now; SIGTERM it once streams are in flight
    ready_timeout_s: float = 300.0
    options: DrainOptions = field(default_factory=DrainOptions)
    slos: list[SLO] = field(default_factory=list)  # drain_ok, drain_time<=30s
    out: Path = Path("reports")
    run_id: str | None = None
    reference_args: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.slos = as_slos(self.slos)


@dataclass(slots=True)
class DrainResult(RunResult):
    """The outcome of :func:`run_drain`; ``data`` is what ``drain.json`` holds."""


# --------------------------------------------------------------------------- actions


class SignalAction(DrainAction):
    """SIGTERM to a process servecheck launched (or knows: the embedded reference, an engine)."""

    def __init__(self, pid: int, what: str, proc: subprocess.Popen[bytes] | None = None) -> None:
        self.pid, self.proc, self.what = pid, proc, f"SIGTERM to {what} (pid {pid})"
        self.t0 = 0.0
        self._exited: float | None = None
        self._error = ""

    def start(self) -> None:
        self.t0 = time.monotonic()
        try:
            os.kill(self.pid, signal.SIGTERM)
        except OSError as exc:
            self._error = f"cannot signal pid {self.pid}: {exc.strerror}"

    def poll(self, t: float) -> ActionOutcome:
        return ActionOutcome(self.what, not self._error, self._error, 0.0)

    def exited_s(self) -> float | None:
        if self._exited is None and not _alive(self.pid, self.proc):
            self._exited = round(time.monotonic() - self.t0, 3)
        return self._exited

    def wait_exited(self, timeout_s: float) -> float | None:
        until = time.monotonic() + timeout_s
        while self.exited_s() is None and not self._error and time.monotonic() < until:
            time.sleep(0.05)
        return self._exited


class CommandAction(DrainAction):
    """A targets.yaml ``drain: {command}`` hook, run with a timeout beside the measurement."""

    def __init__(self, command: str, timeout_s: float, target: Target) -> None:
        self.command, self.timeout_s, self.target = command, timeout_s, target
        self.what = f"drain command ({timeout_s:g} s limit)"
        self.proc: subprocess.Popen[bytes] | None = None
        self.t0 = 0.0
        self.outcome: ActionOutcome | None = None

    def start(self) -> None:
        from servecheck.signals import die_with_parent

        env = {
            **os.environ,
            "SERVECHECK_DRAIN_TARGET": self.target.name,
            "SERVECHECK_DRAIN_URL": self.target.base_url,
        }
        self.t0 = time.monotonic()
        try:
            self.proc = subprocess.Popen(  # noqa: S603 - the user's own hook from targets.yaml
                ["/bin/sh", "-c", self.command],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - only calls prctl
            )
        except OSError as exc:
            self.outcome = ActionOutcome(self.what, False, f"cannot run /bin/sh: {exc.strerror}")

    def poll(self, t: float) -> ActionOutcome:
        if self.outcome is not None or self.proc is None:
            return self.outcome or ActionOutcome(self.what, False, "not started")
        code = self.proc.poll()
        if code is None:
            return ActionOutcome(self.what, True, "still running")
        took = round(time.monotonic() - self.t0, 3)
        err = (self.proc.stderr.read() if self.proc.stderr else b"")[-300:].decode(errors="replace")
        ok = code == 0
        detail = "" if ok else f"exited with code {code}: {err.strip()}"
        self.outcome = ActionOutcome(self.what, ok, detail, took)
        return self.outcome

    def finish(self) -> None:
        if self.proc is None or self.outcome is not None:
            return
        left = self.timeout_s - (time.monotonic() - self.t0)
        try:
            self.proc.wait(timeout=max(0.0, left))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.outcome = ActionOutcome(
                self.what, False, f"timed out after {self.timeout_s:g} s and was killed"
            )


def _alive(pid: int, proc: subprocess.Popen[bytes] | None) -> bool:
    if proc is not None:
        return proc.poll() is None
    from servecheck.engines.base import pid_alive

    return pid_alive(pid)


@dataclass(slots=True)
class _Resolved:
    action: DrainAction
    cleanup: Any = None  # called once the measurement is over (stop what is left)


def resolve_action(target: Target, launched: subprocess.Popen[bytes] | None) -> _Resolved:
    """The drain action for ``target`` (the module docstring's order); a SpecError without one."""
    if launched is not None:
        return _Resolved(SignalAction(launched.pid, "the launched server", launched))
    if target.drain is not None:
        return _Resolved(CommandAction(target.drain.command, target.drain.timeout_s, target))
    ref_pid = os.environ.get("SERVECHECK_REF_PID")
    if target.name == "reference" and ref_pid and ref_pid.isdigit():
        return _Resolved(SignalAction(int(ref_pid), "the embedded reference server"))
    state = _engine_on(target)
    if state is not None:
        from servecheck.engines.base import stop_state

        return _Resolved(
            SignalAction(state.pid, f"engine {state.name}"), lambda: stop_state(state, 20.0)
        )
    raise SpecError(
        "{target} {name!r}: servecheck did not launch it and targets.yaml gives it no "
        "drain: {{command: ...}}; give {launch} CMD (servecheck starts it) or a drain hook",
        name=target.name,
    )


def _engine_on(target: Target) -> Any:
    """The ``servecheck engine up`` server on the target's loopback port, if one runs."""
    from servecheck.engines.base import running_states

    url = urlsplit(target.base_url)
    if url.hostname not in ("127.0.0.1", "localhost", "::1") or url.port is None:
        return None
    return next((s for s in running_states() if s.port == url.port), None)


# --------------------------------------------------------------------------- the run


def drain_slos(spec_slos: list[SLO], target: Target) -> list[SLO]:
    """The drain SLOs to judge: the spec's (any other kind is a usage error) and the target's."""
    for slo in spec_slos:
        if not slo.drain:
            raise SpecError(
                "{slos} {slo!r}: servecheck drain judges drain_ok and drain_time only", slo=slo.text
            )
    own = [s for s in target.slos if s.drain]
    seen = {(s.metric, s.op, s.bound) for s in spec_slos}
    return [*spec_slos, *(s for s in own if (s.metric, s.op, s.bound) not in seen)]


def judge(report: DrainReport, slos: list[SLO]) -> tuple[RunVerdict, list[Verdict]]:
    """The drain verdict folded with the drain SLOs: an SLO without a value is inconclusive."""
    status, reasons = report.verdict()
    stage = {"ok": status == PASS, "verdict": status, "detail": "; ".join(reasons)}
    stages = [stage_verdict("drain", stage)]
    values = {
        "drain_ok": None if status == INCONCLUSIVE else float(status == PASS),
        "drain_time": None if report.drain_time_s is None else report.drain_time_s * 1000.0,
    }
    verdicts = []
    for slo in slos:
        value = values[slo.metric]
        held = value is not None and slo.holds(value)
        verdicts.append(Verdict(slo, value, held, "" if value is not None else "not measured"))
        if value is None:
            stages.append(RunVerdict(INCONCLUSIVE, [f"SLO {slo.text}: not measured"]))
        elif not held:
            stages.append(RunVerdict("fail", [f"SLO {slo.text}: observed {value:g}"]))
    return compose(stages), verdicts


@contextlib.contextmanager
def _launched(spec: DrainSpec, run_dir: Path) -> Iterator[subprocess.Popen[bytes] | None]:
    if not spec.launch:
        yield None
        return
    from servecheck.probes import coldstart

    proc = coldstart.launch(spec.launch, run_dir / "launch.log")
    try:
        yield proc
    finally:
        coldstart.stop(proc)


def run_drain(spec: DrainSpec) -> DrainResult:
    """Drain ``spec.target`` and judge it; ``drain.json`` and ``junit.xml`` in the run folder."""
    from servecheck.workflows.support import new_run_dir, reference_env, say, validate_before_run

    problems = spec.options.problems()
    problems += [
        f"{{slos}} {s.text!r}: servecheck drain judges drain_ok and drain_time only"
        for s in spec.slos
        if not s.drain
    ]
    if problems:
        raise SpecError("; ".join(problems))
    if spec.target == "reference" and spec.launch:
        raise SpecError("{launch} with {target} reference: the embedded server is started anyway")
    validate_before_run(
        targets_file=spec.targets_file, names=[spec.target], reference_args=spec.reference_args
    )
    run_dir = new_run_dir(spec.out, "drain", spec.target, spec.run_id)
    say(f"servecheck drain: {spec.target}; report {run_dir}")
    with (
        reference_env(
            [spec.target], extra_args=spec.reference_args, log_path=run_dir / "reference-server.log"
        ),
        _launched(spec, run_dir) as proc,
    ):
        from servecheck.config import load_targets

        target = load_targets(spec.targets_file).get(spec.target)
        slos = drain_slos(spec.slos, target)
        data = drain_stage(spec, target, run_dir, proc, slos)
    say(f"servecheck drain: {data['verdict'].upper()}; {run_dir / 'drain.json'}")
    return DrainResult(run_dir, data, run_dir / "drain.json", 0 if data["ok"] else 1)


def drain_part(spec: Any, target: Target, run_dir: Path) -> Stage:
    """The drain step of a cutover: OLD drained (its folder ``drain/``), as the stage a cutover
    folds in (its facts: ``ok``, ``verdict``, ``detail`` ...)."""
    sub = run_dir / "drain"
    sub.mkdir(parents=True, exist_ok=True)
    data = drain_stage(spec, target, sub)
    keys = ("ok", "verdict", "detail", "drain_time_s", "stream_outcomes", "probe_outcomes")
    return Stage.judged("drain", {**{k: data.get(k) for k in keys}, "folder": "drain"})


def drain_stage(
    spec: Any,
    target: Target,
    run_dir: Path,
    proc: subprocess.Popen[bytes] | None = None,
    slos: list[SLO] | None = None,
) -> dict[str, Any]:
    """Drain ``target`` (ready first), write ``drain.json`` and ``junit.xml`` (the drain case,
    one a SLO) and return what ``drain.json`` holds."""
    from servecheck.client.http import ServeClient
    from servecheck.client.models import model_for_target
    from servecheck.probes.drain import measure_drain
    from servecheck.workflows.support import Case, Suite, say, write_json, write_junit

    action = resolve_action(target, proc)  # a usage error before any traffic
    slos = drain_slos([], target) if slos is None else slos
    from servecheck.checks.health import wait_ready

    with ServeClient.for_target(target) as client:
        ready = wait_ready(client, target, timeout_s=getattr(spec, "ready_timeout_s", 300.0))
    opts = getattr(spec, "options", None) or DrainOptions()
    if target.engine in IGNORE_EOS_ENGINES and "ignore_eos" not in opts.extra_body:
        # a tiny model stops early: the streams must still run when the drain begins
        opts = replace(opts, extra_body={**opts.extra_body, "ignore_eos": True})
    verdicts: list[Verdict] = []
    report: dict[str, Any] = {}
    if ready.state != "ready":
        verdict = RunVerdict(INCONCLUSIVE, [f"not ready: {ready.detail}"])
    else:
        model = model_for_target(target, getattr(spec, "model", None)).model
        try:
            measured = measure_drain(target, model, action.action, opts, say)
        finally:
            if action.cleanup is not None:
                action.cleanup()
        verdict, verdicts = judge(measured, slos)
        report = measured.as_dict()
    detail = "; ".join(verdict.reasons) or _summary(report)
    data = {
        **report,
        "kind": "drain",
        "target": target.name,
        "drain_verdict": report.get("verdict"),
        "verdict": verdict.status,
        "reasons": verdict.reasons,
        "slos": [v.as_dict() for v in verdicts],
        "ok": verdict.passed,
        "detail": detail,
        "finished": time.time(),
    }
    write_json(run_dir / "drain.json", data)
    cases = [Case("drain", verdict.passed, detail, "servecheck.drain")]
    cases += [Case(v.slo.text, v.passed, v.line(), "servecheck.drain") for v in verdicts]
    write_junit(run_dir / "junit.xml", [Suite("servecheck.drain", cases)])
    say(f"drain: {verdict.status.upper()}  {detail}")
    return data


def _summary(report: dict[str, Any]) -> str:
    """One line of what was seen: stream outcomes, finish reasons, new requests, drain time."""
    if not report:
        return ""
    t = report.get("drain_time_s")
    return (
        f"streams {report.get('stream_outcomes')}, finish reasons {report.get('finish_reasons')}, "
        f"new requests {report.get('probe_outcomes')}, drained in "
        + ("-" if t is None else f"{t:.1f} s")
    )


__all__ = [
    "DrainResult",
    "DrainSpec",
    "drain_part",
    "drain_stage",
    "judge",
    "resolve_action",
    "run_drain",
]
