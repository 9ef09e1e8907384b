"""Proof that the checks work: every check passes on the clean reference server, and every
fault in the catalogue makes the check it was made for fail, with that check's id.

Legal variations (quirks) must not fail anything: the whole catalogue passes with each on.
A pass here is a strict pass: a check whose answers break the openai SDK's types is non-strict
(checks/schema.py), so the clean server and every quirk give no schema finding either. A fault
that only the strict schema profile sees names, in ``strict``, checks it makes non-strict by
default and fail in strict mode.
"""

from __future__ import annotations

import pytest

from servecheck.checks import CheckFailed, CheckSkipped, NonStrict, load_all, run_with_allowances
from servecheck.checks.preconditions import CheckError
from servecheck.reference.faults import FAULTS, QUIRKS
from servecheck.reference.reasoning import ReasoningMode
from tests.support import TEST_KEY, context_for

CHECKS = load_all()
PAIRS = [(fault.name, cid) for fault in FAULTS.values() for cid in fault.catches]
STRICT_PAIRS = [(fault.name, cid) for fault in FAULTS.values() for cid in fault.strict]
# Faults that only show on a server slow enough to be caught mid-generation.
FAULT_OPTIONS: dict[str, dict[str, object]] = {
    "abort-leak": {"itl_ms": 20.0},
    "kv-leak": {"itl_ms": 20.0},
    # A burst exceeds the limit only while earlier requests are still in flight: hold each for
    # 300 ms, far longer than a loaded 2-core machine takes to send the 12 requests.
    **{f: {"ttft_ms": 300.0} for f in FAULTS if f.startswith("overload-")},
}
AGENT_CONTEXT = 65536
# A surface whose checks need a server mode and a target declaration (REASON: a reasoning model;
# without one its checks skip). Its faults get the same mode, and so do its clean runs.
# HEALTH: answers slow enough (200 ms a token, ~4 s an answer) that HEALTH-UNDER-LOAD's streams are still
# generating when it asks for health.
# IMAGE: a vision model (--vision) and a target declaring vision; IMAGE-REJECTED-TEXT-ONLY, keyed
# (and IMAGE-MESSAGES-REJECTED-TEXT-ONLY), keyed by its own id, keeps the default text-only
# server and target (a check id's key wins).
SURFACE_SERVER: dict[str, dict[str, object]] = {
    "REASON": {"reasoning": ReasoningMode()},
    "HEALTH": {"itl_ms": 200.0},
    "IMAGE": {"vision": True},
    # LORA: runtime adapters (--lora) and a target naming one to load (its path must exist)
    "LORA": {"lora": True},
    "IMAGE-REJECTED-TEXT-ONLY": {},
    "IMAGE-MESSAGES-REJECTED-TEXT-ONLY": {},
    # MESSAGES-THINKING: a reasoning model whose context holds Anthropic's minimum thinking budget
    "MESSAGES-THINKING": {"reasoning": ReasoningMode(), "max_model_len": 2048},
    # AGENT: a context that holds agent-sized requests (~23-28k tokens; the default 512 makes
    # them "context too small" skips, tests/test_agent_sized.py); its REASONING check a
    # reasoning model as well
    "AGENT": {"max_model_len": AGENT_CONTEXT},
    "AGENT-SIZED-REASONING": {"reasoning": ReasoningMode(), "max_model_len": AGENT_CONTEXT},
    # opencode's recorded request: its 8.8k-character system prompt is ~2.4k tokens
    "CLIENT-SHAPE-OPENCODE": {"max_model_len": AGENT_CONTEXT},
}
SURFACE_TARGET: dict[str, dict[str, object]] = {
    "REASON": {"reasoning": "auto"},
    "IMAGE": {"capabilities": {"vision": True}},
    "LORA": {"capabilities": {"lora": True}, "lora_adapter": {"name": "ref-lora", "path": "/"}},
    "IMAGE-REJECTED-TEXT-ONLY": {},
    "IMAGE-MESSAGES-REJECTED-TEXT-ONLY": {},
    "MESSAGES-THINKING": {"reasoning": "auto"},
    "AGENT-SIZED-REASONING": {"reasoning": "auto"},
}


def _surface(check_id):
    """The key of ``check_id``'s server mode and target: the id itself where it has its own."""
    if check_id in SURFACE_SERVER or check_id in SURFACE_TARGET:
        return check_id
    return check_id.split("-", 1)[0]


def _run(server, check_id, strict=False, **target):
    ctx = context_for(server, check_id, **{**SURFACE_TARGET.get(_surface(check_id), {}), **target})
    ctx.strict = strict
    try:
        run_with_allowances(CHECKS[check_id], ctx)
    finally:
        ctx.client.close()


@pytest.mark.parametrize("check_id", [pytest.param(cid, id=cid) for cid in CHECKS])
def test_clean_server_passes(reference, make_reference, check_id):
    options = SURFACE_SERVER.get(_surface(check_id))
    _run(make_reference(api_key=TEST_KEY, **options) if options else reference, check_id)


@pytest.mark.parametrize("fault,check_id", [pytest.param(f, c, id=f"{f}->{c}") for f, c in PAIRS])
def test_fault_is_caught(make_reference, fault, check_id):
    if check_id not in CHECKS:
        pytest.fail(f"fault {fault!r} names check {check_id!r}, which is not in the registry")
    options = {**SURFACE_SERVER.get(_surface(check_id), {}), **FAULT_OPTIONS.get(fault, {})}
    server = make_reference(fault, api_key=TEST_KEY, **options)
    with pytest.raises(CheckFailed) as excinfo:
        _run(server, check_id)
    assert excinfo.value.check_id == check_id
    assert str(excinfo.value).startswith(f"{check_id}: ")
    assert TEST_KEY not in str(excinfo.value), "a failure message shows the API key"


