"""Pieces shared by the workflows (accept, capacity, cutover, soak): validation before a run,
run folders, the embedded reference target, JUnit merging, allure copies, the console line.

Workflow plumbing, not reporting: it starts the embedded server, so it lives in workflows/
(report/ only renders; ``write_json``, a report's own file, is ``report/output.py``'s and is
re-exported here for the workflows).
"""

from __future__ import annotations

import contextlib
import os
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.analysis.budget import SOURCE as BUDGET_SOURCE
from servecheck.records.results import not_run_phrase
from servecheck.redact import redact
from servecheck.report.output import write_json

PARTIAL_PROPERTY = "servecheck_partial"  # JUnit testsuite property of an interrupted run
# JUnit testsuite property with the run's one verdict (pass | fail | inconclusive), as its JSON,
# console, page and summary.md say it: JUnit itself knows only passed and failed cases.
VERDICT_PROPERTY = "servecheck_verdict"


def validate_before_run(
    *,
    targets_file: str | Path | None = None,
    names: Sequence[str] | None = None,
    slos: Sequence[str] = (),
    thresholds: Sequence[str] = (),
    reference_args: Sequence[str] = (),
) -> None:
    """Every usage check a workflow can make before it creates its run folder or sends a byte:
    the targets file and the named targets (a missing ``${VAR}``, an SLO typo in it), ``--slo``
    expressions, compare ``--threshold`` overrides and ``--reference-arg`` values. Raises
    :class:`~servecheck.errors.UsageError` (exit code 2)."""
    from servecheck.analysis.compare import parse_threshold
    from servecheck.analysis.slo import parse_slos
    from servecheck.config import load_targets
    from servecheck.embedded import ENV_URL

    parse_slos(list(slos), "cli")
    for text in thresholds:
        parse_threshold(text)
    if names is not None:
        loaded = load_targets(targets_file)  # None: the default file, as the run will read it
        for name in names:
            if name == "reference" and ENV_URL not in os.environ:
                continue  # its ${SERVECHECK_REF_URL} is set once the embedded server listens
            loaded.get(name)


def new_run_dir(out: str | Path, kind: str, label: str, run_id: str | None = None) -> Path:
    """``<out>/<time>-<kind>-<label>`` (or ``<out>/<run_id>``), created."""
    rid = run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}-{label[:40]}"
    path = Path(out) / rid
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def reference_env(
    names: Sequence[str],
    enabled: bool = True,
    extra_args: Sequence[str] = (),
    log_path: Path | None = None,
) -> Iterator[bool]:
    """Start the embedded reference server when a ``reference`` target is named and none is set.

    The variables it exports (``SERVECHECK_REF_URL`` ...) are put into ``os.environ`` for the
    block, so ``load_targets`` and child processes see them, and restored afterwards.
    """
    from servecheck.embedded import ENV_URL, embedded_reference

    if not enabled or "reference" not in names or ENV_URL in os.environ:
        yield False
        return
    saved = {
        k: os.environ.get(k)
        for k in (
            "SERVECHECK_REF_URL",
            "SERVECHECK_REF_API_KEY",
            "SERVECHECK_REF_METRICS_URL",
            "SERVECHECK_REF_PID",
        )
    }
    with embedded_reference(extra_args, log_path=log_path) as env:
        os.environ.update(env)
        try:
            yield True
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@dataclass(slots=True)
class Case:
    """One JUnit test case of a workflow stage (readiness, an SLO, an agreement check ...)."""

    name: str
    passed: bool
    message: str = ""
    classname: str = "servecheck"
    time_s: float = 0.0
    skipped: bool = False


@dataclass(slots=True)
class Suite:
    name: str
    cases: list[Case] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)


def write_junit(path: Path, suites: Sequence[Suite], include: Sequence[Path] = ()) -> Path:
    """A JUnit XML file with ``suites`` plus every ``<testsuite>`` of the files in ``include``."""
    root = ET.Element("testsuites")
    for inc in include:
        try:
            tree = ET.parse(inc)
        except (OSError, ET.ParseError):
            continue
        r = tree.getroot()
        for ts in [r] if r.tag == "testsuite" else list(r.iter("testsuite")):
            root.append(ts)
    for s in suites:
        fails = sum(1 for c in s.cases if not c.passed and not c.skipped)
        skips = sum(1 for c in s.cases if c.skipped)
        ts = ET.SubElement(
            root,
            "testsuite",
            name=s.name,
            tests=str(len(s.cases)),
            failures=str(fails),
            errors="0",
            skipped=str(skips),
            time=f"{sum(c.time_s for c in s.cases):.3f}",
        )
        if s.properties:
            props = ET.SubElement(ts, "properties")
            for key, value in s.properties.items():
                ET.SubElement(props, "property", name=key, value=redact(value))
        for c in s.cases:
            tc = ET.SubElement(
                ts, "testcase", classname=c.classname, name=c.name, time=f"{c.time_s:.3f}"
            )
            if c.skipped:
                ET.SubElement(tc, "skipped", message=redact(c.message)[:500])
            elif not c.passed:
                f = ET.SubElement(
                    tc,
                    "failure",
                    message=redact(c.message.splitlines()[0] if c.message else "failed")[:500],
                )
                f.text = redact(c.message)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    return path


