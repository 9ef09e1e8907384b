"""The reference server's image input on chat completions (the IMAGE-* checks), and its faults.

By default the reference serves a text-only model: a chat message with an ``image_url`` part is
refused with a 400 error object, as an engine without a vision encoder should. With ``--vision``
it serves a vision model: each ``image_url`` part must be a base64 ``data:`` URL (it fetches
nothing) of a PNG, JPEG, WebP or GIF; bad base64, another media type, bytes that do not decode
and an image above :data:`MAX_PIXELS` or :data:`MAX_BYTES` are a 400. A decoded image counts one
prompt token per 28x28 patch, at least :data:`MIN_TOKENS` and at most :data:`MAX_TOKENS` (an
engine resizes to its encoder's bounds), so prompt_tokens grow with the image's area and with
the number of images. The answer is seeded by the whole request, data URLs included, so a
different image gives a different answer.

Pillow decodes (it is a dependency already; the client side draws with it too, but the two share
no code: :mod:`servecheck.client.images` is not imported here).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import math
from dataclasses import dataclass, field
from typing import Any

from servecheck.reference.http import ApiError, State

PATCH = 28  # pixels a side of one image token (Qwen2-VL's 14 px patches merged 2x2)
MIN_TOKENS = 4
MAX_TOKENS = 256
MAX_PIXELS = 2048 * 2048
MAX_BYTES = 8 * 1024 * 1024
MEDIA_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")
FLAT_TOKENS = 16  # image-tokens-flat: every image counts this, whatever its size


@dataclass(slots=True)
class Seen:
    """The images a request carried as the server read them: their sizes and prompt tokens."""

    sizes: list[tuple[int, int]] = field(default_factory=list)
    tokens: int = 0


def _image_parts(body: dict[str, Any]) -> list[tuple[str, Any]]:
    """(where, url) of every image_url part of the chat body's messages, in order."""
    out: list[tuple[str, Any]] = []
    messages = body.get("messages")
    for i, m in enumerate(messages if isinstance(messages, list) else []):
        content = m.get("content") if isinstance(m, dict) else None
        for j, part in enumerate(content if isinstance(content, list) else []):
            if isinstance(part, dict) and part.get("type") == "image_url":
                ref = part.get("image_url")
                url = ref.get("url") if isinstance(ref, dict) else ref
                out.append((f"messages[{i}].content[{j}]", url))
    return out


def image_tokens(width: int, height: int) -> int:
    """Prompt tokens of a ``width`` x ``height`` image: one per 28x28 patch, bounded."""
    patches = math.ceil(width / PATCH) * math.ceil(height / PATCH)
    return max(MIN_TOKENS, min(MAX_TOKENS, patches))


def _payload(faults: frozenset[str], where: str, url: Any) -> tuple[str, bytes] | None:
    """The media type and bytes of a data URL; None where a fault drops the image unread."""
    if not isinstance(url, str) or not url.startswith("data:"):
        raise ApiError(
            400,
            f"{where}: only base64 data: URLs are served (this server fetches nothing), got "
            f"{str(url)[:40]!r}",
            param=where,
        )
    head, _, text = url[5:].partition(",")
    media_type, _, encoding = head.partition(";")
    if encoding != "base64":
        raise ApiError(400, f"{where}: the data URL is not base64 ({head!r})", param=where)
    if media_type not in MEDIA_TYPES and "image-type-unchecked" not in faults:
        raise ApiError(
            400,
            f"{where}: unsupported image type {media_type!r} (one of {', '.join(MEDIA_TYPES)})",
            param=where,
        )
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        if "image-bad-base64-500" in faults:
            raise ApiError(
                500, "internal error: binascii.Error: Incorrect padding", "server_error"
            ) from None
        if "image-bad-base64-accepted" in faults:
            return None
        raise ApiError(400, f"{where}: the image is not valid base64", param=where) from None
    if len(data) > MAX_BYTES:
        raise ApiError(
            400, f"{where}: the image is {len(data)} bytes, over {MAX_BYTES}", param=where
        )
    return media_type, data


