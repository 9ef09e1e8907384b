"""Load with images: every request's last user turn carries images as base64 data URLs.

``--images`` (plan key ``images``) is either

* sizes to generate, ``[COUNTx]WIDTHxHEIGHT`` items separated by commas: ``512x512`` is one
  512x512 image a request, ``1x512x512,2x256x256`` makes each request (picked with the run's
  seed) carry one 512x512 image or two 256x256 ones. Images are drawn here, deterministically
  from the seed (Pillow: a gradient and a few rectangles, encoded as PNG), :data:`POOL` distinct
  ones per size, so a request's image is not always the very one before it;
* or a folder of your own PNG / JPEG files (``*.png``, ``*.jpg``, ``*.jpeg``, not recursive):
  each request carries one of them, at most :data:`MAX_FILES` files of at most
  :data:`MAX_FILE_BYTES` each and :data:`MAX_FOLDER_BYTES` in all.

Chat sends them as ``image_url`` content parts, the messages API as ``image`` blocks with a base64
source (load/generator/apis.py). Nothing is fetched from anywhere: data URLs only. Each record keeps
``images`` (how many), ``image_size`` (``WxH``) and ``text_tokens`` (the text's planned prompt
tokens), from which the summary's ``images`` section derives tokens per image (analysis/image_stats.py).
"""

from __future__ import annotations

import base64
import io
import os
import random
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from servecheck.errors import SpecError
from servecheck.load.workload.planned import PlannedRequest, Send

MAX_COUNT = 8  # images in one request
MAX_SIDE = 2048  # pixels, each side of a generated image
MAX_VARIANTS = 16
POOL = 8  # distinct generated images per size
MAX_FILES = 256
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_FOLDER_BYTES = 128 * 1024 * 1024
MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg"}
SUFFIXES = (".png", ".jpg", ".jpeg")
_VARIANT = re.compile(r"^(?:(\d+)x)?(\d+)x(\d+)$")


@dataclass(slots=True, frozen=True)
class Variant:
    """``count`` images of ``width`` x ``height`` in one request."""

    count: int
    width: int
    height: int

    @property
    def key(self) -> str:
        return f"{self.count}x{self.width}x{self.height}"


@dataclass(slots=True)
class ImageFile:
    """One image read from the user's folder."""

    name: str
    media_type: str
    width: int
    height: int
    data: bytes


def _looks_like_sizes(text: str) -> bool:
    return all(_VARIANT.match(p.strip()) for p in text.split(","))


def parse_variants(text: str) -> list[Variant]:
    """``1x512x512,2x256x256`` -> variants; a SpecError says what is wrong with an item."""
    items = [p.strip() for p in text.split(",")]
    if len(items) > MAX_VARIANTS:
        raise SpecError(f"{{images}}: at most {MAX_VARIANTS} sizes, got {len(items)}")
    out = []
    for item in items:
        m = _VARIANT.match(item)
        if m is None:
            raise SpecError(
                "{images} {item}: a size is [COUNTx]WIDTHxHEIGHT, e.g. 2x256x256", item=item
            )
        count, w, h = int(m.group(1) or 1), int(m.group(2)), int(m.group(3))
        if not 1 <= count <= MAX_COUNT:
            raise SpecError(f"{{images}} {{item}}: 1 to {MAX_COUNT} images a request", item=item)
        if not (1 <= w <= MAX_SIDE and 1 <= h <= MAX_SIDE):
            raise SpecError(
                f"{{images}} {{item}}: each side from 1 to {MAX_SIDE} pixels", item=item
            )
        out.append(Variant(count, w, h))
    return out


def read_folder(folder: str | os.PathLike[str]) -> list[ImageFile]:
    """The PNG / JPEG files of ``folder`` (sorted by name, the first :data:`MAX_FILES`), each
    checked to be the image its name says, within the size bounds; else a SpecError naming it."""
    from PIL import Image, UnidentifiedImageError

    path = Path(folder)
    if not path.is_dir():
        raise SpecError(
            "{images} {folder}: not a folder of images, nor sizes such as 512x512", folder=folder
        )
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES)
    if not files:
        raise SpecError("{images} {folder}: no .png, .jpg or .jpeg file in it", folder=folder)
    out: list[ImageFile] = []
    total = 0
    for p in files[:MAX_FILES]:
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise SpecError(
                f"{{images}}: {{file}} is {size} bytes, at most {MAX_FILE_BYTES} a file (resize it)",
                file=p,
            )
        total += size
        if total > MAX_FOLDER_BYTES:
            raise SpecError(
                f"{{images}} {{folder}}: more than {MAX_FOLDER_BYTES} bytes of images",
                folder=folder,
            )
        data = p.read_bytes()
        try:
            with Image.open(io.BytesIO(data)) as im:
                fmt, (w, h) = im.format, im.size
                im.verify()
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
            raise SpecError(
                "{images}: {file} is not a readable image ({why})", file=p, why=exc
            ) from None
        if fmt not in MEDIA_TYPES:
            raise SpecError("{images}: {file} is {fmt}, not PNG or JPEG", file=p, fmt=fmt)
        out.append(ImageFile(p.name, MEDIA_TYPES[fmt], w, h, data))
    return out


