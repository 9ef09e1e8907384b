"""Images made here, for requests that carry them: the IMAGE-* checks, and load with images.

Every image is drawn locally and deterministically (the same width, height, format and seed give
the same bytes on every run) and travels as a base64 ``data:`` URL: nothing here names a URL off
the machine, so no test can make an engine fetch one. Pillow draws and encodes them (PNG and
JPEG; it is a dependency already through matplotlib, and the one well-kept encoder for both,
see docs/dependencies.md).

The request shapes are here too, so that each API's checks build the same image the same way:
:func:`chat_part` (an OpenAI chat ``image_url`` part) and :func:`messages_block` (an Anthropic
Messages ``image`` block with a base64 source).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
from dataclasses import dataclass
from typing import Any, Literal

Format = Literal["png", "jpeg"]
MEDIA_TYPES: dict[str, str] = {"png": "image/png", "jpeg": "image/jpeg"}
MAX_SIDE = 8192  # pixels a side: 64 Mpx decodes to 192 MB, the most a run may ask an engine for


@dataclass(frozen=True, slots=True)
class Image:
    """One encoded image: its size, media type and bytes."""

    width: int
    height: int
    media_type: str
    data: bytes
    colour: tuple[int, int, int]  # the background colour it was drawn with

    @property
    def pixels(self) -> int:
        return self.width * self.height

    @property
    def base64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")

    @property
    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.base64}"

    def describe(self) -> str:
        """``224x224 image/png (1.2 kB)``: how failure messages name an image."""
        return f"{self.width}x{self.height} {self.media_type} ({len(self.data) / 1000:.1f} kB)"


def _colours(seed: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    digest = hashlib.sha256(f"servecheck-image-{seed}".encode()).digest()
    return (digest[0], digest[1], digest[2]), (digest[3], digest[4], digest[5])


@functools.lru_cache(maxsize=64)
def make_image(width: int, height: int, fmt: Format = "png", seed: int = 0) -> Image:
    """A ``width`` x ``height`` image in ``fmt``: a background colour and a block of a second
    colour in its top-left quarter, both picked by ``seed`` (so images with different seeds
    differ, and the same seed is the same image). Few colours: a big image stays a small file."""
    from PIL import Image as PILImage

    if fmt not in MEDIA_TYPES:
        raise ValueError(f"image format {fmt!r} is not one of {', '.join(MEDIA_TYPES)}")
    for name, side in (("width", width), ("height", height)):
        if not 1 <= side <= MAX_SIDE:
            raise ValueError(f"image {name} {side} is outside 1..{MAX_SIDE}")
    background, block = _colours(seed)
    picture = PILImage.new("RGB", (width, height), background)
    picture.paste(block, (0, 0, max(1, width // 2), max(1, height // 2)))
    out = io.BytesIO()
    if fmt == "png":
        picture.save(out, format="PNG", optimize=False, compress_level=9)
    else:
        picture.save(out, format="JPEG", quality=85)
    return Image(width, height, MEDIA_TYPES[fmt], out.getvalue(), background)


def chat_part(image: Image | str) -> dict[str, Any]:
    """An OpenAI chat content part for ``image`` (or a data URL given as text, e.g. a malformed
    one a check sends on purpose)."""
    url = image.data_url if isinstance(image, Image) else image
    return {"type": "image_url", "image_url": {"url": url}}


def chat_message(text: str, *images: Image | str) -> dict[str, Any]:
    """A user message whose content is ``text`` then one part per image."""
    return {
        "role": "user",
        "content": [{"type": "text", "text": text}, *(chat_part(i) for i in images)],
    }


def messages_block(image: Image) -> dict[str, Any]:
    """An Anthropic Messages content block for ``image`` (a base64 source)."""
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": image.media_type, "data": image.base64},
    }


def data_url(media_type: str, payload: bytes | str) -> str:
    """A ``data:`` URL of ``payload`` (bytes are base64-encoded, text is put in as it is): how
    the malformed cases are built (bad base64, a media type that is no image)."""
    text = base64.b64encode(payload).decode("ascii") if isinstance(payload, bytes) else payload
    return f"data:{media_type};base64,{text}"


__all__ = [
    "MAX_SIDE",
    "MEDIA_TYPES",
    "Format",
    "Image",
    "chat_message",
    "chat_part",
    "data_url",
    "make_image",
    "messages_block",
]
