"""IMAGE-*: image input on chat completions (``image_url`` content parts).

A target that declares ``capabilities: {vision: true}`` serves a vision-language model: it must
answer an image, count it into ``usage.prompt_tokens`` (the witness that the image reached the
model, as REQ-* use it for text parts: more tokens than the same text alone, more for a bigger
image, more for more images) and refuse a malformed image with a 4xx error object. Every other
target is text-only, the usual case: an image part must get a 4xx error object there, never a
500 and never a 200 whose answer silently left the image out (IMAGE-REJECTED-TEXT-ONLY, the one
IMAGE check that runs on every text engine).

The Anthropic Messages API carries images too, as ``image`` content blocks with a base64
``source``: IMAGE-MESSAGES-ANSWERS holds a vision target's /v1/messages to what IMAGE-ANSWERS and
IMAGE-TOKENS-GROW ask of chat, and IMAGE-MESSAGES-REJECTED-TEXT-ONLY a text-only target's to a
4xx in Anthropic's error shape.

Images are drawn here (:mod:`servecheck.client.images`) and sent as base64 ``data:`` URLs only:
no request names a URL off the machine, so no engine is made to fetch one.
"""

from __future__ import annotations

from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.registry import check
from servecheck.checks.surfaces import messages as anthropic
from servecheck.checks.surfaces.err import error_shape_problem
from servecheck.checks.surfaces.req import answered, prompt_tokens
from servecheck.client.http import Exchange
from servecheck.client.images import Image, chat_message, data_url, make_image, messages_block

PROMPT = "Describe the image in a few words."
MAX_TOKENS = 8
SMALL, LARGE = 56, 336  # sides: 4 and 144 patches of 28x28 (Qwen2-VL's minimum is 56x56)
MULTI_SIDE, MULTI_COUNT = 112, 3
HUGE_SIDE = 4096  # 16.8 Mpx (50 MB decoded), a 59 kB PNG on the wire
REJECT_SIDE = 56
ANSWER_SIDE = 224
# Prompt tokens an image part may add on a text-only target without having been read: a template
# that renders each part with a separator (Xinference 4.1 adds 1 a part, measured 2026-12-02); a
# read image adds at least Qwen2-VL's 4 for 56x56 and its 2 markers.
READ_MARGIN = 3

HINT_VISION = (
    "a vision model reads image_url parts with base64 data URLs (vLLM serves a VLM as it is; "
    "llama.cpp needs --mmproj); a text-only deployment must not declare vision"
)
HINT_COUNT = (
    "count the image's tokens into usage.prompt_tokens (clients and load tests bill and size "
    "requests by it); an image that adds no tokens was dropped before the model saw it"
)
HINT_REFUSE = (
    "refuse an image the model cannot read with a 400 and an OpenAI error object naming the part "
    "(what is wrong: its base64, its media type, its size); a 500 reads as a server failure"
)
# Malformed image_url parts: base64 that does not decode, bytes that are no image under an
# image media type, and a media type that is no image at all.
MALFORMED: dict[str, str] = {
    "bad-base64": data_url("image/png", "iVBORw0KGgo@@not*base64!!"),
    "not-an-image": data_url("image/png", b"plain text, not the bytes of a PNG"),
    "unsupported-type": data_url("text/plain", b"hello: a text file is not an image"),
}


def _ask(ctx: CheckContext, *images: Image | str) -> Exchange:
    """One user message: the prompt as a text part, then the images, at temperature 0."""
    return ctx.chat([chat_message(PROMPT, *images)], max_tokens=MAX_TOKENS, temperature=0)


def _tokens_of(ctx: CheckContext, ex: Exchange, what: str, hint: str = HINT_VISION) -> int:
    data, _ = answered(ctx, ex, what, hint=hint)
    return prompt_tokens(ctx, data, ex)


def _text_alone(ctx: CheckContext) -> int:
    """Prompt tokens of the same message without its images (the prompt as its one text part)."""
    return _tokens_of(ctx, _ask(ctx), "the same text without an image", hint="")


def _refusal_problem(ex: Exchange) -> tuple[str | None, str | None]:
    """Why ``ex`` is not a 4xx with an OpenAI error object (None when it is), and the deviation."""
    status = ex.status or 0
    if ex.error or status == 0:
        return f"no answer: {ex.describe(200)}", None
    if status >= 500:
        return f"a server error: {ex.describe(200)}", None
    if status < 400:
        return f"accepted: {ex.describe(200)}", None
    problem, deviation = error_shape_problem(ex)
    return (f"a {status} without an OpenAI error object: {problem}" if problem else None), deviation


