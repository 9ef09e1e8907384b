"""The complexity budget: ruff's C901 (mccabe) over servecheck/, against an allow-list that
may only shrink.

The budget and the allow-list live in pyproject.toml (``[tool.servecheck.complexity]``): ``max``
is the mccabe complexity a function may have, ``allow`` the functions (``path::name``) that are
over it today. A function over the budget that is not listed fails; so does a listed function
that is no longer over it (take it off the list: the list only shrinks). ``make lint`` runs
this; ``tests/test_code_shape.py`` runs it in CI.

    python scripts/complexity.py          # exit 1 and the findings, or exit 0
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class Budget:
    max: int
    allow: frozenset[str]


def budget(pyproject: Path = ROOT / "pyproject.toml") -> Budget:
    table = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["servecheck"]["complexity"]
    return Budget(int(table["max"]), frozenset(table["allow"]))


def over_budget(limit: int, paths: tuple[str, ...] = ("servecheck",)) -> dict[str, str]:
    """``path::function`` -> ruff's message, for each function over ``limit``."""
    ruff = Path(sys.executable).with_name("ruff")
    cmd = [str(ruff) if ruff.exists() else "ruff", "check", "--isolated", "--select", "C901"]
    cmd += ["--config", f"lint.mccabe.max-complexity={limit}", "--output-format", "json", *paths]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode not in (0, 1):
        raise RuntimeError(f"ruff failed ({out.returncode}): {out.stderr.strip()}")
    found: dict[str, str] = {}
    for item in json.loads(out.stdout or "[]"):
        path = Path(item["filename"]).resolve()
        path = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.as_posix()
        name = item["message"].split("`")[1]
        found[f"{path}::{name}"] = item["message"]
    return found


def problems(limit: int, allow: frozenset[str], found: dict[str, str]) -> list[str]:
    new = [f"{key}: {found[key]}" for key in sorted(set(found) - allow)]
    done = [
        f"{key}: within the budget now; take it off the allow-list"
        for key in sorted(allow - set(found))
    ]
    lines = []
    if new:
        lines.append(f"over the complexity budget ({limit}); split it into named steps:")
        lines += [f"  {line}" for line in new]
    if done:
        lines.append("allow-list entries to remove (pyproject.toml [tool.servecheck.complexity]):")
        lines += [f"  {line}" for line in done]
    return lines


def main() -> int:
    b = budget()
    lines = problems(b.max, b.allow, over_budget(b.max))
    print(
        "\n".join(lines)
        or f"complexity: every function within {b.max} or allow-listed ({len(b.allow)})"
    )
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
