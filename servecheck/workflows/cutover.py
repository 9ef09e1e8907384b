"""Checks before (and during) a hot model swap: :class:`CutoverSpec` -> :func:`run_cutover`.

Before the swap (``old`` and ``new``):

1. the conformance catalogue on NEW (``conformance/``);
2. greedy-output agreement between OLD and NEW on a prompt set (temperature 0): the share of
   identical answers and the word-level edit distance where they differ;
3. latency/throughput deltas at the same load (``load-old/``, ``load-new/``, judged like
   ``servecheck compare``).

During the swap (``swap_under_load`` with ``via``): a steady load on the alias/gateway target
while the operator swaps the model behind it; the report names the failed requests, the longest
time without a successful response and each change of the served ``model`` field. With ``swap``
servecheck does the swap itself with the engine's own mechanism (a runtime LoRA load/unload, an
Xinference relaunch) under a streamed probe, and the ``swap_impact`` part measures failed
requests, the TTFT spike and the time to settle (:mod:`servecheck.workflows.cutover_swap`).

Exit code 0 when every part held, 1 when one did not. The page is
:func:`servecheck.report.cutover_html.write_cutover_html`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.analysis.slo import SLO, as_slos
from servecheck.analysis.verdict import RunVerdict, Stage, compose, stage_facts
from servecheck.errors import SpecError, UsageError
from servecheck.probes.swap import SwapAction, parse_swap
from servecheck.report.cutover_html import part_message as _part_message
from servecheck.workflows import RunResult, coldstart
from servecheck.workflows.drain import drain_part

COLD_READY_S = 900.0  # how long a launched candidate may take to become ready


@dataclass(slots=True)
class CutoverSpec:
    """What ``servecheck cutover`` does: the pre-cutover checks of ``old`` -> ``new``, or with
    ``swap_under_load`` the probe through ``via`` (``old``/``new`` then name the expected models)."""

    old: str | None = None
    new: str | None = None
    targets_file: str | None = None  # None: ./targets.yaml, else the built-in reference target
    prompts: str | None = None
    max_tokens: int = 64
    min_agreement: float = 0.8
    conformance: bool = True
    surfaces: list[str] = field(default_factory=list)
    keyword: str | None = None
    workers: str = "auto"
    load: bool = True
    users: int = 2
    load_duration_s: float = 20.0
    thresholds: list[str] = field(default_factory=list)
    swap_under_load: bool = False
    via: str | None = None
    duration_s: float = 60.0
    rate: float = 10.0
    max_failed: int = 0
    max_gap_s: float = 2.0
    out: Path = Path("reports")
    run_id: str | None = None
    reference_args: list[str] = field(default_factory=list)
    launch: str | None = None  # start NEW with this command line; measure its cold start
    cold_start: bool = False
    cold_start_requests: int = 30
    cold_start_slos: list[SLO] = field(default_factory=list)  # time_to_ready<=900s ...
    drain: bool = False  # last: OLD is sent SIGTERM mid-stream and its drain judged (drain.py)
    swap: SwapAction | str | None = None  # servecheck swaps: lora-load:NAME=PATH ...
    swap_at_s: float = 10.0  # when, from the probe's start
    swap_slos: list[SLO] = field(default_factory=list)  # swap_failed_requests<=0 ...
    probe_models: list[tuple[str, float]] = field(default_factory=list)  # the probe's mix

    def __post_init__(self) -> None:
        self.cold_start_slos = as_slos(self.cold_start_slos)  # expressions: parsed once, here
        self.swap_slos = as_slos(self.swap_slos)
        if isinstance(self.swap, str):
            self.swap = parse_swap(self.swap)


@dataclass(slots=True)
class CutoverResult(RunResult):
    """The outcome of :func:`run_cutover`; ``data`` is what ``cutover.json`` holds."""


def run_cutover(spec: CutoverSpec) -> CutoverResult:
    """Pre-cutover checks, or the swap-under-load probe; one report; exit 0 only if all held."""
    from servecheck.workflows import cutover_swap
    from servecheck.workflows.support import new_run_dir, reference_env, say, validate_before_run

    coldstart.validate(spec)  # cold-start SLOs, before any traffic
    action = spec.swap if isinstance(spec.swap, SwapAction) else None
    cutover_swap.validate(
        action, spec.swap_slos, spec.probe_models, spec.swap_at_s, spec.duration_s
    )
    spec.swap_under_load = spec.swap_under_load or action is not None
    if spec.swap_under_load:
        if not spec.via:
            raise SpecError("{swap_under_load} needs {via} ALIAS (the target the clients use)")
        names = [spec.via]
        label = f"swap-{spec.via}"
    else:
        if not spec.old or not spec.new:
            raise SpecError("give {old} OLD and {new} NEW (or {swap_under_load} {via} ALIAS)")
        if spec.old == spec.new:
            raise SpecError("{old} and {new} are both {name!r}", name=spec.old)
        names = [spec.old, spec.new]
        label = f"{spec.old}-to-{spec.new}"
    if spec.drain and not spec.old:
        raise SpecError("{drain} needs {old} OLD: the target that is drained after the swap")
    validate_before_run(
        targets_file=spec.targets_file,
        names=names,
        thresholds=spec.thresholds,
        reference_args=spec.reference_args,
    )
    run_dir = new_run_dir(spec.out, "cutover", label, spec.run_id)
    say(f"servecheck cutover: {label}; report {run_dir}")
    with (
        reference_env(
            names, extra_args=spec.reference_args, log_path=run_dir / "reference-server.log"
        ),
        coldstart.launched(spec, run_dir) as launch,
    ):
        if spec.drain:  # how OLD is told to stop: a usage error now, not after the other parts
            from servecheck.config import load_targets
            from servecheck.workflows.drain import resolve_action

            resolve_action(load_targets(spec.targets_file).get(str(spec.old)), None)
        return _swap(spec, run_dir) if spec.swap_under_load else _pre(spec, run_dir, launch)


def _pre(spec: CutoverSpec, run_dir: Path, launch: coldstart.Launch | None = None) -> CutoverResult:
    from servecheck.analysis.compare import compare_runs
    from servecheck.config import load_targets
    from servecheck.load.run import run_load
    from servecheck.load.spec import LoadSpec
    from servecheck.probes.agreement import agreement, read_prompts
    from servecheck.report.html import write_load_html
    from servecheck.workflows.accept import run_conformance
    from servecheck.workflows.support import (
        Case,
        Suite,
        say,
        write_json,
        write_junit,
    )

    loaded = load_targets(spec.targets_file)
    # run_cutover checked that both are named
    old, new = loaded.get(str(spec.old)), loaded.get(str(spec.new))
    prompts = read_prompts(spec.prompts)
    if not prompts:
        raise SpecError("{prompts} {path}: no prompts in the file", path=spec.prompts)
    if not 0 <= spec.min_agreement <= 1:
        raise SpecError(f"{{min_agreement}} {spec.min_agreement}: a share between 0 and 1")
    load_s = spec.load_duration_s
    parts: dict[str, Stage] = {}
    if launch is not None and coldstart.enabled(spec):  # NEW just started: its cold start first
        _, parts["cold_start"] = coldstart.run_stage(spec, new, launch, COLD_READY_S)
    if spec.conformance:
        say(f"conformance catalogue on {new.name}")
        code = run_conformance(
            new.name,
            spec.targets_file,
            run_dir,
            surface=spec.surfaces,
            keyword=spec.keyword,
            workers=str(spec.workers),
        )
        parts["conformance"] = _part(
            "conformance", {"ok": code == 0, "exit_code": code, "folder": "conformance"}
        )
    say(f"greedy agreement on {len(prompts)} prompts")
    agr = agreement(old, new, prompts, spec.max_tokens)
    share = agr.identical_share
    parts["agreement"] = _part(
        "agreement",
        {
            "ok": share is not None and share >= spec.min_agreement and agr.errors == 0,
            "identical_share": share,
            "mean_distance": agr.mean_distance,
            "errors": agr.errors,
            "min_agreement": spec.min_agreement,
        },
    )
    write_json(run_dir / "agreement.json", agr.as_dict())
    if spec.load:
        for name, tgt in (("load-old", old), ("load-new", new)):
            say(f"comparison load on {tgt.name}: {spec.users} users for {load_s:g} s")
            res = run_load(
                LoadSpec(
                    target=tgt,
                    users=spec.users,
                    duration_s=load_s,
                    out_dir=run_dir,
                    run_id=name,
                    seed=0,
                    progress=True,
                    # about twenty slices a load: the page overlays OLD's and NEW's per slice
                    slice_s=max(0.5, min(5.0, load_s / 20)),
                ),
                on_log=say,
            )
            write_load_html(res.run_dir)
        cmp = compare_runs(
            run_dir / "load-old", run_dir / "load-new", threshold_overrides=spec.thresholds
        )
        write_json(run_dir / "load-compare.json", cmp.as_dict())
        parts["load"] = _part(
            "load",
            {"ok": not cmp.regressed, "regressions": cmp.regressions, "notes": cmp.notes},
        )
    if spec.drain:  # the swap is done: OLD goes away, mid-stream (workflows/drain.py)
        parts["drain"] = drain_part(spec, old, run_dir)
    verdict = _verdict(parts)
    ok = verdict.passed
    data = {
        "kind": "cutover",
        "mode": "pre",
        "from": old.name,
        "to": new.name,
        "parts": stage_facts(parts),
        "verdict": verdict.status,
        "reasons": verdict.reasons,
        "ok": ok,
        "finished": time.time(),
    }
    write_json(run_dir / "cutover.json", data)
    cases = [
        Case(name, p.ok, _part_message(name, p.facts), "servecheck.cutover")
        for name, p in parts.items()
    ]
    write_junit(
        run_dir / "junit.xml",
        [Suite("servecheck.cutover", cases)],
        include=[run_dir / "conformance" / "junit.xml"],
    )
    from servecheck.report.cutover_html import write_cutover_html

    page = write_cutover_html(run_dir)
    for name, p in parts.items():
        say(f"{name}: {'ok' if p.ok else 'FAILED'}  {_part_message(name, p.facts)}")
    say(f"servecheck cutover: {verdict.status.upper()}; report {page}")
    return CutoverResult(run_dir, data, page, verdict.exit_code)


def _part(name: str, facts: dict[str, Any]) -> Stage:
    """A part cutover makes itself, judged with its message as the reason (the parts other
    workflows make, the cold start and the drain, say their own detail, which is the message)."""
    return Stage.judged(name, facts, _part_message(name, facts))


def _verdict(parts: dict[str, Stage]) -> RunVerdict:
    """The run's verdict from its parts (analysis/verdict.py's rule); each reason is the part's
    message."""
    return compose(p.verdict for p in parts.values())


def _probe(
    spec: CutoverSpec, via: Any, model: str, action: SwapAction | None
) -> tuple[Any, Any, Any]:
    """The probe's records, run length and options (None without servecheck's own swap)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from servecheck.probes.swap_probe import run_swap_probe
    from servecheck.workflows import cutover_swap
    from servecheck.workflows.support import say

    duration = spec.duration_s
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), transient=True
    ) as progress:
        task = progress.add_task("swap probe", total=duration)

        def tick(t: float, done: int, failed: int) -> None:
            progress.update(
                task,
                completed=min(t, duration),
                description=f"swap probe: {done} done, {failed} failed",
            )

        if action is None:
            records, length = run_swap_probe(
                via, model, duration_s=duration, rate=spec.rate, on_tick=tick
            )
            return records, length, None
        say(f"servecheck swaps {action.text} at {spec.swap_at_s:g} s")
        return cutover_swap.probe_with_swap(
            via,
            model,
            action,
            duration_s=duration,
            rate=spec.rate,
            at_s=spec.swap_at_s,
            mix=spec.probe_models,
            on_tick=tick,
        )