def mark_junit_partial(path: Path, reason: str, not_run: object = None) -> None:
    """Mark the JUnit file of an interrupted run (written by pytest or :func:`write_junit`)
    partial: a :data:`PARTIAL_PROPERTY` testsuite property (and ``servecheck_not_run`` when the
    count of checks that did not run is known) and one error case ``interrupted``, so that no
    JUnit consumer counts the run as green. Idempotent."""
    if path.exists():
        try:
            root = ET.parse(path).getroot()  # noqa: S314 - our own file, not input
        except ET.ParseError:
            root = ET.Element("testsuites")  # pytest was killed while writing it
    else:
        root = ET.Element("testsuites")
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        suite = ET.SubElement(root, "testsuite", name="servecheck", tests="0", errors="0")
    props = suite.find("properties")
    if props is None:
        props = ET.Element("properties")
        suite.insert(0, props)
    if any(p.get("name") == PARTIAL_PROPERTY for p in props):
        return
    ET.SubElement(props, "property", name=PARTIAL_PROPERTY, value="true")
    if not_run is not None:
        ET.SubElement(props, "property", name="servecheck_not_run", value=str(not_run))
    case = ET.SubElement(suite, "testcase", classname="servecheck", name="interrupted", time="0")
    message = f"partial run: {reason}; {not_run_phrase(not_run)}"
    ET.SubElement(case, "error", message=message, type="interrupted").text = message
    for node in {root, suite}:
        for key in ("errors", "tests"):
            node.set(key, str(int(node.get(key) or 0) + 1))
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


TRIALS_PROPERTY = "servecheck_trials"


def mark_junit_trials(path: Path, rates: Sequence[Any]) -> None:
    """Give each model-dependent check's testcase in pytest's JUnit file a
    :data:`TRIALS_PROPERTY` property, ``k/K (threshold t/K)``: pytest's xunit2 writes no
    per-case properties itself. ``rates`` are summary.json's ``trial_rates``. Idempotent."""
    if not path.exists():
        return
    try:
        root = ET.parse(path).getroot()  # noqa: S314 - our own file, not input
    except ET.ParseError:
        return  # pytest was killed while writing it: mark_junit_partial says so
    by_case = {
        f"{r.get('target')}/{r.get('model')}/{r.get('check')}": r.get("trials")
        for r in rates
        if isinstance(r, dict) and isinstance(r.get("trials"), dict)
    }
    for case in root.iter("testcase"):
        name = case.get("name") or ""
        tally = by_case.get(name.rsplit("[", 1)[-1].rstrip("]"))
        if tally is None:
            continue
        props = case.find("properties")
        if props is None:
            props = ET.Element("properties")
            case.insert(0, props)
        if any(p.get("name") == TRIALS_PROPERTY for p in props):
            continue
        runs = tally.get("runs")
        value = f"{tally.get('passed')}/{runs} (threshold {tally.get('threshold')}/{runs})"
        ET.SubElement(props, "property", name=TRIALS_PROPERTY, value=value)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def slo_cases(
    summary: dict[str, Any], classname: str = "servecheck.load", asked: Sequence[str] = ()
) -> list[Case]:
    """JUnit cases for a load summary: one per SLO, plus the run's own verdict. ``asked``: the
    SLOs the run was given (their text); one the run could not judge (the target was down before
    the load, or the steady window held no request) is a failing case that says why, so no SLO
    asked for goes missing from the file."""
    judged = summary.get("slo") or []
    why = "; ".join(summary.get("reasons") or []) or f"verdict {summary.get('verdict')}"
    out = [
        Case(f"SLO {v.get('slo')}", bool(v.get("passed")), _slo_message(v), classname)
        for v in judged
    ]
    seen = {str(v.get("slo")) for v in judged}
    out += [
        Case(f"SLO {text}", False, f"not judged: {why}", classname)
        for text in dict.fromkeys(asked)
        if text not in seen
    ]
    verdict = str(summary.get("verdict"))
    out.append(verdict_case("load run verdict", verdict, load_reasons(summary), classname))
    return out


def load_reasons(summary: dict[str, Any]) -> list[str]:
    """Why a load run has its verdict, as its console's ``verdict:`` line says it: the summary's
    reasons, then the SLOs it breached (the error budget's breach is a reason of its own)."""
    breached = [
        str(v.get("slo"))
        for v in summary.get("slo") or []
        if not v.get("passed") and v.get("source") != BUDGET_SOURCE
    ]
    return [
        *(str(r) for r in summary.get("reasons") or []),
        *([f"SLO breached: {', '.join(breached)}"] if breached else []),
    ]


