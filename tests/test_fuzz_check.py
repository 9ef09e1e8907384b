"""FUZZ-NO-5XX shrinks what it finds and prints a curl that repeats it."""

from __future__ import annotations

import json

import pytest

from servecheck.checks import CheckFailed, load_all, run_with_allowances
from servecheck.checks.surfaces.fuzz import edge_corpus
from tests.support import TEST_KEY, context_for

CHECK = load_all()["FUZZ-NO-5XX"]
BASE = {
    "model": "ref-tiny",
    "messages": [{"role": "user", "content": "Say hello."}],
    "max_tokens": 4,
}


def _fail(server) -> CheckFailed:
    ctx = context_for(server, "FUZZ-NO-5XX")
    try:
        with pytest.raises(CheckFailed) as excinfo:
            run_with_allowances(CHECK, ctx)
    finally:
        ctx.client.close()
    return excinfo.value


def test_a_generated_crash_is_shrunk_to_one_field(make_reference):
    # Wrong types crash this server; no edge case in the corpus has a wrong type, so hypothesis must find one.
    failure = _fail(make_reference("err-wrong-type-500", api_key=TEST_KEY))
    assert failure.summary.startswith("a generated body (shrunk;")
    assert failure.exchange is not None
    body = failure.exchange.request_body
    changed = {
        k for k in set(body) | set(BASE) if body.get(k, "<absent>") != BASE.get(k, "<absent>")
    }
    assert len(changed) == 1, f"not shrunk to one field: {body}"
    text = str(failure)
    assert "Reproduce: curl" in text and json.dumps(body, ensure_ascii=False) in text.replace(
        "'\"'\"'", "'"
    )
    assert TEST_KEY not in text


def test_an_edge_case_is_named(make_reference):
    failure = _fail(make_reference("fuzz-500", api_key=TEST_KEY))
    assert failure.summary == "the edge case 'stop-empty-string' got HTTP 500"


def test_the_corpus_is_one_field_per_case():
    for name, body in edge_corpus("ref-tiny"):
        changed = {
            k for k in set(body) | set(BASE) if body.get(k, "<absent>") != BASE.get(k, "<absent>")
        }
        assert 1 <= len(changed) <= 2, (
            name
        )  # logprobs + top_logprobs, tools + tool_choice travel together
