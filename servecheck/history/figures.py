"""A metric's series over the nights: the console table, an SVG figure (report/svg.py) with its
steps marked, and an HTML page holding both."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servecheck.history.analysis import Step
from servecheck.report.html import Section, esc, write_page
from servecheck.report.svg import PALETTE, new_figure, to_svg


def series_table(rows: Sequence[dict[str, Any]], metric: str, found: Sequence[Step]) -> str:
    """One line a night: night, run, engine version, tag, value, verdict; steps marked."""
    at = {s.index: s for s in found}
    head = f"{'night':<10}  {'run':<24}  {'engine version':<18}  {'tag':<12}  {metric:>12}  verdict"
    lines = [head, "-" * len(head)]
    for i, r in enumerate(rows):
        v = r["metrics"].get(metric)
        mark = "  <- step" if i in at else ""
        lines.append(
            f"{str(r['started_at'])[:10]:<10}  {str(r['run_id'])[:24]:<24}  "
            f"{str(r.get('engine_version') or '-')[:18]:<18}  {str(r.get('tag') or '-')[:12]:<12}  "
            f"{'-' if v is None else format(v, '.4g'):>12}  {r['verdict']}{mark}"
        )
    return "\n".join(lines)


def series_svg(
    title: str, rows: Sequence[dict[str, Any]], metric: str, found: Sequence[Step]
) -> str:
    """The series as points over night number, a dashed line at each step's first night."""
    fig, (ax,) = new_figure(width=7.0, height=3.4)
    pts = [
        (i, r["metrics"][metric])
        for i, r in enumerate(rows)
        if r["metrics"].get(metric) is not None
    ]
    ax.plot(
        [p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, color=PALETTE[0], label=metric
    )
    for s in found:
        ax.axvline(s.index - 0.5, color=PALETTE[1], ls="--", lw=1)
        ax.annotate(
            s.engine_version or s.night,
            (s.index - 0.5, max(s.before, s.after)),
            fontsize=7,
            color=PALETTE[1],
            rotation=90,
            va="top",
        )
    ticks = list(range(len(rows)))
    step = max(1, len(ticks) // 10)
    ax.set_xticks(ticks[::step])
    ax.set_xticklabels([str(rows[i]["started_at"])[5:10] for i in ticks[::step]], fontsize=7)
    ax.set_title(title)
    ax.set_xlabel("night")
    ax.set_ylabel(metric)
    return to_svg(fig)


def write_series(
    out: Path, target: str, rows: Sequence[dict[str, Any]], metric: str, found: Sequence[Step]
) -> tuple[Path, Path]:
    """``<target>-<metric>.svg`` and ``report.html`` in ``out``; returns both paths."""
    out.mkdir(parents=True, exist_ok=True)
    title = f"{target}: {metric} over {len(rows)} nights"
    svg = series_svg(title, rows, metric, found)
    figure = (
        out / f"{''.join(c if c.isalnum() or c in '-_.' else '_' for c in target)}-{metric}.svg"
    )
    figure.write_text(svg + "\n", encoding="utf-8")
    items = "".join(f"<li>{esc(s.line())}</li>" for s in found) or "<li>no step</li>"
    table = esc(series_table(rows, metric, found))
    section = Section(
        "Series",
        f"{svg}<h3>Steps</h3><ul>{items}</ul><pre>{table}</pre>",
        [f"- {s.line()}" for s in found] or ["- no step"],
    )
    page = write_page(out, f"servecheck history: {title}", [section])
    return figure, page
