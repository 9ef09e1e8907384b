"""A bounded load sweep to find the highest load that meets the SLOs:
:class:`CapacitySpec` -> :func:`run_capacity`.

Each step is one :func:`~servecheck.load.run.run_load` (its own folder
``steps/<nn>-<level>/``) at the next level of users (closed loop), rates (open loop) or, with a
trace, the speed factor it is replayed at (production's arrivals, 2x, 4x ...). The sweep
stops early past saturation (two SLO breaches, or throughput falling more than
``throughput_drop_pct`` below the best), and never runs more than ``max_steps`` steps. The report
gives the highest passing level, the knee of latency vs throughput, and with ``target_rate`` the
replicas needed (see :mod:`servecheck.report.capacity` and docs/workflows.md; the page:
:func:`servecheck.report.capacity_html.write_capacity_html`).

Exit code 0 when at least one level met the SLOs (and, with ``target_rate``, a replica count
could be computed), 1 when none did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.errors import UsageError
from servecheck.workflows import RunResult


def parse_levels(text: str, rates: bool, speeds: bool = False) -> list[float]:
    """``1,2,4,8`` (users), ``1/s,2/s`` (rates) or ``0.5,1,2`` (trace speeds) -> increasing
    positive levels."""
    from servecheck.load.schedule import parse_rate

    option, example = (
        ("--speeds", "0.5,1,2,4")
        if speeds
        else ("--rates", "1/s,2/s,5/s")
        if rates
        else ("--users", "1,2,4,8")
    )
    try:
        vals = [
            float(p) if speeds else parse_rate(p) if rates else float(int(p))
            for p in text.split(",")
            if p.strip()
        ]
    except (ValueError, UsageError) as exc:
        raise UsageError(f"{option} {text!r}: a comma-separated list ({example}): {exc}") from None
    if not vals or any(v <= 0 for v in vals):
        raise UsageError(f"{option} {text!r}: give positive levels")
    if vals != sorted(vals):
        raise UsageError(f"{option} {text!r}: levels must increase")
    return vals


@dataclass(slots=True)
class CapacitySpec:
    """What ``servecheck capacity`` sweeps: ``levels`` are users, or requests/s with ``rates``.

    ``max_error_rate`` (e.g. ``"1%"``, or ``"none"``) adds the SLO ``error_rate<=`` it unless an
    ``error_rate`` SLO is given."""

    target: str = "reference"
    targets_file: str | None = None  # None: ./targets.yaml, else the built-in reference target
    slos: list[str] = field(default_factory=list)
    levels: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0, 16.0])
    rates: bool = False
    step_duration_s: float = 20.0
    max_steps: int = 8
    throughput_drop_pct: float = 10.0
    target_rate: float | None = None
    headroom: float = 1.0
    knee_metric: str = "e2e_p95"
    scenario: str = "chat"
    dataset: str | None = None  # every step's prompts from this file (load/dataset.py)
    dataset_format: str = "auto"
    trace: str | None = None  # levels are speed factors of this trace's replay (mode "speed")
    trace_format: str = "auto"
    max_error_rate: str = "1%"
    allow_lag: bool = False
    ready_timeout_s: float = 60.0
    out: Path = Path("reports")
    run_id: str | None = None
    reference_args: list[str] = field(default_factory=list)

    def validate(self) -> None:
        """Raise :class:`UsageError` naming the option when the sweep cannot run."""
        from servecheck.load.dataset import check_dataset
        from servecheck.load.slo import parse_slos, reject_cold

        check_dataset(self.dataset, self.dataset_format, self.scenario)
        if self.trace is not None:
            from servecheck.load.trace import load_trace

            load_trace(self.trace, self.trace_format)  # a bad trace: file:line, before any load
            if self.scenario != "trace":
                raise UsageError(f"--trace replays with the trace scenario, not {self.scenario!r}")
        elif self.scenario == "trace":
            raise UsageError("the trace scenario needs --trace FILE (levels: --speeds 1,2,4)")
        if not 1 <= self.step_duration_s <= 3600:
            raise UsageError(f"--step-duration {self.step_duration_s:g}s: between 1s and 1h")
        if not 1 <= self.max_steps <= 50:
            raise UsageError(f"--max-steps {self.max_steps}: between 1 and 50")
        if not 0 < self.headroom <= 1:
            raise UsageError(f"--headroom {self.headroom}: between 0 (exclusive) and 1")
        fam, _, stat = self.knee_metric.partition("_")
        families = ("ttft", "itl", "e2e", "tpot", "ttfa", "ttfr")  # ttfa/ttfr: reasoning phases
        if fam not in families or stat not in ("p50", "p90", "p95", "p99"):
            raise UsageError(
                f"--knee-metric {self.knee_metric!r}: one of ttft|itl|e2e|tpot|ttfa|ttfr _ p50|p90|p95|p99, e.g. e2e_p95"
            )
        reject_cold(parse_slos(self.slos), "servecheck capacity")
        parse_slos(
            [
                *self.slos,
                *(
                    [f"error_rate<={self.max_error_rate}"]
                    if self.max_error_rate.lower() != "none"
                    else []
                ),
            ]
        )


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
    from servecheck.report.capacity_html import write_capacity_html

    rates, step_s, target_rate = spec.rates, spec.step_duration_s, spec.target_rate
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from servecheck.checks.health import wait_ready
    from servecheck.client.http import ServeClient
    from servecheck.config import load_targets
    from servecheck.load.run import LoadSpec, run_load
    from servecheck.report.capacity import (
        UNITS,
        Step,
        best_step,
        replicas_for,
        should_stop,
        sweep_knee,
    )
    from servecheck.report.html import read_json, write_load_html
    from servecheck.workflows.support import Case, Suite, say, write_json, write_junit

    target = load_targets(spec.targets_file).get(spec.target)
    with ServeClient.for_target(target) as client:
        state = wait_ready(client, target, timeout_s=spec.ready_timeout_s)
    if state.state != "ready":
        say(
            f"servecheck capacity: {target.name} is not ready ({state.state}: {state.detail}); no load was sent"
        )
        write_json(
            run_dir / "capacity.json",
            {
                "kind": "capacity",
                "target": spec.target,
                "ok": False,
                "steps": [],
                "stop_reason": f"not ready: {state.detail}",
                "best": None,
                "knee": None,
            },
        )
        page = write_capacity_html(run_dir)
        return CapacityResult(run_dir, read_json(run_dir / "capacity.json"), page, 1)
    mode = "speed" if spec.trace else "rate" if rates else "users"
    slos = list(spec.slos)
    if spec.max_error_rate.lower() != "none" and not any(
        x.strip().startswith("error_rate") for x in [*slos, *target.slo]
    ):
        # A level that answers fast by failing a third of the requests has not "met the SLOs".
        slos.append(f"error_rate<={spec.max_error_rate}")
    steps: list[Step] = []
    stop_reason = "all levels run"
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
            label = f"{level:g}{'x' if spec.trace else 'rps' if rates else 'u'}"
            progress.update(task, description=f"capacity: step {i + 1} at {label}")
            load_spec = LoadSpec(
                target=target,
                scenario=spec.scenario,
                dataset=spec.dataset,
                dataset_format=spec.dataset_format,
                users=None if rates or spec.trace else int(level),
                rate=level if rates and not spec.trace else None,
                # A trace: each step replays it at the next speed, cut at the step's duration.
                trace=spec.trace,
                trace_format=spec.trace_format,
                trace_speed=level if spec.trace else 1.0,
                duration_s=step_s,
                slos=slos,
                out_dir=run_dir / "steps",
                run_id=f"{i + 1:02d}-{label}",
                progress=False,
                seed=i,
                allow_lag=spec.allow_lag,
            )
            result = run_load(load_spec)
            try:
                write_load_html(result.run_dir)
            except Exception as exc:  # noqa: BLE001 - a step's page is a nicety; the sweep goes on
                say(f"  (no page for step {i + 1}: {type(exc).__name__}: {exc})")
            step = Step.from_summary(level, mode, result.summary, result.passed)
            steps.append(step)
            progress.advance(task)
            say(
                f"step {i + 1} {label}: {'PASS' if step.passed else 'FAIL'}  {step.requests_per_s:.2f} req/s  "
                f"{spec.knee_metric} {_ms(step.metric(spec.knee_metric))}  errors {step.error_rate:.2%}"
                + _breakdown_line(step.breakdown)
            )
            reason = should_stop(steps, spec.throughput_drop_pct / 100.0)
            if reason:
                stop_reason = reason
                break
        else:
            if len(levels) == spec.max_steps:
                stop_reason = f"--max-steps {spec.max_steps} reached"
    best = best_step(steps)
    kn = sweep_knee(steps, spec.knee_metric)
    replicas = (
        replicas_for(target_rate, best.requests_per_s, spec.headroom)
        if target_rate and best
        else None
    )
    data: dict[str, Any] = {
        "kind": "capacity",
        "target": spec.target,
        "mode": mode,
        "step_duration_s": step_s,
        "slo": slos + list(target.slo),
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
        "target_rate": target_rate,
        "headroom": spec.headroom,
        "replicas": replicas,
    }
    ok = best is not None and (target_rate is None or replicas is not None)
    data["ok"] = ok
    write_json(run_dir / "capacity.json", data)
    write_junit(
        run_dir / "junit.xml",
        [
            Suite(
                "servecheck.capacity",
                [
                    Case(
                        f"step {i + 1}: {s.level:g} {mode}",
                        s.passed,
                        "; ".join(
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
                ],
            )
        ],
    )
    page = write_capacity_html(run_dir)
    unit = UNITS[mode]
    say(f"stopped: {stop_reason}")
    say(
        f"highest load meeting the SLOs: {best.level:g} {unit} ({best.requests_per_s:.2f} req/s)"
        if best
        else "no load level met the SLOs"
    )
    if kn:
        say(
            f"knee: {kn.level:g} {unit} ({kn.throughput:.2f} req/s, {kn.metric} {kn.latency_ms:.1f} ms)"
        )
    if target_rate:
        say(
            f"replicas for {target_rate:g} req/s: {replicas if replicas is not None else 'unknown (no passing level)'}"
        )
    say(f"report: {page}")
    return CapacityResult(run_dir, data, page, 0 if ok else 1)


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
        out += f" (engine {b['engine_hit_rate']:.0%})"
    return out


def _ms(value: float | None) -> str:
    """A latency for the console; "no data" when no request succeeded (not a 0.0 ms that reads as fast)."""
    return "no data" if value is None else f"{value:.1f} ms"


__all__ = ["CapacityResult", "CapacitySpec", "parse_levels", "run_capacity"]
