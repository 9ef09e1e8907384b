"""The invariant x variant grid (issue 43): declared cells, derived ids, and faults that break one
variant only.

tests/test_fault_matrix.py proves each cell passes on the clean reference and fails on its faults;
this file proves what the matrix does not: that a ``grid-*`` fault leaves the other variants of
its invariant passing (so each cell is proven on a variant-only defect, not a broad one), that
every pair of the product is a check or says why not, and that a bracketed id can be excluded.
"""

from __future__ import annotations

import pytest

from servecheck.checks import CheckFailed, CheckSkipped, load_all, run_with_allowances
from servecheck.checks.grid import INVARIANTS, VARIANTS, cell_id, cells, grid_markdown, why_not
from servecheck.checks.registry import matches
from servecheck.reference.faults import FAULTS
from tests.support import TEST_KEY, context_for

CHECKS = load_all()
GRID_FAULTS = [name for name in FAULTS if name.startswith("grid-")]


def _invariant(check_id: str) -> str:
    return check_id.split("[", 1)[0]


def test_every_pair_is_a_check_or_says_why_not():
    ids = {cell_id(i, v) for i, v in cells()}
    assert ids <= set(CHECKS), sorted(ids - set(CHECKS))
    assert {c for c in CHECKS if c.startswith("GRID-")} == ids
    for inv in INVARIANTS:
        for v in VARIANTS:
            reason = why_not(inv, v)
            assert (cell_id(inv, v) in ids) == (reason is None), (inv.name, v.label)
            assert reason is None or len(reason) > 10, (inv.name, v.label, reason)
    # each invariant is held on its plain and its streamed form (where it has both)
    for inv in INVARIANTS:
        forms = {v.stream for i, v in cells() if i is inv}
        assert forms == {True, False} or inv.name in ("EQUAL",), (inv.name, forms)
    assert "GRID-USAGE[chat,stream,n=2,usage]" in ids


def test_grid_doc_names_every_cell():
    text = grid_markdown()
    for inv, v in cells():
        assert f"`{cell_id(inv, v)}`" in text


@pytest.mark.parametrize(
    "pattern",
    [
        pytest.param("GRID-USAGE[chat,plain,n=2]", id="exact"),
        pytest.param("grid-usage[chat,plain,n=2]", id="exact-lower-case"),
        pytest.param("GRID-USAGE*", id="glob"),
    ],
)
def test_a_bracketed_id_is_matched_by_exclude_and_known_failures(pattern):
    assert matches("GRID-USAGE[chat,plain,n=2]", [pattern]) == pattern


def test_a_bracketed_exact_id_matches_only_itself():
    assert matches("GRID-USAGE[chat,plain,n=1]", ["GRID-USAGE[chat,plain,n=2]"]) is None


@pytest.mark.parametrize("fault", [pytest.param(f, id=f) for f in GRID_FAULTS])
def test_grid_fault_breaks_only_its_variants(make_reference, fault):
    """The other cells of each invariant a grid-* fault breaks still pass under it."""
    caught = FAULTS[fault].catches
    assert caught and all(c.startswith("GRID-") for c in caught)
    invariants = {_invariant(c) for c in caught}
    others = [c for c in CHECKS if _invariant(c) in invariants and c not in caught]
    assert others, f"{fault} breaks every variant of {invariants}"
    server = make_reference(fault, api_key=TEST_KEY)
    failed = []
    for check_id in others:
        ctx = context_for(server, check_id)
        try:
            run_with_allowances(CHECKS[check_id], ctx)
        except CheckFailed as exc:
            failed.append(str(exc).splitlines()[0])
        finally:
            ctx.client.close()
    assert not failed, f"{fault} is not variant-only: {failed}"


def test_a_failing_cell_names_its_variant_and_what_broke(make_reference):
    server = make_reference("grid-usage-n2-stream", api_key=TEST_KEY)
    check_id = "GRID-USAGE[chat,stream,n=2,usage]"
    ctx = context_for(server, check_id)
    try:
        with pytest.raises(CheckFailed) as excinfo:
            run_with_allowances(CHECKS[check_id], ctx)
    finally:
        ctx.client.close()
    text = str(excinfo.value)
    assert text.startswith(
        f"{check_id}: usage arithmetic holds: broken on [chat,stream,n=2,usage]\n"
    )
    assert "completion_tokens 8 outside [16, 16]" in text
    assert "Reproduce: curl" in text and TEST_KEY not in text


@pytest.mark.parametrize(
    "check_id",
    [
        pytest.param("GRID-ROLE[chat,stream,n=2]", id="role-stream"),
        pytest.param("GRID-TOOLS[chat,stream,n=1,usage,tools]", id="tools-stream"),
    ],
)
def test_a_stream_without_choices_fails_a_per_choice_cell(check_id):
    """A 200 HTML page parses as a stream with no chunk: per-choice invariants would hold
    vacuously, so the cell fails on the missing choices instead of passing."""
    from servecheck.reference.hostile import hostile
    from tests.hostile.support import hostile_context

    with hostile("html-login-page") as srv:
        ctx = hostile_context(srv, check_id)
        try:
            with pytest.raises(CheckFailed) as excinfo:
                run_with_allowances(CHECKS[check_id], ctx)
        finally:
            ctx.client.close()
    assert str(excinfo.value).startswith(f"{check_id}: ")