@pytest.mark.parametrize(
    "fault,check_id", [pytest.param(f, c, id=f"{f}->{c}") for f, c in STRICT_PAIRS]
)
def test_schema_fault_is_nonstrict_then_caught_in_strict_mode(make_reference, fault, check_id):
    """A profile-only fault: the check passes on its own, so by default it is non-strict
    (schema); in strict mode the same answers fail it with its id."""
    assert check_id in CHECKS, f"fault {fault!r} names check {check_id!r}, not in the registry"
    assert not FAULTS[fault].catches, "a profile-only fault is caught by no check on its own"
    server = make_reference(fault, api_key=TEST_KEY)
    with pytest.raises(NonStrict) as nonstrict:
        _run(server, check_id)
    assert nonstrict.value.kind == "schema"
    assert str(nonstrict.value).startswith(f"{check_id}: non-strict (schema): ")
    with pytest.raises(CheckFailed) as excinfo:
        _run(server, check_id, strict=True)
    assert excinfo.value.check_id == check_id
    assert str(excinfo.value).startswith(f"{check_id}: schema: ")
    assert TEST_KEY not in str(excinfo.value), "a failure message shows the API key"


# Faults under which a check cannot judge the server: it must end in CheckError, not a pass or skip.
NOT_JUDGED = {
    "completions-model-always-404": ("MODELS-UNKNOWN-404",),
    "tokenize-500": ("COMPL-PROMPT-TOKENS", "CHAT-LOGIT-BIAS"),
    "stream-refused-503": ("HEALTH-UNDER-LOAD",),
}


@pytest.mark.parametrize(
    "fault,check_id",
    [pytest.param(f, c, id=f"{f}->{c}") for f, ids in NOT_JUDGED.items() for c in ids],
)
def test_fault_is_not_judged(make_reference, fault, check_id):
    assert fault in FAULTS and not FAULTS[fault].catches and not FAULTS[fault].strict
    options = SURFACE_SERVER.get(_surface(check_id), {})
    with pytest.raises(CheckError) as excinfo:
        _run(make_reference(fault, api_key=TEST_KEY, **options), check_id)
    assert excinfo.value.check_id == check_id
    assert TEST_KEY not in str(excinfo.value), "an error message shows the API key"


def test_every_check_has_a_fault():
    covered = {cid for _, cid in PAIRS}
    missing = sorted(set(CHECKS) - covered)
    assert not missing, f"checks without a fault that proves them: {missing}"


@pytest.mark.parametrize("quirk", [pytest.param(q, id=q) for q in QUIRKS])
def test_legal_variations_pass(make_reference, quirk):
    server = make_reference(quirks=(quirk,), api_key=TEST_KEY)
    servers = {
        surface: make_reference(quirks=(quirk,), api_key=TEST_KEY, **options)
        for surface, options in SURFACE_SERVER.items()
    }
    failures = []
    for check_id, check in CHECKS.items():
        surface = _surface(check_id)
        ctx = context_for(servers.get(surface, server), check_id, **SURFACE_TARGET.get(surface, {}))
        try:
            run_with_allowances(check, ctx)
        except (CheckFailed, NonStrict) as exc:
            failures.append(str(exc).splitlines()[0])
        finally:
            ctx.client.close()
    assert not failures, f"legal variation {quirk!r} failed: {failures}"


REASONING_VARIANTS = {
    "field-reasoning": (ReasoningMode(field="reasoning"), {"reasoning": "auto"}),
    "field-declared": (
        ReasoningMode(field="reasoning"),
        {"reasoning": {"field": "reasoning", "parser": "deepseek_r1"}},
    ),
    "long-reasoning": (ReasoningMode(tokens=40), {"reasoning": "auto"}),
    "own-markers": (
        ReasoningMode(markers=("<|begin_of_thought|>", "<|end_of_thought|>")),
        {"reasoning": {"markers": ["<|begin_of_thought|>", "<|end_of_thought|>"]}},
    ),
}


@pytest.mark.parametrize("variant", [pytest.param(v, id=v) for v in REASONING_VARIANTS])
def test_reasoning_variations_pass(make_reference, variant):
    """Either field name, a declared parser, long reasoning and other markers are all legal."""
    mode, target = REASONING_VARIANTS[variant]
    server = make_reference(api_key=TEST_KEY, reasoning=mode)
    for check_id in (c for c in CHECKS if _surface(c) == "REASON"):
        _run(server, check_id, **target)


@pytest.mark.parametrize(
    "fault", [pytest.param(f, id=f) for f in FAULTS if f.startswith("reasoning-")]
)
def test_reasoning_fault_caught_with_own_markers(make_reference, fault):
    """The reasoning faults are caught whatever markers and field the target declares."""
    mode = ReasoningMode(field="reasoning", markers=("<|begin_of_thought|>", "<|end_of_thought|>"))
    server = make_reference(fault, api_key=TEST_KEY, reasoning=mode)
    (check_id,) = FAULTS[fault].catches
    target = {"reasoning": {"field": "reasoning", "markers": list(mode.markers)}}
    with pytest.raises(CheckFailed) as excinfo:
        _run(server, check_id, **target)
    assert excinfo.value.check_id == check_id


def test_reasoning_checks_skip_without_declaration(reference):
    """A target with no reasoning block skips every REASON check and says why."""
    for check_id in (c for c in CHECKS if _surface(c) == "REASON"):
        ctx = context_for(reference, check_id)
        try:
            with pytest.raises(CheckSkipped, match="declares no reasoning model"):
                run_with_allowances(CHECKS[check_id], ctx)
        finally:
            ctx.client.close()
