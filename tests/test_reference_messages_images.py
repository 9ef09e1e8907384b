"""The reference's /v1/messages: image blocks (read under --vision, refused text-only) and the
engine counters a streamed answer feeds (load's server-counter check compares them)."""

from __future__ import annotations

import re

import httpx

from servecheck.client.images import make_image, messages_block
from servecheck.reference.vision import image_tokens
from tests.support import TEST_KEY

HEADERS = {"x-api-key": TEST_KEY, "anthropic-version": "2023-06-01"}


def _post(server, body, path="/messages"):
    return httpx.post(server.base_url + path, json=body, headers=HEADERS, timeout=10)


def _body(*blocks, **extra):
    content = [{"type": "text", "text": "Describe it."}, *blocks]
    return {
        "model": "ref-tiny",
        "max_tokens": 4,
        "messages": [{"role": "user", "content": content}],
    } | extra


def test_a_text_only_reference_refuses_an_image_block_in_anthropics_shape(make_reference):
    server = make_reference(api_key=TEST_KEY)
    resp = _post(server, _body(messages_block(make_image(56, 56))))
    assert resp.status_code == 400
    body = resp.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "text-only" in body["error"]["message"]


def test_a_vision_reference_counts_an_image_block_by_its_area(make_reference):
    server = make_reference(api_key=TEST_KEY, vision=True)
    alone = _post(server, _body()).json()["usage"]["input_tokens"]
    for side in (56, 336):
        block = messages_block(make_image(side, side))
        resp = _post(server, _body(block))
        assert resp.status_code == 200, resp.text
        assert resp.json()["usage"]["input_tokens"] == alone + image_tokens(side, side)
        counted = _post(
            server,
            {k: v for k, v in _body(block).items() if k != "max_tokens"},
            "/messages/count_tokens",
        )
        assert counted.json() == {"input_tokens": alone + image_tokens(side, side)}


def test_a_vision_reference_refuses_a_malformed_image_block(make_reference):
    server = make_reference(api_key=TEST_KEY, vision=True)
    bad = [
        {"type": "image", "source": {"type": "url", "url": "http://127.0.0.1:9/a.png"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "@@"}},
        {"type": "image", "source": {"type": "base64", "media_type": "text/plain", "data": "aGk="}},
    ]
    for block in bad:
        resp = _post(server, _body(block))
        assert resp.status_code == 400, (block, resp.text)
        assert resp.json()["type"] == "error"


def _counter(server, name):
    text = httpx.get(server.root + "/metrics", timeout=10).text
    match = re.search(rf"^vllm:{name}\{{[^}}]*\}} (\d+)", text, re.M)
    assert match, name
    return int(match.group(1))


def test_a_streamed_message_feeds_the_engine_token_counters(make_reference):
    server = make_reference(api_key=TEST_KEY)
    resp = _post(server, _body(stream=True, max_tokens=5))
    assert resp.status_code == 200
    assert _counter(server, "prompt_tokens_total") > 0
    assert _counter(server, "generation_tokens_total") > 0
