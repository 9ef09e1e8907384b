"""JSON-* and TOOLS-* beyond the fault matrix: legal deviations, inconclusive outputs, pinned messages."""

from __future__ import annotations

import dataclasses

import pytest

from servecheck.checks import CheckFailed, CheckSkipped, NonStrict, load_all, run_with_allowances
from servecheck.checks.surfaces import json as json_mode
from servecheck.checks.surfaces import tools
from servecheck.client.http import Exchange, StreamResult
from tests.support import TEST_KEY, context_for

CHECKS = load_all()


def test_tool_finish_stop_is_non_strict_where_the_profile_allows_it(make_reference):
    server = make_reference("tools-finish-stop", api_key=TEST_KEY)
    ctx = context_for(server, "TOOLS-FINISH")
    ctx.profile = dataclasses.replace(
        ctx.profile, deviations={"tool-finish-stop": "engine X answers 'stop' (evidence)"}
    )
    try:
        with pytest.raises(NonStrict, match="engine X answers 'stop'"):
            run_with_allowances(CHECKS["TOOLS-FINISH"], ctx)
    finally:
        ctx.client.close()


def test_named_tool_failure_message_is_pinned(make_reference):
    server = make_reference("tools-wrong-name", api_key=TEST_KEY)
    ctx = context_for(server, "TOOLS-NAMED")
    try:
        with pytest.raises(CheckFailed) as excinfo:
            run_with_allowances(CHECKS["TOOLS-NAMED"], ctx)
    finally:
        ctx.client.close()
    lines = str(excinfo.value).splitlines()
    assert lines[:3] == [
        "TOOLS-NAMED: the named tool_choice did not call 'get_time'",
        "  Expected: tool_calls naming only 'get_time'",
        "  Received: calls to ['get_time_other']",
    ]
    assert lines[3].startswith("  Hint: the named tool_choice is ignored")
    assert lines[4].startswith("  Reproduce: curl ") and '"parallel_tool_calls": false' in lines[4]


def _stream_exchange(chunks):
    ex = Exchange(
        method="POST",
        url="http://x/v1/chat/completions",
        request_headers={},
        request_body={},
        status=200,
    )
    ex.stream = StreamResult(chunks=chunks, done=True)
    return ex


def _delta(tool_call):
    return {"choices": [{"index": 0, "delta": {"tool_calls": [tool_call]}, "finish_reason": None}]}


def test_stream_reassembly_flags_a_repeated_name_and_a_missing_index():
    ex = _stream_exchange(
        [
            _delta(
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": ""},
                }
            ),
            _delta({"index": 0, "function": {"name": "get_time", "arguments": '{"zone": '}}),
            _delta({"function": {"arguments": '"UTC", "hour24": true}'}}),
        ]
    )
    calls, problems = tools._stream_calls(None, ex)  # type: ignore[arg-type]
    assert calls[0]["arguments"] == '{"zone": "UTC", "hour24": true}'
    assert any("without an integer index" in p for p in problems)
    assert any("arrived 2 times" in p for p in problems)


def test_stream_reassembly_accepts_openai_deltas():
    ex = _stream_exchange(
        [
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": None},
                        "finish_reason": None,
                    }
                ]
            },
            _delta(
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": ""},
                }
            ),
            _delta({"index": 0, "function": {"arguments": '{"zone":"UTC",'}}),
            _delta({"index": 0, "function": {"arguments": '"hour24":false}'}}),
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        ]
    )
    calls, problems = tools._stream_calls(None, ex)  # type: ignore[arg-type]
    assert problems == []
    assert calls == {
        0: {"id": "call_1", "names": ["get_time"], "arguments": '{"zone":"UTC","hour24":false}'}
    }


@pytest.fixture
def json_ctx(reference):
    ctx = context_for(reference, "JSON-OBJECT")
    yield ctx
    ctx.client.close()


def _choice(content, finish):
    return {
        "index": 0,
        "message": {"role": "assistant", "content": content},
        "finish_reason": finish,
    }


def test_an_open_object_at_length_is_inconclusive_for_json_object(json_ctx):
    with pytest.raises(CheckSkipped, match="inconclusive"):
        json_mode._parse(
            json_ctx,
            _choice('{"colour": "bl', "length"),
            None,
            what="x",
            hint="h",
            cut_is_inconclusive=True,
        )


def test_an_open_object_at_length_fails_a_bounded_schema(json_ctx):
    with pytest.raises(
        CheckFailed, match="did not finish within 160 tokens although the schema is bounded"
    ):
        json_mode._parse(
            json_ctx,
            _choice('{"name": "bl', "length"),
            None,
            what="x",
            hint="h",
            cut_is_inconclusive=False,
        )


@pytest.mark.parametrize(
    "content",
    [
        pytest.param('```json\n{"a": 1}\n```', id="code-fence"),
        pytest.param('Sure! {"a": 1}', id="prose-prefix"),
        pytest.param("", id="empty"),
    ],
)
def test_json_mode_rejects_non_json_content(json_ctx, content):
    with pytest.raises(CheckFailed) as excinfo:
        json_mode._parse(
            json_ctx,
            _choice(content, "stop"),
            None,
            what="the json_object answer",
            hint=json_mode.HINT_OBJECT,
            cut_is_inconclusive=True,
        )
    assert str(excinfo.value).startswith("JSON-OBJECT: the json_object answer is not valid JSON")
    assert "Hint: JSON mode is ignored: enable guided decoding" in str(excinfo.value)
