"""Regenerate the generated docs: ``python -m servecheck.docs`` (or ``make docs``).

docs/checks.md (the check catalogue) and docs/targets.schema.json (targets.yaml schema for
editors) come from the code; tests/test_docs.py fails when they are stale.
"""

from __future__ import annotations

import json
from pathlib import Path

from servecheck.checks.registry import catalogue_markdown
from servecheck.config import targets_json_schema

ROOT = Path(__file__).resolve().parent.parent


def generated() -> dict[Path, str]:
    return {
        ROOT / "docs" / "checks.md": catalogue_markdown(),
        ROOT / "docs" / "targets.schema.json": json.dumps(targets_json_schema(), indent=2) + "\n",
    }


def main() -> None:
    for path, text in generated().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
