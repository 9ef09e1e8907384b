"""``--images``: generated images, a folder of the user's, attaching them to requests, and the
summary's images section (servecheck/load/workload/images.py, image_stats.py)."""

from __future__ import annotations

import base64
import io
import random
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from servecheck.analysis.image_stats import image_section
from servecheck.analysis.typed_json import to_json
from servecheck.errors import SpecError, UsageError
from servecheck.load.plan import load_plan
from servecheck.load.workload.images import (
    MAX_FILE_BYTES,
    ImagePool,
    Variant,
    check_images,
    generate_png,
    parse_variants,
    read_folder,
)
from servecheck.load.workload.planned import PlannedRequest
from servecheck.report.load_text import format_images


def image_breakdown(records: Any) -> dict[str, Any]:
    """The ``images`` section as summary.json writes it, or ``{}`` when no record had images."""
    section = image_section(records)
    return {} if section is None else {"images": to_json(section)}


def test_sizes_parse_with_an_optional_count() -> None:
    assert parse_variants("512x512, 2x256x128") == [Variant(1, 512, 512), Variant(2, 256, 128)]
    assert check_images(" 64x32,3x16x16 ") == "1x64x32,3x16x16"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("9x64x64", "images 9x64x64: 1 to 8 images a request", id="too-many-images"),
        pytest.param("0x64x64", "images 0x64x64: 1 to 8 images a request", id="zero-images"),
        pytest.param("64x5000", "images 64x5000: each side from 1 to 2048 pixels", id="too-wide"),
        pytest.param("64x0", "images 64x0: each side from 1 to 2048 pixels", id="zero-side"),
    ],
)
def test_bad_sizes_are_usage_errors(text: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        check_images(text)
    assert str(info.value) == message


def test_generated_images_are_deterministic_pngs_of_the_size_asked() -> None:
    a, b, c = generate_png(96, 40, 1), generate_png(96, 40, 1), generate_png(96, 40, 2)
    assert a == b and a != c
    with Image.open(io.BytesIO(a)) as im:
        assert (im.format, im.size, im.mode) == ("PNG", (96, 40), "RGB")


def _write(folder: Path, name: str, size: tuple[int, int], fmt: str) -> None:
    Image.new("RGB", size, (10, 20, 30)).save(folder / name, format=fmt)


def test_a_folder_of_png_and_jpeg_is_read_in_name_order(tmp_path: Path) -> None:
    _write(tmp_path, "b.jpg", (40, 30), "JPEG")
    _write(tmp_path, "a.PNG", (20, 10), "PNG")
    (tmp_path / "notes.txt").write_text("not an image")
    files = read_folder(tmp_path)
    assert [(f.name, f.media_type, f.width, f.height) for f in files] == [
        ("a.PNG", "image/png", 20, 10),
        ("b.jpg", "image/jpeg", 40, 30),
    ]
    assert check_images(str(tmp_path)) == str(tmp_path.resolve())


def test_bad_folders_are_clear_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"images .*missing.*: not a folder of images, nor sizes"):
        check_images(str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError, match=r"no \.png, \.jpg or \.jpeg file in it"):
        check_images(str(empty))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.png").write_bytes(b"not a png at all")
    with pytest.raises(UsageError, match=r"x\.png.* is not a readable image"):
        check_images(str(bad))
    gif = tmp_path / "gif"
    gif.mkdir()
    Image.new("RGB", (4, 4)).save(gif / "x.png", format="GIF")
    with pytest.raises(UsageError, match=r"x\.png.* is GIF, not PNG or JPEG"):
        check_images(str(gif))
    big = tmp_path / "big"
    big.mkdir()
    (big / "huge.png").write_bytes(b"\0" * (MAX_FILE_BYTES + 1))
    with pytest.raises(UsageError, match=r"huge\.png.* is \d+ bytes, at most \d+ a file"):
        check_images(str(big))


