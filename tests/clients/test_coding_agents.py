"""Claude Code and Codex CLI as real clients (issue 44): pointed at the target and quieted by
their documented switches, the key by environment only; against the reference's scripted agent
mode both stream and run a read-only tool; each fails by name, with the request and the answer
that broke it, on the reference fault that refuses what it always sends. The live runs need the
clients in the cache (skipped otherwise, unless SERVECHECK_REQUIRE_CLIENTS names them)."""

from __future__ import annotations

import json

import pytest

from servecheck.clients.catalog import CLIENTS, SCRIPTS, task_argv
from servecheck.clients.run import AGENT_CONTEXT, _env
from tests.clients.test_clients_command import _ready, _servecheck

# (client, route, the fault that refuses what it always sends, what the 400 says)
BREAKS = [
    pytest.param(
        "claude-code",
        "messages",
        "messages-system-role-rejected",
        "must be user or assistant, got 'system'",
        id="claude-code-system-role",
    ),
    pytest.param(
        "codex",
        "responses",
        "responses-builtin-tools-rejected",
        "must be {type: function, name, parameters}",
        id="codex-builtin-tools",
    ),
]
# What each client's tool task says when its tool really ran (clients.json)
RAN = {"claude-code": "Read asked for 1 time(s), 1 tool result(s) sent", "codex": "1 shell command"}


def test_the_coding_agents_are_pinned_on_their_own_routes():
    assert (CLIENTS["claude-code"].packages, CLIENTS["claude-code"].routes) == (
        ("@anthropic-ai/claude-code@2.1.332",),
        ("messages",),
    )
    assert (CLIENTS["codex"].packages, CLIENTS["codex"].routes) == (
        ("@openai/codex@0.171.0",),
        ("responses",),
    )


def test_every_documented_quiet_switch_is_set(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-caller-own")
    env = _env(CLIENTS["claude-code"], "http://127.0.0.1:9/v1", "sk-target", "m", "messages", 5)
    for name in (
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "DISABLE_TELEMETRY",
        "DISABLE_ERROR_REPORTING",
        "DISABLE_AUTOUPDATER",
    ):
        assert env.get(name) == "1", name
    assert "ANTHROPIC_API_KEY" not in env, "the caller's own Anthropic key reaches the client"
    codex = SCRIPTS["codex_task.mjs"]
    for line in (
        "check_for_update_on_startup = false",
        "[analytics]\nenabled = false",
        "[feedback]\nenabled = false",
        '[otel]\nexporter = "none"',
        "[features]\nplugins = false",
        'wire_api = "responses"',
        'env_key = "SERVECHECK_TARGET_KEY"',
    ):
        assert line in codex, line


@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_the_key_never_reaches_argv(tmp_path, monkeypatch, name):
    """The key goes to the script by environment and from there to the client by environment
    (Claude Code's ANTHROPIC_AUTH_TOKEN, Codex's env_key): no argument carries it."""
    monkeypatch.setenv("SERVECHECK_CACHE", str(tmp_path))
    CLIENTS[name].folder.mkdir(parents=True)
    argv = task_argv(CLIENTS[name])
    assert not any("SC_API_KEY" in a or "sk-" in a for a in argv)
    script = SCRIPTS[CLIENTS[name].script]
    assert "SC.key" in script and "args" in script
    # the key appears in the script only as an environment value handed to the child
    uses = [line for line in script.splitlines() if "SC.key" in line]
    assert uses and all("ANTHROPIC_AUTH_TOKEN" in u or "SERVECHECK_TARGET_KEY" in u for u in uses)


def test_a_clients_run_gives_the_reference_room_for_an_agents_prompt():
    # Claude Code's prompt and tools are ~2.4k tokens in the reference's count, Codex's ~13k.
    assert AGENT_CONTEXT >= 32768


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in ("claude-code", "codex")])
def test_the_coding_agent_runs_its_tool_against_the_scripted_reference(tmp_path, name):
    _ready(name)
    done = _servecheck(tmp_path, "--client", name, "--run-id", "tool", "--timeout", "240")
    said = " ".join(done.stderr.split())
    assert done.returncode == 0, said + done.stdout
    data = json.loads((tmp_path / "tool" / "clients.json").read_text())
    (outcome,) = data["clients"]
    tasks = {t["task"]: t for t in outcome["tasks"]}
    assert set(tasks) == {"stream", "tool"}, tasks
    assert RAN[name] in tasks["tool"]["detail"], tasks["tool"]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "route", "fault", "refusal"), BREAKS)
def test_the_coding_agent_fails_by_name_on_what_it_depends_on(
    tmp_path, name, route, fault, refusal
):
    _ready(name)
    spec = CLIENTS[name]
    done = _servecheck(
        tmp_path, "--client", name, "--run-id", "fault", f"--reference-arg=--fault={fault}"
    )
    said = " ".join(done.stderr.split())
    assert done.returncode == 1, said + done.stdout
    assert f"{spec.label} on {route}: fails (protocol only)" in said
    assert f"{spec.label} on {route} broke on:" in done.stdout
    assert "HTTP/1.1 400 Bad Request" in done.stdout
    assert refusal in done.stdout
    assert "sk-ref-" not in done.stdout + done.stderr, "the embedded server's key is shown"


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in ("claude-code", "codex")])
def test_a_stalled_target_fails_each_task_within_its_bound(tmp_path, name):
    """Headers, then nothing: each task is killed at its share of --timeout (Codex's launcher
    with its native child, as one process group) and fails; a tool task that never got an
    answer is broken, not "not judged"."""
    from servecheck.reference.hostile import hostile

    _ready(name)
    with hostile("headers-then-stall", max_s=300) as server:
        (tmp_path / "targets.yaml").write_text(
            f"targets:\n  - name: stalled\n    base_url: {server.base_url}\n"
            "    models: [hostile-tiny]\n"
        )
        done = _servecheck(
            tmp_path,
            *("--targets-file", str(tmp_path / "targets.yaml"), "--target", "stalled"),
            *("--client", name, "--timeout", "24", "--run-id", "stall"),
        )
    said = " ".join(done.stderr.split())
    assert done.returncode == 1, said + done.stdout
    (outcome,) = json.loads((tmp_path / "stall" / "clients.json").read_text())["clients"]
    assert outcome["verdict"] == "fails", outcome
    assert [t["task"] for t in outcome["tasks"]] == ["stream", "tool"], outcome
    for task in outcome["tasks"]:
        assert task["ok"] is False and task["detail"].startswith("no end within 10 s"), task
