"""The load generator's reader of Anthropic's Messages stream (servecheck/load/generator/anthropic_events.py)
and the request the messages API sends (servecheck/load/generator/apis.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servecheck.client.sse import MAX_EVENT_BYTES
from servecheck.errors import SpecError
from servecheck.load.generator.anthropic_events import MessagesStreamState, parse_messages_bytes
from servecheck.load.generator.apis import api_headers, new_state, request_for, resolve_api
from servecheck.load.generator.stream import classify, record_from_stream, record_phases
from servecheck.load.generator.wire import WireResult
from servecheck.load.plan import load_plan
from servecheck.load.workload.planned import PlannedRequest
from servecheck.records.record import RequestRecord


def ev(obj: dict[str, Any], name: str | None = None) -> bytes:
    head = f"event: {name or obj['type']}\n"
    return (head + f"data: {json.dumps(obj)}\n\n").encode()


def start(input_tokens: int = 12, **usage: int) -> bytes:
    message = {"id": "m", "type": "message", "role": "assistant", "content": []}
    return ev(
        {
            "type": "message_start",
            "message": {
                **message,
                "usage": {"input_tokens": input_tokens, "output_tokens": 1, **usage},
            },
        }
    )


def delta(kind: str, key: str, text: str, index: int = 0) -> bytes:
    return ev({"type": "content_block_delta", "index": index, "delta": {"type": kind, key: text}})


def block(index: int, kind: str) -> bytes:
    return ev({"type": "content_block_start", "index": index, "content_block": {"type": kind}})


def stop(index: int) -> bytes:
    return ev({"type": "content_block_stop", "index": index})


def end(output_tokens: int) -> list[bytes]:
    return [
        ev(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": output_tokens},
            }
        ),
        ev({"type": "message_stop"}),
    ]


THINK_THEN_TEXT = [
    start(),
    ev({"type": "ping"}),
    block(0, "thinking"),
    delta("thinking_delta", "thinking", "let me"),
    delta("thinking_delta", "thinking", " see"),
    delta("signature_delta", "signature", "c2ln"),  # no token
    stop(0),
    block(1, "text"),
    delta("text_delta", "text", "", 1),  # an empty delta: no token
    delta("text_delta", "text", "Hello", 1),
    ev({"type": "ping"}),
    delta("text_delta", "text", " world", 1),
    stop(1),
    *end(6),
]


def timed(events: list[bytes], step: float = 0.1) -> list[tuple[bytes, float]]:
    return [(e, round((i + 1) * step, 3)) for i, e in enumerate(events)]


def test_thinking_then_text_gives_chat_phases_ttft_ttfa_itls_and_usage() -> None:
    st = parse_messages_bytes(timed(THINK_THEN_TEXT))
    assert st.done and not st.problem
    # TTFT: the first content delta of any kind (thinking); TTFA: the first text delta
    assert st.t_first == 0.4 and st.t_first_reasoning == 0.4 and st.t_first_answer == 1.0
    assert st.token_times == [0.4, 0.5, 1.0, 1.2] and st.reasoning_at == [0, 1]
    r_itls, a_itls = st.phase_itls()
    assert r_itls == [pytest.approx(0.1)] and a_itls == [pytest.approx(0.2)]
    assert st.usage == {"completion_tokens": 6, "prompt_tokens": 12}
    assert st.reply == "Hello world"
    rec = RequestRecord("t", "messages", "w", 1, 0.0, 0.0)
    record_from_stream(rec, ttft=st.t_first, e2e=1.5, token_times=st.token_times, usage=st.usage)
    record_phases(rec, st, 0.0)
    assert (rec.ttft, rec.ttfa, rec.ttfr) == (0.4, 1.0, 0.4)
    assert rec.output_tokens == 6 and rec.prompt_tokens == 12 and rec.output_tokens_client == 4
    assert rec.itls == pytest.approx([0.1, 0.5, 0.2])
    assert rec.reasoning_tokens_client == 2


def test_text_only_stream_ttft_is_ttfa_and_message_start_output_is_not_taken() -> None:
    events = [
        start(),
        block(0, "text"),
        delta("text_delta", "text", "a"),
        delta("text_delta", "text", "b"),
        stop(0),
    ]
    st = parse_messages_bytes(timed([*events, ev({"type": "message_stop"})]))
    assert st.done and st.t_first == st.t_first_answer == 0.3 and not st.reasoning_at
    # message_start's output_tokens (1) is a placeholder: without message_delta there is no usage
    assert st.usage is None


def test_tool_input_json_deltas_are_answer_tokens() -> None:
    events = [
        start(),
        block(0, "tool_use"),
        delta("input_json_delta", "partial_json", '{"a":'),
        delta("input_json_delta", "partial_json", "1}"),
        stop(0),
        *end(2),
    ]
    st = parse_messages_bytes(timed(events))
    assert len(st.token_times) == 2 and st.t_first_answer == 0.3 and st.reply == ""


def test_cache_counts_become_prompt_tokens_and_cached_tokens() -> None:
    events = [
        start(5, cache_read_input_tokens=90, cache_creation_input_tokens=3),
        delta("text_delta", "text", "x"),
        *end(1),
    ]
    st = parse_messages_bytes(timed(events))
    assert st.usage == {
        "completion_tokens": 1,
        "prompt_tokens": 98,
        "prompt_tokens_details": {"cached_tokens": 90},
    }


def test_message_delta_input_tokens_win_over_message_start() -> None:
    last = ev(
        {"type": "message_delta", "delta": {}, "usage": {"input_tokens": 40, "output_tokens": 2}}
    )
    st = parse_messages_bytes(
        timed([start(10), delta("text_delta", "text", "x"), last, ev({"type": "message_stop"})])
    )
    assert st.usage == {"completion_tokens": 2, "prompt_tokens": 40}


def ok_result() -> WireResult:
    return WireResult(status=200, headers={"content-type": "text/event-stream"})


def test_error_event_is_a_stream_error_naming_its_type() -> None:
    err = ev({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    st = parse_messages_bytes(timed([start(), delta("text_delta", "text", "x"), err]))
    assert classify(ok_result(), st) == (
        "stream-error",
        "error event: overloaded_error: Overloaded",
    )


def test_stream_without_message_stop_is_a_stream_error() -> None:
    st = parse_messages_bytes(timed([start(), delta("text_delta", "text", "x"), end(1)[0]]))
    assert classify(ok_result(), st) == (
        "stream-error",
        "the stream ended without event: message_stop",
    )


def test_a_complete_stream_is_a_success_and_done_after_stop_is_ignored() -> None:
    events = [*THINK_THEN_TEXT, b"data: [DONE]\n\n", delta("text_delta", "text", "late")]
    st = parse_messages_bytes(timed(events))
    assert classify(ok_result(), st) == (None, "") and len(st.token_times) == 4


def test_non_json_data_is_invalid_sse() -> None:
    st = parse_messages_bytes(timed([start(), b"event: content_block_delta\ndata: {not json\n\n"]))
    assert classify(ok_result(), st)[0] == "invalid-sse"


def test_an_endless_event_is_bounded_as_the_chat_reader_bounds_it() -> None:
    st = MessagesStreamState()
    why = None
    piece = b"event: content_block_delta\ndata: {" + b"x" * 65536
    for i in range(MAX_EVENT_BYTES // 65536 + 2):
        why = st.feed(piece if i == 0 else b"x" * 65536, float(i))
        if why:
            break
    assert why is not None and st.problem_kind == "too-large"
    assert classify(ok_result(), st)[0] == "too-large"


def test_crlf_framing_and_reads_split_anywhere_give_the_same_record() -> None:
    whole = b"".join(THINK_THEN_TEXT)
    ref = parse_messages_bytes([(whole, 1.0)])
    crlf = parse_messages_bytes([(whole.replace(b"\n", b"\r\n"), 1.0)])
    split = parse_messages_bytes([(whole[i : i + 7], 1.0) for i in range(0, len(whole), 7)])
    data_only = parse_messages_bytes(
        [(b"".join(b"\n".join(e.split(b"\n")[1:]) for e in THINK_THEN_TEXT), 1.0)]
    )  # no event: lines, the type in the data alone
    for st in (crlf, split, data_only):
        assert (st.done, st.reasoning_at, len(st.token_times), st.usage, st.reply) == (
            ref.done,
            ref.reasoning_at,
            len(ref.token_times),
            ref.usage,
            ref.reply,
        )
    assert ref.done and len(ref.token_times) == 4


def test_unknown_event_types_are_ignored() -> None:
    events = [
        start(),
        ev({"type": "future_event", "x": 1}),
        delta("citations_delta", "citation", "c"),
        delta("text_delta", "text", "a"),
        *end(1),
    ]
    st = parse_messages_bytes(timed(events))
    assert st.done and not st.problem and len(st.token_times) == 1


# ---- the request the messages API sends ---------------------------------------------------


def test_messages_body_lifts_system_and_turns_image_parts_into_blocks() -> None:
    url = "data:image/png;base64,iVBORw0KGgo="
    prompt = PlannedRequest(
        [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is it?"},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            },
        ],
        32,
    )
    path, body = request_for("messages", "m", prompt, {}, {})
    assert path == "/messages"
    assert body == {
        "model": "m",
        "max_tokens": 32,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is it?"},
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": "iVBORw0KGgo=",
                        },
                    },
                ],
            }
        ],
        "stream": True,
        "system": "be brief",
        "temperature": 0,
    }
    thinking = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    _, body = request_for("messages", "m", prompt, {}, thinking)
    assert body["thinking"] == thinking["thinking"] and "temperature" not in body
    path, chat = request_for("chat", "m", prompt, {}, {})
    assert path == "/chat/completions" and chat["messages"] is prompt.messages
    assert chat["stream_options"] == {"include_usage": True}


def test_messages_headers_and_states() -> None:
    assert api_headers("messages", "k") == {"anthropic-version": "2023-06-01", "x-api-key": "k"}
    assert api_headers("messages", None) == {"anthropic-version": "2023-06-01"}
    assert api_headers("chat", "k") == {}
    assert isinstance(new_state("messages"), MessagesStreamState)
    assert not isinstance(new_state("chat"), MessagesStreamState)


@pytest.mark.parametrize(
    ("api", "scenario", "expected"),
    [
        pytest.param(None, "chat", "chat", id="default-chat"),
        pytest.param(None, "messages", "messages", id="messages-scenario"),
        pytest.param(None, "scenarios/messages.py", "messages", id="messages-scenario-path"),
        pytest.param("messages", "dataset", "messages", id="dataset-over-messages"),
        pytest.param("messages", "messages", "messages", id="both-agree"),
    ],
)
def test_resolve_api(api: str | None, scenario: str, expected: str) -> None:
    assert resolve_api(api, scenario) == expected


@pytest.mark.parametrize(
    ("api", "scenario", "message"),
    [
        pytest.param("grpc", "chat", "api grpc: one of chat, messages", id="unknown-api"),
        pytest.param(
            "chat",
            "messages",
            "the messages scenario speaks the messages API, not api chat",
            id="contradiction",
        ),
        pytest.param(
            "messages",
            "tools",
            "scenario tools sends OpenAI-only request keys",
            id="chat-only-scenario",
        ),
    ],
)
def test_resolve_api_refuses(api: str, scenario: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        resolve_api(api, scenario)
    assert message in str(info.value)


def test_the_documented_thinking_plan_loads(tmp_path: Path) -> None:
    """docs/load.md's plan for extended thinking is a valid plan (docs that cannot rot)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "load.md").read_text()
    section = text.split("## Anthropic's Messages API", 1)[1].split("## Load with images", 1)[0]
    plan = tmp_path / "plan.yaml"
    plan.write_text(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    values = load_plan(plan).values
    assert values["scenario"] == "messages"
    assert values["extra_body"] == {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    _, body = request_for("messages", "m", PlannedRequest([], 8), {}, values["extra_body"])
    assert "temperature" not in body and body["thinking"]["budget_tokens"] == 1024
