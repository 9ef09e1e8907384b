"""Parse at the edge: only the command layer (``servecheck/cli.py``, ``servecheck/commands/``)
knows argparse; the library takes typed specs and keywords (ARCHITECTURE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import servecheck

ROOT = Path(servecheck.__file__).resolve().parent
EDGE = ("cli.py", "commands/")
# Not yet at the edge, each for a reason (remove the entry when it moves):
PENDING: dict[str, str] = {}


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


def test_pending_exemptions_are_still_needed() -> None:
    """An exemption that no longer matches a file that imports argparse is stale: delete it."""
    stale = []
    for prefix, why in PENDING.items():
        paths = [ROOT / prefix] if prefix.endswith(".py") else sorted((ROOT / prefix).rglob("*.py"))
        if not any("argparse" in p.read_text(encoding="utf-8") for p in paths if p.is_file()):
            stale.append(f"{prefix} ({why})")
    assert not stale, f"no longer uses argparse: remove from PENDING: {', '.join(stale)}"
