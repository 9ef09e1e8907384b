"""The one-page acceptance report of ``servecheck accept`` (the run:
:mod:`servecheck.workflows.accept`)."""

from __future__ import annotations

from pathlib import Path

# A stage's verdict in summary.md, as the console's stage line says it (workflows/accept.py).
_STAGE_WORD = {"pass": "ok", "fail": "FAILED"}


def write_accept_html(run_dir: Path) -> Path:
    """The one-page acceptance report: readiness, conformance and smoke load sections."""
    from servecheck.analysis.verdict import RunVerdict, stage_verdict
    from servecheck.report.html import (
        Section,
        conformance_section,
        esc,
        load_section,
        read_json,
        status_badge,
        table,
        verdict_badge,
        write_page,
    )

    data = read_json(run_dir / "accept.json")
    # One verdict for the page, as accept.json and the console have it (issue 41: a smoke load
    # that was INCONCLUSIVE made an INCONCLUSIVE run whose page said FAIL); each stage's word is
    # the one the run composed it from (analysis/verdict.py's stage_verdict).
    verdict = RunVerdict.of_summary(data)
    facts = data.get("stages") or {}
    stages = {name: stage_verdict(name, stage).status for name, stage in facts.items()}
    rows = [
        (
            esc(name),
            # a stage an interrupt cut short: not judged, neither a pass nor a failure
            verdict_badge(None, "INTERRUPTED")
            if facts[name].get("interrupted")
            else status_badge(word),
            esc(
                facts[name].get("detail")
                or facts[name].get("verdict")
                or f"exit code {facts[name].get('exit_code')}"
            ),
            esc(facts[name].get("seconds")),
        )
        for name, word in stages.items()
    ]
    partial = bool(data.get("partial"))
    flag = (
        f'<p class="flag">PARTIAL: accept was interrupted ({esc(data.get("interrupted"))}); '
        f"verdict {esc(str(data.get('verdict')).upper())}: the stages below are what ran.</p>"
        if partial
        else ""
    )
    overview = Section(
        "Stages",
        flag + f"<p>target <b>{esc(data.get('target'))}</b> ({esc(data.get('engine'))}) at "
        f"<code>{esc(data.get('base_url'))}</code></p>"
        + table(("stage", "verdict", "detail", "seconds"), rows, raw=(0, 1, 2, 3)),
        [f"- {name}: {_stage_word(facts[name], word)}" for name, word in stages.items()],
        verdict.passed,
        verdict.status,
    )
    sections = [overview]
    if "cold_start" in facts:
        from servecheck.report.coldstart_html import cold_start_section

        sections.append(cold_start_section(facts["cold_start"]))
    if (run_dir / "conformance").is_dir():
        sections.append(conformance_section(run_dir / "conformance"))
    if (run_dir / "load").is_dir():
        sections.append(load_section(run_dir / "load", "Smoke load"))
    return write_page(
        run_dir,
        f"servecheck accept: {data.get('target')}",
        sections,
        verdict=verdict,
        subtitle=str(run_dir.name),
    )


def _stage_word(stage: dict[str, object], word: str) -> str:
    """A stage's word in summary.md: as the console's stage line says it, or INTERRUPTED."""
    return "INTERRUPTED" if stage.get("interrupted") else _STAGE_WORD.get(word, word.upper())


__all__ = ["write_accept_html"]
