"""Parse at the edge: only the command layer (``servecheck/cli.py``, ``servecheck/commands/``)
knows argparse; the library takes typed specs and keywords (ARCHITECTURE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import servecheck

ROOT = Path(servecheck.__file__).resolve().parent
# scenarios/_options.py: plain `locust -f`'s options, on Locust's own parser (its edge)
EDGE = ("cli.py", "commands/", "scenarios/_options.py")
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


# --- The library names spec fields, never our options (servecheck.errors.SpecError) ---------


def _our_options() -> set[str]:
    """Every ``--option`` of every ``servecheck`` command, from the real parsers."""
    import argparse
    import importlib

    from servecheck import cli

    def walk(parser: argparse.ArgumentParser, out: set[str]) -> None:
        for action in parser._actions:
            out.update(o for o in action.option_strings if o.startswith("--"))
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub, out)

    found: set[str] = set()
    walk(cli.build_parser(), found)
    for name, (module, _help) in cli.COMMANDS.items():
        parser = argparse.ArgumentParser(prog=f"servecheck {name}")
        importlib.import_module(module).add_arguments(parser)
        walk(parser, found)
    return found - {"--help", "--version"}


# Strings that are somebody else's command line, where a name happens to be one of ours.
ALLOWED: dict[str, set[str]] = {
    # argv of child processes the library launches
    "embedded.py": {"--port", "--ready-file"},  # the reference server's own argv
    "load/run.py": {  # Locust's argv (locust_command)
        "--host",
        "--worker",
        "--master-host",
        "--master-port",
        "--master",
        "--expect-workers",
        "--processes",
    },
    "workflows/conformance.py": {"--itl-ms"},  # the reference server's argv
    # the reference server's argv (its scripted agent mode, a context for an agent's prompt)
    "clients/run.py": {"--agent", "--max-model-len"},
    "engines/": {  # vLLM's, llama.cpp's, LiteLLM's, Xinference's own argv (and a profile's note)
        "--host",
        "--reasoning",
        "--port",
        "--api-key",
        "--max-model-len",
        "--target",
        "--max-num-seqs",
    },
    # the reference server's option table: a program of its own, started as a child, whose
    # `--fault NAME` syntax the fault catalogue documents
    "reference/options.py": {"*"},
    # a documented `servecheck checks --markdown`, and `servecheck check --strict` in the profile's
    # section of docs/checks.md
    "checks/registry.py": {"--fault", "--markdown", "--strict"},
    # pytest's own command line: the plugin is an edge of its own (pytest parses it)
    "pytest_plugin.py": {"--target", "--targets-file", "--model"},
    # the suite shims it writes quote the plugin's `pytest suites/test_x.py --target NAME`; the
    # packaged targets file's header comment says where it applies (no --targets-file given)
    "docs.py": {"--target", "--targets-file"},
    # the cause of a late generator names its way out in every output of a run (load, accept
    # and capacity all take these options; issue 42 asked for the option in the verdict line)
    "analysis/host.py": {"--allow-lag", "--processes"},
    # an engine's option in a hint (vLLM --max-model-len / --max-num-seqs, llama.cpp
    # --reasoning-format, an engine's --api-key), not ours
    "checks/surfaces/": {
        "--max-model-len",
        "--max-num-seqs",
        "--api-key",
        "--target",
    },  # + wait-ready hint
    "config/model.py": {"--max-num-seqs"},
    "reference/faults.py": {"--max-model-len"},
    # a whole `servecheck <command> --option` line quoted as the thing to run instead
    "analysis/slo.py": {"--cold-start-slo", "--launch", "--cold-start"},
    "load/workload/trace.py": {
        "--trace"
    },  # `servecheck load --trace FILE`, raised in a Locust worker
    "load/generator/locust_user.py": {"--host"},  # `locust --host`, run by hand on the scenario
    "preflight/layout.py": {"--revision"},  # `hf download REPO --revision REF`, the hf CLI's
}
# Not yet at the edge, each for a reason (remove the entry when it moves):
PENDING_OPTIONS: dict[str, str] = {}


def _library_option_strings(skip_pending: bool = True) -> list[str]:
    import re

    options = _our_options()
    pattern = re.compile(
        r"(?<![\w-])("
        + "|".join(sorted(map(re.escape, options), key=len, reverse=True))
        + r")(?![\w-])"
    )
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(EDGE) or (skip_pending and rel.startswith(tuple(PENDING_OPTIONS))):
            continue
        allowed = set().union(*(v for k, v in ALLOWED.items() if rel.startswith(k)))
        if "*" in allowed:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
            ):
                named = set(pattern.findall(node.value)) - allowed
                found += [f"{rel}:{node.lineno}: {opt}" for opt in sorted(named)]
    return found


def test_no_library_string_names_our_options() -> None:
    """A library message names a spec field (``SpecError("{cycles} ...")``); the command layer
    shows its option. An option string in the library is wrong for servecheck.api callers."""
    found = _library_option_strings()
    assert not found, (
        "library strings name servecheck options (raise servecheck.errors.SpecError with the "
        "spec field in braces; child-process argv goes in ALLOWED): " + "; ".join(found)
    )


def test_pending_option_exemptions_are_still_needed() -> None:
    hits = _library_option_strings(skip_pending=False)
    stale = [
        f"{prefix} ({why})"
        for prefix, why in PENDING_OPTIONS.items()
        if not any(hit.startswith(prefix) for hit in hits)
    ]
    assert not stale, f"no longer names an option: remove from PENDING_OPTIONS: {', '.join(stale)}"


def test_spec_error_shows_fields_to_the_api_and_options_on_the_cli(capsys) -> None:
    """The same error: field names from the library, the option from ``servecheck load``."""
    import pytest

    from servecheck import cli
    from servecheck.analysis.warmup import Warmup
    from servecheck.errors import SpecError

    with pytest.raises(SpecError) as info:
        Warmup(seconds=-1.0)
    assert str(info.value) == "warmup_s must be >= 0"
    odd = SpecError("{dataset} {path!r}: file not found", path="/tmp/{x}.jsonl")
    assert odd.render({"dataset": "--dataset"}) == "--dataset '/tmp/{x}.jsonl': file not found"
    assert cli.main(["load", "--target", "reference", "--users", "1", "--rate", "1/s"]) == 2
    assert "give exactly one of --users N (closed loop), --rate R/s" in capsys.readouterr().err


def test_a_workflow_hint_names_the_field_and_the_cli_its_option(tmp_path, capsys) -> None:
    """Issue 23.5: ``run_check`` names the spec field ``targets``; ``servecheck check`` shows
    its ``--target``."""
    import pytest

    from servecheck import cli
    from servecheck.errors import SpecError
    from servecheck.workflows.conformance import CheckSpec, run_check

    file = tmp_path / "targets.yaml"
    file.write_text("targets:\n  - name: other\n    base_url: http://127.0.0.1:9/v1\n")
    with pytest.raises(SpecError, match=r"no 'reference' target; name one with targets$"):
        run_check(CheckSpec(targets=["reference"], targets_file=str(file), embedded=False))
    argv = ["check", "--targets-file", str(file), "--target", "reference", "--no-embedded"]
    assert cli.main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert "no 'reference' target; name one with --target\n" in capsys.readouterr().err
