"""The reference server's image input: text-only by default, read and counted with --vision."""

from __future__ import annotations

import pytest

from servecheck.client.http import ServeClient
from servecheck.client.images import chat_message, data_url, make_image
from servecheck.reference.options import from_values, to_config, validate
from servecheck.reference.vision import MAX_TOKENS, MIN_TOKENS, image_tokens
from tests.support import TEST_KEY, target_for


def _ask(server, *images):
    client = ServeClient.for_target(target_for(server))
    try:
        body = {"model": "ref-tiny", "messages": [chat_message("Describe it.", *images)]}
        ex = client.post("/chat/completions", {**body, "max_tokens": 4, "temperature": 0})
    finally:
        client.close()
    return ex.status, ex.json()


def test_the_vision_option_reaches_the_server_config():
    opts = from_values({"vision": True})
    validate(opts)
    assert to_config(opts).vision is True
    assert to_config(from_values({})).vision is False


def test_image_tokens_grow_with_area_and_are_bounded():
    assert image_tokens(1, 1) == MIN_TOKENS
    assert image_tokens(56, 56) == MIN_TOKENS
    assert image_tokens(336, 336) == 144
    assert image_tokens(8192, 8192) == MAX_TOKENS


def test_the_default_server_refuses_an_image(reference):
    status, body = _ask(reference, make_image(56, 56))
    assert status == 400
    assert body["error"]["param"] == "messages[0].content[1]"
    assert "text-only" in body["error"]["message"]


@pytest.fixture(scope="module")
def vision(make_reference):
    return make_reference(api_key=TEST_KEY, vision=True)


@pytest.mark.parametrize(
    "url,message",
    [
        pytest.param("https://example.com/cat.png", "only base64 data: URLs", id="http-url"),
        pytest.param("data:image/png,raw", "is not base64", id="not-base64-encoded"),
        pytest.param(data_url("image/png", "@@"), "not valid base64", id="bad-base64"),
        pytest.param(data_url("text/plain", b"hi"), "unsupported image type", id="type"),
        pytest.param(data_url("image/png", b"no png"), "does not decode", id="not-an-image"),
    ],
)
def test_a_vision_server_refuses_what_it_cannot_read(vision, url, message):
    status, body = _ask(vision, url)
    assert status == 400
    assert message in body["error"]["message"]


def test_a_vision_server_counts_every_image(vision):
    _, alone = _ask(vision)
    _, one = _ask(vision, make_image(112, 112, seed=1))
    _, three = _ask(vision, *(make_image(112, 112, seed=k) for k in range(3)))
    base = alone["usage"]["prompt_tokens"]
    assert one["usage"]["prompt_tokens"] == base + image_tokens(112, 112)
    assert three["usage"]["prompt_tokens"] == base + 3 * image_tokens(112, 112)


def test_a_different_image_gives_a_different_answer(vision):
    answers = {
        _ask(vision, make_image(112, 112, seed=k))[1]["choices"][0]["message"]["content"]
        for k in range(3)
    }
    assert len(answers) == 3


def test_a_huge_image_is_refused_or_resized_by_the_quirk(vision, make_reference):
    huge = make_image(4096, 4096, seed=3)
    status, body = _ask(vision, huge)
    assert (status, body["error"]["param"]) == (400, "messages[0].content[1]")
    resized = make_reference(api_key=TEST_KEY, vision=True, quirks=("image-huge-resized",))
    status, body = _ask(resized, huge)
    assert status == 200
    _, alone = _ask(resized)
    assert body["usage"]["prompt_tokens"] == alone["usage"]["prompt_tokens"] + MAX_TOKENS


def test_the_text_only_check_skips_where_the_target_declares_vision(vision):
    from servecheck.checks import CheckSkipped, load_all, run_with_allowances
    from tests.support import context_for

    ctx = context_for(vision, "IMAGE-REJECTED-TEXT-ONLY", capabilities={"vision": True})
    try:
        with pytest.raises(CheckSkipped, match="declares vision"):
            run_with_allowances(load_all()["IMAGE-REJECTED-TEXT-ONLY"], ctx)
    finally:
        ctx.client.close()