@check(
    "IMAGE-ANSWERS",
    "one image as a base64 data URL is answered",
    f"a user message with a text part and one {ANSWER_SIDE}x{ANSWER_SIDE} image_url part (a "
    "base64 data URL), once as PNG and once as JPEG, gets a 200 chat.completion with a non-empty "
    "answer each time",
    requires=("vision",),
)
def image_answers(ctx: CheckContext) -> None:
    for fmt in ("png", "jpeg"):
        image = make_image(ANSWER_SIDE, ANSWER_SIDE, fmt, seed=1)
        answered(ctx, _ask(ctx, image), f"one {image.describe()} image", hint=HINT_VISION)


def _adds_tokens(ctx: CheckContext, image: Image, alone: int, summary: str) -> int:
    """prompt_tokens with ``image`` beside the text, which must be more than ``alone``."""
    ex = _ask(ctx, image)
    tokens = _tokens_of(ctx, ex, f"one {image.describe()} image")
    ctx.expect(
        tokens > alone,
        summary,
        expected=f"prompt_tokens > {alone} (the same text without the image)",
        received=f"prompt_tokens {tokens} with one {image.describe()} image",
        exchange=ex,
        hint=HINT_COUNT,
    )
    return tokens


@check(
    "IMAGE-TOKENS-GROW",
    "an image adds prompt tokens, a bigger image more",
    f"usage.prompt_tokens with one {SMALL}x{SMALL} PNG is larger than for the same text without "
    f"it, and with one {LARGE}x{LARGE} PNG larger still (a fixed-resolution encoder that counts "
    "every image the same is the image-tokens-fixed deviation)",
    requires=("vision",),
)
def image_tokens_grow(ctx: CheckContext) -> None:
    alone = _text_alone(ctx)
    small, large = make_image(SMALL, SMALL, seed=2), make_image(LARGE, LARGE, seed=2)
    with_small = _adds_tokens(ctx, small, alone, "the image adds no prompt tokens")
    ex_large = _ask(ctx, large)
    with_large = _tokens_of(ctx, ex_large, f"one {large.describe()} image")
    ctx.expect(
        with_large > with_small,
        "a bigger image costs no more prompt tokens than a small one",
        expected=f"prompt_tokens > {with_small} (the {SMALL}x{SMALL} image) for {LARGE}x{LARGE}, "
        f"{(LARGE // SMALL) ** 2}x its pixels",
        received=f"prompt_tokens {with_large} with a {large.describe()} image "
        f"({alone} without an image)",
        exchange=ex_large,
        deviation="image-tokens-fixed",
        hint="an encoder that tiles or patches the image counts its tokens by area; a fixed "
        "count for every size is right only for a fixed-resolution encoder (then allow "
        "image-tokens-fixed in targets.yaml)",
    )


def _several(ctx: CheckContext, images: list[Image]) -> Exchange:
    ex = _ask(ctx, *images)
    if ex.status is not None and 400 <= ex.status < 500:
        ctx.fail(
            f"a message with {len(images)} images is refused",
            expected=f"a 200 chat.completion reading all {len(images)} images",
            received=ex.describe(300),
            exchange=ex,
            deviation="image-count-limited",
            hint="several images in one message are what document and comparison prompts send; "
            "raise the per-prompt image limit (vLLM --limit-mm-per-prompt '{\"image\": 4}'), or "
            "allow image-count-limited for a deployment limited on purpose",
        )
    return ex


@check(
    "IMAGE-MULTI",
    "several images in one message are all read",
    f"a user message with {MULTI_COUNT} different {MULTI_SIDE}x{MULTI_SIDE} PNGs gets a 200 "
    "chat.completion with an answer, and the images add at least twice the prompt tokens one "
    "of them adds (which must be more than none)",
    requires=("vision",),
)
def image_multi(ctx: CheckContext) -> None:
    alone = _text_alone(ctx)
    images = [make_image(MULTI_SIDE, MULTI_SIDE, seed=10 + k) for k in range(MULTI_COUNT)]
    one = _adds_tokens(
        ctx,
        images[0],
        alone,
        "one image adds no prompt tokens: the count cannot tell how many images were read",
    )
    ex = _several(ctx, images)
    several = _tokens_of(ctx, ex, f"{MULTI_COUNT} images in one message")
    ctx.expect(
        several - alone >= 2 * (one - alone),
        f"{MULTI_COUNT} images add no more prompt tokens than one or two: images were dropped",
        expected=f"prompt_tokens >= {alone} + 2 x {one - alone} (two images' worth at least)",
        received=f"prompt_tokens {several} with {MULTI_COUNT} images, {one} with one, "
        f"{alone} with none",
        exchange=ex,
        hint="read every image_url part of a message, not the first one only",
    )


