"""The import graph of ``servecheck/`` has no circle but the check registry's self-registration.

Every ``import`` and ``from ... import`` in every module counts, at module level or inside a
function (a function-level import that closes a circle is still a circle: it only moves the
failure from import time to call time). Imports under ``if TYPE_CHECKING:`` never run and are
left out. A ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to
``pkg``.

The one circle allowed: ``checks/registry.py`` imports ``checks/surfaces/`` so that the surface
modules register their checks with the decorator they import from the registry.
"""

from __future__ import annotations

import ast
import graphlib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "servecheck"
ALLOWED = ("servecheck.checks.registry", "servecheck.checks.surfaces")  # importer, imported prefix
# Circles another branch of issue 23 cuts (reference/http.py takes server.py's shared helpers and
# STATE): (importer, imported) edges left out until it lands. Empty this when it has.
PENDING: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import node, skipping the bodies of ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _resolve(name: str, modules: set[str]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in paths.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                hit = _resolve(target, modules)
                if hit is not None and hit != mod:
                    graph[mod].add(hit)
    return graph


def _allowed(importer: str, imported: str) -> bool:
    return importer == ALLOWED[0] and (
        imported == ALLOWED[1] or imported.startswith(ALLOWED[1] + ".")
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Circles, each as ``[a, b, ..., a]`` where each module imports the next: graphlib names
    one; its last edge is cut and the graph searched again, until none is left."""
    found: list[list[str]] = []
    edges = {m: set(deps) for m, deps in graph.items()}
    while True:
        try:
            graphlib.TopologicalSorter(edges).prepare()
        except graphlib.CycleError as exc:
            # graphlib lists each node before the one that depends on (imports) it
            circle: list[str] = list(reversed(exc.args[1]))
            found.append(circle)
            edges[circle[0]].discard(circle[1])
            continue
        return found


def test_the_graph_sees_function_level_imports() -> None:
    graph = import_graph()
    # checks/registry.py imports the surfaces inside a function: the allowed circle exists.
    assert "servecheck.checks.surfaces" in graph["servecheck.checks.registry"], graph[
        "servecheck.checks.registry"
    ]


def test_no_import_circle_but_the_registry_self_registration() -> None:
    graph = import_graph()
    for importer, deps in graph.items():
        graph[importer] = {
            d for d in deps if not _allowed(importer, d) and (importer, d) not in PENDING
        }
    found = [" imports ".join(c) for c in cycles(graph)]
    assert not found, "import circles in servecheck/:\n" + "\n".join(found)


def test_the_walk_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    (circle,) = cycles(graph)
    assert len(circle) == 4 and circle[0] == circle[-1], circle
    assert all(circle[i + 1] in graph[circle[i]] for i in range(3)), circle


# Rooms by job (issue 40): what the generator and the analysis share is the record, so the record
# imports neither, and the analysis never reaches back into the load run. The one exception is the
# workload's pure duration and share helpers (``parse_duration``, ``split_count``).
DOWNWARD = {
    "servecheck.records": ("servecheck.load", "servecheck.analysis", "servecheck.probes"),
    "servecheck.analysis": ("servecheck.load", "servecheck.probes", "servecheck.report"),
}
DOWNWARD_EXCEPTIONS = {"servecheck.load.workload.schedule"}


def test_records_and_analysis_never_import_the_run() -> None:
    graph = import_graph()
    found = [
        f"{importer} imports {dep}"
        for importer, deps in sorted(graph.items())
        for room, banned in DOWNWARD.items()
        if importer == room or importer.startswith(room + ".")
        for dep in sorted(deps)
        if dep.startswith(banned) and dep not in DOWNWARD_EXCEPTIONS
    ]
    assert not found, "\n".join(found)
