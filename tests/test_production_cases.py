"""Issue 43's production cases: each check passes on the clean reference and fails, with its id
and a message saying what broke, on its fault; and the reference behaviour they rely on
(min_tokens honoured as vLLM does, an image over the decoder's limit refused) holds.

tests/test_fault_matrix.py proves the same pairs generically; this file names them, so that a
catalogue without these checks fails here.
"""

from __future__ import annotations

import base64

import httpx
import pytest

from servecheck.checks import CheckFailed, load_all, run_with_allowances
from servecheck.checks.surfaces.chat import spanning_stop
from servecheck.checks.surfaces.image import OVERSIZED_SIDE, oversized_png
from servecheck.config.model import Target
from servecheck.engines.registry import resolve_capabilities
from tests.support import TEST_KEY, context_for

CHECKS = load_all()
VISION = {"capabilities": {"vision": True}}
# check id -> (fault, server options, target overrides, the start of its failure's first line)
CASES = {
    "CHAT-STOP-BOUNDARY": (
        "stop-boundary-stream",
        {},
        {},
        "CHAT-STOP-BOUNDARY: the streamed output runs through the stop string",
    ),
    "CHAT-MIN-TOKENS": (
        "min-tokens-ignored",
        {},
        {},
        "CHAT-MIN-TOKENS: min_tokens was accepted and ignored",
    ),
    "RESPONSES-STREAM-REASONING-TOOL": (
        "responses-reasoning-call-twice",
        {},
        {},
        "RESPONSES-STREAM-REASONING-TOOL: the completed response does not hold exactly one",
    ),
    "IMAGE-OVERSIZED": (
        "image-bomb-500",
        {"vision": True},
        VISION,
        f"IMAGE-OVERSIZED: a data: URL image declaring {OVERSIZED_SIDE}x{OVERSIZED_SIDE} pixels",
    ),
}


def _run(server, check_id, **target):
    ctx = context_for(server, check_id, **target)
    try:
        run_with_allowances(CHECKS[check_id], ctx)
    finally:
        ctx.client.close()


@pytest.mark.parametrize("check_id", [pytest.param(c, id=c) for c in CASES])
def test_case_passes_clean_and_fails_on_its_fault(make_reference, check_id):
    fault, options, target, first_line = CASES[check_id]
    _run(make_reference(api_key=TEST_KEY, **options), check_id, **target)
    with pytest.raises(CheckFailed) as excinfo:
        _run(make_reference(fault, api_key=TEST_KEY, **options), check_id, **target)
    text = str(excinfo.value)
    assert text.startswith(first_line), text
    assert "Reproduce: curl" in text and TEST_KEY not in text


def test_a_server_ignoring_stop_fails_the_plain_half(make_reference):
    server = make_reference("stop-ignored", api_key=TEST_KEY)
    with pytest.raises(CheckFailed, match="the non-streamed output runs through the stop string"):
        _run(server, "CHAT-STOP-BOUNDARY")


@pytest.mark.parametrize(
    "pieces,stop",
    [
        pytest.param(["river", " stone", " garden", " moss"], "en m", id="middle-boundary"),
        pytest.param(["river", " stone", " garden"], "ne g", id="the-one-boundary"),
        pytest.param(["a", " b", " c"], None, id="pieces-too-short"),
        pytest.param(["xcdab", "cd", "ab"], None, id="found-earlier-than-its-boundary"),
        pytest.param(["你好", "世界", "模型"], None, id="not-plain-text"),
    ],
)
def test_spanning_stop_crosses_a_boundary(pieces, stop):
    assert spanning_stop(pieces) == stop


def _chat(server, **params):
    body = {"model": "ref-tiny", "messages": [{"role": "user", "content": "Say hello."}]}
    headers = {"Authorization": f"Bearer {TEST_KEY}"}
    return httpx.post(
        server.base_url + "/chat/completions", json=body | params, headers=headers, timeout=30
    )


def test_reference_holds_stop_strings_back_until_min_tokens(make_reference):
    server = make_reference(api_key=TEST_KEY)
    text = _chat(server, max_tokens=24, temperature=0).json()["choices"][0]["message"]["content"]
    stop = text[:2]
    early = _chat(server, max_tokens=24, temperature=0, stop=[stop]).json()["usage"]
    held = _chat(server, max_tokens=24, temperature=0, stop=[stop], min_tokens=12).json()
    assert early["completion_tokens"] < 12 <= held["usage"]["completion_tokens"]
    refused = _chat(server, max_tokens=8, min_tokens=9)
    assert refused.status_code == 400
    assert "min_tokens must be less than or equal to max_tokens=8" in refused.text


def test_reference_refuses_an_oversized_image_with_a_400(make_reference):
    server = make_reference(api_key=TEST_KEY, vision=True)
    png = oversized_png()
    assert len(png) < 2048, "the oversized image is meant to be small on the wire"
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    part = {"type": "image_url", "image_url": {"url": url}}
    answer = _chat(server, max_tokens=4, messages=[{"role": "user", "content": [part]}])
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "engine,declared",
    [
        pytest.param("reference", True, id="reference"),
        pytest.param("vllm", True, id="vllm"),
        pytest.param("llamacpp", False, id="llamacpp"),
        pytest.param("openai", False, id="openai"),
    ],
)
def test_min_tokens_is_declared_only_where_served(engine, declared):
    target = Target.model_validate(
        {"name": "t", "base_url": "http://127.0.0.1:9/v1", "engine": engine, "models": ["m"]}
    )
    assert resolve_capabilities(target)["min_tokens"] is declared
    assert "min_tokens" in CHECKS["CHAT-MIN-TOKENS"].capabilities