@check(
    "IMAGE-MALFORMED",
    "a malformed image is refused with a 4xx error object",
    f"an image_url part that is {', '.join(MALFORMED)} (base64 that does not decode, text bytes "
    "under image/png, a text/plain data URL) each gets a 4xx with an OpenAI error object: "
    "never a 200 that dropped it, never a 5xx",
    requires=("vision", "route-accepts:/chat/completions"),
)
def image_malformed(ctx: CheckContext) -> None:
    problems: list[str] = []
    deviations: set[str | None] = set()
    last: Exchange | None = None
    for name, url in MALFORMED.items():
        ex = _ask(ctx, url)
        problem, deviation = _refusal_problem(ex)
        if problem:
            problems.append(f"{name}: {problem}")
            deviations.add(deviation)
            last = ex
    ctx.expect(
        not problems,
        f"{len(problems)} malformed image(s) were not refused cleanly",
        expected="a 4xx with an OpenAI error object for each",
        received=" | ".join(problems),
        exchange=last,
        deviation=deviations.pop() if len(deviations) == 1 else None,
        hint=HINT_REFUSE,
    )


@check(
    "IMAGE-HUGE",
    "a huge image is refused with a 4xx or read, never a crash",
    f"one {HUGE_SIDE}x{HUGE_SIDE} PNG (16.8 Mpx; a 59 kB file) gets a 4xx with an OpenAI error "
    "object, or a 200 chat.completion with an answer whose prompt_tokens exceed the same text's "
    "without it (read, resized); never a 5xx, a dropped image or no answer within the timeout",
    requires=("vision", "route-accepts:/chat/completions"),
)
def image_huge(ctx: CheckContext) -> None:
    huge = make_image(HUGE_SIDE, HUGE_SIDE, seed=3)
    ex = _ask(ctx, huge)
    status = ex.status or 0
    if ex.error or status == 0 or status >= 500 or 400 <= status < 500:
        problem, deviation = _refusal_problem(ex)
        ctx.expect(
            problem is None,
            f"a {huge.describe()} image is not refused cleanly",
            expected="a 4xx with an OpenAI error object (or a 200 that read it)",
            received=problem or "",
            exchange=ex,
            deviation=deviation,
            hint="check an image's size before decoding it and refuse it with a 400 naming the "
            "limit, or resize it to the encoder's bounds; never run out of memory on it",
        )
        return
    with_huge = _tokens_of(ctx, ex, f"a {huge.describe()} image")
    alone = _text_alone(ctx)
    ctx.expect(
        with_huge > alone,
        "the huge image was answered without being read",
        expected=f"prompt_tokens > {alone} (the same text without the image), or a 4xx",
        received=f"prompt_tokens {with_huge} with the {huge.describe()} image",
        exchange=ex,
        hint="an image over a limit must be refused (400) or resized and read, never dropped "
        "silently: the answer would be about no image",
    )


def _accepted_problem(ctx: CheckContext, ex: Exchange, data: Any) -> tuple[str, str]:
    """(summary, hint) for a text-only target that answered an image with a 2xx."""
    usage = data.get("usage") if isinstance(data, dict) else None
    count = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    alone = _text_alone(ctx)
    if isinstance(count, int) and count > alone + READ_MARGIN:
        return (
            f"the target read the image (prompt_tokens {count}, {alone} without it) but does "
            "not declare vision",
            "declare capabilities: {vision: true} for a vision model, and the IMAGE checks "
            "for vision judge it",
        )
    return (
        f"the image was silently ignored: 200 with prompt_tokens {count}, {alone} without it "
        f"(an image read adds more than {READ_MARGIN})",
        "a model without a vision encoder must refuse image parts with a 400 (vLLM does for a "
        "text-only model): a client cannot tell that its image was never seen",
    )