CLIENT_CELLS = [
    "GRID-USAGE[chat,stream,n=1,usage,tools,ai-sdk]",
    "GRID-FINISH[chat,stream,n=1,usage,tools,ai-sdk]",
    "GRID-ROLE[chat,stream,n=1,usage,tools,ai-sdk]",
    "GRID-TOOLS[chat,stream,n=1,usage,tools,ai-sdk]",
    "GRID-FINISH[chat,stream,n=1,tools,openai-agents]",
    "GRID-ROLE[chat,stream,n=1,tools,openai-agents]",
    "GRID-TOOLS[chat,stream,n=1,tools,openai-agents]",
    "GRID-USAGE[messages,stream,n=1,claude-code]",
    "GRID-FINISH[messages,stream,n=1,claude-code]",
    "GRID-USAGE[responses,stream,n=1,codex]",
    "GRID-FINISH[responses,stream,n=1,codex]",
]


def test_client_shapes_are_grid_variants():
    """Issue 43 item 5: each client shape is a variant whose applicable cells are checks with
    derived ids, each proven on a fault; the rest say n/a or not built."""
    assert {cell_id(i, v) for i, v in cells() if v.client} == set(CLIENT_CELLS)
    proven = {c for f in FAULTS.values() for c in f.catches}
    assert set(CLIENT_CELLS) <= proven
    text = grid_markdown()
    assert "`messages,stream,n=1,claude-code`" in text
    assert "not built: the client's recorded tool_choice is auto" in text


@pytest.mark.parametrize("variant", [pytest.param(v, id=v.client) for v in VARIANTS if v.client])
def test_a_client_variant_says_what_its_fixture_sends(variant):
    """The flags a client variant is labelled with are what the recorded body carries."""
    from servecheck.checks.grid import client_fixture

    fixture = client_fixture(variant.client)
    body = fixture["body"]
    assert fixture["version"] and fixture["client"] and fixture["route"] == variant.path
    assert body.get("stream") is True and variant.stream
    if variant.route == "chat":
        assert variant.tools == (body.get("tool_choice") == "required")
        assert variant.usage == (body.get("stream_options") == {"include_usage": True})
    sent = variant.body("m")
    assert sent["model"] == "m" and "Authorization" not in variant.headers


def test_a_client_shape_fault_breaks_only_that_client(make_reference):
    """grid-strict-tool-id-repeated: only the Agents SDK's strict tools get the broken deltas;
    the AI SDK's streamed call and the plain streamed call hold."""
    server = make_reference("grid-strict-tool-id-repeated", api_key=TEST_KEY)
    broken = "GRID-TOOLS[chat,stream,n=1,tools,openai-agents]"
    for check_id in (broken, "GRID-TOOLS[chat,stream,n=1,usage,tools,ai-sdk]"):
        ctx = context_for(server, check_id)
        try:
            if check_id == broken:
                with pytest.raises(CheckFailed) as excinfo:
                    run_with_allowances(CHECKS[check_id], ctx)
                assert "repeats id or name in a later delta" in str(excinfo.value)
                assert "tools,openai-agents]" in str(excinfo.value).splitlines()[0]
            else:
                run_with_allowances(CHECKS[check_id], ctx)
        finally:
            ctx.client.close()


def test_a_client_shape_the_context_cannot_hold_is_skipped_not_failed(make_reference):
    """CI models hold 512 tokens and Claude Code's cut request is ~740 of theirs: the refusal in
    the server's own words is a skip that says so (CLIENT-SHAPE-*'s rule), never a failure."""
    server = make_reference(api_key=TEST_KEY, max_model_len=128)
    check_id = "GRID-FINISH[messages,stream,n=1,claude-code]"
    ctx = context_for(server, check_id)
    try:
        with pytest.raises(
            CheckSkipped, match="context cannot hold claude-code's recorded request"
        ):
            run_with_allowances(CHECKS[check_id], ctx)
    finally:
        ctx.client.close()


def test_a_streamed_call_cut_by_the_limit_may_have_partial_arguments():
    """A client's free string parameter on a random-weight model runs to max_tokens (llama.cpp,
    measured 2026-12-06): partial arguments after finish_reason length are no structure defect;
    without the cut they are."""
    from servecheck.checks.grid import _delta_problems

    deltas = [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "read_file"}},
        {"index": 0, "function": {"arguments": '{"path": "abc'}},
    ]
    assert _delta_problems(0, deltas, cut=True) == []
    assert "not JSON once joined" in _delta_problems(0, deltas)[0]
