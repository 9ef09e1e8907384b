"""CTX-* beyond the fault matrix: the truncate policy, an unknown context length, pinned messages."""

from __future__ import annotations

import pytest

from servecheck.checks import CheckFailed, CheckSkipped, load_all, run_with_allowances
from tests.support import TEST_KEY, context_for

CHECKS = load_all()


def _run(server, check_id, **overrides):
    ctx = context_for(server, check_id, **overrides)
    try:
        run_with_allowances(CHECKS[check_id], ctx)
    finally:
        ctx.client.close()


def test_truncate_policy_passes_when_signalled(make_reference):
    server = make_reference(api_key=TEST_KEY, context_policy="truncate")
    _run(server, "CTX-OVERLONG", context_policy="truncate")


def test_truncate_policy_still_accepts_a_rejection(reference):
    _run(reference, "CTX-OVERLONG", context_policy="truncate")


def test_truncate_policy_fails_silent_truncation(make_reference):
    server = make_reference("ctx-silent-truncate", api_key=TEST_KEY)
    with pytest.raises(CheckFailed) as excinfo:
        _run(server, "CTX-OVERLONG", context_policy="truncate")
    text = str(excinfo.value)
    assert text.startswith("CTX-OVERLONG: a prompt of about ")
    assert "was truncated silently" in text.splitlines()[0]
    assert "Hint: a truncated prompt must be visible" in text


def test_reject_policy_fails_a_signalled_truncation(make_reference):
    server = make_reference(api_key=TEST_KEY, context_policy="truncate")
    with pytest.raises(CheckFailed) as excinfo:
        _run(server, "CTX-OVERLONG")
    assert "was served with a 200" in str(excinfo.value).splitlines()[0]
    assert "context_policy is 'reject'" in str(excinfo.value)


@pytest.mark.parametrize(
    "check_id", [pytest.param(c, id=c) for c in ("CTX-OVERLONG", "CTX-MAX-TOKENS", "CTX-FITS")]
)
def test_unknown_context_length_skips_with_advice(make_reference, check_id):
    server = make_reference("models-no-context", api_key=TEST_KEY)
    with pytest.raises(CheckSkipped, match="set context_length for target 'ref' in targets.yaml"):
        _run(server, check_id, context_length=None)


def test_overlong_5xx_message_is_pinned(make_reference):
    server = make_reference("ctx-500", api_key=TEST_KEY)
    with pytest.raises(CheckFailed) as excinfo:
        _run(server, "CTX-OVERLONG")
    lines = str(excinfo.value).splitlines()
    assert (
        lines[0]
        == "CTX-OVERLONG: a prompt of about 576 tokens (context 512) crashed the request with a server error"
    )
    assert lines[1] == "  Expected: HTTP 400 naming the limit (512 tokens)"
    assert lines[2].startswith("  Received: HTTP 500 application/json: ")
    assert lines[3].startswith("  Hint: check the prompt length before scheduling it")
    assert lines[4].startswith("  Reproduce: curl ")
    assert TEST_KEY not in str(excinfo.value)


def test_fits_names_a_lower_real_limit(make_reference):
    server = make_reference("ctx-limit-lower", api_key=TEST_KEY)
    with pytest.raises(CheckFailed) as excinfo:
        _run(server, "CTX-FITS")
    text = str(excinfo.value)
    assert text.startswith(
        "CTX-FITS: a prompt of about 488 tokens with max_tokens 8 (context 512) was not served"
    )
    assert "the real context is lower than advertised" in text