def normalise_images(text: str | None) -> str | None:
    """``--images`` in its canonical form: sizes as ``COUNTxWxH`` items, or the folder's absolute
    path (not read here: :func:`check_images` reads it); None stays None."""
    if text is None:
        return None
    text = str(text).strip()
    if text and _looks_like_sizes(text):
        return ",".join(v.key for v in parse_variants(text))
    return str(Path(os.path.expanduser(text)).resolve())


def check_images(text: str | None) -> str | None:
    """``--images`` checked before any traffic (a folder's files read and checked):
    :func:`normalise_images`' form; a SpecError says what is wrong."""
    value = normalise_images(text)
    if value is not None and not _looks_like_sizes(value):
        read_folder(value)
    return value


def generate_png(width: int, height: int, seed: int) -> bytes:
    """A deterministic PNG of ``width`` x ``height``: a seeded colour gradient and rectangles."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    ramp = Image.linear_gradient("L").resize((width, height))
    shifts = [rng.randrange(256) for _ in range(3)]
    bands = [ramp.point([(v + a) % 256 for v in range(256)]) for a in shifts]
    im = Image.merge("RGB", bands)
    draw = ImageDraw.Draw(im)
    for _ in range(6):
        x0, y0 = rng.randrange(width), rng.randrange(height)
        x1, y1 = (
            min(width - 1, x0 + rng.randrange(1, width + 1)),
            min(height - 1, y0 + rng.randrange(1, height + 1)),
        )
        draw.rectangle((x0, y0, x1, y1), fill=tuple(rng.randrange(256) for _ in range(3)))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64," + base64.b64encode(data).decode("ascii")


@dataclass(slots=True)
class _Entry:
    count: int
    size: str  # WxH
    urls: list[str] = field(default_factory=list)


class ImagePool:
    """The images of one Locust process, built before the run's clock starts."""

    def __init__(self, text: str, seed: int = 0) -> None:
        self.entries: list[_Entry] = []
        if _looks_like_sizes(text):
            for i, v in enumerate(parse_variants(text)):
                urls = [
                    data_url(
                        "image/png", generate_png(v.width, v.height, seed * 7919 + i * 101 + k)
                    )
                    for k in range(POOL)
                ]
                self.entries.append(_Entry(v.count, f"{v.width}x{v.height}", urls))
        else:
            for f in read_folder(text):
                self.entries.append(
                    _Entry(1, f"{f.width}x{f.height}", [data_url(f.media_type, f.data)])
                )

    def shape(self, send: Send) -> None:
        """The run's step (``--images``): the request's last user turn gets its images."""
        send.prompt = self.attach(send.prompt, send.rng)

    def attach(self, prompt: PlannedRequest, rng: random.Random) -> PlannedRequest:
        """``prompt`` with images added to its last user turn (a new request; the planned one,
        which a scenario may keep as history, is not changed)."""
        entry = self.entries[rng.randrange(len(self.entries))]
        pool = entry.urls
        urls = (
            rng.sample(pool, entry.count)
            if entry.count <= len(pool)
            else [pool[rng.randrange(len(pool))] for _ in range(entry.count)]
        )
        messages = list(prompt.messages)
        at = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        if at < 0:
            return prompt
        content = messages[at].get("content")
        parts: list[Any] = (
            [{"type": "text", "text": content}] if isinstance(content, str) else list(content or ())
        )
        parts += [{"type": "image_url", "image_url": {"url": u}} for u in urls]
        messages[at] = {**messages[at], "content": parts}
        fields = {
            **prompt.fields,
            "images": entry.count,
            "image_size": entry.size,
            "text_tokens": prompt.prompt_tokens,
        }
        return replace(prompt, messages=messages, fields=fields)
