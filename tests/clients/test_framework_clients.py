"""pydantic-ai, LangChain and opencode as real clients (issue 44): pinned, quieted by their
documented switches, the key by environment only; against the reference's scripted agent mode
each streams and runs a read-only tool (the generic tests in test_clients_command.py); here, each
fails by name on a reference fault that breaks what its own parser depends on, with the request
and the answer that broke it. The live runs need the clients in the cache (skipped otherwise,
unless SERVECHECK_REQUIRE_CLIENTS names them)."""

from __future__ import annotations

import json

import pytest

from servecheck.clients.catalog import CLIENTS, SCRIPTS, TOOL_RESULT
from servecheck.clients.run import _env
from tests.clients.test_clients_command import _ready, _servecheck

NEW = ("pydantic-ai", "langchain", "opencode")

# (client, fault, what the failing task says in clients.json); opencode also fails on
# tools-args-invalid (docs/clients.md), left out here: each opencode run costs 10-40 s of CI.
BREAKS = [
    pytest.param(
        "langchain",
        "tools-stream-no-index",
        "tool call LangChain could not parse",
        id="langchain-delta-without-index",
    ),
    pytest.param(
        "opencode",
        "tools-stream-no-index",
        "UnknownError: Expected 'id' to be a string.",
        id="opencode-delta-without-index",
    ),
    pytest.param(
        "pydantic-ai",
        "tools-args-invalid",
        "refused by pydantic-ai's validation: [{'type': 'json_invalid'",
        id="pydantic-ai-arguments-not-json",
    ),
]


def test_the_new_clients_are_pinned_on_chat_completions():
    assert {n: (CLIENTS[n].packages, CLIENTS[n].routes) for n in NEW} == {
        "pydantic-ai": (("pydantic-ai-slim[openai]==2.78.0",), ("chat",)),
        "langchain": (("langchain-openai==1.8.1",), ("chat",)),
        "opencode": (("opencode-ai@1.18.33", "@opencode-ai/plugin@1.18.33"), ("chat",)),
    }


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in NEW])
def test_each_task_script_answers_the_tool_with_the_shared_result(name):
    script = SCRIPTS[CLIENTS[name].script]
    assert "@TOOL_RESULT@" not in script, "a placeholder was left in the script"
    assert repr(TOOL_RESULT) in script


def test_opencode_is_quiet_and_gets_the_key_by_environment_only(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-caller-own")
    env = _env(CLIENTS["opencode"], "http://127.0.0.1:9/v1", "sk-target", "m", "chat", 5.0)
    for switch in (
        "OPENCODE_DISABLE_AUTOUPDATE",
        "OPENCODE_DISABLE_SHARE",
        "OPENCODE_DISABLE_MODELS_FETCH",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS",
        "OPENCODE_DISABLE_LSP_DOWNLOAD",
    ):
        assert env.get(switch) == "1", switch
    assert "OPENAI_API_KEY" not in env
    script = SCRIPTS["opencode_task.mjs"]
    # the key reaches opencode's config by its {env:...} substitution, never in argv or a file
    assert '"{env:SC_OPENCODE_KEY}"' in script and "SC_OPENCODE_KEY: SC.key" in script
    assert "SC.key" not in script.split("function run(")[1]
    # and only the read tool can run, whatever a model asks for
    assert '{ "*": false, read: true }' in script and 'bash: "deny"' in script


def test_the_python_frameworks_have_their_tracing_off():
    env = _env(CLIENTS["langchain"], "http://127.0.0.1:9/v1", "k", "m", "chat", 5.0)
    assert env["LANGSMITH_TRACING"] == "false" and env["LANGCHAIN_TRACING_V2"] == "false"
    env = _env(CLIENTS["pydantic-ai"], "http://127.0.0.1:9/v1", "k", "m", "chat", 5.0)
    assert env["OTEL_SDK_DISABLED"] == "true"
    assert "Agent.instrument_all(False)" in SCRIPTS["pydantic_ai_task.py"]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "fault", "said"), BREAKS)
def test_each_fails_by_name_on_a_fault_its_parser_depends_on(tmp_path, name, fault, said):
    _ready(name)
    run_id = f"{name}-{fault}"
    done = _servecheck(
        tmp_path, "--client", name, "--run-id", run_id, f"--reference-arg=--fault={fault}"
    )
    stages = " ".join(done.stderr.split())
    label = CLIENTS[name].label
    assert done.returncode == 1, stages + done.stdout
    assert f"{label} on chat: fails (protocol only)" in stages
    assert f"{label} on chat broke on:" in done.stdout
    assert "POST /v1/chat/completions HTTP/1.1" in done.stdout
    result = json.loads((tmp_path / run_id / "clients.json").read_text())
    (outcome,) = result["clients"]
    tasks = {t["task"]: t for t in outcome["tasks"]}
    assert tasks["stream"]["ok"] is True, "the fault is in tool calls: the plain answer is fine"
    assert tasks["tool"]["ok"] is False
    assert said in tasks["tool"]["detail"]
    assert "sk-ref-" not in done.stdout + done.stderr, "the embedded server's key is shown"
