"""The strict schema profile (servecheck/checks/schema.py): the validator, where it hooks in,
and the outcomes it gives.

The fault matrix holds the rest: every check on the clean server and with every quirk passes
*strictly* (a schema finding would make it non-strict, which fails those tests), and the
profile-only fault is non-strict by default and a failure in strict mode.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from servecheck.checks import CheckFailed, NonStrict, load_all, run_with_allowances, schema
from servecheck.checks.registry import Check
from servecheck.client.http import Exchange, StreamResult
from tests.support import TEST_KEY, context_for

CHAT = "openai.types.chat:ChatCompletion"
CHUNK = "openai.types.chat:ChatCompletionChunk"
EVENT = "openai.types.responses:ResponseStreamEvent"
GOOD = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1718000000,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "hi"},
            "logprobs": None,
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


def _findings(spec: str, data: Any, **kw: Any) -> list[schema.Finding]:
    return schema.findings_for(spec, data, "/chat/completions", "body", **kw)


def _with(change: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    change(data)
    return data


# ---- the validator ---------------------------------------------------------------------------


def test_a_good_body_has_no_finding():
    assert _findings(CHAT, GOOD) == []


def test_unknown_fields_are_allowed():
    def extra(d: dict[str, Any]) -> None:
        d["x_engine"] = {"kv": 1}
        d["choices"][0]["stop_reason"] = None
        d["choices"][0]["message"]["reasoning_content"] = "thought"

    assert _findings(CHAT, _with(extra)) == []


@pytest.mark.parametrize(
    "value,json_type",
    [
        pytest.param("12", "a string", id="string"),
        pytest.param(12.5, "a number", id="float"),
        pytest.param(True, "a boolean", id="bool"),
    ],
)
def test_a_usage_count_of_another_json_type_is_a_type_finding(value, json_type):
    data = _with(lambda d: d["usage"].__setitem__("prompt_tokens", value))
    (f,) = _findings(CHAT, data)
    assert (f.path, f.rule, f.json_type) == ("usage.prompt_tokens", "type", json_type)
    assert f.describe().startswith(f"usage.prompt_tokens {f.value} is {json_type}; input should")


def test_an_enum_value_outside_the_set_is_an_enum_finding():
    (f,) = _findings(CHAT, _with(lambda d: d["choices"][0].__setitem__("finish_reason", "eos")))
    assert (f.path, f.rule, f.value) == ("choices[0].finish_reason", "enum", '"eos"')
    assert f.describe() == (
        "choices[0].finish_reason \"eos\" is not one of 'stop', 'length', 'tool_calls', "
        "'content_filter' or 'function_call' [/chat/completions body]"
    )


@pytest.mark.parametrize(
    "change,path",
    [
        pytest.param(lambda d: d.__setitem__("object", "chat"), "object", id="object"),
        pytest.param(
            lambda d: d["choices"][0]["message"].__setitem__("role", "bot"),
            "choices[0].message.role",
            id="role",
        ),
    ],
)
def test_object_and_role_are_enums(change, path):
    (f,) = _findings(CHAT, _with(change))
    assert (f.path, f.rule) == (path, "enum")


def test_a_missing_required_field_is_a_required_finding():
    (f,) = _findings(CHAT, _with(lambda d: d.pop("id")))
    assert (f.path, f.rule, f.value) == ("id", "required", "")
    assert f.describe() == "id is missing (required by ChatCompletion) [/chat/completions body]"


def test_a_union_reports_only_the_member_the_value_meant():
    """pydantic reports every member of a failed union; a tagged member is picked by ``type``."""
    event = {
        "type": "response.output_text.delta",
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "delta": "hi",
        "logprobs": [],
        "sequence_number": "3",
    }
    (f,) = schema.findings_for(EVENT, event, "/responses", "chunk 2")
    assert (f.path, f.rule, f.where) == ("sequence_number", "type", "chunk 2")


def test_an_unknown_event_type_is_one_enum_finding():
    (f,) = schema.findings_for(EVENT, {"type": "response.bogus"}, "/responses", "chunk 0")
    assert (f.path, f.rule, f.value) == ("type", "enum", '"response.bogus"')
    assert "'response.created'" in f.message
    assert len(f.describe()) < 300


def test_a_nested_union_item_is_narrowed_to_its_type():
    item = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "finished",
        "content": [{"type": "output_text", "text": "x", "annotations": []}],
    }
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "m",
        "output": [item],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": None,
        "temperature": 1.0,
        "top_p": 1.0,
    }
    found = schema.findings_for("openai.types.responses:Response", response, "/responses", "body")
    assert [(f.path, f.rule) for f in found] == [("output[0].status", "enum")]


def test_completions_stream_chunks_may_carry_a_null_finish_reason():
    """The SDK types the legacy stream's chunks with Completion, whose finish_reason is
    required; the API sends null until the last chunk. Null is accepted in a chunk only."""
    shape = schema.ROUTES[("POST", "/completions")]
    chunk = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "text": "hi", "finish_reason": None, "logprobs": None}],
    }
    spec = "openai.types:Completion"
    assert schema.findings_for(spec, chunk, "/completions", "chunk 0", shape=shape) == []
    (f,) = schema.findings_for(spec, chunk, "/completions", "body", shape=shape)
    assert f.path == "choices[0].finish_reason"
    chunk["choices"][0]["finish_reason"] = "eos"
    assert schema.findings_for(spec, chunk, "/completions", "chunk 0", shape=shape)


def test_base64_embeddings_are_strings_only_when_asked_for():
    shape = schema.ROUTES[("POST", "/embeddings")]
    body = {
        "object": "list",
        "model": "m",
        "data": [{"object": "embedding", "index": 0, "embedding": "AAAAAA=="}],
        "usage": {"prompt_tokens": 1, "total_tokens": 1},
    }
    spec = "openai.types:CreateEmbeddingResponse"
    asked = {"model": "m", "input": "x", "encoding_format": "base64"}

    def found(request: Any) -> list[schema.Finding]:
        return schema.findings_for(spec, body, "/embeddings", "body", shape=shape, request=request)

    assert found(asked) == []
    assert [f.path for f in found({"model": "m", "input": "x"})] == ["data[0].embedding"]


def test_routes_map_relative_to_the_base_url():
    base = "http://h:1/v1"
    assert schema.route_of("http://h:1/v1/chat/completions?x=1", base) == "/chat/completions"
    assert schema.route_of("http://h:1/tokenize", base) is None
    assert schema.shape_for("GET", "/models/ref-tiny") is schema.ROUTES[("GET", "/models/{id}")]
    assert schema.shape_for("POST", "/models") is None
    assert schema.shape_for("GET", "/models") is not None


def test_a_type_whose_package_is_missing_is_not_validated():
    """A route whose SDK is not installed is mapped but not validated."""
    spec = "servecheck_no_such_sdk.types:Message"
    assert schema.adapter(spec) is None
    assert schema.validate(spec, {"anything": 1}) == []


def _exchange(url: str, status: int, body: bytes = b"", *, chunks: list[Any] | None = None):
    ex = Exchange(method="POST", url=url, request_headers={}, request_body={}, status=status)
    ex.body = body
    if chunks is not None:
        ex.stream = StreamResult(chunks=chunks, done=True)
        ex.response_headers = {"content-type": "text/event-stream"}
    else:
        ex.response_headers = {"content-type": "application/json"}
    return ex


def test_error_answers_are_not_validated_against_success_types():
    found = schema.SchemaFindings()
    url = "http://h/v1/chat/completions"
    found.observe(_exchange(url, 400, b'{"error": {"message": "bad", "type": "x"}}'), "http://h/v1")
    found.observe(_exchange(url, 200, b'{"id": 1}'), "http://h/v1")
    assert [f.path for f in found.findings][:1] == ["id"]  # the 200 was validated, the 400 not


def test_findings_are_bounded_and_deduplicated():
    found = schema.SchemaFindings()
    bad = {"object": "x", "created": "1", "model": 2, "id": 3, "choices": [{"index": "0"}]}
    chunks = [copy.deepcopy(bad) for _ in range(200)]
    url = "http://h/v1/chat/completions"
    found.observe(_exchange(url, 200, chunks=chunks), "http://h/v1")
    assert len(found.findings) == schema.MAX_FINDINGS
    assert len({(f.path, f.rule) for f in found.findings}) == schema.MAX_FINDINGS
    assert found.more >= 1
    assert found.summary().endswith("more distinct finding(s)")


# ---- outcomes ------------------------------------------------------------------------------


def _one_request_check(stream: bool, fail: bool = False) -> Check:
    def func(ctx: Any) -> None:
        ex = ctx.stream_chat("Say hello.", max_tokens=4) if stream else ctx.chat("Say hello.")
        if fail:
            ctx.fail("its own defect", expected="x", received="y", exchange=ex)

    return Check("SCHEMA-PROBE", "probe", "probe", (), func)


def test_clean_answers_pass(reference):
    ctx = context_for(reference, "SCHEMA-PROBE")
    try:
        run_with_allowances(_one_request_check(stream=True), ctx)
    finally:
        ctx.client.close()
    assert ctx.schema.seen == 1 and not ctx.schema


@pytest.mark.parametrize(
    "strict",
    [
        pytest.param("off", id="off"),
        pytest.param("ctx", id="ctx"),
        pytest.param("target", id="target"),
    ],
)
def test_findings_make_a_pass_nonstrict_or_a_strict_failure(make_reference, strict):
    server = make_reference("schema-chunk-created-string", api_key=TEST_KEY)
    ctx = context_for(server, "SCHEMA-PROBE", **({"strict": True} if strict == "target" else {}))
    ctx.strict = strict == "ctx"
    try:
        if strict == "off":
            with pytest.raises(NonStrict) as ns:
                run_with_allowances(_one_request_check(stream=True), ctx)
            assert ns.value.kind == "schema"
            first = str(ns.value).splitlines()[0]
            assert first.startswith('SCHEMA-PROBE: non-strict (schema): created "')
            assert (
                "is a string; input should be a valid integer [/chat/completions chunk 0]" in first
            )
            assert "; fix: send each field with the JSON type" in first
            assert "would fail in strict mode" in str(ns.value)
        else:
            with pytest.raises(CheckFailed) as failed:
                run_with_allowances(_one_request_check(stream=True), ctx)
            assert failed.value.check_id == "SCHEMA-PROBE"
            assert "  Reproduce: curl" in str(failed.value)
    finally:
        ctx.client.close()


def test_a_check_that_fails_on_its_own_keeps_its_failure_with_the_findings(make_reference):
    server = make_reference("schema-chunk-created-string", api_key=TEST_KEY)
    ctx = context_for(server, "SCHEMA-PROBE")
    try:
        with pytest.raises(CheckFailed) as failed:
            run_with_allowances(_one_request_check(stream=True, fail=True), ctx)
    finally:
        ctx.client.close()
    text = str(failed.value)
    assert text.startswith("SCHEMA-PROBE: its own defect")
    assert "\n  Schema: created " in text


def test_the_profile_sees_every_route_the_catalogue_calls(reference, make_reference, monkeypatch):
    """On the clean server the whole catalogue gives no finding, and that is not vacuous: the
    chat body and chunks, the Responses body and events, the Messages body and events,
    embeddings and the model list were all validated."""
    from servecheck.reference.reasoning import ReasoningMode

    seen: dict[tuple[str, str], int] = {}
    real = schema.findings_for

    def counting(spec: str, data: Any, route: str, where: str, **kw: Any) -> Any:
        key = (route, where.split()[0])
        seen[key] = seen.get(key, 0) + 1
        return real(spec, data, route, where, **kw)

    monkeypatch.setattr(schema, "findings_for", counting)
    reasoning = make_reference(api_key=TEST_KEY, reasoning=ReasoningMode())
    # MESSAGES-THINKING: a context that holds Anthropic's minimum thinking budget
    thinking = make_reference(api_key=TEST_KEY, reasoning=ReasoningMode(), max_model_len=2048)
    # the IMAGE checks for vision models: a --vision server and a target declaring vision
    vision = make_reference(api_key=TEST_KEY, vision=True)
    lora = make_reference(api_key=TEST_KEY, lora=True)
    for check_id, check in load_all().items():
        is_reason = check_id.startswith("REASON-") or check_id == "MESSAGES-THINKING"
        is_vision = check_id.startswith("IMAGE-") and not check_id.endswith("-TEXT-ONLY")
        server = thinking if check_id == "MESSAGES-THINKING" else reasoning
        target: dict[str, Any] = {"reasoning": "auto"} if is_reason else {}
        if is_vision:
            server, target = vision, {"capabilities": {"vision": True}}
        if check_id.startswith("LORA-"):  # runtime adapters, and a target naming one to load
            server = lora
            target = {
                "capabilities": {"lora": True},
                "lora_adapter": {"name": "ref-lora", "path": "/"},
            }
        is_special = is_reason or is_vision or check_id.startswith("LORA-")
        ctx = context_for(server if is_special else reference, check_id, **target)
        try:
            run_with_allowances(check, ctx)  # a finding would raise NonStrict here
        finally:
            ctx.client.close()
    for key in [
        ("/chat/completions", "body"),
        ("/chat/completions", "chunk"),
        ("/responses", "body"),
        ("/responses", "chunk"),
        ("/embeddings", "body"),
        ("/models", "body"),
        ("/completions", "body"),
        ("/messages", "body"),
        ("/messages", "chunk"),
        ("/messages/count_tokens", "body"),
    ]:
        assert seen.get(key), f"the profile validated nothing of {key}: {seen}"


# ---- how strict mode flows -------------------------------------------------------------------


@pytest.mark.parametrize("command", ["check", "accept"])
def test_the_strict_option_reaches_the_pytest_command(command, tmp_path, monkeypatch):
    import argparse
    import importlib

    from servecheck.workflows.conformance import CheckSpec, build_pytest_command

    monkeypatch.delenv("SERVECHECK_STRICT", raising=False)
    module = importlib.import_module(f"servecheck.commands.{command}")
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    assert module.spec_from_args(parser.parse_args(["--strict"])).strict is True
    assert module.spec_from_args(parser.parse_args([])).strict is False
    monkeypatch.setenv("SERVECHECK_STRICT", "1")
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    assert module.spec_from_args(parser.parse_args([])).strict is True
    assert "--sc-strict" in build_pytest_command(CheckSpec(strict=True), tmp_path)
    assert "--sc-strict" not in build_pytest_command(CheckSpec(), tmp_path)


def test_accept_hands_strict_to_its_conformance_stage(monkeypatch, tmp_path):
    from servecheck.workflows import accept

    seen = []

    class Result:
        exit_code = 0

    monkeypatch.setattr(accept, "run_check", lambda spec: seen.append(spec) or Result())
    accept.run_conformance("reference", None, tmp_path, strict=True)
    assert seen[0].strict is True


def test_messages_stream_events_are_the_sdk_union_or_ping():
    """/v1/messages events validate as anthropic's RawMessageStreamEvent; ping is legal too."""
    spec = schema.shape_for("POST", "/messages").chunk
    assert schema.validate(spec, {"type": "ping"}) == []
    assert schema.validate(spec, {"type": "message_stop"}) == []
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "stop"},
        "usage": {"output_tokens": 1},
    }
    found = schema.findings_for(spec, delta, "/messages", "chunk 0")
    assert [f.rule for f in found] == ["enum"], found
    assert "stop_reason" in found[0].path
