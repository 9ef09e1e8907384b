"""Client shapes (issue 44): ``servecheck clients --record-shapes`` writes the fixtures that
CLIENT-SHAPE-* replays, sanitised and the same on every run; and the chat clients' parser rules
those checks judge by. The faults that break each rule are in the fault matrix
(tests/test_fault_matrix.py); here, each rule on a stream made by hand, and a real recording.
"""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from servecheck.checks.surfaces.client_shapes_chat import (
    AGENTS,
    AI_SDK,
    LANGCHAIN,
    OPENCODE,
    completion_problems,
    stream_problems,
)
from servecheck.clients import netns
from servecheck.clients.catalog import CLIENTS
from servecheck.clients.shapes import (
    ShapesSpec,
    fixture,
    parse_request,
    pick,
    record_shapes,
    requests_of,
    sanitise,
)
from tests.clients.test_clients_command import _ready, _servecheck

SHIPPED = resources.files("servecheck.checks").joinpath("data", "client_shapes")


def _raw(body: dict, *, chunked: bool = False, **headers: str) -> bytes:
    data = json.dumps(body).encode()
    head = "".join(f"{k.replace('_', '-')}: {v}\r\n" for k, v in headers.items())
    if chunked:
        head += "Transfer-Encoding: chunked\r\n"
        data = b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)
    else:
        head += f"Content-Length: {len(data)}\r\n"
    return f"POST /v1/chat/completions HTTP/1.1\r\n{head}\r\n".encode() + data


def test_a_recorded_request_is_sanitised_and_made_stable():
    body = {
        "model": "ref-tiny",
        "prompt_cache_key": "0f8e2a9c-1b3d-4e5f-8a7b-9c0d1e2f3a4b",
        "messages": [
            {
                "role": "system",
                "content": "cwd /root/.cache/x/opencode-1\nToday: Sun Dec 06 2026",
                "anthropic-version": "2023-06-01",
            }
        ],
    }
    raw = _raw(
        body,
        chunked=True,
        authorization="Bearer sk-secret",
        cookie="s=1",
        x_api_key="sk-two",
        user_agent="opencode/1.18.33",
        x_stainless_lang="python",
        x_stainless_retry_count="0",
        host="127.0.0.1:4000",
    )
    req = parse_request(raw)
    assert req is not None
    headers, clean = sanitise(req, "/root/.cache/x/opencode-1", "2026-12-06")
    assert headers == {"user-agent": "opencode/1.18.33", "x-stainless-lang": "python"}
    assert clean == {
        "model": "MODEL",
        "prompt_cache_key": "RANDOM-ID",
        "messages": [
            {
                "role": "system",
                "content": "cwd /work/project\nToday: DAY",
                "anthropic-version": "2023-06-01",  # a date, but not the day of the recording
            }
        ],
    }
    assert "sk-" not in json.dumps([headers, clean])


def test_the_tool_tasks_first_request_is_picked_whatever_the_connection_order():
    plain = {"model": "m", "messages": [{"role": "user", "content": "Say hello."}]}
    tools = [{"type": "function", "function": {"name": "read_file"}}]
    first = {"model": "m", "tools": tools, "messages": [{"role": "user", "content": "Q"}]}
    second = {**first, "messages": [*first["messages"], {"role": "tool", "content": "r"}]}
    # a kept-alive connection carries the stream task, then the tool task's second turn
    older = netns.Exchange(bytearray(_raw(plain) + _raw(second)), bytearray())
    newer = netns.Exchange(bytearray(_raw(first)), bytearray())
    picked = pick(requests_of([older, newer]), "chat")
    assert picked is not None and picked.body == first
    assert pick(requests_of([older]), "responses") is None


def test_a_fixture_names_the_client_its_version_and_how_it_was_recorded():
    req = parse_request(_raw({"model": "x", "tools": [{}], "stream": True}, user_agent="u"))
    assert req is not None
    data = json.loads(fixture(CLIENTS["langchain"], "chat", req, "2026-12-06"))
    assert {k: data[k] for k in ("client", "package", "version", "route")} == {
        "client": "LangChain (langchain-openai)",
        "package": "langchain-openai",
        "version": "1.8.1",
        "route": "/chat/completions",
    }
    assert data["source"].startswith(
        "recorded 2026-12-06 by servecheck's shape recorder: the streamed tool task of "
        "LangChain (langchain-openai) 1.8.1"
    )


