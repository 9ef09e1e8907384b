"""A metric's series over the nights: the console table, an SVG figure (report/svg.py) with its
steps marked, and an HTML page holding both. A night is a date (UTC): the runs of one night are
counted and drawn as that night's, and every run keeps its full id."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servecheck.history.analysis import Step
from servecheck.history.store import runs_per_night
from servecheck.report.html import Section, esc, write_page
from servecheck.report.svg import PALETTE, new_figure, to_svg


def _positions(rows: Sequence[dict[str, Any]]) -> tuple[list[float], list[str]]:
    """Each run's x (its night's number, the runs of one night spread around it) and the
    nights in order: a night is a date, however many runs it holds."""
    per = runs_per_night(rows)
    number = {night: i for i, night in enumerate(per)}
    seen: dict[str, int] = {}
    xs: list[float] = []
    for r in rows:
        night = str(r["started_at"])[:10]
        k, m = seen.get(night, 0), per[night]
        seen[night] = k + 1
        xs.append(number[night] + (0.0 if m == 1 else (k / (m - 1) - 0.5) * 0.6))
    return xs, list(per)


def nights_line(rows: Sequence[dict[str, Any]]) -> str:
    """How many runs over how many nights, and the nights that hold more than one run."""
    per = runs_per_night(rows)
    text = f"{len(rows)} run{'s' * (len(rows) != 1)} over {len(per)} night{'s' * (len(per) != 1)}"
    several = [f"{night}: {n}" for night, n in per.items() if n > 1]
    return text + (f" (runs per night: {', '.join(several)})" if several else "")


def series_table(rows: Sequence[dict[str, Any]], metric: str, found: Sequence[Step]) -> str:
    """One line a run: its night (and its place in it, when the night holds several), the run
    id in full (what a user greps for), engine version, tag, value, verdict; steps marked; then
    how many runs over how many nights."""
    at = {s.index: s for s in found}
    per = runs_per_night(rows)
    cells = []
    seen: dict[str, int] = {}
    for r in rows:
        night = str(r["started_at"])[:10]
        seen[night] = seen.get(night, 0) + 1
        place = f"{seen[night]}/{per[night]}" if per[night] > 1 else ""
        cells.append(
            (
                night,
                place,
                str(r["run_id"]),
                str(r.get("engine_version") or "-"),
                str(r.get("tag") or "-"),
            )
        )
    wide = [max([len(h), *(len(c[k]) for c in cells)]) for k, h in enumerate(_HEAD)]
    head = "  ".join(f"{h:<{w}}" for h, w in zip(_HEAD, wide, strict=True))
    head += f"  {metric:>12}  verdict"
    lines = [head, "-" * len(head)]
    for i, (r, c) in enumerate(zip(rows, cells, strict=True)):
        v = r["metrics"].get(metric)
        mark = "  <- step" if i in at else ""
        lines.append(
            "  ".join(f"{x:<{w}}" for x, w in zip(c, wide, strict=True))
            + f"  {'-' if v is None else format(v, '.4g'):>12}  {r['verdict']}{mark}"
        )
    lines.append(nights_line(rows))
    return "\n".join(lines)


_HEAD = ("night", "#", "run", "engine version", "tag")


def series_svg(
    title: str, rows: Sequence[dict[str, Any]], metric: str, found: Sequence[Step]
) -> str:
    """The series as points over the nights (runs of one night side by side at its date), a
    dashed line before each step's first run."""
    fig, (ax,) = new_figure(width=7.0, height=3.4)
    xs, nights = _positions(rows)
    pts = [
        (xs[i], r["metrics"][metric])
        for i, r in enumerate(rows)
        if r["metrics"].get(metric) is not None
    ]
    ax.plot(
        [p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, color=PALETTE[0], label=metric
    )
    for s in found:
        x = (xs[s.index - 1] + xs[s.index]) / 2.0 if s.index > 0 else xs[0] - 0.5
        ax.axvline(x, color=PALETTE[1], ls="--", lw=1)
        ax.annotate(
            s.engine_version or s.night,
            (x, max(s.before, s.after)),
            fontsize=7,
            color=PALETTE[1],
            rotation=90,
            va="top",
        )
    ticks = list(range(len(nights)))
    step = max(1, len(ticks) // 10)
    ax.set_xticks(ticks[::step])
    ax.set_xticklabels([nights[i][5:10] for i in ticks[::step]], fontsize=7)
    ax.set_title(title)
    ax.set_xlabel("night")
    ax.set_ylabel(metric)
    return to_svg(fig)


def write_series(
    out: Path, target: str, rows: Sequence[dict[str, Any]], metric: str, found: Sequence[Step]
) -> tuple[Path, Path]:
    """``<target>-<metric>.svg`` and ``report.html`` in ``out``; returns both paths."""
    out.mkdir(parents=True, exist_ok=True)
    title = f"{target}: {metric}, {nights_line(rows)}"
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
