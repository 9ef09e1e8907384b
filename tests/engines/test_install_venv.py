"""The venv install shared by the pip-installed engines (``engines/base.install_venv``): the
steps each engine asks for, in order, once; a marker makes the next call free. No engine is
installed or started: ``run_logged`` is replaced by a recorder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from servecheck.engines import base, litellm, xinference
from servecheck.engines.base import PipStep, install_venv


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], str]]:
    monkeypatch.setenv("SERVECHECK_CACHE", str(tmp_path / "cache"))
    seen: list[tuple[list[str], str]] = []

    def record(argv: Sequence[str], log: Path, *, what: str = "", **_: Any) -> None:
        seen.append((list(argv), what))
        if argv[1:3] == ["-m", "venv"]:  # the venv's python appears, as venv would make it
            py = Path(argv[3]) / "bin" / "python"
            py.parent.mkdir(parents=True)
            py.touch()

    for module in (base, litellm, xinference):  # never a real pip, whatever the engine calls
        monkeypatch.setattr(module, "run_logged", record, raising=False)
    return seen


def test_install_venv_runs_the_steps_then_is_free(
    calls: list[tuple[list[str], str]], tmp_path: Path
) -> None:
    venv = tmp_path / "venvs" / "demo-1.0"
    steps = [PipStep(("install", "demo==1.0"), 60, "demo: install")]
    first = install_venv("demo", venv, "demo==1.0\n", steps)
    assert calls == [
        ([base.venv_python(), "-m", "venv", str(venv)], "demo: create venv"),
        ([str(venv / "bin" / "python"), "-m", "pip", "install", "demo==1.0"], "demo: install"),
    ]
    assert (first.cached, first.location) == (False, venv)
    assert install_venv("demo", venv, "demo==1.0\n", steps).cached is True
    assert len(calls) == 2
    install_venv("demo", venv, "demo==2.0\n", steps)  # another version wanted: pip again
    assert [what for _, what in calls[2:]] == ["demo: install"]


def test_litellm_installs_once(calls: list[tuple[list[str], str]]) -> None:
    engine = litellm.LiteLlm()
    first = engine.install()
    assert [what for _, what in calls] == ["litellm: create venv", "litellm: install"]
    assert calls[1][0][1:] == [
        "-m",
        "pip",
        "install",
        f"litellm[proxy]=={litellm.VERSION}",
        "prisma",
    ]
    assert (first.cached, first.location) == (False, engine.venv)
    assert engine.install().cached is True
    assert len(calls) == 2, "a second install with the marker in place ran pip again"


def test_xinference_runs_its_three_pip_steps_in_order(calls: list[tuple[list[str], str]]) -> None:
    engine = xinference.Xinference()
    engine.install()
    assert [what for _, what in calls] == [
        "xinference: create venv",
        "xinference: install torch",
        "xinference: install",
        "xinference: remove CUDA-linked extras",
    ]
    assert calls[-1][0][3:5] == ["uninstall", "-y"]
    marker = engine.venv / ".servecheck-installed"
    assert marker.read_text() == (
        f"xinference[transformers]=={xinference.VERSION} torch=={xinference.TORCH}\n"
    )
