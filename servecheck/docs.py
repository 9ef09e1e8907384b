"""Regenerate the generated docs: ``python -m servecheck.docs`` (or ``make docs``).

docs/checks.md (the check catalogue), docs/coverage.md's invariant x variant grid and
docs/targets.schema.json (targets.yaml schema for
editors) come from the code, and so do the conformance suites' thin files, one per surface of
``SURFACES`` (``servecheck/suites/test_<surface>.py`` and the checkout's ``suites/`` shim that
imports it); tests/test_docs.py fails when they are stale.
"""

from __future__ import annotations

import json
from pathlib import Path

from servecheck.checks.grid import splice_grid
from servecheck.checks.registry import SURFACES, catalogue_markdown, suite_file
from servecheck.config import targets_json_schema

ROOT = Path(__file__).resolve().parent.parent


def generated() -> dict[Path, str]:
    return {
        ROOT / "docs" / "checks.md": catalogue_markdown(),
        # only the invariant x variant grid of coverage.md is generated; the rest is by hand
        ROOT / "docs" / "coverage.md": splice_grid((ROOT / "docs" / "coverage.md").read_text()),
        ROOT / "docs" / "targets.schema.json": json.dumps(targets_json_schema(), indent=2) + "\n",
        ROOT / "servecheck" / "config" / "builtin_targets.yaml": builtin_targets(),
        **suite_files(),
    }


BUILTIN_HEADER = """\
# The targets file servecheck uses where there is no ./targets.yaml and none was named
# (--targets-file, SERVECHECK_TARGETS_FILE), so that an installed servecheck works in an empty
# folder: the embedded reference, and the local engines `servecheck engine up NAME` starts, with
# their known failures (`engine up vllm` then `check --target local-vllm`).
# GENERATED from the repository's targets.yaml by `python -m servecheck.docs`: edit that file.
"""


def builtin_targets() -> str:
    """The packaged targets file: the checkout's targets.yaml under its own header, so the
    targets CI judges the engines with are the ones an installed servecheck ships."""
    text = (ROOT / "targets.yaml").read_text()
    body = text.split("\n", 3)[3]  # after the checkout file's three header lines
    return BUILTIN_HEADER + body


def suite_files() -> dict[Path, str]:
    """Each surface's packaged suite module and its checkout shim (the plugin parametrises
    ``test_conformance`` over the ``SURFACE`` a module names)."""
    out: dict[Path, str] = {}
    for surface in SURFACES:
        name = suite_file(surface)
        out[ROOT / "servecheck" / "suites" / name] = _suite_text(surface)
        out[ROOT / "suites" / name] = _shim_text(surface, name.removesuffix(".py"))
    return out


def _suite_text(surface: str) -> str:
    return (
        f'"""{surface}-* conformance checks (see docs/checks.md). The checks live in '
        'servecheck/checks/surfaces/."""\n'
        "\n"
        "from servecheck.checks import run_with_allowances\n"
        "\n"
        f'SURFACE = "{surface}"\n'
        "\n"
        "\n"
        "def test_conformance(sc_case, sc_ctx):\n"
        "    run_with_allowances(sc_case.check, sc_ctx)\n"
    )


def _shim_text(surface: str, stem: str) -> str:
    return (
        f'"""{surface}-* checks from a checkout: `pytest suites/{stem}.py --target NAME`.\n'
        "\n"
        f"The suite ships inside the package (servecheck/suites/{stem}.py; `pytest --pyargs\n"
        "servecheck.suites` runs it anywhere); this file only imports it.\n"
        '"""\n'
        "\n"
        f"from servecheck.suites.{stem} import *  # noqa: F403\n"
    )


def main() -> None:
    for path, text in generated().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
