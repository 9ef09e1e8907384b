"""The conformance page's surface x target matrix (issue 30, part 2): one row a surface (the
check id's prefix: STREAM, TOOLS ...), one column a target / model, each cell coloured by the
worst outcome in it (fail, then non-strict, then pass; only skips and known failures: grey)
and holding its counts. Plain HTML and CSS, so it needs no script and no network, and reads
at a glance in any browser; the counts are text, so it prints and greps too.

Built from ``results.jsonl`` rows (the pytest plugin's: ``check``, ``target``, ``model``,
``outcome``); a page without rows gets no matrix and the line that says why.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from servecheck.redact import redact

MATRIX_CLASS = "sc-matrix"
FAILING = ("failed", "error", "xpassed")
PASSING = ("passed",)
QUIET = ("skipped", "xfailed", "notrun")
STATES = ("fail", "nonstrict", "pass", "skip")
STATE_COLOURS = {"fail": "#cf222e", "nonstrict": "#bf8700", "pass": "#1a7f37", "skip": "#d0d7de"}
STATE_LABELS = {
    "fail": "fails (failed, error or unexpectedly passed)",
    "nonstrict": "non-strict (a legal deviation or a schema finding), none failing",
    "pass": "passes, none failing or non-strict",
    "skip": "only skipped or known failures",
}
NO_ROWS = "No surface x target matrix: no check results were recorded."
CSS = (
    f".{MATRIX_CLASS} td.cell{{text-align:center;font-variant-numeric:tabular-nums;"
    "min-width:64px;font-size:12px}"
    f".{MATRIX_CLASS} td.fail{{background:{STATE_COLOURS['fail']};color:#fff}}"
    f".{MATRIX_CLASS} td.nonstrict{{background:{STATE_COLOURS['nonstrict']};color:#fff}}"
    f".{MATRIX_CLASS} td.pass{{background:{STATE_COLOURS['pass']};color:#fff}}"
    f".{MATRIX_CLASS} td.skip{{background:{STATE_COLOURS['skip']};color:#1f2328}}"
    f".{MATRIX_CLASS} td.none{{background:#fff;color:#8c959f}}"
    ".sc-key span{display:inline-block;width:12px;height:12px;border-radius:2px;"
    "vertical-align:middle;margin:0 4px 0 10px}"
)


def surface_of(check: str) -> str:
    """A check id's surface: its prefix before the first dash (``STREAM-DONE`` -> ``STREAM``)."""
    return check.split("-", 1)[0]


def state_of(counts: Mapping[str, int]) -> str:
    """The cell's colour: the worst outcome in it."""
    if any(counts.get(o) for o in FAILING):
        return "fail"
    if counts.get("nonstrict"):
        return "nonstrict"
    if any(counts.get(o) for o in PASSING):
        return "pass"
    return "skip"


@dataclass(slots=True)
class Matrix:
    """Rows (surfaces, in the catalogue's order), columns (target, model) and each cell's
    outcome counts."""

    surfaces: list[str] = field(default_factory=list)
    columns: list[tuple[str, str]] = field(default_factory=list)
    cells: dict[tuple[str, tuple[str, str]], dict[str, int]] = field(default_factory=dict)

    def state(self, surface: str, column: tuple[str, str]) -> str | None:
        counts = self.cells.get((surface, column))
        return None if counts is None else state_of(counts)


def _catalogue_order() -> list[str]:
    try:
        from servecheck.checks.registry import SURFACES
    except Exception:  # noqa: BLE001 - the order is a nicety; the matrix must still render
        return []
    return list(SURFACES)


def build_matrix(rows: Iterable[Mapping[str, Any]]) -> Matrix:
    """The matrix of ``results.jsonl`` rows (rows without a check id are left out)."""
    m = Matrix()
    seen: set[str] = set()
    for r in rows:
        check = r.get("check")
        if not isinstance(check, str) or not check:
            continue
        surface = surface_of(check)
        column = (str(r.get("target")), str(r.get("model")))
        seen.add(surface)
        if column not in m.columns:
            m.columns.append(column)
        counts = m.cells.setdefault((surface, column), {})
        outcome = str(r.get("outcome"))
        counts[outcome] = counts.get(outcome, 0) + 1
    order = _catalogue_order()
    m.surfaces = [s for s in order if s in seen] + sorted(seen - set(order))
    m.columns.sort()
    return m


def _cell_text(counts: Mapping[str, int]) -> str:
    bad = sum(counts.get(o, 0) for o in FAILING)
    parts = []
    if bad:
        parts.append(f"✘ {bad}")
    if counts.get("nonstrict"):
        parts.append(f"~ {counts['nonstrict']}")
    if counts.get("passed"):
        parts.append(f"✔ {counts['passed']}")
    quiet = sum(counts.get(o, 0) for o in QUIET)
    if quiet and not parts:
        parts.append(f"– {quiet}")
    return " · ".join(parts)


def _title(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))


def matrix_html(rows: Sequence[Mapping[str, Any]]) -> str:
    """The matrix as a ``<table>`` with its key, or the line that says why there is none."""
    m = build_matrix(rows)
    if not m.surfaces:
        return f"<p class='muted'>{NO_ROWS}</p>"

    def esc(v: Any) -> str:
        return html.escape(redact(str(v)), quote=True)

    head = "".join(
        f"<th>{esc(t)}<br><span class='muted'>{esc(model)}</span></th>" for t, model in m.columns
    )
    body: list[str] = []
    for s in m.surfaces:
        cells = []
        for col in m.columns:
            counts = m.cells.get((s, col))
            if counts is None:
                cells.append("<td class='cell none' title='not run'>·</td>")
            else:
                cells.append(
                    f"<td class='cell {state_of(counts)}' title='{esc(_title(counts))}'>"
                    f"{esc(_cell_text(counts))}</td>"
                )
        body.append(f"<tr><th>{esc(s)}</th>{''.join(cells)}</tr>")
    key = "".join(
        f"<span style='background:{STATE_COLOURS[st]}'></span>{esc(STATE_LABELS[st])}"
        for st in STATES
    )
    return (
        f"<style>{CSS}</style><h3>Surfaces x targets</h3>"
        f"<table class='{MATRIX_CLASS}'><tr><th>surface</th>{head}</tr>{''.join(body)}</table>"
        f"<p class='sc-key muted'>{key}<br>✘ failing, ~ non-strict, ✔ passed, – skipped or known"
        " failures; · not run</p>"
    )


__all__ = ["Matrix", "NO_ROWS", "build_matrix", "matrix_html", "state_of", "surface_of"]
