"""The one-page acceptance report of ``servecheck accept`` (the run:
:mod:`servecheck.workflows.accept`)."""

from __future__ import annotations

from pathlib import Path


def write_accept_html(run_dir: Path) -> Path:
    """The one-page acceptance report: readiness, conformance and smoke load sections."""
    from servecheck.report.html import (
        Section,
        conformance_section,
        esc,
        load_section,
        read_json,
        table,
        verdict_badge,
        write_page,
    )

    data = read_json(run_dir / "accept.json")
    stages = data.get("stages") or {}
    rows = [
        (
            esc(name),
            # a stage an interrupt cut short: not judged, neither a pass nor a failure
            verdict_badge(None, "INTERRUPTED")
            if s.get("interrupted")
            else verdict_badge(s.get("ok")),
            esc(s.get("detail") or s.get("verdict") or f"exit code {s.get('exit_code')}"),
            esc(s.get("seconds")),
        )
        for name, s in stages.items()
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
        [f"- {name}: {_stage_word(s)}" for name, s in stages.items()],
        None if partial else data.get("ok"),
    )
    sections = [overview]
    if "cold_start" in stages:
        from servecheck.report.coldstart_html import cold_start_section

        sections.append(cold_start_section(stages["cold_start"]))
    if (run_dir / "conformance").is_dir():
        sections.append(conformance_section(run_dir / "conformance"))
    if (run_dir / "load").is_dir():
        sections.append(load_section(run_dir / "load", "Smoke load"))
    return write_page(
        run_dir,
        f"servecheck accept: {data.get('target')}",
        sections,
        # one verdict on the page: an interrupted run is neither PASS nor FAIL (the flag says so)
        ok=None if partial else data.get("ok"),
        subtitle=str(run_dir.name),
    )


def _stage_word(stage: dict[str, object]) -> str:
    if stage.get("interrupted"):
        return "INTERRUPTED"
    return "ok" if stage.get("ok") else "FAILED"


__all__ = ["write_accept_html"]