@check(
    "IMAGE-REJECTED-TEXT-ONLY",
    "a text-only target refuses an image with a 4xx error object",
    f"on a target that does not declare vision, a user message with a text part and one "
    f"{REJECT_SIDE}x{REJECT_SIDE} PNG image_url part gets a 4xx with an OpenAI error object: "
    "never a 5xx, never a 200 that left the image out (prompt_tokens at most "
    f"{READ_MARGIN} over the text's alone) or read it (a vision model that should declare vision); "
    "skipped where the target declares vision",
    requires=("route-accepts:/chat/completions",),
)
def image_rejected_text_only(ctx: CheckContext) -> None:
    if ctx.capabilities.get("vision"):
        raise CheckSkipped(
            f"{ctx.target.name} declares vision: IMAGE-ANSWERS and the other vision checks judge "
            "its images"
        )
    image = make_image(REJECT_SIDE, REJECT_SIDE, seed=4)
    ex = _ask(ctx, image)
    status = ex.status or 0
    if 200 <= status < 300 and not ex.error:
        summary, hint = _accepted_problem(ctx, ex, ex.json())
        ctx.fail(
            summary,
            expected="a 4xx with an OpenAI error object (the model reads no images)",
            received=body_snippet(ex.json(), 300),
            exchange=ex,
            hint=hint,
        )
    problem, deviation = _refusal_problem(ex)
    ctx.expect(
        problem is None,
        f"a text-only target does not refuse a {image.describe()} image cleanly",
        expected="a 4xx with an OpenAI error object",
        received=problem or "",
        exchange=ex,
        deviation=deviation,
        hint=HINT_REFUSE,
    )


MESSAGES_NEEDS = ("messages", "route-accepts:/messages")


def _ask_messages(ctx: CheckContext, *images: Image) -> Exchange:
    """One /v1/messages user turn: the prompt as a text block, then one image block an image."""
    content = [{"type": "text", "text": PROMPT}, *(messages_block(i) for i in images)]
    body = anthropic.request_body(ctx, [{"role": "user", "content": content}])
    return anthropic.send(ctx, body | {"max_tokens": MAX_TOKENS})


def _message_tokens(ctx: CheckContext, ex: Exchange, what: str) -> int:
    """input_tokens (with cache reads and writes) of a 200 Messages API answer, else a failure."""
    if ex.status is not None and not ex.error and not ex.ok:
        ctx.fail(
            f"{what}: /v1/messages refused an image block",
            expected="HTTP 200 with a message object",
            received=ex.describe(400),
            exchange=ex,
            hint="a vision model reads Anthropic image blocks ({type: image, source: {type: "
            "base64, media_type, data}}) on /v1/messages as it reads image_url parts on chat",
        )
    data = ctx.ok_json(ex, f"POST /v1/messages with {what}")
    problems = anthropic.shape_problems(data)
    ctx.expect(
        not problems,
        f"{what}: the answer departs from the Messages API message",
        expected="a message object with content blocks, a stop_reason and usage",
        received="; ".join(problems),
        exchange=ex,
    )
    return int(anthropic.prompt_tokens(anthropic.usage_of(data)))


@check(
    "IMAGE-MESSAGES-ANSWERS",
    "an image block on /v1/messages is answered and counted",
    f"on /v1/messages, a user turn with a text block and one {SMALL}x{SMALL} PNG image block "
    "(a base64 source) gets a 200 message whose usage.input_tokens (plus cache reads and writes) "
    f"exceed the same text's alone, and one {LARGE}x{LARGE} PNG larger still (a fixed-resolution "
    "encoder is the image-tokens-fixed deviation)",
    requires=("vision", *MESSAGES_NEEDS),
)
def image_messages_answers(ctx: CheckContext) -> None:
    alone = _message_tokens(ctx, _ask_messages(ctx), "the text alone")
    small, large = make_image(SMALL, SMALL, seed=5), make_image(LARGE, LARGE, seed=5)
    ex_small = _ask_messages(ctx, small)
    with_small = _message_tokens(ctx, ex_small, f"one {small.describe()} image block")
    ctx.expect(
        with_small > alone,
        "the image block adds no input tokens: it never reached the model",
        expected=f"input_tokens > {alone} (the same text without the image)",
        received=f"input_tokens {with_small} with a {small.describe()} image block",
        exchange=ex_small,
        hint=HINT_COUNT.replace("usage.prompt_tokens", "usage.input_tokens"),
    )
    ex_large = _ask_messages(ctx, large)
    with_large = _message_tokens(ctx, ex_large, f"one {large.describe()} image block")
    ctx.expect(
        with_large > with_small,
        "a bigger image block costs no more input tokens than a small one",
        expected=f"input_tokens > {with_small} (the {SMALL}x{SMALL} image) for {LARGE}x{LARGE}",
        received=f"input_tokens {with_large} with a {large.describe()} image block "
        f"({alone} without an image)",
        exchange=ex_large,
        deviation="image-tokens-fixed",
        hint="count an image block as chat counts an image_url part; a fixed count for every "
        "size is right only for a fixed-resolution encoder (then allow image-tokens-fixed)",
    )


