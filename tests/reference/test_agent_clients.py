"""The reference accepts what the agent clients send (issue 44): a system-role message inside
Messages' messages, adaptive thinking, the clients' newer fields, non-function tools on
Responses (declined, never called), a default output length that is the context's room; and its
scripted agent mode (--agent) asks for the first offered tool once, then answers."""

from __future__ import annotations

import httpx
import pytest

from tests.support import TEST_KEY

AUTH = {"Authorization": f"Bearer {TEST_KEY}", "anthropic-version": "2023-06-01"}
WEATHER_FN = {
    "type": "function",
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def _post(server, path, body):
    return httpx.post(server.base_url + path, json=body, headers=AUTH, timeout=30)


def _message(**extra):
    return {
        "model": "ref-tiny",
        "max_tokens": 32,
        "messages": [
            {"role": "system", "content": "Agents: general-purpose, Explore."},
            {"role": "user", "content": "Say hello."},
        ],
    } | extra


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({}, id="system-role-message"),
        pytest.param({"thinking": {"type": "adaptive"}}, id="adaptive-thinking"),
        pytest.param(
            {
                "context_management": {"edits": [{"type": "clear_thinking_20251015"}]},
                "output_config": {"effort": "high"},
                "metadata": {"user_id": "user_0"},
            },
            id="newer-fields",
        ),
    ],
)
def test_messages_accepts_claude_codes_fields(reference, extra):
    resp = _post(reference, "/messages", _message(**extra))
    assert resp.status_code == 200, resp.text
    assert resp.json()["content"][0]["type"] == "text"


def test_the_system_role_message_reaches_the_prompt(reference):
    with_it = _post(reference, "/messages", _message()).json()["usage"]["input_tokens"]
    body = _message()
    body["messages"] = body["messages"][1:]
    without = _post(reference, "/messages", body).json()["usage"]["input_tokens"]
    assert with_it > without


@pytest.mark.parametrize(
    "fault,extra,said",
    [
        pytest.param("messages-system-role-rejected", {}, "got 'system'", id="system-role"),
        pytest.param(
            "messages-thinking-adaptive-rejected",
            {"thinking": {"type": "adaptive"}},
            "thinking must be",
            id="adaptive",
        ),
        pytest.param(
            "messages-extra-fields-rejected",
            {"output_config": {"effort": "high"}},
            "output_config: Extra inputs are not permitted",
            id="extra-fields",
        ),
    ],
)
def test_messages_faults_refuse_the_shape(make_reference, fault, extra, said):
    server = make_reference(fault, api_key=TEST_KEY)
    resp = _post(server, "/messages", _message(**extra))
    assert resp.status_code == 400
    assert said in resp.json()["error"]["message"]


def _response(**extra):
    return {"model": "ref-tiny", "input": "Say hello.", "temperature": 0} | extra


HOSTED = [
    {"type": "web_search"},
    {"type": "namespace", "name": "multi_agent", "tools": [WEATHER_FN]},
    {"type": "custom", "name": "apply_patch", "format": {"type": "text"}},
]


def test_responses_declines_hosted_tools_and_calls_only_functions(make_reference):
    server = make_reference(api_key=TEST_KEY, agent=True)
    resp = _post(server, "/responses", _response(tools=[*HOSTED, WEATHER_FN]))
    assert resp.status_code == 200, resp.text
    calls = [i for i in resp.json()["output"] if i["type"] == "function_call"]
    assert [c["name"] for c in calls] == ["get_weather"]


def test_responses_still_refuses_a_tool_type_nobody_defined(reference):
    resp = _post(reference, "/responses", _response(tools=[{"type": "servecheck_bogus"}]))
    assert resp.status_code == 400


def test_responses_builtin_tools_fault_refuses_the_request(make_reference):
    server = make_reference("responses-builtin-tools-rejected", api_key=TEST_KEY)
    resp = _post(server, "/responses", _response(tools=HOSTED))
    assert resp.status_code == 400
    assert "tools[0]" in resp.json()["error"]["message"]


def test_responses_without_max_output_tokens_is_not_cut_at_16(reference, make_reference):
    """The reference's natural answer for this prompt is longer than 16 tokens: the clean server
    completes it; the fault cuts it at 16 and marks it incomplete."""
    clean = _post(reference, "/responses", _response()).json()
    assert clean["status"] == "completed", clean
    assert clean["usage"]["output_tokens"] > 16
    server = make_reference("responses-default-length-16", api_key=TEST_KEY)
    cut = _post(server, "/responses", _response()).json()
    assert cut["status"] == "incomplete"
    assert cut["usage"]["output_tokens"] == 16


def test_agent_mode_calls_the_first_tool_once_then_answers(make_reference):
    server = make_reference(api_key=TEST_KEY, agent=True)
    tools = [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
        for n in ("read_file", "list_dir")
    ]
    ask = [{"role": "user", "content": "What is in the project?"}]
    first = _post(
        server,
        "/chat/completions",
        {"model": "ref-tiny", "max_tokens": 64, "messages": ask, "tools": tools},
    ).json()
    call = first["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "read_file"
    answered = [
        *ask,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "a readme"},
    ]
    second = _post(
        server,
        "/chat/completions",
        {"model": "ref-tiny", "max_tokens": 64, "messages": answered, "tools": tools},
    ).json()
    assert second["choices"][0]["message"].get("tool_calls") in (None, [])
    assert second["choices"][0]["message"]["content"]


def test_without_agent_mode_an_unnamed_tool_is_not_called(reference):
    tools = [
        {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
    ]
    ask = [{"role": "user", "content": "What is in the project?"}]
    first = _post(
        reference,
        "/chat/completions",
        {"model": "ref-tiny", "max_tokens": 64, "messages": ask, "tools": tools},
    ).json()
    assert not first["choices"][0]["message"].get("tool_calls")


def test_agent_mode_on_messages_calls_the_first_tool(make_reference):
    server = make_reference(api_key=TEST_KEY, agent=True)
    tool = {"name": "Read", "input_schema": {"type": "object", "properties": {}}}
    body = _message(tools=[tool])
    data = _post(server, "/messages", body).json()
    assert data["stop_reason"] == "tool_use"
    assert data["content"][-1]["name"] == "Read"


def test_a_context_too_small_for_the_replay_skips_it_naming_the_refusal(make_reference):
    """A CI model's small context refusing the replay's size is no shape refusal: skipped."""
    from servecheck.checks import CheckSkipped, load_all, run_with_allowances
    from tests.support import context_for

    server = make_reference(api_key=TEST_KEY, max_model_len=64)
    ctx = context_for(server, "CLIENT-SHAPE-CLAUDE-CODE")
    try:
        with pytest.raises(CheckSkipped, match="context cannot hold Claude Code 2.1.332's"):
            run_with_allowances(load_all()["CLIENT-SHAPE-CLAUDE-CODE"], ctx)
    finally:
        ctx.client.close()
