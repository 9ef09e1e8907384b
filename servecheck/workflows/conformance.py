"""A conformance run: the check catalogue under pytest (+ xdist) in a subprocess, into one run
folder (``results.jsonl``, ``summary.json``, JUnit, allure results, ``report.html``).

:class:`CheckSpec` -> :func:`run_check` -> :class:`CheckResult`. With the ``reference`` target
and no ``SERVECHECK_REF_URL`` it starts the embedded reference server for the run.
``servecheck check``, ``accept`` and ``cutover`` call it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from servecheck.checks.registry import MAX_TRIALS, SURFACES, suite_file
from servecheck.config import load_targets
from servecheck.errors import SpecError
from servecheck.records.results import not_run_phrase
from servecheck.redact import redact
from servecheck.signals import signum_of, stoppable_child
from servecheck.workflows.support import (
    PARTIAL_PROPERTY,
    mark_junit_partial,
    mark_junit_trials,
    validate_before_run,
)


def surface_files(surfaces: Iterable[str] = SURFACES) -> dict[str, str]:
    """``--surface`` value -> its suite file, derived from the check registry's surfaces."""
    return {surface.lower(): suite_file(surface) for surface in surfaces}


SURFACE_FILES = surface_files()


def suites_dir() -> Path:
    """The conformance suites shipped inside the package (``servecheck/suites/``): the same
    files wherever servecheck is installed and whichever folder it runs from."""
    return Path(__file__).resolve().parents[1] / "suites"


# pytest-xdist's status line for a terminal. On a log (no terminal) and with -q it has no worker
# counts to show and writes it twice, once as the workers start and once as they finish collecting.
XDIST_STATUS_LINE = "bringing up nodes..."


