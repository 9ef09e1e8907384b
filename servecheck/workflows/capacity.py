"""A bounded load sweep to find the highest load that meets the SLOs:
:class:`CapacitySpec` -> :func:`run_capacity`.

Each step is one :func:`~servecheck.load.run.run_load` (its own folder
``steps/<nn>-<level>/``) at the next level of users (closed loop), rates (open loop) or, with a
trace, the speed factor it is replayed at (production's arrivals, 2x, 4x ...). The sweep
stops early past saturation (two SLO breaches, or throughput falling more than
``throughput_drop_pct`` below the best), and never runs more than ``max_steps`` steps. The report
gives the highest passing level, the knee of latency vs throughput, and with ``target_rate`` the
replicas needed (see :mod:`servecheck.analysis.capacity` and docs/workflows.md; the page:
:func:`servecheck.report.capacity_html.write_capacity_html`).

Exit code 0 when at least one level met the SLOs (and, with ``target_rate``, a replica count
could be computed), 1 when none did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.analysis.budget import (
    DEFAULT_ERROR_BUDGET,
    parse_error_budget,
    percent,
    with_error_budget,
)
from servecheck.analysis.slo import SLO, as_slos, reject_cold
from servecheck.analysis.verdict import RunVerdict
from servecheck.errors import SpecError
from servecheck.workflows import RunResult


@dataclass(slots=True)
class CapacitySpec:
    """What ``servecheck capacity`` sweeps: ``levels`` are users, or requests/s with ``rates``.

    ``max_error_rate`` is the error budget of every step (``analysis/budget.py``: ``"1%"``, the
    shared default, or ``"none"``): it adds the SLO ``error_rate<=`` it unless an ``error_rate``
    SLO is given."""

    target: str = "reference"
    targets_file: str | None = None  # None: ./targets.yaml, else the built-in reference target
    slos: list[SLO] = field(default_factory=list)  # expressions given are parsed once, here
    levels: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0, 16.0])
    rates: bool = False
    step_duration_s: float = 20.0
    max_steps: int = 8
    throughput_drop_pct: float = 10.0
    target_rate: float | None = None
    headroom: float = 1.0
    knee_metric: str = "e2e_p95"
    scenario: str = "chat"
    dataset: str | None = None  # every step's prompts from this file (load/workload/dataset.py)
    dataset_format: str = "auto"
    api: str | None = None  # chat | messages; None: the scenario's (load/generator/apis.py)
    images: str | None = None  # every step's requests carry these images (load/workload/images.py)
    cancel: Any = None  # every step cancels this share of its requests (load/workload/cancel.py)
    cancel_drain_s: float = 30.0
    trace: str | None = None  # levels are speed factors of this trace's replay (mode "speed")
    trace_format: str = "auto"
    max_error_rate: str = percent(DEFAULT_ERROR_BUDGET)
    # Early stops (analysis/capacity.py StopRules): a level failing more than this share ends the
    # sweep (None: off); achieved this far below the load asked, two levels running, while
    # latency or the queue grew, is over-saturation.
    stop_error_rate: float | None = 0.05
    saturation_margin: float = 0.10
    reset_prefix_cache: bool = False  # between levels, where the engine exposes it
    level_ready_s: float = 10.0  # the readiness probe before every level waits this long
    allow_lag: bool = False
    ready_timeout_s: float = 60.0
    out: Path = Path("reports")
    run_id: str | None = None
    reference_args: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.slos = as_slos(self.slos)

    def validate(self) -> None:
        """Raise :class:`UsageError` naming the option when the sweep cannot run."""
        from servecheck.load.workload.dataset import check_dataset

        check_dataset(self.dataset, self.dataset_format, self.scenario)
        from servecheck.load.generator.apis import resolve_api
        from servecheck.load.workload.images import check_images

        resolve_api(self.api, self.scenario)  # before any step: an API the scenario cannot speak
        check_images(self.images)
        if self.trace is not None:
            from servecheck.load.workload.trace import load_trace

            load_trace(self.trace, self.trace_format)  # a bad trace: file:line, before any load
            if self.scenario != "trace":
                raise SpecError(
                    "{trace} replays with the trace scenario, not {scenario!r}",
                    scenario=self.scenario,
                )
        elif self.scenario == "trace":
            raise SpecError("the trace scenario needs {trace} FILE (levels: {speeds} 1,2,4)")
        if not 1 <= self.step_duration_s <= 3600:
            raise SpecError(f"{{step_duration_s}} {self.step_duration_s:g}s: between 1s and 1h")
        if self.stop_error_rate is not None and not 0 <= self.stop_error_rate <= 1:
            raise SpecError(f"{{stop_error_rate}} {self.stop_error_rate:g}: between 0 and 1")
        if not 0 < self.saturation_margin < 1:
            raise SpecError(f"{{saturation_margin}} {self.saturation_margin:g}: between 0 and 1")
        if not 1 <= self.max_steps <= 50:
            raise SpecError(f"{{max_steps}} {self.max_steps}: between 1 and 50")
        if not 0 < self.headroom <= 1:
            raise SpecError(f"{{headroom}} {self.headroom}: between 0 (exclusive) and 1")
        fam, _, stat = self.knee_metric.partition("_")
        families = ("ttft", "itl", "e2e", "tpot", "ttfa", "ttfr")  # ttfa/ttfr: reasoning phases
        if fam not in families or stat not in ("p50", "p90", "p95", "p99"):
            raise SpecError(
                "{knee_metric} {value!r}: one of ttft|itl|e2e|tpot|ttfa|ttfr _ p50|p90|p95|p99, e.g. e2e_p95",
                value=self.knee_metric,
            )
        reject_cold(self.slos, "servecheck capacity")
        self.error_budget()  # a bad --max-error-rate is a usage error before any load

    def error_budget(self) -> float | None:
        """``max_error_rate`` as a fraction (None for ``none``)."""
        return parse_error_budget(self.max_error_rate, "max_error_rate")


@dataclass(slots=True)
class CapacityResult(RunResult):
    """The outcome of :func:`run_capacity`; ``data`` is what ``capacity.json`` holds."""


def run_capacity(spec: CapacitySpec) -> CapacityResult:
    """Sweep, write capacity.json + report.html + summary.md, say the findings."""
    from servecheck.workflows.support import new_run_dir, reference_env, say, validate_before_run

    spec.validate()
    levels = list(spec.levels[: spec.max_steps])
    validate_before_run(
        targets_file=spec.targets_file, names=[spec.target], reference_args=spec.reference_args
    )
    run_dir = new_run_dir(spec.out, "capacity", spec.target, spec.run_id)
    say(
        f"servecheck capacity: target {spec.target}; {len(levels)} steps of {spec.step_duration_s:g} s at most; report {run_dir}"
    )
    with reference_env(
        [spec.target], extra_args=spec.reference_args, log_path=run_dir / "reference-server.log"
    ):
        return _sweep(spec, run_dir, levels)


def _sweep(spec: CapacitySpec, run_dir: Path, levels: list[float]) -> CapacityResult:
    from servecheck.checks.health import wait_ready
    from servecheck.client.http import ServeClient
    from servecheck.config import load_targets
    from servecheck.report.capacity_html import write_capacity_html
    from servecheck.workflows.support import write_json

    target = load_targets(spec.targets_file).get(spec.target)
    with ServeClient.for_target(target) as client:
        state = wait_ready(client, target, timeout_s=spec.ready_timeout_s)
    if state.state != "ready":
        return _not_ready(spec, run_dir, target, f"{state.state}: {state.detail}", state.detail)
    mode = "speed" if spec.trace else "rate" if spec.rates else "users"
    # A level that answers fast by failing a third of the requests has not "met the SLOs".
    own = [s for s in target.slos if not s.drain]  # drain: its own run
    slos = with_error_budget(spec.slos, spec.error_budget(), own)
    from servecheck.workflows.capacity_guard import PrefixReset

    resets = PrefixReset() if spec.reset_prefix_cache else None
    steps, verdicts, stop_reason = _run_steps(spec, target, run_dir, levels, slos, mode, resets)
    data = _findings(spec, target, mode, slos, steps, stop_reason)
    data["prefix_cache_reset"] = None if resets is None else resets.as_dict()
    data["stop_rules"] = {
        "stop_error_rate": spec.stop_error_rate,
        "saturation_margin": spec.saturation_margin,
        "throughput_drop_pct": spec.throughput_drop_pct,
    }
    verdict = _verdict(spec, data, verdicts)
    data.update(verdict=verdict.status, reasons=verdict.reasons, ok=verdict.passed)
    write_json(run_dir / "capacity.json", data)
    _write_junit(run_dir, steps, mode)
    page = write_capacity_html(run_dir)
    _say_findings(data, mode, page)
    return CapacityResult(run_dir, data, page, verdict.exit_code)


def _not_ready(
    spec: CapacitySpec, run_dir: Path, target: Any, why: str, detail: str
) -> CapacityResult:
    """No load is sent to a target that never became ready: a FAIL with its own page."""
    from servecheck.analysis.verdict import FAIL
    from servecheck.records.results import read_json
    from servecheck.report.capacity_html import write_capacity_html
    from servecheck.workflows.support import say, write_json

    say(f"servecheck capacity: {target.name} is not ready ({why}); no load was sent")
    write_json(
        run_dir / "capacity.json",
        {
            "kind": "capacity",
            "target": spec.target,
            "verdict": FAIL,
            "reasons": [f"not ready: {detail}"],
            "ok": False,
            "steps": [],
            "stop_reason": f"not ready: {detail}",
            "best": None,
            "knee": None,
        },
    )
    page = write_capacity_html(run_dir)
    return CapacityResult(run_dir, read_json(run_dir / "capacity.json"), page, 1)


def _step_spec(
    spec: CapacitySpec, target: Any, run_dir: Path, i: int, level: float, slos: list[SLO]
) -> Any:
    """Step ``i``'s :class:`~servecheck.load.run.LoadSpec` at ``level``."""
    from servecheck.load.spec import LoadSpec

    rates = spec.rates
    return LoadSpec(
        target=target,
        scenario=spec.scenario,
        dataset=spec.dataset,
        dataset_format=spec.dataset_format,
        api=spec.api,
        images=spec.images,
        cancel=spec.cancel,
        cancel_drain_s=spec.cancel_drain_s,
        users=None if rates or spec.trace else int(level),
        rate=level if rates and not spec.trace else None,
        # A trace: each step replays it at the next speed, cut at the step's duration.
        trace=spec.trace,
        trace_format=spec.trace_format,
        trace_speed=level if spec.trace else 1.0,
        duration_s=spec.step_duration_s,
        slos=slos,
        error_budget=spec.error_budget(),
        out_dir=run_dir / "steps",
        run_id=f"{i + 1:02d}-{_label(spec, level)}",
        progress=False,
        seed=i,
        allow_lag=spec.allow_lag,
    )


