"""Reasoning-aware budgets (issue 43, item 2): on a reasoning model the checks that need answer
text ask without thinking where the target declares the switch, else with room for the
reasoning, and an empty answer cut while the model reasoned is not judged, never a failure.

The reference server's reasoning mode (``ReasoningMode``) thinks for ``tokens`` tokens before it
answers and counts them against ``max_tokens`` as engines do; ``chat_template_kwargs:
{enable_thinking: false}`` turns it off. A target declares the switch by default
(``reasoning: auto``) or says it has none (``thinking_off: false``).
"""

from __future__ import annotations

import pytest

from servecheck.checks import CheckFailed, CheckSkipped, NonStrict, load_all, run_with_allowances
from servecheck.checks.preconditions import CheckError
from servecheck.reference.faults import FAULTS
from servecheck.reference.reasoning import ReasoningMode
from tests.support import TEST_KEY, context_for

CHECKS = load_all()
# The six checks issue 43 found failing falsely on a reasoning model (max_tokens 4 or 8).
SIX = (
    "CHAT-LOGPROBS",
    "REQ-CONTENT-PARTS",
    "REQ-DEVELOPER-ROLE",
    "REQ-NULL-OPTIONALS",
    "REQ-CLIENT-FIELDS",
    "REQ-MAX-COMPLETION-TOKENS",
)
# How a target declares its reasoning model: with the thinking switch (the default), without one
# (the checks then grow their budget), with its own field name and markers.
DECLARATIONS: dict[str, dict[str, object]] = {
    "switch": {},
    "no-switch": {"thinking_off": False},
}
# Reasoning longer than any of the six's budgets (8 tokens): each would be cut mid-thought.
LONG = ReasoningMode(tokens=40)
FIX_PAIRS = [(f.name, cid) for f in FAULTS.values() for cid in f.catches if cid in SIX]
# Surfaces whose clean runs need a server mode of their own (tests/test_fault_matrix.py's
# SURFACE_SERVER): left to that file; REASON is what this server is.
OWN_MODE = ("HEALTH", "IMAGE", "LORA", "MESSAGES-THINKING")
MODES = {
    "default-switch": (ReasoningMode(), {}),
    "long-no-switch": (LONG, {"thinking_off": False}),
    "field-reasoning-no-switch": (ReasoningMode(field="reasoning"), {"thinking_off": False}),
    "own-markers-switch": (
        ReasoningMode(tokens=40, markers=("<|begin_of_thought|>", "<|end_of_thought|>")),
        {"markers": ["<|begin_of_thought|>", "<|end_of_thought|>"]},
    ),
}


def _run(server, check_id, reasoning):
    ctx = context_for(server, check_id, reasoning=reasoning)
    try:
        run_with_allowances(CHECKS[check_id], ctx)
    finally:
        ctx.client.close()


@pytest.mark.parametrize("declared", [pytest.param(d, id=d) for d in DECLARATIONS])
@pytest.mark.parametrize("check_id", [pytest.param(c, id=c) for c in SIX])
def test_six_pass_on_a_reasoning_model(make_reference, check_id, declared):
    """The six pass (no skip, no failure) on a model that thinks 40 tokens first."""
    server = make_reference(api_key=TEST_KEY, reasoning=LONG)
    _run(server, check_id, DECLARATIONS[declared])


@pytest.mark.parametrize("declared", [pytest.param(d, id=d) for d in DECLARATIONS])
@pytest.mark.parametrize(
    "fault,check_id", [pytest.param(f, c, id=f"{f}->{c}") for f, c in FIX_PAIRS]
)
def test_six_still_fail_on_their_faults_when_reasoning(make_reference, fault, check_id, declared):
    """The budget helper hides no defect: each fault of the six still fails its check."""
    server = make_reference(fault, api_key=TEST_KEY, reasoning=LONG)
    with pytest.raises(CheckFailed) as excinfo:
        _run(server, check_id, DECLARATIONS[declared])
    assert excinfo.value.check_id == check_id


