"""The real API key never shows in what a check reports: failure text, received bodies, curl lines."""

from __future__ import annotations

import json

import pytest

from servecheck.checks import CheckFailed, NonStrict, load_all, run_with_allowances
from servecheck.client.http import Exchange
from servecheck.config.model import Target
from tests.support import TEST_KEY, context_for, target_for

CHECKS = load_all()


def _echoing_exchange() -> Exchange:
    """A server that repeats the caller's key in its error message and a debug header."""
    return Exchange(
        method="POST",
        url="http://127.0.0.1:1/v1/chat/completions",
        request_headers={"Authorization": f"Bearer {TEST_KEY}", "Content-Type": "application/json"},
        request_body={"model": "m", "messages": []},
        status=400,
        response_headers={"content-type": "application/json", "x-debug-auth": TEST_KEY},
        body=json.dumps(
            {
                "error": {
                    "message": f"bad request from key {TEST_KEY}",
                    "type": "invalid_request_error",
                }
            }
        ).encode(),
    )


@pytest.fixture
def registered_key(reference):
    # Building a target registers its key with servecheck.redact, as loading targets.yaml does.
    return target_for(reference)


def test_failure_text_masks_the_key_everywhere(registered_key: Target) -> None:
    ex = _echoing_exchange()
    failure = CheckFailed(
        "AUTH-NO-ECHO",
        f"summary with {TEST_KEY}",
        expected="no key",
        received=ex.describe(),
        exchange=ex,
        hint=f"hint with {TEST_KEY}",
    )
    text = str(failure)
    assert TEST_KEY not in text
    assert "***" in text
    assert "<secret:Authorization>" in ex.curl()
    assert TEST_KEY not in ex.curl()


def test_non_strict_text_masks_the_key(registered_key: Target) -> None:
    failure = CheckFailed("ERR-SHAPE", f"echo {TEST_KEY}", expected="x", received=TEST_KEY)
    assert TEST_KEY not in str(NonStrict("ERR-SHAPE", f"reason {TEST_KEY}", failure))


@pytest.mark.parametrize(
    "fault,check_id",
    [
        pytest.param("auth-echo-key", "AUTH-NO-ECHO", id="echoed-wrong-key"),
        pytest.param("auth-none", "AUTH-REQUIRED", id="auth-not-enforced"),
        pytest.param("err-plain-text", "ERR-SHAPE", id="plain-text-errors"),
    ],
)
def test_auth_and_error_failures_do_not_show_the_key(
    make_reference, fault: str, check_id: str
) -> None:
    server = make_reference(fault, api_key=TEST_KEY)
    ctx = context_for(server, check_id)
    try:
        with pytest.raises(CheckFailed) as excinfo:
            run_with_allowances(CHECKS[check_id], ctx)
    finally:
        ctx.client.close()
    text = str(excinfo.value)
    assert TEST_KEY not in text
    assert "Reproduce: curl" in text


def test_curl_names_a_key_from_no_variable_with_a_placeholder(registered_key: Target) -> None:
    # target_for() gives the key literally, as `api_key: sk-...` in targets.yaml would: no
    # variable to name, so the line says which value to paste (a $VAR nobody set sends "").
    curl = _echoing_exchange().curl()
    assert "-H 'Authorization: Bearer <secret:Authorization>'" in curl
    assert TEST_KEY not in curl
    other = Exchange(
        method="GET",
        url="http://127.0.0.1:1/v1/models",
        request_headers={"x-api-key": TEST_KEY},
        request_body=None,
    )
    assert "-H 'x-api-key: <secret:x-api-key>'" in other.curl()