def _label(spec: CapacitySpec, level: float) -> str:
    return f"{level:g}{'x' if spec.trace else 'rps' if spec.rates else 'u'}"


def _run_steps(
    spec: CapacitySpec,
    target: Any,
    run_dir: Path,
    levels: list[float],
    slos: list[SLO],
    mode: str,
    resets: Any = None,
) -> tuple[list[Any], list[RunVerdict], str]:
    """Run the steps until saturation or the last level: (steps, their verdicts, why it stopped)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from servecheck.analysis.capacity import Step, StopRules, should_stop
    from servecheck.load.run import run_load
    from servecheck.report.html import write_load_html
    from servecheck.workflows.capacity_guard import ready_before_level
    from servecheck.workflows.support import say

    steps: list[Step] = []
    verdicts: list[RunVerdict] = []  # each step's, as its run judged it
    stop_reason = "all levels run"
    rules = StopRules(
        drop=spec.throughput_drop_pct / 100.0,
        max_error_rate=spec.stop_error_rate,
        saturation_margin=spec.saturation_margin,
        knee_metric=spec.knee_metric,
    )
    (run_dir / "steps").mkdir(exist_ok=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} steps"),
        TimeElapsedColumn(),
        transient=True,
    ) as progress:
        task = progress.add_task("capacity", total=len(levels))
        for i, level in enumerate(levels):
            label = _label(spec, level)
            progress.update(task, description=f"capacity: step {i + 1} at {label}")
            not_ready = ready_before_level(target, spec.level_ready_s) if i else None
            if not_ready:  # the first level had the sweep's own wait
                stop_reason = (
                    f"the target stopped being ready before step {i + 1} ({label}): {not_ready}"
                )
                break
            if resets is not None:
                resets.reset(target)
            result = run_load(_step_spec(spec, target, run_dir, i, level, slos))
            try:
                write_load_html(result.run_dir)
            except Exception as exc:  # noqa: BLE001 - a step's page is a nicety; the sweep goes on
                say(f"  (no page for step {i + 1}: {type(exc).__name__}: {exc})")
            step = Step.from_summary(level, mode, result.summary, result.passed)
            steps.append(step)
            verdicts.append(RunVerdict.of_summary(result.summary))
            progress.advance(task)
            say(
                f"step {i + 1} {label}: {step.status.upper()}  {step.requests_per_s:.2f} req/s  "
                f"{spec.knee_metric} {_ms(step.metric(spec.knee_metric))}  errors {step.error_rate:.2%}"
                + _breakdown_line(step.breakdown)
            )
            if step.status == "inconclusive":  # not the SLOs: say what kept it from measuring
                say(f"  inconclusive: {'; '.join(step.reasons) or 'see the step report'}")
            reason = should_stop(steps, rules=rules)
            if reason:
                stop_reason = reason
                break
        else:
            if len(levels) == spec.max_steps:
                stop_reason = f"the step limit ({spec.max_steps}) reached"
    return steps, verdicts, stop_reason


def _findings(
    spec: CapacitySpec,
    target: Any,
    mode: str,
    slos: list[SLO],
    steps: list[Any],
    stop_reason: str,
) -> dict[str, Any]:
    """capacity.json's figures: the steps, the best level, the knee, the replicas."""
    from servecheck.analysis.capacity import best_step, engine_knee, replicas_for, sweep_knee

    best = best_step(steps)
    kn = sweep_knee(steps, spec.knee_metric)
    engine = engine_knee(steps)
    target_rate = spec.target_rate
    replicas = (
        replicas_for(target_rate, best.requests_per_s, spec.headroom)
        if target_rate and best
        else None
    )
    return {
        "kind": "capacity",
        "target": spec.target,
        "mode": mode,
        "step_duration_s": spec.step_duration_s,
        "slo": [s.text for s in slos] + list(target.slo),
        "steps": [s.as_dict() for s in steps],
        "stop_reason": stop_reason,
        "best": None
        if best is None
        else {
            "level": best.level,
            "requests_per_s": best.requests_per_s,
            "tokens_per_s": best.tokens_per_s,
            "run_id": best.run_id,
        },
        "knee": None
        if kn is None
        else {
            "level": kn.level,
            "requests_per_s": kn.throughput,
            "latency_ms": kn.latency_ms,
            "metric": kn.metric,
            "distance": kn.distance,
        },
        # Where the engine itself said it saturated (its waiting queue, its preemptions): the
        # knee to plan by when it comes before the latency knee.
        "engine_knee": None
        if engine is None
        else {
            "level": steps[engine[0]].level,
            "requests_per_s": steps[engine[0]].requests_per_s,
            "why": engine[1],
            "before_latency_knee": kn is None or steps[engine[0]].level < kn.level,
        },
        "target_rate": target_rate,
        "headroom": spec.headroom,
        "replicas": replicas,
    }