def _size(state: State, where: str, data: bytes) -> tuple[int, int] | None:
    """The decoded image's (width, height); None where a fault drops it."""
    from PIL import Image, UnidentifiedImageError

    faults = state.faults
    try:
        with Image.open(io.BytesIO(data)) as picture:
            width, height = picture.size
            if width * height > MAX_PIXELS:
                if "image-huge-500" in faults:
                    raise ApiError(500, "internal error: MemoryError", "server_error")
                if "image-huge-dropped" in faults:
                    return None
                if "image-huge-resized" not in state.config.quirks:
                    raise ApiError(
                        400,
                        f"{where}: the image is {width}x{height}, over {MAX_PIXELS} pixels",
                        param=where,
                    )
                return width, height  # resized to the encoder's bound: counted, not decoded
            picture.load()
    except Image.DecompressionBombError:
        if "image-bomb-500" in faults:  # the decoder's exception escapes as a server error
            raise ApiError(500, "internal error: DecompressionBombError", "server_error") from None
        raise ApiError(400, f"{where}: the image is too large to decode", param=where) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        if "image-type-unchecked" in faults:
            return None
        raise ApiError(400, f"{where}: the image data does not decode", param=where) from None
    return width, height


def _count(faults: frozenset[str], sizes: list[tuple[int, int]]) -> int:
    if "image-tokens-uncounted" in faults:
        return 0
    if "image-tokens-flat" in faults:
        return FLAT_TOKENS * len(sizes)
    return sum(image_tokens(w, h) for w, h in sizes)


def screen(state: State, body: dict[str, Any]) -> Seen:
    """Read a chat body's image parts: refuse them on a text-only server, else decode and count
    them (the prompt tokens they add); raises the 400 (or a fault's 500) an engine answers."""
    faults = state.faults
    parts = _image_parts(body)
    seen = Seen()
    if not parts:
        return seen
    if "image-500" in faults:
        raise ApiError(500, "internal error: KeyError: 'pixel_values'", "server_error")
    if not state.config.vision:
        if "image-ignored" in faults:
            return seen  # the template renders text parts only: the image is gone, silently
        where = parts[0][0]
        raise ApiError(
            400,
            f"{body.get('model')!r} is a text-only model and does not accept images ({where} is "
            "an image_url part)",
            param=where,
        )
    if "image-multi-refused" in faults and len(parts) > 1:
        raise ApiError(400, "at most 1 image may be provided in one request", param="messages")
    if "image-first-only" in faults:
        parts = parts[:1]
    for where, url in parts:
        read = _payload(faults, where, url)
        size = _size(state, where, read[1]) if read is not None else None
        if size is not None:
            seen.sizes.append(size)
    seen.tokens = _count(faults, seen.sizes)
    return seen


def messages_image(state: State, where: str, block: dict[str, Any]) -> tuple[int, str]:
    """Read an Anthropic Messages ``image`` content block (a base64 ``source``) as a chat
    image_url part is read: refused on a text-only server (the image-messages-ignored fault
    drops it unread), else decoded and counted (image-messages-dropped: decoded, not counted).
    Returns (its prompt tokens, a digest of it for the answer's seed); raises the 400 an engine
    answers."""
    faults = state.faults
    if not state.config.vision:
        if "image-messages-ignored" in faults:
            return 0, ""
        raise ApiError(
            400,
            f"{where}: this is a text-only model and does not accept image content blocks",
            param=where,
        )
    source = block.get("source")
    ok = (
        isinstance(source, dict)
        and source.get("type") == "base64"
        and isinstance(source.get("media_type"), str)
        and isinstance(source.get("data"), str)
    )
    if not ok:
        raise ApiError(
            400,
            f"{where}.source must be {{type: base64, media_type, data}} (this server fetches "
            "no URLs)",
            param=where,
        )
    assert isinstance(source, dict)  # noqa: S101 - checked above
    url = f"data:{source['media_type']};base64,{source['data']}"
    read = _payload(faults, where, url)
    size = _size(state, where, read[1]) if read is not None else None
    if read is None or size is None or "image-messages-dropped" in faults:
        return 0, ""
    return image_tokens(*size), hashlib.sha256(read[1]).hexdigest()[:16]
