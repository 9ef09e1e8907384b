"""The reference's scripted agent mode (--agent) asks the way a model that follows a coding
agent's prompt does (issue 44): never for a tool the client deferred (Claude Code offers a
``DeferredToolPlaceholder`` with ``defer_loading`` first), and with only the tool's required
arguments (Codex CLI's ``exec_command`` declares number knobs it parses as integers)."""

from __future__ import annotations

import json

import httpx

from tests.support import TEST_KEY

AUTH = {"Authorization": f"Bearer {TEST_KEY}", "anthropic-version": "2023-06-01"}
# Many optional knobs: a scripted call that filled any of them (half of them, at random, is what
# the reference does outside agent mode) is seen at once.
KNOBS = {f"knob_{n}": {"type": "number"} for n in range(12)}


def _post(server, path, body):
    return httpx.post(server.base_url + path, json=body, headers=AUTH, timeout=30)


def _schema(required):
    """An object schema with one required string and the many optional KNOBS."""
    return {
        "type": "object",
        "properties": {required: {"type": "string"}, **KNOBS},
        "required": [required],
    }


def _shell():
    """Codex CLI's exec_command, as a Responses API function tool."""
    return {"type": "function", "name": "exec_command", "parameters": _schema("cmd")}


def _function_calls(server, body):
    resp = _post(server, "/responses", body)
    assert resp.status_code == 200, resp.text
    return [i for i in resp.json()["output"] if i["type"] == "function_call"]


def test_agent_mode_on_messages_skips_a_deferred_tool_and_fills_only_what_is_required(
    make_reference,
):
    server = make_reference(api_key=TEST_KEY, agent=True)
    placeholder = {
        "name": "DeferredToolPlaceholder",
        "description": "Stands in for the tools that load on search.",
        "input_schema": {"type": "object", "properties": {}},
        "defer_loading": True,
    }
    read = {"name": "Read", "input_schema": _schema("file_path")}
    body = {
        "model": "ref-tiny",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "Read README.md."}],
        "tools": [placeholder, read],
    }
    data = _post(server, "/messages", body).json()
    assert data.get("stop_reason") == "tool_use", data
    call = data["content"][-1]
    assert call["name"] == "Read", f"the scripted agent called {call['name']!r}, not Read"
    assert set(call["input"]) == {"file_path"}, call["input"]


def test_agent_mode_on_responses_fills_only_the_required_arguments(make_reference):
    server = make_reference(api_key=TEST_KEY, agent=True)
    body = {"model": "ref-tiny", "input": "Run cat README.md.", "tools": [_shell()]}
    calls = _function_calls(server, body)
    assert [c["name"] for c in calls] == ["exec_command"]
    assert set(json.loads(calls[0]["arguments"])) == {"cmd"}, calls[0]["arguments"]


def test_outside_agent_mode_a_named_tool_call_still_fills_optional_arguments(make_reference):
    """Only the scripted agent is trimmed: a plain server's calls keep exercising optional
    properties (the TOOLS checks judge them)."""
    server = make_reference(api_key=TEST_KEY)
    body = {
        "model": "ref-tiny",
        "input": "Run cat README.md.",
        "tools": [_shell()],
        "tool_choice": "required",
    }
    calls = _function_calls(server, body)
    assert len(json.loads(calls[0]["arguments"])) > 1, calls[0]["arguments"]


def test_agent_mode_runs_the_command_the_users_turn_quotes(make_reference):
    """A coding agent's task quotes its command ("Run `cat README.md` in the shell"): the scripted
    call runs that, not a random string that may name a program waiting on its terminal (CI saw
    Codex finish a tool task with no command run, 2026-12-07)."""
    server = make_reference(api_key=TEST_KEY, agent=True)
    prompt = "Run `cat README.md` in the shell, then say in one line what this project is."
    body = {
        "model": "ref-tiny",
        "input": [
            {"role": "user", "content": "<environment_context>cwd: /tmp</environment_context>"},
            {"role": "user", "content": [{"type": "input_text", "text": prompt}]},
        ],
        "tools": [_shell()],
    }
    (call,) = _function_calls(server, body)
    assert json.loads(call["arguments"]) == {"cmd": "cat README.md"}, call["arguments"]
    body = {
        "model": "ref-tiny",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
        "tools": [{"name": "Bash", "input_schema": _schema("command")}],
    }
    data = _post(server, "/messages", body).json()
    assert data["content"][-1]["input"] == {"command": "cat README.md"}, data