@pytest.mark.parametrize("check_id", [pytest.param(c, id=c) for c in SIX])
def test_cut_in_reasoning_is_not_judged(make_reference, check_id):
    """Reasoning longer than the grown budget (300 tokens, 512 context): the answer is empty
    after a length cut, and the check says it did not judge it instead of failing."""
    server = make_reference(api_key=TEST_KEY, reasoning=ReasoningMode(tokens=300))
    if check_id == "REQ-MAX-COMPLETION-TOKENS":
        # Its limit is the point and is judged on the cut itself: a pass, not a skip.
        _run(server, check_id, {"thinking_off": False})
        return
    with pytest.raises(CheckSkipped, match=f"^{check_id}: not judged: .*reasoning") as excinfo:
        _run(server, check_id, {"thinking_off": False})
    assert "thinking_off" in str(excinfo.value), "the skip names the fix"


@pytest.mark.parametrize("check_id", [pytest.param(c, id=c) for c in SIX])
def test_undeclared_reasoning_model_is_not_judged(make_reference, check_id):
    """A target that does not declare its reasoning model gets no switch and no room; the cut
    answer is still not judged rather than failed."""
    server = make_reference(api_key=TEST_KEY, reasoning=LONG)
    ctx = context_for(server, check_id)
    try:
        if check_id == "REQ-MAX-COMPLETION-TOKENS":
            run_with_allowances(CHECKS[check_id], ctx)
            return
        with pytest.raises(CheckSkipped, match="not judged"):
            run_with_allowances(CHECKS[check_id], ctx)
    finally:
        ctx.client.close()


def test_answer_budget_by_declaration(reference):
    """Switch merged where declared; room where not (capped by the context); as is otherwise."""
    plain = context_for(reference, "REQ-CONTENT-PARTS")
    switch = context_for(reference, "REQ-CONTENT-PARTS", reasoning="auto")
    effort = context_for(
        reference, "REQ-CONTENT-PARTS", reasoning={"thinking_off": {"reasoning_effort": "none"}}
    )
    room = context_for(reference, "REQ-CONTENT-PARTS", reasoning={"thinking_off": False})
    asked = context_for(
        reference,
        "REQ-CONTENT-PARTS",
        reasoning={"thinking_on": {"chat_template_kwargs": {"enable_thinking": True}}},
    )
    try:
        assert plain.answer_budget(8) == {"max_tokens": 8}
        assert switch.answer_budget(8) == {
            "max_tokens": 8,
            "chat_template_kwargs": {"enable_thinking": False},
        }
        assert effort.answer_budget(5, key="max_completion_tokens") == {
            "max_completion_tokens": 5,
            "reasoning_effort": "none",
        }
        assert room.answer_budget(8) == {"max_tokens": 256}  # half the 512-token context
        assert room.answer_budget(8, grow=False) == {"max_tokens": 8}
        assert asked.answer_budget(8) == {"max_tokens": 8}
        # REASON-* judge the reasoning: a shared helper never turns it off under them
        reason = context_for(reference, "REASON-TOOLS", reasoning="auto")
        assert reason.answer_budget(64) == {"max_tokens": 64}
        reason.client.close()
    finally:
        for ctx in (plain, switch, effort, room, asked):
            ctx.client.close()


@pytest.mark.parametrize("mode", [pytest.param(m, id=m) for m in MODES])
def test_whole_catalogue_passes_on_reasoning_modes(make_reference, mode):
    """Every check (but those needing a server mode of their own) passes or skips for a reason
    other than its budget on each reasoning mode: no failure, no non-strict, no error."""
    reasoning, declared = MODES[mode]
    server = make_reference(api_key=TEST_KEY, reasoning=reasoning)
    bad: list[str] = []
    for check_id, check in CHECKS.items():
        if check_id in OWN_MODE or check_id.split("-", 1)[0] in OWN_MODE:
            continue
        ctx = context_for(server, check_id, reasoning=declared)
        try:
            run_with_allowances(check, ctx)
        except (CheckFailed, NonStrict, CheckError) as exc:
            bad.append(str(exc).splitlines()[0])
        except CheckSkipped as exc:
            if "not judged" in str(exc):
                bad.append(str(exc).splitlines()[0])
        finally:
            ctx.client.close()
    assert not bad, f"reasoning mode {mode!r}: {bad}"


