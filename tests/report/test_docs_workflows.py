"""docs/workflows.md cannot rot: every ``servecheck`` command line in it parses with today's options."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from pathlib import Path

import pytest

from servecheck.cli import COMMANDS

DOC = Path(__file__).resolve().parents[2] / "docs" / "workflows.md"


def doc_commands() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```(?:sh|yaml)\n(.*?)```", text, re.S)
    lines: list[str] = []
    for block in blocks:
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip().removeprefix("run: ").strip()
            if line.startswith("servecheck ") and "${{" not in line:
                lines.append(line)
    return lines


@pytest.mark.parametrize(
    "line",
    [pytest.param(line, id=line.split()[1] + f"-{i}") for i, line in enumerate(doc_commands())],
)
def test_documented_command_parses(line: str) -> None:
    argv = shlex.split(line)[1:]
    module_name, _ = COMMANDS[argv[0]]
    parser = argparse.ArgumentParser(prog=f"servecheck {argv[0]}")
    importlib.import_module(module_name).add_arguments(parser)
    parser.parse_args(argv[1:])


def test_the_doc_shows_every_workflow_command() -> None:
    names = {shlex.split(line)[1] for line in doc_commands()}
    assert {"accept", "compare", "capacity", "cutover"} <= names