def _echo(source: IO[bytes], sink: IO[str]) -> None:
    """Copy pytest's output to ``sink`` line by line, passing :data:`XDIST_STATUS_LINE` once.
    Every other line (a worker's ``node down``, a crash report) goes through as it is."""
    seen_status = False
    for raw in iter(source.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        if line.strip() == XDIST_STATUS_LINE:
            if seen_status:
                continue
            seen_status = True
        with contextlib.suppress(ValueError, OSError):  # sink closed: the user went away
            sink.write(line)
            sink.flush()


def _is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except ValueError:  # closed
        return False


@dataclass(slots=True)
class CheckSpec:
    """What to check. ``targets`` are names in ``targets_file`` (``all`` for every target);
    ``surfaces`` are keys of :data:`SURFACE_FILES`; ``workers`` is pytest-xdist's ``-n``
    (``"0"`` runs in-process); ``pytest_args`` go to pytest as they are; ``strict``: the strict
    schema profile's findings fail the checks (``checks/schema.py``) instead of non-strict."""

    targets: list[str] = field(default_factory=lambda: ["reference"])
    targets_file: str | None = None  # None: ./targets.yaml, else the built-in reference target
    models: list[str] = field(default_factory=list)
    surfaces: list[str] = field(default_factory=list)
    keyword: str | None = None
    strict: bool = False
    trials: int = 1  # --trials K: model-dependent checks run K times (checks/runner.py)
    workers: str = "auto"
    out: Path = Path("reports")
    run_id: str | None = None
    embedded: bool = True
    reference_args: list[str] = field(default_factory=list)
    pytest_args: list[str] = field(default_factory=list)


@dataclass(slots=True)
class CheckResult:
    """The outcome of :func:`run_check`: pytest's exit code (3 when nothing was selected), the
    outcome counts from ``summary.json`` and the HTML page (``None`` when none was written)."""

    run_dir: Path
    exit_code: int
    counts: dict[str, int]
    page: Path | None = None

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


def _run_id(targets: list[str]) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    label = "-".join(targets)[:40] if targets else "reference"
    return f"{stamp}-check-{label}"


def build_pytest_command(spec: CheckSpec, run_dir: Path) -> list[str]:
    """The pytest command line for ``spec`` (the suites shipped with servecheck)."""
    root = suites_dir()
    files = [str(root / SURFACE_FILES[s]) for s in spec.surfaces] if spec.surfaces else [str(root)]
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *files,
        "-q",
        # The catalogue's own pytest settings, not those of the folder it runs from.
        "-c",
        str(root / "catalogue.ini"),
        # Named, so it loads where plugin autoloading is off (the entry point has the same name).
        "-p",
        "servecheck.pytest_plugin",
        "-p",
        "no:randomly",
        "--sc-report-dir",
        str(run_dir),
        *(["--sc-targets-file", spec.targets_file] if spec.targets_file else []),
        f"--junitxml={run_dir / 'junit.xml'}",
        "-o",
        "junit_family=xunit2",
        "--rootdir",
        str(root.parent),
    ]
    try:
        import allure_pytest  # noqa: F401

        cmd.append(f"--alluredir={run_dir / 'allure-results'}")
    except ImportError:
        pass
    # The namespaced names: the short ones are absent where a conftest.py defines them.
    for target in spec.targets:
        cmd += ["--sc-target", target]
    for model in spec.models:
        cmd += ["--sc-model", model]
    if spec.keyword:
        cmd += ["-k", spec.keyword]
    if spec.strict:
        cmd.append("--sc-strict")
    if spec.trials != 1:
        cmd += ["--sc-trials", str(spec.trials)]
    if str(spec.workers) not in ("0", ""):
        cmd += ["-n", str(spec.workers)]
    extra = list(spec.pytest_args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    return cmd + extra


def _pytest(cmd: list[str], env: dict[str, str], run_dir: Path) -> int:
    """Run pytest as a child that dies with us. Interrupted (Ctrl-C, SIGINT or SIGTERM to our
    pid): pytest gets one SIGINT at once (it writes what finished), then we say where the
    partial results are.

    pytest runs in its own session with SIGINT at its default (:func:`stoppable_child`), so the
    one SIGINT it hears is ours, whoever was signalled. In our process group a terminal's Ctrl-C
    reached it too, but a SIGINT sent to our pid alone (CI cancellation, ``timeout -s INT``,
    ``kill -INT``) did not: waiting for pytest to end on its own then let every check run to
    the end, and forwarding at once would land a second SIGINT in pytest's report (a traceback
    from inside its summary) after a Ctrl-C. A background job (``servecheck check ... &``,
    ``nohup``) starts with SIGINT ignored, which pytest would inherit and hear nothing until
    the kill 15 s later; the reset to the default covers that too."""
    # On a terminal pytest writes to it itself (colours, xdist's status rewritten in place); on a
    # log its output is copied through :func:`_echo`, where pytest sees no terminal either.
    piped = not _is_terminal(sys.stdout)
    stdout = subprocess.PIPE if piped else None
    proc = subprocess.Popen(  # noqa: PLW1509 - signal reset and prctl only
        cmd, env=env, preexec_fn=stoppable_child, start_new_session=True, stdout=stdout
    )
    echo = None
    if proc.stdout is not None:
        echo = threading.Thread(target=_echo, args=(proc.stdout, sys.stdout), daemon=True)
        echo.start()
    try:
        return _wait(proc, run_dir)
    finally:
        if echo is not None:
            echo.join(timeout=10)  # EOF once pytest and its workers are gone
        if proc.stdout is not None:
            proc.stdout.close()


def _wait(proc: subprocess.Popen[bytes], run_dir: Path) -> int:
    try:
        return proc.wait()
    except KeyboardInterrupt:
        # To pytest's whole group (its session: pytest and its xdist workers), as a terminal's
        # Ctrl-C reaches a plain pytest: each worker stops its check at once. To pytest alone,
        # xdist waits for the workers' running checks, then gives up on them after 10 s.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):  # or a second Ctrl-C: now
            proc.kill()
            proc.wait()
        print(
            f"servecheck check: interrupted; partial results in {run_dir} "
            f"(results.jsonl has a line for every check that finished)",
            file=sys.stderr,
            flush=True,
        )
        raise


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def mark_partial(run_dir: Path, reason: str) -> dict[str, object]:
    """Mark an interrupted run partial in every output it left: ``summary.json`` (``partial``,
    ``not_run``, ``interrupted``; written from results.jsonl when pytest was killed before it
    wrote one) and ``junit.xml`` (a ``servecheck_partial`` testsuite property and one error
    case for the interruption, so no JUnit consumer counts the run as green). Returns the
    summary. Idempotent: a second call changes nothing more."""
    path = run_dir / "summary.json"
    summary: dict[str, object] = {}
    if path.exists():
        with contextlib.suppress(ValueError):
            summary = json.loads(path.read_text(encoding="utf-8"))
    if not summary:
        counts: dict[str, int] = {}
        results = run_dir / "results.jsonl"
        for line in results.read_text(encoding="utf-8").splitlines() if results.exists() else []:
            with contextlib.suppress(ValueError):
                outcome = str(json.loads(line).get("outcome"))
                counts[outcome] = counts.get(outcome, 0) + 1
        summary = {"kind": "conformance", "counts": counts, "not_run": None}
    summary["partial"] = True
    summary.setdefault("interrupted", reason)
    path.write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    mark_junit_partial(run_dir / "junit.xml", reason, summary.get("not_run"))
    return summary


def _conclude(
    run_dir: Path, say: Callable[[str], None], interrupted: str | None
) -> tuple[dict[str, int], Path | None]:
    """Counts from summary.json, the partial mark when the run was cut short, the HTML page."""
    counts: dict[str, int] = {}
    page = None
    summary = run_dir / "summary.json"
    data: dict[str, object] = {}
    if summary.exists():
        with contextlib.suppress(ValueError):
            data = json.loads(summary.read_text())
    if interrupted is not None or data.get("partial"):
        data = mark_partial(run_dir, interrupted or "interrupted")
    if not data:
        return counts, page
    raw = data.get("counts")
    counts = {str(k): int(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    line = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    say(f"servecheck check: {line or 'no checks ran'} -> {run_dir}")
    stalls = data.get("never_complete")
    for stall in stalls if isinstance(stalls, list) else []:  # the cause of the checks not run
        if isinstance(stall, dict):
            say(f"servecheck check: {redact(str(stall.get('message', '')))}")
    if data.get("partial"):
        say(
            f"servecheck check: PARTIAL: the run was interrupted; {not_run_phrase(data.get('not_run'))}"
        )
    _say_trials(run_dir, data, say)
    try:
        from servecheck.report.html import write_conformance_html

        page = write_conformance_html(run_dir)
        say(f"servecheck check: HTML summary {page}")
    except ImportError:
        pass
    return counts, page


def _say_trials(run_dir: Path, data: dict[str, object], say: Callable[[str], None]) -> None:
    """``--trials K``: each model-dependent check's k/K, on the console and in junit.xml."""
    rates = data.get("trial_rates")
    if not isinstance(rates, list) or not rates:
        return
    mark_junit_trials(run_dir / "junit.xml", rates)
    say(
        f"servecheck check: {len(rates)} model-dependent check(s), {data.get('trials')} trials each:"
    )
    for rate in rates:
        tally = rate.get("trials") if isinstance(rate, dict) else None
        if isinstance(tally, dict):
            say(
                f"  {rate.get('check')} {rate.get('target')}/{rate.get('model')}: "
                f"{tally.get('passed')}/{tally.get('runs')} passed "
                f"(threshold {tally.get('threshold')}/{tally.get('runs')}): {rate.get('outcome')}"
            )


def run_check(spec: CheckSpec, say: Callable[[str], None] | None = None) -> CheckResult:
    """Run the catalogue for ``spec``; ``say`` gets the progress lines (default: stdout).

    Raises :class:`UsageError` on a bad targets file or a missing ``reference`` target."""
    say = say or (lambda text: print(text, flush=True))
    targets = spec.targets
    loaded = load_targets(spec.targets_file)
    needs_embedded = (
        ("reference" in targets or "all" in targets)
        and spec.embedded
        and "SERVECHECK_REF_URL" not in os.environ
    )
    if not 1 <= spec.trials <= MAX_TRIALS:
        raise SpecError("{trials} {n}: expected 1 to {most}", n=spec.trials, most=MAX_TRIALS)
    if "reference" in targets and "reference" not in loaded.names:
        raise SpecError("{path}: no 'reference' target; name one with {targets}", path=loaded.path)
    # Every usage problem before the run folder and pytest (which would print it as "ERROR:"
    # and exit 4): a named target's missing ${VAR}, a bad --reference-arg.
    validate_before_run(
        targets_file=spec.targets_file,
        names=[t for t in targets if t != "all"],
        reference_args=spec.reference_args,
    )
    run_id = spec.run_id or _run_id(targets)
    run_dir = Path(spec.out) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = build_pytest_command(spec, run_dir)
    # Hypothesis (FUZZ-*) keeps a .hypothesis/ folder in the working directory even without an
    # example database; the user's folder is not ours to write to, the run folder is.
    env = {**os.environ, "HYPOTHESIS_STORAGE_DIRECTORY": str(run_dir / ".hypothesis")}
    say(f"servecheck check: targets {', '.join(targets)}; report {run_dir}")
    try:
        if needs_embedded:
            from servecheck.embedded import embedded_reference

            with embedded_reference(
                ["--itl-ms", "2", *spec.reference_args], log_path=run_dir / "reference-server.log"
            ) as ref_env:
                env.update(ref_env)
                code = _pytest(cmd, env, run_dir)
        else:
            code = _pytest(cmd, env, run_dir)
    except KeyboardInterrupt as exc:
        # Partial in every output (summary.json, junit.xml, the page), then the interrupt goes on.
        _conclude(run_dir, say, f"interrupted by {_signal_name(signum_of(exc))}")
        raise
    counts, page = _conclude(run_dir, say, None)
    if code == 5:
        print(redact("servecheck check: no checks were selected (pytest exit 5)"), file=sys.stderr)
        code = 3
    return CheckResult(run_dir, code, counts, page)


__all__ = [
    "PARTIAL_PROPERTY",
    "SURFACE_FILES",
    "CheckResult",
    "CheckSpec",
    "build_pytest_command",
    "mark_partial",
    "run_check",
    "suites_dir",
    "surface_files",
]