def _probe_row(r: Any) -> dict[str, Any]:
    """One line of probe.json (ttft and the model sent only where the probe streamed)."""
    row = {
        "t_sent": round(r.t_sent, 4),
        "t_done": round(r.t_done, 4),
        "ok": r.ok,
        "status": r.status,
        "error": r.error,
        "model": r.served_model,
        "lag": round(r.lag, 4),
    }
    if r.model is not None and r.model != r.served_model:
        row["model_sent"] = r.model
    if r.ok and r.ttft is not None:
        row["ttft"] = round(r.ttft, 4)
    return row


def _swap(spec: CutoverSpec, run_dir: Path) -> CutoverResult:

    from servecheck.analysis.cutover import analyse_swap
    from servecheck.client.models import model_for_target
    from servecheck.config import load_targets
    from servecheck.workflows import cutover_swap
    from servecheck.workflows.support import Case, Suite, say, write_json, write_junit

    loaded = load_targets(spec.targets_file)
    via = loaded.get(str(spec.via))  # run_cutover checked it is named
    duration, rate, max_gap = spec.duration_s, spec.rate, spec.max_gap_s
    if not 1 <= duration <= 4 * 3600:
        raise SpecError(f"{{duration_s}} {duration:g}s: between 1s and 4h")
    if not 0 < rate <= 1000:
        raise SpecError(f"{{rate}} {rate:g}/s: between 0 and 1000/s")
    model = model_for_target(via).model
    say(
        f"probing {via.name} ({via.base_url}) at {rate:g} req/s for {duration:g} s with model {model!r}"
        + ("" if isinstance(spec.swap, SwapAction) else ": swap the model now")
    )
    action = spec.swap if isinstance(spec.swap, SwapAction) else None
    records, length, opts = _probe(spec, via, model, action)
    rep = analyse_swap(records, length)
    expected = {}
    if spec.old or spec.new:
        for key, name in (("from", spec.old), ("to", spec.new)):
            if name:
                try:
                    expected[key] = model_for_target(loaded.get(name)).model
                except UsageError as exc:
                    expected[key] = f"(unknown: {exc})"
    part: dict[str, Any] = {
        "ok": rep.failed <= spec.max_failed and rep.longest_gap_s <= max_gap,
        "failed": rep.failed,
        "max_failed": spec.max_failed,
        "longest_gap_s": rep.longest_gap_s,
        "max_gap_s": max_gap,
        "model_changes": [{"t": c.t, "old": c.old, "new": c.new} for c in rep.model_changes],
    }
    parts = {"swap": _part("swap", part)}
    if action is not None and opts is not None:
        impact = cutover_swap.impact_part(records, opts, action, spec.swap_slos)
        parts["swap_impact"] = _part("swap_impact", impact)
    if spec.drain:  # after the swap, OLD goes away mid-stream (workflows/drain.py)
        parts["drain"] = drain_part(spec, loaded.get(str(spec.old)), run_dir)
    verdict = _verdict(parts)
    data = {
        "kind": "cutover",
        "mode": "swap",
        "via": via.name,
        "model": model,
        "rate": rate,
        "report": rep.as_dict(),
        "expected_models": expected,
        "parts": stage_facts(parts),
        "verdict": verdict.status,
        "reasons": verdict.reasons,
        "ok": verdict.passed,
        "finished": time.time(),
    }
    notes = []
    if expected.get("to") and rep.models_seen and rep.models_seen[-1] != expected["to"]:
        notes.append(
            f"the last served model is {rep.models_seen[-1]!r}, not NEW's {expected['to']!r}: was the swap done?"
        )
    if rep.probe_lag_max_s > 0.25:
        notes.append(
            f"the probe sent up to {rep.probe_lag_max_s:.2f} s late (a starved CPU?): gaps may be overstated"
        )
    if notes:
        data["note"] = "; ".join(notes)
    write_json(run_dir / "cutover.json", data)
    write_json(run_dir / "probe.json", [_probe_row(r) for r in records])
    write_junit(
        run_dir / "junit.xml",
        [
            Suite(
                "servecheck.cutover",
                [
                    Case(
                        "swap under load" if name == "swap" else name.replace("_", " "),
                        p.ok,
                        _part_message(name, p.facts),
                        "servecheck.cutover",
                    )
                    for name, p in parts.items()
                ],
            )
        ],
    )
    from servecheck.report.cutover_html import write_cutover_html

    page = write_cutover_html(run_dir)
    for name, p in parts.items():
        say(f"{name}: {_part_message(name, p.facts)}")
    if data.get("note"):
        say(f"note: {data['note']}")
    say(f"servecheck cutover: {verdict.status.upper()}; report {page}")
    return CutoverResult(run_dir, data, page, verdict.exit_code)


__all__ = ["CutoverResult", "CutoverSpec", "run_cutover"]
