"""Parse at the edge: only the command layer (``servecheck/cli.py``, ``servecheck/commands/``)
knows argparse; the library takes typed specs and keywords (ARCHITECTURE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import servecheck

ROOT = Path(servecheck.__file__).resolve().parent
EDGE = ("cli.py", "commands/")
# Not yet at the edge, each for a reason (remove the entry when it moves):
PENDING = {
    # another branch takes argparse out of the reference server's own entry point
    "reference/": "the reference server's options move out on their own branch",
    # a maintainer's script (python -m ...) that regenerates docs/engines.md, not a library path
    "report/engine_matrix.py": "the docs generator's own main()",
}


def _argparse_importers() -> list[str]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(EDGE) or rel.startswith(tuple(PENDING)):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n == "argparse" or n.startswith("argparse.") for n in names):
                found.append(f"{rel}:{node.lineno}")
    return found


def test_no_library_module_imports_argparse() -> None:
    found = _argparse_importers()
    assert not found, (
        "library modules import argparse (options belong in servecheck/commands/, "
        f"the library takes a typed spec): {', '.join(found)}"
    )


@pytest.mark.parametrize("prefix", sorted(PENDING), ids=sorted(PENDING))
def test_pending_exemptions_are_still_needed(prefix: str) -> None:
    """An exemption that no longer matches a file that imports argparse is stale: delete it."""
    paths = [ROOT / prefix] if prefix.endswith(".py") else sorted((ROOT / prefix).rglob("*.py"))
    assert any("argparse" in p.read_text(encoding="utf-8") for p in paths if p.is_file()), (
        f"{prefix} no longer uses argparse: remove it from PENDING ({PENDING[prefix]})"
    )
