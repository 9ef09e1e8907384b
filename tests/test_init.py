"""``servecheck init URL`` against the reference server: the entry it writes is right, commented,
parses, carries no key, and a check run with it passes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    assert "n: false  # tried n=2 at temperature 0.7:" in out
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


# --append edits the user's file: its layout, comments and other keys must survive, and a
# result that would not load must never be written.


@pytest.fixture
def canned_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """``init`` without a server: the probe answers with fixed facts."""
    from servecheck.workflows import init as workflow

    def probe(url: str, api_key: str | None = None, timeout_s: float = 20.0) -> Any:
        return workflow.EndpointFacts(
            url=url,
            base_url=url.rstrip("/") + "/v1",
            auth_needed=False,
            auth_why="GET /models answered without a key",
            engine=workflow.Finding("vllm", 'owned_by "vllm"'),
            models=workflow.Finding(["m1"], "served: m1"),
            context_length=workflow.Finding(4096, "max_model_len"),
            metrics_url=workflow.Finding(None, "no /metrics"),
            capabilities={"streaming": workflow.Finding(True, "tried: accepted")},
        )

    monkeypatch.setattr(workflow, "probe_endpoint", probe)


def _append(path: Path, *extra: str) -> int:
    return main(["init", "http://127.0.0.1:8001", "--append", str(path), *extra])


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param(
            "targets:\n  - name: a\n    base_url: http://a:1/v1\ndefaults:\n  timeout_s: 5\n",
            id="another-top-level-key-after-targets",
        ),
        pytest.param(
            "targets:\n- name: a\n  base_url: http://a:1/v1\n  capabilities:\n    tools: false\n",
            id="items-at-column-0",
        ),
    ],
)
def test_append_keeps_the_file_loading(
    tmp_path: Path, canned_probe: None, capsys: pytest.CaptureFixture[str], layout: str
) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(layout)
    assert _append(path) == 0, capsys.readouterr().err
    targets = load_targets(path, env={})
    assert targets.names == ["a", "mine"]
    assert targets.get("mine").base_url == "http://127.0.0.1:8001/v1"
    assert targets.get("mine").context_length == 4096
    if "defaults" in layout:
        assert targets.get("a").timeout_s == 5 and targets.get("mine").timeout_s == 5
    else:
        assert targets.get("a").capabilities.tools is False


def test_append_keeps_comments_key_order_and_indentation(
    tmp_path: Path, canned_probe: None, capsys: pytest.CaptureFixture[str]
) -> None:
    head = (
        "# our endpoints (do not reorder)\n"
        "targets:\n"
        "  # the old box\n"
        "  - name: a\n"
        "    engine: vllm\n"
        "    base_url: http://a:1/v1  # behind the VPN\n"
    )
    tail = "# shared by every target\ndefaults:\n  timeout_s: 30  # slow gateway\n"
    path = tmp_path / "targets.yaml"
    path.write_text(head + tail)
    assert _append(path) == 0, capsys.readouterr().err
    text = path.read_text()
    # The user's lines are all there, unchanged and in their order; the entry goes between the
    # last target and the next top-level key, at the file's own indentation.
    assert text.startswith(head) and text.endswith(tail), text
    added = text[len(head) : -len(tail)]
    assert added.startswith("  # `servecheck init http://127.0.0.1:8001` on "), added
    assert "\n  - name: mine\n    base_url: http://127.0.0.1:8001/v1\n" in added
    assert "    engine: vllm  # owned_by" in added and "      streaming: true  # tried" in added
    targets = load_targets(path, env={})
    assert targets.names == ["a", "mine"] and targets.get("mine").timeout_s == 30


def test_append_refuses_a_taken_name_and_leaves_the_file(
    tmp_path: Path,
    canned_probe: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # base_url from a variable: the file is read as a run reads it, not with dummy values
    monkeypatch.setenv("SC_INIT_URL", "http://a:1/v1")
    original = "targets:\n  - name: mine  # keep\n    base_url: ${SC_INIT_URL}\n"
    path = tmp_path / "targets.yaml"
    path.write_text(original)
    assert _append(path) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"{path}: a target named 'mine' exists; pass --name"), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert path.read_text() == original


def test_append_never_writes_a_file_that_does_not_load(
    tmp_path: Path, canned_probe: None, capsys: pytest.CaptureFixture[str]
) -> None:
    original = "targets:\n  - name: a\n    base_url: http://a:1/v1\nextra: 1\n"
    path = tmp_path / "targets.yaml"
    path.write_text(original)
    assert _append(path, "--name", "b") == 2
    err = capsys.readouterr().err.strip()
    assert "not changed: the result would not load:" in err and "unknown key 'extra'" in err
    assert str(path) in err and ".tmp" not in err and len(err.splitlines()) == 1
    assert path.read_text() == original
    assert [p.name for p in tmp_path.iterdir()] == ["targets.yaml"]  # no temp file left


def test_init_asks_n_sampled_and_gives_a_forced_call_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42 item 7: init wrote `n: false` (it asked n=2 greedily, which vLLM refuses) and
    `tools: false` (8 tokens cut vLLM's forced call before it parsed), so 33 checks that pass on
    the same server were skipped. A server that behaves that way is declared capable."""
    from servecheck.workflows import init

    class Answer:
        def __init__(self, body: dict[str, Any], status: int) -> None:
            self.body, self.status, self.error, self.stream = body, status, None, None
            self.ok = status == 200

        def json(self) -> dict[str, Any]:
            return self.body

        def describe(self, limit: int) -> str:
            return f"HTTP {self.status}"[:limit]

    def reply(body: dict[str, Any]) -> Answer:
        if (body.get("n") or 1) > 1 and not body.get("temperature"):
            return Answer({"error": {"message": "n must be 1 when using greedy sampling"}}, 400)
        message: dict[str, Any] = {"role": "assistant", "content": "OK"}
        if body.get("tool_choice") not in (None, "none", "auto"):
            if body["max_tokens"] < 32:  # the forced call's JSON does not fit: cut, unparsed
                message["content"] = '{"name": "pi'
            else:
                message["tool_calls"] = [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "ping", "arguments": "{}"},
                    }
                ]
        choices = [{"index": i, "message": message} for i in range(body.get("n") or 1)]
        return Answer({"choices": choices}, 200)

    class Client:  # /completions and /tokenize: not served
        def post(self, path: str, body: dict[str, Any]) -> Answer:
            return Answer({}, 404)

    class Chat(init._Chat):
        def post(self, body: dict[str, Any], stream: bool = False) -> Any:
            return reply(body)

    chat = Chat(client=Client(), timeout_s=5)  # type: ignore[arg-type]
    monkeypatch.setattr(init, "_vision", lambda chat, model: init.Finding(False, "not asked"))
    caps = init._capabilities(chat, "http://127.0.0.1:1/v1", "m")
    assert caps["n"].value is True, caps["n"]
    assert caps["tools"].value is True, caps["tools"]
    assert caps["n"].why == "tried n=2 at temperature 0.7: accepted"
