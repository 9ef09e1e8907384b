"""``servecheck engine`` user-facing behaviour that needs no engine installed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from servecheck.cli import main


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SERVECHECK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_unknown_engine_suggests_a_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine", "up", "vlm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "servecheck engine: error: unknown engine 'vlm' (did you mean \"vllm\"?)"
    ), err


def test_port_needs_one_engine(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine", "up", "vllm", "llamacpp", "--port", "9000"]) == 2
    assert "--port needs exactly one engine name" in capsys.readouterr().err


def test_status_and_down_with_nothing_running(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine", "status"]) == 0
    assert capsys.readouterr().out == "no engine running\n"
    assert main(["engine", "status", "--json"]) == 0
    assert capsys.readouterr().out.strip() == "[]"
    assert main(["engine", "down", "all"]) == 0
    assert capsys.readouterr().out == "no matching engine running\n"


def test_help_lists_engines_and_ports(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["engine", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for fragment in (
        "up",
        "down",
        "status",
        "install",
        "model",
        "vllm (8011)",
        "vllm-chunked (8012)",
        "llamacpp (8021)",
        "xinference (8031)",
        "litellm (8041)",
    ):
        assert fragment in out, f"{fragment!r} missing from engine --help"


def test_model_writes_both_artefacts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tokenizers")
    assert main(["engine", "model", "--out", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    hf = next(
        line.split(":", 1)[1].strip() for line in out.splitlines() if line.strip().startswith("hf:")
    )
    gguf = next(
        line.split(":", 1)[1].strip()
        for line in out.splitlines()
        if line.strip().startswith("gguf:")
    )
    assert (Path(hf) / "config.json").is_file() and (Path(hf) / "model.safetensors").is_file()
    assert Path(gguf).stat().st_size > 1_000_000


def test_shipped_engine_targets_are_valid() -> None:
    """The packaged targets file lists every engine `engine up` starts, on its port."""
    from servecheck.config.loader import BUILTIN_FILE, load_targets

    targets = load_targets(BUILTIN_FILE, env={"HOME": "/home/user"})
    assert targets.broken == {}
    expected = {
        "local-vllm": 8011,
        "local-vllm-chunked": 8012,
        "local-llamacpp": 8021,
        "local-xinference": 8031,
        "local-litellm": 8041,
    }
    got = {
        name: int(t.base_url.rsplit(":", 1)[1].split("/")[0]) for name, t in targets.targets.items()
    }
    assert expected.items() <= got.items(), got
    assert targets.get("local-litellm").api_key is not None, (
        "the LiteLLM proxy needs its master key"
    )


def _state_file(cache: Path, name: str, pid: int, **extra: object) -> Path:
    import json

    state = cache / "state" / f"{name}-8999.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "name": name,
        "port": 8999,
        "pid": pid,
        "log": "/tmp/x.log",
        "served_model": "m",
        "context_length": 512,
        "started_at": time.time(),
        **extra,
    }
    state.write_text(json.dumps(body))
    return state


def test_status_lists_an_engine_another_servecheck_started(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A state file in the shared cache from another branch (an engine this one does not know,
    a key it does not know): listed with a note, never a traceback, and the file is kept."""
    import json
    import os

    state = _state_file(cache, "vllm-from-elsewhere", os.getpid(), future_key=1)
    assert main(["engine", "status"]) == 0
    out = capsys.readouterr().out
    assert "vllm-from-elsewhere  8999" in out and " unknown " in out, out
    assert "note: vllm-from-elsewhere (pid" in out and "started by another servecheck" in out
    assert main(["engine", "status", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["state"] == "unknown" and row["name"] == "vllm-from-elsewhere"
    assert state.exists(), "a live server's state file was taken for broken and removed"


def test_up_prints_progress_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`engine up` shows the engines' progress log on stdout while it runs, and only then."""
    import servecheck.commands.engine as command
    from servecheck.engines import base

    def fake_up(names: list[str], port: int | None, *, install: bool) -> int:
        base.LOG.info("vllm: loading, 10 s of at most 300 s")
        return 0

    monkeypatch.setattr(command, "_up", fake_up)
    assert main(["engine", "up", "vllm"]) == 0
    assert capsys.readouterr().out == "  vllm: loading, 10 s of at most 300 s\n"
    base.LOG.info("after the command")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("port", "expected"),
    [
        (8011, "  target: local-vllm; next: servecheck check --target local-vllm"),
        (8021, "  target: local-llamacpp; next: servecheck check --target local-llamacpp"),
    ],
)
def test_next_step_names_the_shipped_target_from_an_empty_folder(
    port: int,
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After `engine up`, the target to use works from any folder (issue 42 item 1): with no
    ./targets.yaml the packaged file is used, and it lists the engine's target."""
    from servecheck.commands.engine import _next_step
    from servecheck.config.loader import load_targets

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SERVECHECK_TARGETS_FILE", raising=False)
    assert _next_step(port) == expected
    target = load_targets(None).get(expected.split()[1].rstrip(";"))
    assert target.base_url == f"http://127.0.0.1:{port}/v1"


def test_next_step_names_the_way_round_a_users_own_targets_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from servecheck.commands.engine import _next_step
    from servecheck.config.loader import BUILTIN_FILE

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SERVECHECK_TARGETS_FILE", raising=False)
    (tmp_path / "targets.yaml").write_text(
        "targets:\n  - name: mine\n    base_url: http://127.0.0.1:9/v1\n    engine: vllm\n"
    )
    line = _next_step(8011)
    assert line == (
        "  target: local-vllm (shipped; ./targets.yaml does not list it); next: "
        f"servecheck check --target local-vllm --targets-file {BUILTIN_FILE}"
    )
    assert _next_step(1).startswith("  target: none shipped for port 1")
