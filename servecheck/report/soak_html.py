"""The soak report: ``soak.json``, ``soak.png`` and ``report.html`` of a soak run, and the
``--probe-only`` run's ``soak.json`` and ``probe.png`` (the runs are in
:mod:`servecheck.load.soak`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servecheck.load.soak import ProbeOnlyResult, SoakResult
    from servecheck.report.html import Section
    from servecheck.telemetry import LeakVerdict


def write_soak_report(result: SoakResult) -> Path:
    """soak.json, soak.png and report.html (the figure inline as SVG) plus summary.md; returns
    the page's path."""
    from servecheck.analysis.verdict import RunVerdict
    from servecheck.records.parquet import records_file
    from servecheck.records.record import to_dataframe
    from servecheck.report import svg
    from servecheck.report.html import Section, esc, fmt, status_badge, table, write_page
    from servecheck.report.output import write_json
    from servecheck.telemetry import timeseries_figure

    run_dir, data, frame, phases = result.run_dir, result.data, result.frame, result.phases
    verdict = RunVerdict.of_summary(data)  # the page's one verdict, as soak.json has it
    verdicts, drain = result.leak, result.drain
    assert phases is not None and frame is not None, "write_soak_report needs run_soak's result"
    path = records_file(run_dir)  # soak writes records.jsonl; a compacted folder has .parquet
    records = to_dataframe(path if path is not None else [])
    write_json(run_dir / "soak.json", data)
    ok_records = records[records["ok"]] if len(records) else None
    title = f"soak {data['target']}: {len(phases.cycles)} cycles"
    try:
        # One figure for both files (what plot_timeseries does, without building it twice).
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        fig = timeseries_figure(frame, phases=phases, records=ok_records, title=title)
        FigureCanvasAgg(fig)
        fig.savefig(run_dir / "soak.png")
        figure = svg.to_svg(fig)
    except Exception as exc:  # noqa: BLE001 - a plot must not cost the verdicts
        figure = f"<p class='muted'>no plot: {esc(type(exc).__name__)}: {esc(exc)}</p>"
    lines = [(m, v.status, v.message) for m, v in verdicts.items()]
    if drain is not None:
        lines.append(("drain", drain.status, drain.message))
    lines = _hung_and_flush(data) + lines
    rows = [(esc(m), status_badge(s), esc(msg)) for m, s, msg in lines]
    head = table(("metric", "verdict", "numbers"), rows, raw=(0, 1, 2))
    md = [f"- **{m}** {s}: {msg}" for m, s, msg in lines]
    mixed = len(data.get("members") or []) > 1  # a mix: each cycle's row names its member
    cyc_rows = [
        (
            f"{c['index']} {c['member']}" if mixed else str(c["index"]),
            str(c["requests"]),
            str(c["ok"]),
            str(c["failed"]),
            str(c["abandoned"]),
            fmt(None if c["ttft_p50"] is None else c["ttft_p50"] * 1000),
            fmt(None if c["e2e_p50"] is None else c["e2e_p50"] * 1000),
        )
        for c in data["cycles"]
    ]
    cyc = table(
        ("cycle", "requests", "ok", "failed", "dropped", "TTFT p50 ms", "E2E p50 ms"),
        cyc_rows,
        numeric=range(1, 7),
    )
    legend = (
        "<p class='muted'>grey: idle baseline; orange: load; blue: drain window measured. "
        "Files: soak.json, records.jsonl, telemetry/*.jsonl, soak.png.</p>"
    )
    sections = [
        Section("Verdicts", head, md, verdict.passed, verdict.status),
        Section("Telemetry", figure + legend, _telemetry_md(verdicts)),
        Section("Cycles", cyc, _cycles_md(cyc_rows)),
    ]
    members = data.get("members") or []
    if len(members) > 1:  # a mix: each member's cycles, counts and share of each metric
        sections.insert(1, _members_section(members))
    return write_page(
        run_dir,
        f"servecheck soak: {data['target']}",
        sections,
        verdict=verdict,
        subtitle=run_dir.name,
    )


