"""The shape of ``servecheck/reference/``: its modules import ``http.py`` for what they share,
never each other in a circle; no function there is 120 lines or longer; no argparse (the
reference server's command line is parsed in ``servecheck/commands/reference_server.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import servecheck.reference

PACKAGE = Path(servecheck.reference.__file__).parent
PREFIX = "servecheck.reference."


def _trees() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.glob("*.py"))}


def _imported(tree: ast.Module) -> set[str]:
    """Sibling modules a module imports anywhere (top level, in functions, under TYPE_CHECKING)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "servecheck.reference":
                out |= {alias.name for alias in node.names}
            elif node.module.startswith(PREFIX):
                out.add(node.module.removeprefix(PREFIX).split(".")[0])
        elif isinstance(node, ast.Import):
            out |= {
                a.name.removeprefix(PREFIX).split(".")[0]
                for a in node.names
                if a.name.startswith(PREFIX)
            }
    return out


def test_no_import_circle_inside_reference() -> None:
    trees = _trees()
    graph = {name: _imported(tree) & set(trees) for name, tree in trees.items()}
    circles: list[list[str]] = []

    def walk(node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt in path:
                circles.append([*path[path.index(nxt) :], nxt])
            elif len(path) < len(graph):
                walk(nxt, [*path, nxt])

    for start in graph:
        walk(start, [start])
    assert not circles, "import circles in servecheck/reference/: " + "; ".join(
        " -> ".join(c) for c in circles[:5]
    )


def test_shared_helpers_come_from_http_not_server() -> None:
    users = sorted(
        n for n, tree in _trees().items() if n != "inprocess" and "server" in _imported(tree)
    )
    assert users == [], f"{users} import server.py (its shared helpers live in http.py)"


def test_no_function_reaches_120_lines() -> None:
    long = [
        f"{name}.py:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for name, tree in _trees().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 >= 120
    ]
    assert long == [], f"functions of 120 lines or more: {long}"


def test_no_argparse_in_reference() -> None:
    users = sorted(
        n
        for n, tree in _trees().items()
        if "argparse"
        in {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
        | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    )
    assert users == [], f"{users} import argparse: parse the command line in servecheck/commands/"


def test_stream_fault_table_names_real_faults() -> None:
    from servecheck.reference.faults import FAULTS
    from servecheck.reference.stream_faults import STREAM_FAULTS, StreamHooks, stream_hooks

    assert set(STREAM_FAULTS) <= set(FAULTS), set(STREAM_FAULTS) - set(FAULTS)
    assert stream_hooks(frozenset()) == StreamHooks()
    assert stream_hooks(frozenset({"stream-buffered", "stream-block-buffered"})).hold == "all"
