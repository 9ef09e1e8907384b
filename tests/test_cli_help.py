"""``--help`` of every command: it works, and the shared target options read the same everywhere
(one definition: servecheck/commands/options.py)."""

from __future__ import annotations

import argparse
import importlib
import re

import pytest

from servecheck.cli import COMMANDS, main

TARGET_COMMANDS = ("check", "accept", "load", "capacity", "soak", "cutover")


def _help(name: str) -> str:
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"servecheck {name}")
    module.add_arguments(parser)
    return " ".join(parser.format_help().split())


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_exits_zero_and_shows_no_sentinel_default(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: servecheck {name}")
    assert "(default: None)" not in out and "default: None)" not in out


@pytest.mark.parametrize("name", TARGET_COMMANDS)
def test_shared_target_options_read_the_same(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SERVECHECK_TARGET", "SERVECHECK_TARGETS_FILE", "SERVECHECK_REPORTS"):
        monkeypatch.delenv(var, raising=False)
    text = _help(name)
    assert (
        "--targets-file PATH targets file (env SERVECHECK_TARGETS_FILE; default: ./targets.yaml, "
        "else the built-in file with only the reference target)" in text
    )
    assert "--out DIR where run folders go (env SERVECHECK_REPORTS; default: ./reports)" in text
    if name != "cutover":
        assert re.search(
            r"--target NAME target from the targets file.*\(env SERVECHECK_TARGET", text
        )


@pytest.mark.parametrize("name", TARGET_COMMANDS)
def test_shared_options_default_to_none_and_read_their_variables(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = importlib.import_module(COMMANDS[name][0])
    required = {"cutover": [], "check": []}.get(name, [])

    def parse() -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        return parser.parse_args(required)

    for var in ("SERVECHECK_TARGET", "SERVECHECK_TARGETS_FILE", "SERVECHECK_REPORTS"):
        monkeypatch.delenv(var, raising=False)
    args = parse()
    assert args.targets_file is None and args.out is None
    monkeypatch.setenv("SERVECHECK_TARGETS_FILE", "elsewhere.yaml")
    monkeypatch.setenv("SERVECHECK_REPORTS", "out-dir")
    args = parse()
    assert (args.targets_file, args.out) == ("elsewhere.yaml", "out-dir")


def test_commands_stay_thin() -> None:
    """A command parses, calls the library and prints (ARCHITECTURE.md): about 250 lines at most;
    a run that grows belongs in servecheck/workflows/ or servecheck/load/."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "servecheck" / "commands"
    sizes = {
        p.relative_to(root).as_posix(): len(p.read_text().splitlines()) for p in root.rglob("*.py")
    }
    fat = {name: n for name, n in sizes.items() if n > 260}
    assert not fat, f"command modules over ~250 lines: {fat}"


@pytest.mark.parametrize("name", ("load", "capacity", "accept"))
def test_dataset_options_read_the_same(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVECHECK_DATASET", raising=False)
    text = _help(name)
    assert (
        "--dataset FILE prompts from this local JSONL / ShareGPT file, sampled with the seed "
        "(scenarios dataset, multi_turn; env SERVECHECK_DATASET); a distributed worker needs the "
        "file at the path given to its own --dataset" in text
    )
    assert "--dataset-format {auto,sharegpt,openai,prompt}" in text


@pytest.mark.parametrize("name", ("accept", "cutover"))
def test_cold_start_slo_option_reads_the_same(name: str) -> None:
    assert (
        "--cold-start-slo EXPR cold-start SLO, e.g. time_to_ready<=120s, first_ttft<=5s, "
        "first_ttft_ratio<=10, requests_to_warm<=5 (repeatable; the target's slo entries for "
        "cold starts are added)" in _help(name)
    )
