"""docs/coverage.md cannot make a false claim about the catalogue.

The tables map every case of the engines' own OpenAI-compatibility suites (and the Open Responses
compliance suite) to a disposition. A `covered` or `new` row must name checks that exist, an `n/a`
row must say why, nothing else is a disposition, every check id any row names exists, and the
summary's counts are the tables' own.
"""

from __future__ import annotations

import re

from servecheck.checks import load_all
from servecheck.docs import ROOT

DOC = ROOT / "docs" / "coverage.md"
DISPOSITIONS = ("covered", "new", "covered + new", "n/a")
CHECK_ID = re.compile(r"`([A-Z]+(?:-[A-Z0-9]+)+)`")
TABLE_HEADER = ["case", "source file", "disposition", "check / reason"]
SUMMARY_HEADER = ["source", "rows", *DISPOSITIONS[:3], "n/a", "of n/a: not built"]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _tables(header: list[str]) -> list[tuple[str, int, list[str]]]:
    """(section heading, line number, cells) of every row of the tables with this header."""
    rows, section, inside = [], "", False
    for number, line in enumerate(DOC.read_text().splitlines(), 1):
        if line.startswith("## "):
            section = line[3:].strip()
        if not line.startswith("|"):
            inside = False
            continue
        cells = _cells(line)
        if cells == header:
            inside = True
        elif inside and not set(line.replace("|", "").strip()) <= {"-", " ", ":"}:
            rows.append((section, number, cells))
    return rows


def test_every_row_has_a_disposition_and_a_source():
    rows = _tables(TABLE_HEADER)
    assert len(rows) > 1000, "docs/coverage.md lost its tables"
    bad = [
        f"line {n}: {cells[:3]}"
        for _, n, cells in rows
        if len(cells) != 4
        or cells[2] not in DISPOSITIONS
        or not cells[0]
        or not cells[1]
        or not cells[3]
    ]
    assert not bad, (
        "rows without a case, a source, a disposition from {covered, new, covered + new, n/a} or a reason:\n"
        + "\n".join(bad)
    )


def test_named_checks_exist():
    checks = load_all()
    missing = []
    for _, n, cells in _tables(TABLE_HEADER):
        ids = CHECK_ID.findall(cells[3])
        if cells[2] != "n/a" and not ids:
            missing.append(f"line {n}: {cells[2]} row names no check id: {cells[3]}")
        missing += [f"line {n}: {cid} is not a check" for cid in ids if cid not in checks]
    assert not missing, "\n".join(missing)


def test_summary_counts_the_tables():
    counted: dict[str, list[int]] = {}
    for section, _, cells in _tables(TABLE_HEADER):
        c = counted.setdefault(section, [0] * 6)
        c[0] += 1
        c[1 + DISPOSITIONS.index(cells[2])] += 1
        c[5] += cells[2] == "n/a" and cells[3].startswith("not built:")
    summary = {cells[0]: [int(x) for x in cells[1:]] for _, _, cells in _tables(SUMMARY_HEADER)}
    total = summary.pop("all", None)
    assert summary == counted, f"the summary says {summary}, the tables hold {counted}"
    assert total == [sum(col) for col in zip(*counted.values(), strict=True)], (
        f"the 'all' row {total} is not the sum"
    )