def verdict_case(name: str, verdict: str, reasons: Sequence[str], classname: str) -> Case:
    """A run's verdict as one JUnit case: passed only for ``pass``; its message starts with the
    verdict's word (``INCONCLUSIVE: ...``), so a JUnit reader sees the same one as the console."""
    word = verdict.upper()
    return Case(
        name, verdict == "pass", f"{word}: {'; '.join(reasons)}" if reasons else word, classname
    )


def load_suite(
    summary: dict[str, Any], classname: str = "servecheck.load", asked: Sequence[str] = ()
) -> Suite:
    """The JUnit suite of a load run: :func:`slo_cases`, with the run's verdict as the suite's
    :data:`VERDICT_PROPERTY`."""
    return Suite(
        classname,
        slo_cases(summary, classname, asked),
        {VERDICT_PROPERTY: str(summary.get("verdict"))},
    )


def _slo_message(v: dict[str, Any]) -> str:
    bound = f"bound {v.get('op')} {v.get('bound')} ({v.get('source')})"
    if v.get("observed") is None:  # e.g. a TTFT bound when no request succeeded
        return f"{v.get('note') or 'nothing measured'}; {bound}"
    return f"observed {v.get('observed')} {v.get('unit')}; {bound}"


def soak_cases(data: dict[str, Any], classname: str = "servecheck.soak") -> list[Case]:
    """JUnit cases for a soak (``soak.json``'s data, a ``--probe-only`` one's too): whether the
    target stayed up through the cycles, one case per leak metric the soak judged (its primary
    metric even when it was not sampled), the drain after the abandoned-stream probe, the probe
    itself, and the run's verdict. A case fails when one of the verdict's reasons is its own
    (``kv_usage: leak``, ``drain: not_drained``, ``kv_usage: inconclusive ...``): a soak judges
    its series over all the cycles at once, not cycle by cycle, and an unjudged series is never
    a green case."""
    reasons = [str(r) for r in data.get("failures") or []]

    def case(name: str, prefix: str, detail: str) -> Case:
        mine = [r for r in reasons if r.startswith(prefix)]
        text = "; ".join(mine) + (f"\n{detail}" if mine and detail else "")
        return Case(name, not mine, text if mine else detail, classname)

    out: list[Case] = []
    cycles = data.get("cycles") or []
    if data.get("kind") == "soak":
        down = [str(c["down"]) for c in cycles if c.get("down")]
        plan = data.get("plan") or {}
        planned = plan.get("cycles", 0) * len(plan.get("mix") or ["chat"])  # per member of a mix
        ran = f"{len(cycles)} of {planned or '?'} cycles ran"
        out.append(Case("target stayed up", not down, "; ".join(down) or ran, classname))
    leak = data.get("leak") or {}
    primary = data.get("primary")
    metrics = [primary, *(m for m in leak if m != primary)] if primary else list(leak)
    for metric in metrics:
        message = str((leak.get(metric) or {}).get("message") or "not sampled")
        out.append(case(f"leak {metric}", f"{metric}:", message))
    if data.get("drain") is not None:
        out.append(case("drain", "drain:", str(data["drain"].get("message") or "")))
    if data.get("kind") == "abandon-probe":
        probe = data.get("probe") or {}
        out.append(case("probe", "probe:", f"{probe.get('abandoned', 0)} stream(s) abandoned"))
    verdict = data.get("verdict")
    out.append(
        Case(
            "soak run verdict",
            verdict == "pass",
            "; ".join(reasons) or f"verdict {verdict}",
            classname,
        )
    )
    return out


def write_soak_junit(run_dir: Path, data: dict[str, Any]) -> Path:
    """``junit.xml`` of a soak (or ``--probe-only``) run: :func:`soak_cases` in one suite."""
    return write_junit(run_dir / "junit.xml", [Suite("servecheck.soak", soak_cases(data))])


def copy_allure(src: Path, dst: Path) -> int:
    """Copy allure result files from a sub-run into the run's own allure-results."""
    if not src.is_dir():
        return 0
    dst.mkdir(parents=True, exist_ok=True)
    n = 0
    for p in src.iterdir():
        if p.is_file():
            (dst / p.name).write_bytes(p.read_bytes())
            n += 1
    return n


def say(text: str) -> None:
    """A stage line on stderr (rich when it is a terminal)."""
    from rich.console import Console

    Console(stderr=True, highlight=False).print(redact(text), markup=False)


__all__ = [
    "PARTIAL_PROPERTY",
    "VERDICT_PROPERTY",
    "Case",
    "Suite",
    "copy_allure",
    "load_reasons",
    "load_suite",
    "mark_junit_partial",
    "new_run_dir",
    "reference_env",
    "say",
    "slo_cases",
    "soak_cases",
    "verdict_case",
    "write_json",
    "write_junit",
    "write_soak_junit",
]