def _verdict(spec: CapacitySpec, data: dict[str, Any], steps: list[RunVerdict]) -> RunVerdict:
    """A sweep passes when a level met the SLOs (and, with a target rate, the replicas could be
    counted); when every step was inconclusive, so is the sweep (analysis/verdict.py's rule)."""
    from servecheck.analysis.verdict import FAIL, INCONCLUSIVE, compose

    unmeasured = bool(steps) and all(v.status == INCONCLUSIVE for v in steps)
    found = RunVerdict.of(
        data["best"] is not None,
        "no load level could be measured" if unmeasured else "no load level met the SLOs",
        otherwise=INCONCLUSIVE if unmeasured else FAIL,
    )
    counted = RunVerdict.of(
        data["best"] is None or spec.target_rate is None or data["replicas"] is not None,
        f"replicas for {spec.target_rate:g} req/s: unknown" if spec.target_rate else "",
    )
    return compose([found, counted])


def _write_junit(run_dir: Path, steps: list[Any], mode: str) -> None:
    from servecheck.workflows.support import Case, Suite, write_junit

    cases = [
        Case(
            f"step {i + 1}: {s.level:g} {mode}",
            s.passed,
            ("INCONCLUSIVE: " if s.status == "inconclusive" else "")
            + "; ".join(
                [
                    f"{v.get('slo')} observed {v.get('observed')}"
                    for v in s.slo
                    if not v.get("passed")
                ]
                + s.reasons
            ),
            "servecheck.capacity",
        )
        for i, s in enumerate(steps)
    ]
    write_junit(run_dir / "junit.xml", [Suite("servecheck.capacity", cases)])