def test_a_plan_names_images_relative_to_its_folder(tmp_path: Path) -> None:
    (tmp_path / "pics").mkdir()
    _write(tmp_path / "pics", "a.png", (8, 8), "PNG")
    plan = tmp_path / "plan.yaml"
    plan.write_text("api: messages\nimages: pics\n")
    assert load_plan(plan).values["images"] == str((tmp_path / "pics").resolve())
    plan.write_text("images: 9x8x8\n")
    with pytest.raises(UsageError, match=r"plan\.yaml: images 9x8x8: 1 to 8 images a request"):
        load_plan(plan)


def _decoded(url: str) -> tuple[int, int]:
    head, _, data = url.partition(",")
    assert head == "data:image/png;base64"
    with Image.open(io.BytesIO(base64.b64decode(data))) as im:
        return im.size


def test_the_pool_adds_images_to_the_last_user_turn_without_changing_the_plan() -> None:
    pool = ImagePool("2x32x16", seed=3)
    history = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": "describe"},
    ]
    planned = PlannedRequest(history, 16, prompt_tokens=7, fields={"turn": 1})
    sent = pool.attach(planned, random.Random(0))
    assert planned.messages[3] == {"role": "user", "content": "describe"}  # the plan is kept
    assert sent.messages[:3] == history[:3]
    text, *images = sent.messages[3]["content"]
    assert text == {"type": "text", "text": "describe"}
    assert len(images) == 2 and images[0] != images[1]  # two distinct images of the pool
    assert [_decoded(p["image_url"]["url"]) for p in images] == [(32, 16), (32, 16)]
    assert sent.fields == {"turn": 1, "images": 2, "image_size": "32x16", "text_tokens": 7}


def test_a_folder_pool_sends_the_files_themselves(tmp_path: Path) -> None:
    _write(tmp_path, "one.png", (12, 6), "PNG")
    pool = ImagePool(str(tmp_path))
    sent = pool.attach(
        PlannedRequest([{"role": "user", "content": "q"}], 8, prompt_tokens=1), random.Random(1)
    )
    url = sent.messages[0]["content"][1]["image_url"]["url"]
    assert base64.b64decode(url.partition(",")[2]) == (tmp_path / "one.png").read_bytes()
    assert sent.fields["image_size"] == "12x6"


def _rec(
    images: int, size: str, ttft: float, prompt: int, text: int, **kw: object
) -> dict[str, object]:
    return {
        "images": images,
        "image_size": size,
        "ttft": ttft,
        "prompt_tokens": prompt,
        "text_tokens": text,
        "output_tokens": 4,
        "error": None,
        **kw,
    }


def test_the_images_section_gives_tokens_per_image_and_ttft_by_size() -> None:
    records = [
        _rec(1, "512x512", 0.2, 276, 20),
        _rec(1, "512x512", 0.3, 280, 24),
        _rec(1, "512x512", 0.4, 270, 14),
        _rec(2, "256x256", 0.1, 150, 22),
        _rec(2, "256x256", 0.9, 0, 0, error="http-500"),
        _rec(2, "256x256", 0.2, 40, 40, output_tokens=None),  # no usage: not a measure
        {"ttft": 0.1, "prompt_tokens": 9, "output_tokens": 3},  # no images: not in the section
    ]
    section = image_breakdown(records)["images"]
    assert section["requests"] == 6 and list(section["by_size"]) == ["1x512x512", "2x256x256"]
    big, small = section["by_size"]["1x512x512"], section["by_size"]["2x256x256"]
    assert big["count"] == 3 and big["errors"] == 0 and big["ttft_ms"]["count"] == 3
    assert big["ttft_ms"]["p50"] == pytest.approx(300, rel=0.01)
    assert big["tokens_per_image_p50"] == 256 and big["prompt_tokens_p50"] == 276
    assert small["count"] == 3 and small["errors"] == 1 and small["requests_with_usage"] == 1
    assert small["tokens_per_image_p50"] == 64
    lines = format_images(image_section(records))  # the renderer reads the typed section
    assert lines[0].startswith("images (COUNTxWxH)") and "tok/image" in lines[0]
    assert lines[1].split() == ["1x512x512", "3", "0", "300.0", "400.1", "276", "256.0"]
    assert image_breakdown([{"ttft": 0.1}]) == {} and format_images(None) == []
