"""Agent-sized requests (issue 44 item 3): generated the same every run, sized to the target, and
judged so that "context too small" is a skip that says so, never a pass and never a failure.

tests/test_fault_matrix.py proves each AGENT-SIZED-* check passes on a reference whose context
holds the requests and fails on its faults (agent-tools-stop-empty, agent-system-500); this file
proves the rest: the sizes are an agent's, a small context is a skip naming both sizes, a
refusal in the server's words about the context is a skip too, and a stall fails.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from servecheck.checks import CheckFailed, CheckSkipped, load_all, run_with_allowances
from servecheck.checks import agent_sized as gen
from servecheck.reference import model
from tests.support import TEST_KEY, context_for

CHECKS = load_all()
AGENT = [c for c in CHECKS if c.startswith("AGENT-")]
SIZED = ["AGENT-SIZED-TOOLS", "AGENT-SIZED-SYSTEM", "AGENT-SIZED-MESSAGES"]


def _assert_raises(ctx, check_id, expected, match=None):
    """Run ``check_id`` on ``ctx`` (its client closed after), which must raise ``expected``
    (matching ``match``); the exception, for the test's own assertions."""
    try:
        with pytest.raises(expected, match=match) as excinfo:
            run_with_allowances(CHECKS[check_id], ctx)
    finally:
        ctx.client.close()
    return excinfo.value


def test_the_requests_are_an_agents_and_the_same_every_run():
    tools = gen.tools()
    assert tools == gen.tools() and gen.system_prompt(500) == gen.system_prompt(500)
    assert 20 <= len(tools) <= 60 and len({t.name for t in tools}) == len(tools)
    sizes = [len(t.description) for t in tools]
    assert min(sizes) >= 1000 and max(sizes) <= 3000
    # nested: an object holding an array of objects holding an object
    deep = [
        t for t in tools if "options" in t.parameters["properties"]["items"]["items"]["properties"]
    ]
    assert deep == tools
    words = len(model.tokenize(gen.system_prompt(gen.SYSTEM_TOKENS)))
    assert 15_000 <= words <= 30_000, words
    marked = gen.anthropic_tools(tools[:3])
    assert [("cache_control" in t) for t in marked] == [False, False, True]


@pytest.mark.parametrize("check_id", [pytest.param(c, id=c) for c in SIZED])
def test_a_small_context_is_a_skip_naming_both_sizes(reference, check_id):
    """The default reference holds 512 tokens: each check sees its clear 400 and skips with
    what it needs and what the target has, not a pass."""
    ctx = context_for(reference, check_id)
    text = str(_assert_raises(ctx, check_id, CheckSkipped))
    assert text.startswith(f"{check_id}: context too small: needs ")
    assert "tokens (/tokenize), has 512; refused with 400: " in text
    needs = int(text.split("needs ", 1)[1].split(" ", 1)[0])
    assert needs > 15_000


def test_a_refusal_naming_the_context_is_a_skip_even_where_the_declared_context_fits(
    reference,
):
    """The declared context (64k) says it fits; the server (512) refuses in its own words: that
    is the context, not a refused agent request, so the check skips and does not fail."""
    ctx = context_for(reference, "AGENT-SIZED-SYSTEM", context_length=65536)
    _assert_raises(
        ctx, "AGENT-SIZED-SYSTEM", CheckSkipped, r"context too small: .*maximum context length"
    )


def test_a_refusal_inside_the_stream_is_judged_as_one(make_reference):
    """The stream-late-error quirk refuses an oversized prompt inside a 200 stream: legal, and
    the same skip as a 400."""
    server = make_reference(quirks=("stream-late-error",), api_key=TEST_KEY)
    ctx = context_for(server, "AGENT-SIZED-TOOLS")
    _assert_raises(ctx, "AGENT-SIZED-TOOLS", CheckSkipped, "context too small: needs")


def test_reasoning_is_skipped_without_a_reasoning_model(reference):
    ctx = context_for(reference, "AGENT-SIZED-REASONING")
    _assert_raises(ctx, "AGENT-SIZED-REASONING", CheckSkipped, "declares no reasoning model")


def test_the_empty_answer_fault_keeps_the_reasoning_and_is_named(make_reference):
    """llama.cpp's failure: reasoning streamed, then finish 'stop' with no content: a failure
    with its hint, not a 'not judged' cut."""
    from servecheck.reference.reasoning import ReasoningMode

    server = make_reference(
        "agent-tools-stop-empty", api_key=TEST_KEY, reasoning=ReasoningMode(), max_model_len=65536
    )
    ctx = context_for(server, "AGENT-SIZED-REASONING", reasoning="auto")
    text = str(_assert_raises(ctx, "AGENT-SIZED-REASONING", CheckFailed))
    assert "answered 'stop' with empty content and no tool call" in text
    # "60 characters of thinking" holds the text "0 characters of thinking": match the number
    assert re.search(r"(?<!\d)[1-9]\d* characters of thinking", text), text
    assert "llama.cpp" in text and TEST_KEY not in text


def test_a_stalled_answer_fails_within_the_deadline():
    """headers-then-stall: the check fails on the missed deadline (a hang), it does not wait."""
    from servecheck.reference.hostile import hostile
    from tests.hostile.support import hostile_context

    with hostile("headers-then-stall") as srv:
        ctx = hostile_context(srv, "AGENT-SIZED-SYSTEM", context_length=65536)
        started = time.monotonic()
        try:
            with pytest.raises(CheckFailed) as excinfo:
                CHECKS["AGENT-SIZED-SYSTEM"].func(ctx)
        finally:
            ctx.client.close()
    assert time.monotonic() - started < 120  # a guard against a hang, not a performance claim
    assert "the server broke on an agent-sized request" in str(excinfo.value)


def test_the_ids_are_stable():
    assert sorted(AGENT) == [
        "AGENT-SIZED-MESSAGES",
        "AGENT-SIZED-REASONING",
        "AGENT-SIZED-SYSTEM",
        "AGENT-SIZED-TOOLS",
    ]
    body = json.dumps([t.parameters for t in gen.tools()])
    assert gen.estimate_tokens(body) > 0
