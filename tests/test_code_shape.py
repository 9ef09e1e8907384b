"""The shape of the code stays reviewable: a complexity budget, not a length ceiling.

A line ceiling became a target (three functions sat at exactly 119 of 120 lines); mccabe
complexity says what the ceiling was for. ``scripts/complexity.py`` runs ruff's C901 over
servecheck/ with the budget and the allow-list of pyproject.toml ``[tool.servecheck.complexity]``;
``make lint`` runs the same script.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("complexity", ROOT / "scripts" / "complexity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("complexity", module)
    spec.loader.exec_module(module)
    return module


def test_every_function_is_within_the_budget_or_allow_listed() -> None:
    c = _script()
    b = c.budget()
    found = c.over_budget(b.max)
    assert found, "ruff reported no function at all: is C901 running?"
    lines = c.problems(b.max, b.allow, found)
    assert not lines, "\n".join(lines)


def test_the_budget_catches_a_new_complex_function_and_a_stale_entry(tmp_path: Path) -> None:
    c = _script()
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(14))
    (tmp_path / "m.py").write_text(
        f"def tangled(x):\n{branches}    return -1\n\ndef flat():\n    return 0\n"
    )
    found = c.over_budget(12, (str(tmp_path / "m.py"),))
    ((key, message),) = found.items()
    assert key.endswith("m.py::tangled") and "15 > 12" in message, found
    new = c.problems(12, frozenset(), found)
    assert new[0].startswith("over the complexity budget (12)") and "tangled" in new[1], new
    stale = c.problems(12, frozenset({key, "servecheck/x.py::gone"}), found)
    assert stale == [
        "allow-list entries to remove (pyproject.toml [tool.servecheck.complexity]):",
        "  servecheck/x.py::gone: within the budget now; take it off the allow-list",
    ], stale


def test_the_allow_list_is_sorted_and_the_budget_strict() -> None:
    b = _script().budget()
    allow = sorted(b.allow)
    assert b.max <= 12, b.max
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    listed = [
        line.strip().strip('",')
        for line in text.split("allow = [", 1)[1].split("]", 1)[0].splitlines()
        if line.strip()
    ]
    assert listed == allow, "keep pyproject's allow-list sorted, one entry a line"


def test_pages_are_made_in_report_only() -> None:
    """What a person reads is formatted in report/ (and commands/): no HTML in the rooms that
    run, measure or analyse (issue 40: load/ held steady_html and the live page)."""
    tag = re.compile(r"<(html|table|div|td|th|tr|svg|h[1-6]|p|ul|li|span)[ >]", re.I)
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("load", "analysis", "probes", "records")
        for path in sorted((ROOT / "servecheck" / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if tag.search(line)
    ]
    assert not found, "HTML outside report/: " + ", ".join(found)


# The names a console formatter goes by, and the ones in the measuring rooms that are not console
# text, each with why. The list only shrinks: a new one moves to report/ (issue 40), or, when it
# is data (a verdict's reason stored in JSON, a file's lines), is named here with its reason.
_FORMATTER = re.compile(r"^_?(format_\w+|\w+_lines?|lines?)$")
_NOT_CONSOLE = {
    # the records' JSON lines: a file format
    "records/parquet.py:_sample_lines": "keeps a sample of the worker files' lines",
    "records/record.py:RequestRecord.dict_and_line": "a record and its JSON line",
    "records/record.py:RecordWriter.write_line": "writes one JSON line",
    "records/record.py:iter_lines": "reads a JSON lines file",
    "load/summary.py:_complete_lines": "counts a file's lines",
    # data: the text is stored in a run's JSON (a reason, a stage's detail) or JUnit file
    "analysis/slo.py:Verdict.line": "an SLO verdict's reason and JUnit message",
    "probes/abandon.py:ProbeResult.line": "the probe-only verdict's reason in soak.json",
    "probes/coldstart.py:ColdStart.line": "the cold_start stage's detail in accept.json",
    # console text still in load/ (load/progress.py, moved out of load/run.py), for its own move
    "load/progress.py:RecordTail.line": "the load run's progress line",
}


def _defs(tree: ast.AST, prefix: str = "") -> list[str]:
    """Qualified names of the functions and methods defined in ``tree`` (not nested ones)."""
    names: list[str] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.append(prefix + node.name)
        elif isinstance(node, ast.ClassDef):
            names += _defs(node, f"{prefix}{node.name}.")
    return names


def test_console_text_is_formatted_in_report_only() -> None:
    """No ``format_*``, ``*_line(s)`` or ``line(s)`` in the rooms that run, measure or analyse
    (issue 40: soak's cycle and verdict lines lived in load/soak.py); data named in the list."""
    package = ROOT / "servecheck"
    seen = {
        f"{path.relative_to(package).as_posix()}:{name}"
        for folder in ("load", "analysis", "probes", "records")
        for path in sorted((package / folder).rglob("*.py"))
        for name in _defs(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if _FORMATTER.match(name.rpartition(".")[2])
    }
    assert not seen - set(_NOT_CONSOLE), (
        "console text formatted outside report/ (move it there, or name it in _NOT_CONSOLE "
        f"with why it is data): {sorted(seen - set(_NOT_CONSOLE))}"
    )
    assert not set(_NOT_CONSOLE) - seen, (
        f"gone, take them off _NOT_CONSOLE: {sorted(set(_NOT_CONSOLE) - seen)}"
    )