@check(
    "IMAGE-MESSAGES-REJECTED-TEXT-ONLY",
    "a text-only target refuses an image block on /v1/messages with an Anthropic error",
    f"on a target that does not declare vision, a /v1/messages user turn with a text block and "
    f"one {REJECT_SIDE}x{REJECT_SIDE} PNG image block gets a 4xx whose body is "
    '{"type": "error", "error": {"type", "message"}}: never a 5xx, never a 200 that left the '
    f"image out (input_tokens at most {READ_MARGIN} over the text's alone) or read it; skipped "
    "where the target declares vision",
    requires=MESSAGES_NEEDS,
)
def image_messages_rejected_text_only(ctx: CheckContext) -> None:
    if ctx.capabilities.get("vision"):
        raise CheckSkipped(
            f"{ctx.target.name} declares vision: IMAGE-MESSAGES-ANSWERS judges its image blocks"
        )
    image = make_image(REJECT_SIDE, REJECT_SIDE, seed=6)
    ex = _ask_messages(ctx, image)
    status = ex.status or 0
    if 200 <= status < 300 and not ex.error:
        data = ex.json()
        usage = anthropic.usage_of(data) if isinstance(data, dict) else {}
        count = anthropic.prompt_tokens(usage)
        alone = _message_tokens(ctx, _ask_messages(ctx), "the text alone")
        read = isinstance(count, int) and count > alone + READ_MARGIN
        ctx.fail(
            f"the target read the image block (input_tokens {count}, {alone} without it) but "
            "does not declare vision"
            if read
            else f"the image block was silently ignored: 200 with input_tokens {count}, {alone} "
            f"without it (an image read adds more than {READ_MARGIN})",
            expected="a 4xx Anthropic error (the model reads no images)",
            received=body_snippet(data, 300),
            exchange=ex,
            hint="declare capabilities: {vision: true} for a vision model"
            if read
            else "a model without a vision encoder must refuse image blocks with a 400: a client "
            "cannot tell that its image was never seen",
        )
    problem = anthropic.error_problem(ex)
    ctx.expect(
        problem is None,
        f"a text-only target does not refuse a {image.describe()} image block cleanly",
        expected='a 4xx with {"type": "error", "error": {"type": "invalid_request_error", '
        '"message": "..."}}',
        received=f"{problem}; {ex.describe(300)}",
        exchange=ex,
        hint="refuse an image block the model cannot read with a 400 in Anthropic's error shape "
        "(the anthropic SDK maps error.type to its exceptions); a 5xx reads as a server failure",
    )


OVERSIZED_SIDE = 50_000  # 2.5 Gpx: past every decoder's limit (Pillow's bomb guard: 179 Mpx)


def oversized_png(side: int = OVERSIZED_SIDE) -> bytes:
    """A PNG whose header declares ``side`` x ``side`` RGB pixels, with one row of data: a few
    hundred bytes on the wire that no server can decode into memory (7.5 GB) and must refuse."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    row = zlib.compress(b"\x00" * (1 + 3 * side), 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", row) + chunk(b"IEND", b"")


@check(
    "IMAGE-OVERSIZED",
    "an oversized data: URL image is refused with a 4xx",
    f"a data: URL PNG declaring {OVERSIZED_SIDE}x{OVERSIZED_SIDE} pixels (2.5 Gpx; a few hundred "
    "bytes on the wire) gets a 4xx with an OpenAI error object within the target's timeout: "
    "never a 5xx, a hang, or a 200 that answered without the image",
    requires=("vision", "route-accepts:/chat/completions"),
)
def image_oversized(ctx: CheckContext) -> None:
    url = data_url("image/png", oversized_png())
    ex = _ask(ctx, url)
    problem, deviation = _refusal_problem(ex)
    side = f"{OVERSIZED_SIDE}x{OVERSIZED_SIDE}"
    ctx.expect(
        problem is None,
        f"a data: URL image declaring {side} pixels is not refused with a 4xx",
        expected="a 4xx with an OpenAI error object naming the image",
        received=problem or "",
        exchange=ex,
        deviation=deviation,
        hint="read an image's declared size before decoding it and refuse it with a 400 over "
        "the limit (Pillow raises DecompressionBombError at open: answer it as a client error)",
    )
