"""servecheck as a library: one function per command, each taking a typed spec and returning a
typed result (the same files and exit code as the command; nothing is printed but progress on
stderr). The commands parse their options into these specs and call these functions.

    from servecheck import api

    result = api.check(api.CheckSpec(targets=["mine"], targets_file="targets.yaml"))
    gate = api.accept(api.AcceptSpec(target="mine", slos=["ttft_p95<=800ms"]))
    run = api.load(api.LoadSpec(target=api.target("mine"), users=8, duration_s=60))
    if not (result.passed and gate.passed and run.passed):
        raise SystemExit(1)

Bad input raises :class:`servecheck.errors.UsageError` with a message naming the problem.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from servecheck.config.model import Target
from servecheck.load.run import LoadResult
from servecheck.load.soak import SoakPlan, SoakResult
from servecheck.load.spec import LoadSpec
from servecheck.preflight import PreflightOptions, PreflightReport
from servecheck.workflows.accept import AcceptResult, AcceptSpec
from servecheck.workflows.capacity import CapacityResult, CapacitySpec
from servecheck.workflows.compare import CompareResult, CompareSpec
from servecheck.workflows.conformance import CheckResult, CheckSpec
from servecheck.workflows.cutover import CutoverResult, CutoverSpec
from servecheck.workflows.drain import DrainResult, DrainSpec
from servecheck.workflows.history import (
    HistoryAddResult,
    HistoryAddSpec,
    HistoryCompareResult,
    HistoryCompareSpec,
    HistoryShowResult,
    HistoryShowSpec,
)
from servecheck.workflows.repeat import RepeatResult, RepeatSpec


def target(name: str, targets_file: str | Path | None = None) -> Target:
    """A target from a targets file (``None``: ./targets.yaml, else the built-in reference)."""
    from servecheck.config import load_targets

    return load_targets(targets_file).get(name)


def check(spec: CheckSpec, say: Callable[[str], None] | None = None) -> CheckResult:
    """The conformance catalogue (pytest in a subprocess) into one run folder."""
    from servecheck.workflows.conformance import run_check

    return run_check(spec, say)


def load(spec: LoadSpec, on_log: Callable[[str], None] | None = None) -> LoadResult:
    """One bounded load run with SLO verdicts; also writes the run's HTML page and junit.xml
    (a case per SLO, the error budget among them, and one for the run's verdict). Interrupted
    (:class:`~servecheck.signals.Interrupted`, carrying the partial result): both are written
    for what finished, the JUnit marked partial as an interrupted ``check``'s is, then it goes on."""
    from servecheck.load.run import run_load
    from servecheck.signals import Interrupted

    try:
        result = run_load(spec, on_log=on_log)
    except Interrupted as stop:
        if isinstance(stop.partial, LoadResult):
            _load_outputs(stop.partial, spec, _partial_reason(stop.partial, stop.signum))
        raise
    _load_outputs(result, spec)
    return result


def load_repeat(spec: RepeatSpec, on_log: Callable[[str], None] | None = None) -> RepeatResult:
    """``spec.repeat`` load runs of one spec (each as :func:`load`), and confidence intervals
    over them (workflows/repeat.py)."""
    from servecheck.workflows.repeat import run_repeat

    return run_repeat(spec, lambda one: load(one, on_log=on_log), on_log=on_log)


def _partial_reason(result: LoadResult, signum: int) -> str:
    """Why the run stopped, as its summary says it (``interrupted by SIGINT after 4.1 s``)."""
    import signal

    for reason in result.summary.get("reasons") or []:
        if str(reason).startswith("partial run: "):
            return str(reason).removeprefix("partial run: ")
    return f"interrupted by {signal.Signals(signum).name}"


def _load_outputs(result: LoadResult, spec: LoadSpec, interrupted: str | None = None) -> None:
    if not result.summary:
        return
    from servecheck.errors import UsageError
    from servecheck.load.run import validate
    from servecheck.report.html import write_load_html
    from servecheck.workflows.support import load_suite, mark_junit_partial, write_junit

    junit = result.run_dir / "junit.xml"
    try:  # the SLOs the run judged, or could not (the spec was validated before it ran)
        asked = [s.text for s in validate(spec)]
    except UsageError:
        asked = []
    write_junit(junit, [load_suite(result.summary, asked=asked)])
    if interrupted is not None:
        mark_junit_partial(junit, interrupted)
    write_load_html(result.run_dir)


def soak(
    target: Target,
    plan: SoakPlan,
    run_dir: Path,
    *,
    telemetry_overrides: dict[str, Any] | None = None,
    progress: bool = False,
    say: Callable[[str], None] | None = None,
) -> SoakResult:
    """A validated soak plan against ``target`` (``plan.model`` set); writes soak.json,
    soak.png, report.html and junit.xml (a case per leak metric, the drain, the target staying
    up, and the run's verdict) into ``run_dir``. Interrupted (Ctrl-C, SIGTERM), it writes them
    for what finished, marked partial (``partial: true``, a JUnit ``interrupted`` error case),
    and raises :class:`~servecheck.signals.Interrupted` with that result as ``partial``."""
    from servecheck.load.soak import run_soak
    from servecheck.report.soak_html import write_soak_report
    from servecheck.signals import Interrupted
    from servecheck.workflows.support import mark_junit_partial, write_soak_junit

    plan.validate()
    try:
        result = run_soak(
            target,
            plan,
            run_dir,
            telemetry_overrides=telemetry_overrides,
            progress=progress,
            say=say,
        )
    except Interrupted as stop:
        # What finished, written as a finished run's files are, and marked partial everywhere.
        if stop.partial is not None:
            part = stop.partial
            write_soak_report(part)
            junit = write_soak_junit(run_dir, part.data)
            mark_junit_partial(junit, part.data["failures"][0].removeprefix("partial run: "))
        raise
    write_soak_report(result)
    write_soak_junit(run_dir, result.data)
    return result


def accept(spec: AcceptSpec) -> AcceptResult:
    """Readiness, the catalogue and a smoke load: the post-deploy gate."""
    from servecheck.workflows.accept import run_accept

    return run_accept(spec)


def compare(spec: CompareSpec) -> CompareResult:
    """A regression verdict between two run folders."""
    from servecheck.workflows.compare import run_compare

    return run_compare(spec)


def capacity(spec: CapacitySpec) -> CapacityResult:
    """A bounded load sweep: the highest load within the SLOs, the knee, replicas."""
    from servecheck.workflows.capacity import run_capacity

    return run_capacity(spec)


def cutover(spec: CutoverSpec) -> CutoverResult:
    """Pre-cutover checks of OLD -> NEW, or the swap-under-load probe."""
    from servecheck.workflows.cutover import run_cutover

    return run_cutover(spec)


def history_add(spec: HistoryAddSpec) -> HistoryAddResult:
    """Record load and check run folders in the nightly history."""
    from servecheck.workflows.history import run_history_add

    return run_history_add(spec)


def history_show(spec: HistoryShowSpec) -> HistoryShowResult:
    """One target's series of one metric, its steps, an SVG and a page (or its checks)."""
    from servecheck.workflows.history import run_history_show

    return run_history_show(spec)


def history_compare(spec: HistoryCompareSpec) -> HistoryCompareResult:
    """Tonight against the last N nights (``rolling:N``): regressions, steps, new failures."""
    from servecheck.workflows.history import run_history_compare

    return run_history_compare(spec)


def drain(spec: DrainSpec) -> DrainResult:
    """Streams in flight, the server told to stop, new requests: the drain-on-shutdown verdict."""
    from servecheck.workflows.drain import run_drain

    return run_drain(spec)


def records_frame(path: str | Path) -> Any:
    """A load run's per-request records as a pandas DataFrame, one row per request, in the
    record's own columns (seconds; docs/load.md "Records in a notebook"): ``path`` is a run
    folder (its ``records.parquet``, else ``records.jsonl``) or a records file. A folder whose
    run kept no records (``--records none``) is a :class:`~servecheck.errors.UsageError`."""
    from servecheck.errors import UsageError
    from servecheck.records.parquet import records_file
    from servecheck.records.record import to_dataframe

    p = Path(path)
    found = records_file(p) if p.is_dir() else (p if p.is_file() else None)
    if found is None:
        raise UsageError(
            f"{p}: no records.parquet or records.jsonl (a run that kept no records has none)"
        )
    return to_dataframe(found)


def preflight(
    path: str | Path, options: PreflightOptions | None = None, progress: Any = None
) -> PreflightReport:
    """Model files (safetensors, GGUF, config, tokenizer) before a launch; ``progress`` reports
    hashing (``servecheck.preflight.integrity.HashProgress``)."""
    from servecheck.preflight import run_preflight

    return run_preflight(str(path), options or PreflightOptions(), progress)


__all__ = [
    "AcceptResult",
    "AcceptSpec",
    "CapacityResult",
    "CapacitySpec",
    "CheckResult",
    "CheckSpec",
    "CompareResult",
    "CompareSpec",
    "CutoverResult",
    "CutoverSpec",
    "HistoryAddResult",
    "HistoryAddSpec",
    "HistoryCompareResult",
    "HistoryCompareSpec",
    "HistoryShowResult",
    "HistoryShowSpec",
    "DrainResult",
    "DrainSpec",
    "LoadResult",
    "LoadSpec",
    "PreflightOptions",
    "PreflightReport",
    "RepeatResult",
    "RepeatSpec",
    "SoakPlan",
    "SoakResult",
    "Target",
    "accept",
    "capacity",
    "check",
    "compare",
    "cutover",
    "history_add",
    "history_compare",
    "history_show",
    "drain",
    "load",
    "load_repeat",
    "preflight",
    "records_frame",
    "soak",
    "target",
]
