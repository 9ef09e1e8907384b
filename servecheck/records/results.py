"""What a run folder's JSON files hold, read forgivingly: the conformance outcome vocabulary of
``results.jsonl`` and readers of a JSON object and of JSON lines.

Both the analysis (compare, history) and the reports read run folders; the readers live here,
below both, so that analysis never imports a report module to read a file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# A check that failed, errored or unexpectedly passed; its opposite, one that held (or was
# skipped, non-strict or a known failure). Checks are deterministic: a move from good to bad
# is a regression without statistics (analysis/compare.py, history/analysis.py).
BAD_OUTCOMES = ("failed", "error", "xpassed")
GOOD_OUTCOMES = ("passed", "skipped", "nonstrict", "xfailed")


def read_jsonl(path: Path, limit: int = 2_000_000) -> list[dict[str, Any]]:
    """Rows of a JSONL file; half-written or broken lines are skipped (a killed run keeps the rest)."""
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    with path.open(encoding="utf-8", errors="replace") as fh:
        for i, line in enumerate(fh):
            if i >= limit:
                break
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file's content; ``{}`` when it is missing, broken or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def not_run_phrase(not_run: object) -> str:
    """How an interrupted conformance run's ``not_run`` (summary.json) reads on every page and
    console line: a count, or "unknown" where it is None (cut short before the checks were
    counted, or pytest killed before it wrote its summary), never a made-up 0."""
    if isinstance(not_run, int) and not isinstance(not_run, bool):
        return f"{not_run} check(s) did not run"
    return "the number of checks that did not run is unknown"


__all__ = ["BAD_OUTCOMES", "GOOD_OUTCOMES", "not_run_phrase", "read_json", "read_jsonl"]
