"""Docs that cannot rot: generated files match the code, README commands exist."""

from __future__ import annotations

import re

from servecheck.cli import COMMANDS
from servecheck.docs import ROOT, generated


def test_generated_docs_are_current():
    stale = [
        str(p.relative_to(ROOT))
        for p, text in generated().items()
        if not p.exists() or p.read_text() != text
    ]
    assert not stale, f"regenerate with `make docs` (python -m servecheck.docs): {stale}"


def test_readme_commands_exist():
    readme = (ROOT / "README.md").read_text()
    for name in re.findall(r"servecheck ([a-z][a-z-]+)", readme):
        assert name in COMMANDS, f"README mentions `servecheck {name}`, which is not a command"
    makefile = (ROOT / "Makefile").read_text()
    for target in re.findall(r"make ([a-z][a-z-]+)", readme):
        assert re.search(rf"^{target}:", makefile, re.M), (
            f"README mentions `make {target}`, not in the Makefile"
        )


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme
    assert re.search(r"^\s*make test\b", ci, re.M), ".ci/run must run the README's test command"


def test_architecture_names_every_package():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    for package in sorted(
        p.name
        for p in (ROOT / "servecheck").iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
    ):
        assert f"servecheck/{package}/" in text, (
            f"ARCHITECTURE.md does not place servecheck/{package}/"
        )


def test_layering_rules_hold():
    """The library never imports suites/scenarios; only the adapters import pytest or locust."""
    pkg = ROOT / "servecheck"
    for path in pkg.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text()
        assert not re.search(r"^\s*(from|import) (suites|scenarios|loadtests)\b", text, re.M), rel
        # The packaged suites and locustfiles are run by pytest and Locust, never imported.
        shipped = rel.startswith(("servecheck/suites/", "servecheck/scenarios/"))
        if not shipped:
            assert not re.search(
                r"^\s*(from|import) servecheck\.(suites|scenarios)\b", text, re.M
            ), f"{rel} imports a shipped suite or scenario"
        if re.search(r"^\s*(import|from) locust\b", text, re.M):
            assert rel == "servecheck/load/generator/locust_user.py" or rel.startswith(
                "servecheck/scenarios/"
            ), f"{rel} imports locust"
        if re.search(r"^\s*(import|from) pytest\b", text, re.M):
            assert rel in (
                "servecheck/pytest_plugin.py",
                "servecheck/report/allure_glue.py",
            ) or rel.startswith("servecheck/suites/"), f"{rel} imports pytest"
    for path in pkg.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("servecheck/commands/") or rel == "servecheck/cli.py":
            continue
        # Commands sit on top: the library (workflows included) never reaches up into them.
        assert not re.search(r"^\s*(from|import) servecheck\.commands\b", path.read_text(), re.M), (
            f"{rel} imports a command module"
        )
    for path in (pkg / "commands").rglob("*.py"):
        # A command calls the library, never another command (accept used to run `check` that way).
        text = path.read_text()
        own = path.relative_to(pkg / "commands").parts[0].removesuffix(".py")
        for other in re.findall(r"^\s*(?:from|import) servecheck\.commands\.(\w+)", text, re.M):
            # options.py is the shared option definitions, not a command.
            assert other in (own, "options"), (
                f"{path.relative_to(ROOT)} imports servecheck.commands.{other}"
            )
    for path in (pkg / "reference").rglob("*.py"):
        text = path.read_text()
        # Import statements only: the server's docstring names these packages to say why it avoids them.
        assert not re.search(r"^\s*(from|import) servecheck\.(client|checks)\b", text, re.M), (
            f"{path} must not share code with the checks"
        )
    for path in (pkg / "report").rglob("*.py"):
        # report/ only renders: it sends no request, starts no server and runs no workflow.
        found = re.findall(
            r"^\s*(?:from|import) servecheck\.(client|embedded|reference|workflows)\b",
            path.read_text(),
            re.M,
        )
        assert not found, (
            f"{path.relative_to(ROOT)} imports servecheck.{found[0]} (report/ only reports)"
        )


def test_targets_examples_validate():
    from servecheck.config import load_targets

    examples = load_targets(
        ROOT / "docs" / "targets-examples.yaml", env={"OPENAI_API_KEY": "sk-example-not-real"}
    )
    assert {"sglang", "tgi", "ollama", "openai", "gateway"} <= set(examples.names)


_PATH_TOKEN = re.compile(r"[\w.<>*-]+(/[\w.<>*-]*)*")


def _architecture_paths() -> list[tuple[str, list[str]]]:
    """Each backticked path of ARCHITECTURE.md with the places it may mean (globs, relative to
    the checkout): ``servecheck/...``; ``load/run.py`` under ``servecheck/`` (or the checkout's
    ``tests/...``); a bare ``sse.py`` in the checkout or a folder of a path on its line."""
    top = {p.name for p in (ROOT / "servecheck").iterdir() if p.is_dir()}
    found = []
    for line in (ROOT / "ARCHITECTURE.md").read_text().splitlines():
        tokens = [
            (token, re.sub(r"<[^>]*>", "*", token))
            for token in (t.split("::")[0] for t in re.findall(r"`([^`]+)`", line))
            if _PATH_TOKEN.fullmatch(token) and not token.startswith(".")
        ]
        paths, folders = [], []
        for token, pattern in tokens:
            first = pattern.split("/")[0]
            if "/" in pattern and (
                first == "servecheck" or first in top or (ROOT / first).is_dir()
            ):
                places = [pattern, f"servecheck/{pattern}"] if first in top else [pattern]
                paths.append((token, places))
                folders += [p.rstrip("/").rsplit("/", 1)[0] for p in places if "/" in p.rstrip("/")]
        bare = [
            (token, [pattern, *(f"{f}/{pattern}" for f in folders)])
            for token, pattern in tokens
            if "/" not in pattern and re.search(r"\.(py|c|ini|yaml)$", pattern)
        ]
        found += paths + bare
    return found


def test_every_path_architecture_names_exists():
    missing = [
        token
        for token, places in _architecture_paths()
        if not any(any(ROOT.glob(p.rstrip("/"))) for p in places)
    ]
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"


def test_architecture_finds_every_module():
    """Every module is named, or a row's glob (``servecheck/load/*.py``) covers it; a bare
    folder of the layer table does not count."""
    covered = {
        path
        for _, places in _architecture_paths()
        for place in places
        if not place.endswith("/")
        for path in ROOT.glob(place)
    }
    unplaced = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "servecheck").rglob("*.py"))
        if p.name != "__init__.py" and p not in covered
    ]
    assert not unplaced, f"ARCHITECTURE.md has no row that names: {unplaced}"