def _members_section(members: Sequence[Mapping[str, Any]]) -> Section:
    """The Members section of a mix: one row a member (its cycles and requests) and its share
    of each judged metric (soak_text.member_lines, the console's words)."""
    from servecheck.report.html import Section, esc, table
    from servecheck.report.soak_text import member_lines

    head = ("member", "cycles", "requests", "ok", "failed", "refused (4xx)", "dropped")
    keys = ("requests", "ok", "failed", "refused", "abandoned")
    rows = [(esc(m["member"]), str(len(m["cycles"])), *(str(m[k]) for k in keys)) for m in members]
    lines = member_lines(members)
    body = table(head, rows, numeric=range(1, 7)) + "".join(f"<p>{esc(line)}</p>" for line in lines)
    md = [
        "| " + " | ".join(head) + " |",
        "|" + " --- |" * len(head),
        *("| " + " | ".join(r) + " |" for r in rows),
        "",
        *(f"- {line}" for line in lines),
    ]
    return Section("Members", body, md)


def _hung_and_flush(data: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """The verdict rows of soak.json's ``hung`` (the finding that stopped the soak, with the
    counts behind it) and ``cache_flush`` (the flush before each drain, or why there was none)."""
    rows: list[tuple[str, str, str]] = []
    hung = data.get("hung")
    if hung:
        engine, streams = hung.get("engine") or {}, hung.get("streams") or {}
        numbers = (
            f"running {engine.get('requests_running')}, generated tokens "
            f"{engine.get('generation_tokens_total')}, open streams {streams.get('open')}"
        )
        rows.append(("hung but healthy", "fail", f"{hung['line']} ({numbers})"))
    flush = data.get("cache_flush") or {}
    if flush.get("note"):
        rows.append(("cache flush", "inconclusive", str(flush["note"])))
    elif flush.get("endpoint"):
        rows.append(
            (
                "cache flush",
                "ok",
                f"POST {flush['endpoint']} before each drain ({flush['flushed']} times)",
            )
        )
    return rows


def _telemetry_md(verdicts: Mapping[str, LeakVerdict]) -> list[str]:
    """summary.md's Telemetry: each judged series' baseline, post-drain levels and trend (the
    figure itself is soak.png)."""
    from servecheck.telemetry.leak import fmt_value

    lines = []
    for metric, v in verdicts.items():
        if v.baseline is None:
            lines.append(f"- {metric}: no baseline ({v.status})")
            continue
        f = lambda x, m=metric: fmt_value(x, m)  # noqa: E731
        levels = ", ".join(f(x) for x in v.post_drain) or "none"
        trend = ""
        if v.slope is not None and v.slope_ci is not None and v.mk_p is not None:
            low, high = v.slope_ci
            trend = f"; slope {f(v.slope)}/cycle [{f(low)}, {f(high)}], p={v.mk_p:.3g}"
        lines.append(
            f"- {metric}: baseline {f(v.baseline)}, post-drain {levels} "
            f"(tolerance {f(v.tolerance)}, noise floor {f(v.floor or 0.0)}){trend}"
        )
    return [*lines, "", "Figure: soak.png (telemetry/*.jsonl holds the samples)."]


def _cycles_md(rows: Sequence[Sequence[str]]) -> list[str]:
    """summary.md's Cycles: the page's cycle table as a Markdown table."""
    head = "| cycle | requests | ok | failed | dropped | TTFT p50 ms | E2E p50 ms |"
    return [head, "|" + " --- |" * 7, *("| " + " | ".join(r) + " |" for r in rows)]


def write_probe_report(result: ProbeOnlyResult, say: Callable[[str], None] | None = None) -> Path:
    """``--probe-only``: soak.json (``kind: "abandon-probe"``) and probe.png; returns soak.json."""
    from servecheck.report.output import write_json
    from servecheck.telemetry import Phases, plot_timeseries

    path = write_json(result.run_dir / "soak.json", result.data)
    try:
        plot_timeseries(
            result.frame,
            result.run_dir / "probe.png",
            phases=Phases(result.baseline, []),
            title=f"abandoned-stream probe {result.data['target']}",
        )
    except Exception as exc:  # noqa: BLE001 - a plot must not cost the verdict
        if say is not None:
            say(f"(no plot: {type(exc).__name__}: {exc})")
    return path


__all__ = ["write_probe_report", "write_soak_report"]
