"""The error budget is set the same way everywhere a load is sent: ``--error-budget`` on
``load`` and ``accept``, and ``error_budget:`` in a load plan (one parser, analysis/budget.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from servecheck.analysis.budget import DEFAULT_ERROR_BUDGET
from servecheck.cli import main
from servecheck.commands import accept
from servecheck.commands.load.spec import spec_from_options
from servecheck.config.model import Target
from servecheck.errors import UsageError
from servecheck.load.plan import PLAN_KEYS, load_plan
from servecheck.workflows.accept import AcceptSpec

TARGET = Target.model_validate({"name": "t", "base_url": "http://127.0.0.1:9/v1"})


def _plan(tmp_path: Path, line: str) -> dict[str, object]:
    path = tmp_path / "plan.yaml"
    path.write_text(f"users: 2\nduration: 5s\n{line}\n")
    return load_plan(path).values


@pytest.mark.parametrize(
    ("line", "share"),
    [
        pytest.param("error_budget: 5%", 0.05, id="percent"),
        pytest.param("error_budget: 0.5%", 0.005, id="fraction-of-a-percent"),
        pytest.param("error_budget: none", None, id="none"),
        pytest.param("error_budget: off", None, id="off-which-yaml-reads-as-false"),
        pytest.param("description: no budget key", DEFAULT_ERROR_BUDGET, id="absent"),
    ],
)
def test_a_load_plan_sets_the_error_budget(tmp_path: Path, line: str, share: float | None) -> None:
    assert "error_budget" in PLAN_KEYS
    spec = spec_from_options(TARGET, {}, _plan(tmp_path, line))
    assert spec.error_budget == share


def test_the_command_line_budget_overrides_the_plans(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "error_budget: 5%")
    assert spec_from_options(TARGET, {"error_budget": "20%"}, plan).error_budget == 0.2


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        pytest.param("1", "a percentage of failed requests, e.g. 1% or 0.5%", id="bare-number"),
        pytest.param("150%", "between 0% and 100%", id="over-100"),
    ],
)
def test_a_bad_plan_budget_names_the_plan_and_the_key(
    tmp_path: Path, value: str, problem: str
) -> None:
    with pytest.raises(UsageError) as info:
        _plan(tmp_path, f"error_budget: {value}")
    assert str(info.value).startswith(f"{tmp_path / 'plan.yaml'}: error_budget '{value}': ")
    assert problem in str(info.value)


def _accept_spec(*argv: str) -> AcceptSpec:
    parser = argparse.ArgumentParser()
    accept.add_arguments(parser)
    return accept.spec_from_args(parser.parse_args(list(argv)))


def test_accept_takes_error_budget_as_load_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVECHECK_ACCEPT_ERROR_BUDGET", raising=False)
    assert _accept_spec().error_budget == DEFAULT_ERROR_BUDGET
    assert _accept_spec("--error-budget", "5%").error_budget == 0.05
    assert _accept_spec("--error-budget", "none").error_budget is None
    monkeypatch.setenv("SERVECHECK_ACCEPT_ERROR_BUDGET", "2%")
    assert _accept_spec().error_budget == 0.02


def test_a_bad_accept_budget_is_one_usage_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["accept", "--out", str(tmp_path), "--error-budget", "1"]) == 2
    err = capsys.readouterr().err
    assert "--error-budget '1': a percentage of failed requests, e.g. 1% or 0.5%" in err, err
    assert "Traceback" not in err and not any(tmp_path.iterdir()), "refused before any run"
