"""The images the IMAGE checks send: drawn locally, deterministic, as data URLs only."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image as PILImage

from servecheck.client.images import (
    MAX_SIDE,
    chat_message,
    chat_part,
    data_url,
    make_image,
    messages_block,
)


@pytest.mark.parametrize(
    "fmt,media_type,pil_format",
    [
        pytest.param("png", "image/png", "PNG", id="png"),
        pytest.param("jpeg", "image/jpeg", "JPEG", id="jpeg"),
    ],
)
def test_an_image_decodes_to_the_size_and_format_asked(fmt, media_type, pil_format):
    image = make_image(120, 80, fmt, seed=5)
    with PILImage.open(io.BytesIO(image.data)) as decoded:
        assert decoded.size == (120, 80)
        assert decoded.format == pil_format
        assert decoded.getpixel((119, 79)) == image.colour or fmt == "jpeg"
    assert image.media_type == media_type
    assert image.data_url == f"data:{media_type};base64," + base64.b64encode(image.data).decode()


def test_images_are_deterministic_by_seed():
    drawn = make_image.__wrapped__  # past the cache: drawn twice
    assert drawn(64, 64, "png", 1).data == drawn(64, 64, "png", 1).data
    assert drawn(64, 64, "png", 1).data != drawn(64, 64, "png", 2).data


def test_a_huge_image_stays_a_small_file():
    huge = make_image(4096, 4096, seed=3)
    assert huge.pixels == 4096 * 4096
    assert len(huge.data) < 200_000, "the IMAGE-HUGE image must stay cheap to send"


@pytest.mark.parametrize(
    "width,height,fmt,message",
    [
        pytest.param(0, 10, "png", "width 0 is outside", id="zero-width"),
        pytest.param(10, MAX_SIDE + 1, "png", f"height {MAX_SIDE + 1} is outside", id="too-tall"),
        pytest.param(10, 10, "gif", "'gif' is not one of png, jpeg", id="format"),
    ],
)
def test_bad_sizes_and_formats_are_refused(width, height, fmt, message):
    with pytest.raises(ValueError, match=message):
        make_image(width, height, fmt)


def test_request_shapes_carry_data_urls_only():
    image = make_image(28, 28)
    assert chat_part(image) == {"type": "image_url", "image_url": {"url": image.data_url}}
    message = chat_message("What is it?", image, "data:text/plain;base64,aGk=")
    assert message["content"][0] == {"type": "text", "text": "What is it?"}
    assert [p["image_url"]["url"][:5] for p in message["content"][1:]] == ["data:", "data:"]
    assert messages_block(image) == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": image.base64},
    }
    assert data_url("text/plain", b"hi") == "data:text/plain;base64,aGk="
    assert data_url("image/png", "@@") == "data:image/png;base64,@@"