def test_switch_known_broken_asks_with_room(make_reference):
    """A target recording REASON-THINKING-OFF as a known failure (vLLM's non-streamed parser
    files the thinking-off answer as reasoning) gets room, not the switch it cannot trust."""
    server = make_reference(api_key=TEST_KEY, reasoning=LONG)
    ctx = context_for(
        server,
        "REQ-CONTENT-PARTS",
        reasoning="auto",
        known_failures={"REASON-THINKING-OFF": "the parser files the answer as reasoning"},
    )
    try:
        assert ctx.answer_budget(8) == {"max_tokens": 256}
        run_with_allowances(CHECKS["REQ-CONTENT-PARTS"], ctx)
    finally:
        ctx.client.close()


def test_ignored_switch_is_not_judged_and_named(make_reference):
    """The engine ignores the declared switch (reasoning-off-ignored): the cut answer is not
    judged, and the skip names the switch that did not hold and the check that judges it."""
    server = make_reference("reasoning-off-ignored", api_key=TEST_KEY, reasoning=LONG)
    with pytest.raises(CheckSkipped, match="did not hold \\(REASON-THINKING-OFF judges it\\)"):
        _run(server, "REQ-DEVELOPER-ROLE", {})


# Found by the whole catalogue on local-llamacpp-reasoning (2026-12-06): the tiny reasoning
# model is wired to "\n" after </think> (its llama.cpp logprobs: 0.0 for id 205, -3.4e38 for
# every other), so a -100 bias cannot move it; and a 16-token budget cut its tool call short.
WIRED = {
    "choices": [
        {
            "index": 0,
            "finish_reason": "length",
            "message": {"role": "assistant", "content": "\n"},
            "logprobs": {
                "content": [
                    {
                        "id": 205,
                        "token": "\n",
                        "logprob": 0.0,
                        "top_logprobs": [
                            {"id": 205, "token": "\n", "logprob": 0.0},
                            {"id": 111, "token": "?", "logprob": -3.4028234663852886e38},
                        ],
                    }
                ]
            },
        }
    ]
}


def _exchange(body: dict[str, object], request: dict[str, object] | None = None):
    import json

    from servecheck.client.http import Exchange

    url = "http://t/v1/chat/completions"
    return Exchange("POST", url, {}, request or {}, status=200, body=json.dumps(body).encode())


def test_logit_bias_reads_the_token_id_and_its_lead() -> None:
    from servecheck.checks.surfaces.chat import BIAS, _first_token_id, _lead_nats

    ex = _exchange(WIRED)
    assert _first_token_id(ex) == 205
    lead = _lead_nats(ex)
    assert lead is not None and lead >= -BIAS  # not judged: no bias of -100 shows there
    plain = {"choices": [{"message": {"content": "Red"}, "finish_reason": "length"}]}
    assert _first_token_id(_exchange(plain)) is None and _lead_nats(_exchange(plain)) is None


@pytest.mark.parametrize(
    ("content", "tools", "skipped"),
    [
        pytest.param("\n", True, True, id="call-cut-short"),
        pytest.param("\n", False, False, id="no-tools-offered"),
        pytest.param("Sunny.", True, False, id="text-answer"),
    ],
)
def test_an_answer_cut_while_calling_is_not_judged(content: str, tools: bool, skipped: bool):
    from servecheck.checks.surfaces import req

    choice = {"finish_reason": "length", "message": {"role": "assistant", "content": content}}
    request: dict[str, object] = {"max_tokens": 16, **({"tools": [{}]} if tools else {})}
    ctx = type("Ctx", (), {"check_id": "REQ-TOOL-HISTORY"})()
    ex = _exchange({"choices": [choice]}, request)
    if skipped:
        with pytest.raises(CheckSkipped, match="ran out with tools offered"):
            req._not_judged_if_cut_calling(ctx, choice, ex, "a tool history")
    else:
        req._not_judged_if_cut_calling(ctx, choice, ex, "a tool history")