def _say_findings(data: dict[str, Any], mode: str, page: Path) -> None:
    from servecheck.analysis.capacity import UNITS
    from servecheck.workflows.support import say

    unit, best, kn = UNITS[mode], data["best"], data["knee"]
    target_rate, replicas = data["target_rate"], data["replicas"]
    say(f"stopped: {data['stop_reason']}")
    reset = data.get("prefix_cache_reset") or {}
    if reset.get("unavailable"):
        say(f"note: {reset['unavailable']}")
    if data.get("engine_knee"):
        ek = data["engine_knee"]
        say(f"engine saturation: {ek['level']:g} {unit} ({ek['why']})")
    say(
        f"highest load meeting the SLOs: {best['level']:g} {unit} ({best['requests_per_s']:.2f} req/s)"
        if best
        else "no load level met the SLOs"
    )
    if kn:
        say(
            f"knee: {kn['level']:g} {unit} ({kn['requests_per_s']:.2f} req/s, {kn['metric']} {kn['latency_ms']:.1f} ms)"
        )
    if target_rate:
        say(
            f"replicas for {target_rate:g} req/s: {replicas if replicas is not None else 'unknown (no passing level)'}"
        )
    say(
        f"verdict: {data['verdict'].upper()}"
        + (f" ({'; '.join(data['reasons'])})" if data["reasons"] else "")
    )
    say(f"report: {page}")


def _breakdown_line(b: dict[str, Any] | None) -> str:
    """TTFT first vs later and the hit rate, for a multi-turn / shared-prefix / trace step."""
    if not b:
        return ""
    first, later = b.get("ttft_first_ms") or {}, b.get("ttft_later_ms") or {}
    out = ""
    if first.get("count") or later.get("count"):
        out += f"  ttft p50 first {_ms(first.get('p50'))} / later {_ms(later.get('p50'))}"
    if b.get("hit_rate") is not None:
        out += f"  cache hit {b['hit_rate']:.0%}"
    if b.get("engine_hit_rate") is not None:
        out += f" (engine's own hit rate {b['engine_hit_rate']:.0%})"
    return out


def _ms(value: float | None) -> str:
    """A latency for the console; "no data" when no request succeeded (not a 0.0 ms that reads as fast)."""
    return "no data" if value is None else f"{value:.1f} ms"


__all__ = ["CapacityResult", "CapacitySpec", "run_capacity"]