def test_record_shapes_against_anything_but_the_reference_is_a_usage_error(tmp_path):
    done = _servecheck(tmp_path, "--record-shapes", str(tmp_path), "--target", "local-vllm")
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith("--record-shapes: shapes are recorded against the reference only")
    )
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_recording_langchain_twice_writes_the_shipped_fixture(tmp_path):
    """The cheapest real client, recorded by the command against the reference, twice: both
    runs write the fixture that ships, byte for byte (the day is the shipped one's)."""
    _ready("langchain")
    shipped = SHIPPED.joinpath("langchain.json").read_text(encoding="utf-8")
    day = re.search(r"recorded (\d{4}-\d{2}-\d{2})", shipped)
    assert day is not None
    done = _servecheck(tmp_path, "--record-shapes", str(tmp_path / "a"), "--client", "langchain")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "1 written in" in done.stdout
    again = record_shapes(ShapesSpec(tmp_path / "b", ("langchain",), today=day.group(1)))
    assert [r.reason for r in again] == [""]
    written = (tmp_path / "b" / "langchain.json").read_text(encoding="utf-8")
    assert written == shipped
    first = (tmp_path / "a" / "langchain.json").read_text(encoding="utf-8")
    assert first.replace(first.split('"source": ')[1].split("\n")[0], "") == written.replace(
        written.split('"source": ')[1].split("\n")[0], ""
    )


def _chunk(delta: dict | None = None, finish: str | None = None, **extra) -> dict:
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return {"choices": [choice], **extra}


CALL = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
ARGS = {"index": 0, "function": {"arguments": "{}"}}
GOOD = [_chunk({"tool_calls": [CALL]}), _chunk({"tool_calls": [ARGS]}), _chunk(finish="tool_calls")]
USAGE = {"stream_options": {"include_usage": True}}
USAGE_CHUNK = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}


@pytest.mark.parametrize(
    "rules",
    [
        pytest.param(r, id=n)
        for n, r in [
            ("ai-sdk", AI_SDK),
            ("opencode", OPENCODE),
            ("agents", AGENTS),
            ("langchain", LANGCHAIN),
        ]
    ],
)
def test_a_clean_tool_call_stream_passes_every_clients_rules(rules):
    assert stream_problems([*GOOD, USAGE_CHUNK], USAGE, rules) == []


@pytest.mark.parametrize("rules", [AI_SDK, OPENCODE, AGENTS, LANGCHAIN])
def test_a_stream_without_any_choice_is_no_answer_for_any_client(rules):
    """CI's audit found CLIENT-SHAPE-LANGCHAIN and -OPENAI-AGENTS passing on a sign-in page
    answered 200: no chunk, so none of their rules had anything to object to."""
    assert stream_problems([], {}, rules)[0].startswith("no chunk carries a choice")


@pytest.mark.parametrize(
    "rules,chunks,body,error,said",
    [
        pytest.param(
            AGENTS,
            GOOD,
            {},
            {"message": "boom"},
            "an error object in the 200 stream",
            id="error-object",
        ),
        pytest.param(
            AI_SDK,
            [*GOOD, {"usage": {}}],
            USAGE,
            None,
            "a chunk without a choices list",
            id="usage-chunk-without-choices",
        ),
        pytest.param(
            AI_SDK, GOOD[:2], {}, None, "the stream ends without a finish_reason", id="no-finish"
        ),
        pytest.param(
            AI_SDK,
            GOOD,
            USAGE,
            None,
            "include_usage was asked, but no chunk",
            id="usage-asked-none-sent",
        ),
        pytest.param(
            AI_SDK,
            [_chunk({"tool_calls": [ARGS]})],
            {},
            None,
            "a tool call's first delta names no function",
            id="first-delta-nameless",
        ),
        pytest.param(
            OPENCODE,
            [_chunk({"tool_calls": [{**CALL, "id": None}]})],
            {},
            None,
            "a tool call's first delta has no id",
            id="first-delta-without-id",
        ),
        pytest.param(
            LANGCHAIN,
            [_chunk({"tool_calls": [{"function": {"arguments": "{}"}}]})],
            {},
            None,
            "a tool-call delta without an index",
            id="delta-without-index",
        ),
        pytest.param(
            AGENTS,
            [_chunk(finish="tool_calls")],
            {},
            None,
            "finish_reason tool_calls, but no tool-call delta",
            id="tool-calls-no-call",
        ),
    ],
)
def test_each_clients_rule_names_what_breaks_it(rules, chunks, body, error, said):
    problems = stream_problems(chunks, body, rules, error)
    assert any(p.startswith(said) for p in problems), problems


def test_pydantic_ai_validation_rules():
    good = {
        "created": 1,
        "choices": [
            {
                "message": {
                    "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    assert completion_problems(good) == []
    assert completion_problems({**good, "created": 1.5}) == ["created is 1.5, not an integer"]
    assert completion_problems({**good, "choices": []})[0].startswith("choices is []")
    bad_args = {
        "message": {"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}]}
    }
    assert completion_problems({**good, "choices": [bad_args]}) == [
        "tool-call arguments are not a string: {}"
    ]
