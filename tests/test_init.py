"""``servecheck init URL`` against the reference server: the entry it writes is right, commented,
parses, carries no key, and a check run with it passes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.cli import main
from servecheck.config import load_targets
from servecheck.reference.inprocess import RunningServer

KEY = "sk-init-test-0123456789"


def _root(server: RunningServer) -> str:
    return server.base_url.removesuffix("/v1")


def test_init_writes_a_working_commented_entry_without_the_key(
    tmp_path: Path,
    make_reference: Callable[..., RunningServer],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = make_reference(api_key=KEY)
    monkeypatch.setenv("MY_KEY", KEY)
    targets = tmp_path / "targets.yaml"
    code = main(["init", _root(server), "--api-key-env", "MY_KEY", "--append", str(targets)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert KEY not in out and KEY not in targets.read_text()
    assert "api_key: ${MY_KEY}  # GET " in out and "HTTP 401" in out
    assert 'engine: reference  # /v1/models owned_by "servecheck"' in out
    assert "context_length: 512  # /v1/models max_model_len" in out
    assert "streaming: true  # tried a streamed chat completion: accepted" in out
    target = load_targets(targets).get("mine")
    assert target.base_url == server.base_url and target.models == ["ref-tiny"]
    assert target.metrics_url == _root(server) + "/metrics"
    # The entry is usable as it is: the health and models surfaces pass with it.
    code = main(
        ["check", "--target", "mine", "--targets-file", str(targets), "-n", "0"]
        + ["--surface", "health", "--surface", "models", "--out", str(tmp_path / "r")]
    )
    assert code == 0, capsys.readouterr().out


def test_init_reports_what_the_server_refuses(
    make_reference: Callable[..., RunningServer], capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_reference("n-ignored")
    assert main(["init", server.base_url, "--name", "plain"]) == 0
    out = capsys.readouterr().out
    assert "# no api_key: GET " in out and "answered without a key" in out
    assert "n: false  # tried n=2:" in out
    assert "json_schema: true" in out


def test_init_needs_the_key_when_the_server_does(
    make_reference: Callable[..., RunningServer], capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_reference(api_key=KEY)
    assert main(["init", server.base_url]) == 2
    err = capsys.readouterr().err
    assert "HTTP 401" in err and "--api-key-env" in err and KEY not in err


def test_init_says_when_nothing_answers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "http://127.0.0.1:9", "--timeout", "2"]) == 2
    assert "no OpenAI-compatible /models there" in capsys.readouterr().err
