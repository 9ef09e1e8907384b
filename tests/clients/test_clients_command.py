"""``servecheck clients``: real clients against the embedded reference (its scripted agent mode),
each in a network namespace; a verdict per client and route, and the request and answer that
broke a failing client. The runs need the clients in the cache: skipped, naming the install
command, where it is empty."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from servecheck.clients import netns
from servecheck.clients.catalog import CLIENTS
from servecheck.clients.run import UNJUDGED, broke, judge

ROOT = Path(__file__).resolve().parents[2]


def _servecheck(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVECHECK_REF_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "servecheck", "clients", "--out", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )


def test_an_unknown_client_is_a_usage_error(tmp_path):
    done = _servecheck(tmp_path, "--client", "openai-agent")
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith("--client: unknown client 'openai-agent' (did you mean \"openai-agents\"?)")
    )
    assert "Traceback" not in done.stderr


def _exchange(sent: bytes, received: bytes) -> netns.Exchange:
    return netns.Exchange(bytearray(sent), bytearray(received))


def test_broke_shows_the_refused_request_of_a_kept_alive_connection():
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    refused = b'HTTP/1.1 400 Bad Request\r\nContent-Length: 9\r\n\r\n{"e": 1}'
    first = b'POST /v1/chat/completions HTTP/1.1\r\nauthorization: Bearer sk-x\r\n\r\n{"n": 1}'
    second = b'POST /v1/chat/completions HTTP/1.1\r\n\r\n{"n": 2}'
    shown = broke([_exchange(first + second, ok + refused)])
    assert '{"n": 2}' in shown and "400 Bad Request" in shown
    assert '{"n": 1}' not in shown
    assert broke([]) == "no request reached the target"


def _ready(name: str) -> None:
    why = netns.unavailable()
    if why:
        pytest.skip(f"no network namespace here: {why}")
    if not CLIENTS[name].installed:
        message = (
            f"{CLIENTS[name].label} is not in the cache: "
            f"servecheck clients --install-only --client {name}"
        )
        # CI installs the clients first and lists them here: then a missing one fails.
        if name in os.environ.get("SERVECHECK_REQUIRE_CLIENTS", "").split():
            pytest.fail(message + " (CI installed it earlier)")
        pytest.skip(message)


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in CLIENTS])
def test_each_client_works_against_the_reference(tmp_path, name):
    _ready(name)
    done = _servecheck(tmp_path, "--client", name, "--run-id", "clean")
    said = " ".join(done.stderr.split())  # the per-client lines are stage lines, on stderr
    assert done.returncode == 0, said + done.stdout
    for route in CLIENTS[name].routes:
        assert f"{CLIENTS[name].label} on {route}: works (protocol only)" in said
    assert (tmp_path / "clean" / "clients.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", [pytest.param(n, id=n) for n in CLIENTS if "chat" in CLIENTS[n].routes]
)  # the others fail by name in their own files (tests/clients/test_coding_agents.py)
def test_each_client_fails_by_name_on_a_refused_tool_result(tmp_path, name):
    _ready(name)
    fault = "--reference-arg=--fault=tools-result-rejected"
    done = _servecheck(tmp_path, "--client", name, "--run-id", "fault", fault)
    said = " ".join(done.stderr.split())
    assert done.returncode == 1, said + done.stdout
    assert f"{CLIENTS[name].label} on chat: fails (protocol only)" in said
    assert f"{CLIENTS[name].title} {CLIENTS[name].version} on chat broke on:" in done.stdout
    assert "HTTP/1.1 400 Bad Request" in done.stdout
    assert "tool messages are not supported" in done.stdout
    assert "sk-ref-" not in done.stdout, "the embedded server's key is shown"


def _task(name, ok, unasked=False, detail="d"):
    return {"task": name, "ok": ok, "detail": detail, "unasked": unasked}


def test_a_random_model_that_never_asks_for_the_tool_leaves_it_unjudged():
    tasks = [_task("stream", True), _task("tool", False, unasked=True)]
    assert judge([dict(t) for t in tasks], random_model=True) == ("partial", f"tool: {UNJUDGED}")
    # the scripted reference (or a real model) must ask: there, not asking fails the client
    assert judge([dict(t) for t in tasks], random_model=False) == ("fails", "tool: d")
    raised = [_task("stream", True), _task("tool", False, detail="BadRequestError: 400")]
    assert judge(raised, random_model=True) == ("fails", "tool: BadRequestError: 400")
    assert judge([_task("stream", True), _task("tool", True)], random_model=True) == ("works", "")


def test_a_client_gets_the_targets_key_and_none_of_the_callers_secrets(monkeypatch):
    from servecheck.clients.run import _env

    monkeypatch.setenv("OPENAI_API_KEY", "sk-caller-own")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "caller-secret")
    env = _env(CLIENTS["ai-sdk"], "http://127.0.0.1:9/v1", "sk-target", "m", "chat", 5.0)
    assert env["SC_API_KEY"] == "sk-target" and env["DO_NOT_TRACK"] == "1"
    assert "OPENAI_API_KEY" not in env and "AWS_SECRET_ACCESS_KEY" not in env


@pytest.mark.slow
def test_a_route_the_target_does_not_serve_is_skipped_out_of_the_verdict(tmp_path, make_reference):
    _ready("openai-agents")
    server = make_reference(agent=True)  # a target of the user's own, in scripted agent mode
    (tmp_path / "targets.yaml").write_text(
        f"targets:\n  - name: mine\n    base_url: {server.base_url}\n"
        "    capabilities: {responses: false}\n"
    )
    done = _servecheck(
        tmp_path,
        "--targets-file",
        str(tmp_path / "targets.yaml"),
        "--target",
        "mine",
        "--client",
        "openai-agents",
    )
    said = " ".join(done.stderr.split())
    assert done.returncode == 0, said + done.stdout
    assert "OpenAI Agents SDK 0.24.0 on chat: works (protocol only)" in said
    assert "on responses: skipped (protocol only): the target declares {responses: false}" in said
