"""TEXT-*: the answer text is not garbled, and the served tokenizer is the one it should be.

The tiny test models answer random tokens, and a random byte-level token sequence may well be
invalid UTF-8 that a correct detokenizer renders as U+FFFD. So free-form answers are only
searched for what no correct stack produces from any token sequence: raw byte-token markers
(``<0xE4>``) and mojibake (UTF-8 read as Latin-1 or cp1252, ``cafÃ©``). Replacement characters
are judged where the expected text is known: answers forced by a JSON-schema ``enum`` of
multilingual strings, and ``/tokenize`` -> ``/detokenize`` round trips.
"""

from __future__ import annotations

import json
import re
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.registry import check
from servecheck.checks.surfaces.chat import served_token_ids
from servecheck.checks.surfaces.stream import REPLACEMENT, UTF8_PROMPTS, _message_text
from servecheck.client.http import Exchange

BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")
# A Latin-1/cp1252 lead character of a UTF-8 sequence followed by continuation characters.
_MOJIBAKE_RUN = re.compile(
    "[\u00c2-\u00f4][\u0080-\u00bf\u0152\u0153\u0160\u0161\u0178\u017d\u017e\u0192"
    "\u02c6\u02dc\u2013\u2014\u2018-\u201e\u2020-\u2022\u2026\u2030\u2039\u203a\u20ac\u2122]+"
)
EXACT = ("你好，世界", "東京のモデルです", "déjà vu à Zürich", "naïve façade, crème brûlée")
ROUND_TRIP = (*EXACT, "Ünïcödé ☕ 数据 モデル 🙂")


def mojibake(text: str) -> tuple[str, str] | None:
    """The first run of ``text`` that is UTF-8 read as Latin-1/cp1252, and what it was meant to be."""
    for m in _MOJIBAKE_RUN.finditer(text):
        for codec in ("latin-1", "cp1252"):
            try:
                meant = m.group().encode(codec).decode("utf-8")
            except (UnicodeEncodeError, UnicodeDecodeError):
                continue
            if any(ord(c) > 127 for c in meant):
                return m.group(), meant
    return None


def garbling(text: str) -> str | None:
    """What in ``text`` no correct detokenizer produces, described; None if nothing."""
    found = BYTE_TOKEN.findall(text)
    if found:
        return (
            f"raw byte tokens {''.join(found[:6])} (a byte-fallback detokenizer did not merge them)"
        )
    bad = mojibake(text)
    if bad:
        return f"mojibake {bad[0]!r} (UTF-8 read as Latin-1: meant {bad[1]!r})"
    return None


@check(
    "TEXT-CLEAN",
    "answers to Chinese, Japanese and accented-Latin prompts are not garbled",
    "streamed and non-streamed answers carry no raw byte tokens (<0xE4>) and no mojibake "
    "(UTF-8 read as Latin-1, cafÃ©); a random model's text passes, whatever it says",
)
def text_clean(ctx: CheckContext) -> None:
    for prompt in UTF8_PROMPTS:
        budget = ctx.answer_budget(32)
        ex = ctx.chat(prompt, temperature=0, **budget)
        text = _message_text(ctx.ok_json(ex, "non-streamed answer")) or ""
        sx = ctx.ok_stream(ctx.stream_chat(prompt, temperature=0, **budget), "stream")
        assert sx.stream is not None
        for what, exchange, answer in (
            ("non-streamed", ex, text),
            ("streamed", sx, sx.stream.text(0)),
        ):
            problem = garbling(answer)
            ctx.expect(
                problem is None,
                f"the {what} answer is garbled: {problem}",
                expected="text without byte-token markers or mojibake",
                received=repr(answer[:300]),
                exchange=exchange,
                hint="users see 乱码: check the detokenizer (byte fallback) and every hop's charset",
            )


def _schema() -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "greeting",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"text": {"type": "string", "enum": list(EXACT)}},
                "required": ["text"],
                "additionalProperties": False,
            },
        },
    }


def _forced(ctx: CheckContext, ex: Exchange, content: str | None, finish: Any, what: str) -> None:
    if finish == "length" and (content or "").lstrip().startswith("{"):
        # a JSON answer cut short: the cut explains it, there is nothing to judge
        raise CheckSkipped(f"TEXT-EXACT: the {what} answer was cut at max_tokens: {content!r}")
    try:
        value = json.loads(content or "").get("text")
    except (ValueError, AttributeError):
        value = None
    problem = garbling(content or "") or (
        "U+FFFD replacement characters" if REPLACEMENT in (content or "") else None
    )
    ctx.expect(
        value in EXACT,
        f"the {what} schema-forced answer is not one of the multilingual strings"
        + (f": {problem}" if problem else ""),
        expected=f'{{"text": one of {json.dumps(EXACT, ensure_ascii=False)}}}',
        received=repr((content or "")[:300]),
        exchange=ex,
        hint="the grammar allowed only these strings: what came back was changed on its way "
        "(detokenizer, a proxy's charset, a streaming splitter)",
    )


@check(
    "TEXT-EXACT",
    "multilingual text forced by a schema comes back exactly",
    "a json_schema whose only allowed values are Chinese, Japanese and accented-Latin strings "
    "gets one of them back exactly, streamed and non-streamed (no U+FFFD, no mojibake)",
    requires=("json_schema",),
)
def text_exact(ctx: CheckContext) -> None:
    prompt = "Greet me in one of the allowed languages."
    params: dict[str, Any] = {
        "temperature": 0,
        "response_format": _schema(),
        **ctx.answer_budget(64),
    }
    ex = ctx.chat(prompt, **params)
    data = ctx.ok_json(ex, "schema-forced answer")
    choice = (data.get("choices") or [{}])[0]
    _forced(ctx, ex, _message_text(data), choice.get("finish_reason"), "non-streamed")
    sx = ctx.ok_stream(ctx.stream_chat(prompt, **params), "schema-forced stream")
    assert sx.stream is not None
    finish = next(
        (
            c.get("finish_reason")
            for ch in sx.stream.chunks
            for c in ch.get("choices") or []
            if isinstance(c, dict) and c.get("finish_reason")
        ),
        None,
    )
    _forced(ctx, sx, sx.stream.text(0), finish, "streamed")


def _served_tokens(ctx: CheckContext, text: str) -> tuple[list[int], Exchange]:
    """/tokenize's ids for ``text``, or a failure saying what came back instead."""
    tokens, ex = served_token_ids(ctx, text)
    if tokens is None:
        ctx.fail(
            "/tokenize gave no token ids",
            expected='{"tokens": [int, ...]}',
            received=ex.describe(300),
            exchange=ex,
        )
    return tokens, ex


@check(
    "TEXT-TOKENIZE-ROUNDTRIP",
    "multilingual text survives /tokenize and /detokenize",
    "Chinese, Japanese, accented-Latin and emoji text tokenized and detokenized comes back the "
    "same (whitespace aside), without U+FFFD or mojibake",
    requires=("tokenize",),
)
def text_roundtrip(ctx: CheckContext) -> None:
    for text in ROUND_TRIP:
        tokens, ex = _served_tokens(ctx, text)
        dx = ctx.post(ctx.server_root + "/detokenize", {"model": ctx.model, "tokens": tokens})
        data = ctx.ok_json(dx, "POST /detokenize")
        back = data.get("prompt", data.get("content"))
        ctx.expect(
            isinstance(back, str) and "".join(back.split()) == "".join(text.split()),
            "detokenized text differs from the text tokenized"
            + (f": {garbling(back)}" if isinstance(back, str) and garbling(back) else ""),
            expected=repr(text),
            received=repr(back) if isinstance(back, str) else body_snippet(data),
            exchange=dx,
            hint="the served tokenizer cannot represent this text, or its decoder is not the "
            "encoder's inverse (a wrong or mismatched tokenizer)",
        )


MESSAGES = [
    {"role": "system", "content": "Réponds brièvement, s'il te plaît."},
    {"role": "user", "content": "数据模型は東京にありますか?"},
]


def _template_count(ctx: CheckContext) -> tuple[int | None, str, Exchange]:
    body = {"model": ctx.model, "messages": MESSAGES, "add_generation_prompt": True}
    ex = ctx.post(ctx.server_root + "/tokenize", body)
    data = ex.json() if ex.ok else None
    if isinstance(data, dict) and isinstance(data.get("count"), int) and data["count"] > 0:
        return data["count"], "/tokenize with messages", ex
    if isinstance(data, dict) and isinstance(data.get("tokens"), list) and data["tokens"]:
        return len(data["tokens"]), "/tokenize with messages", ex
    # llama.cpp: render with /apply-template, then count with /tokenize (specials parsed)
    ax = ctx.post(ctx.server_root + "/apply-template", {"messages": MESSAGES})
    rendered = ax.json().get("prompt") if ax.ok and isinstance(ax.json(), dict) else None
    if not isinstance(rendered, str):
        return None, "", ax
    tx = ctx.post(
        ctx.server_root + "/tokenize",
        {"content": rendered, "add_special": True, "parse_special": True},
    )
    tdata = tx.json() if tx.ok else None
    tokens = tdata.get("tokens") if isinstance(tdata, dict) else None
    if isinstance(tokens, list):
        return len(tokens), "/apply-template then /tokenize", tx
    return None, "", tx


@check(
    "TEXT-PROMPT-TOKENS",
    "a chat's prompt_tokens equals its template-rendered token count",
    "usage.prompt_tokens of a chat request equals what the server's own /tokenize counts for "
    "the same messages rendered by its chat template (a doubled BOS or another template shows)",
    requires=("tokenize",),
)
def text_prompt_tokens(ctx: CheckContext) -> None:
    expected, how, tx = _template_count(ctx)
    if expected is None:
        raise CheckSkipped(
            "TEXT-PROMPT-TOKENS: the server cannot count a rendered chat "
            f"(/tokenize with messages, /apply-template): {tx.describe(200)}"
        )
    ex = ctx.chat(MESSAGES, max_tokens=1, temperature=0)
    usage = ctx.ok_json(ex, "chat completion").get("usage")
    got = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    ctx.expect(
        got == expected,
        "prompt_tokens differs from the rendered template's token count",
        expected=f"prompt_tokens {expected} ({how})",
        received=f"usage {body_snippet(usage)}",
        exchange=ex,
        hint=(
            "one token more: a BOS added twice (the template has one and the tokenizer adds "
            "another)"
            if isinstance(got, int) and got == expected + 1
            else "the chat route renders another template or tokenizer than /tokenize"
        ),
    )


# The extra that brings tokenizers (engines/models.py says the same; checks/ may not import it).
ENGINES_INSTALL = "pip install 'servecheck[engines]'"


def _local_tokenizer(ctx: CheckContext) -> Any:
    from pathlib import Path

    if not ctx.target.model_dir:
        raise CheckSkipped("TEXT-LOCAL-TOKENIZER: the target names no model_dir to compare with")
    directory = Path(ctx.target.model_dir).expanduser()
    path = next(
        (
            p
            for p in (directory / "tokenizer.json", directory / "hf" / "tokenizer.json")
            if p.is_file()
        ),
        None,
    )
    if path is None:
        raise CheckSkipped(f"TEXT-LOCAL-TOKENIZER: no tokenizer.json in {directory}")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise CheckSkipped(
            "TEXT-LOCAL-TOKENIZER: the tokenizers package is not installed "
            f"({ENGINES_INSTALL}; pipx: pipx inject servecheck tokenizers)"
        ) from None
    try:
        return Tokenizer.from_file(str(path)), path
    except Exception as exc:  # noqa: BLE001 - a file the library cannot read is preflight's finding
        raise CheckSkipped(
            f"TEXT-LOCAL-TOKENIZER: {path} does not load ({exc}); see servecheck preflight"
        ) from None


@check(
    "TEXT-LOCAL-TOKENIZER",
    "the served tokenizer counts as the local model folder's does",
    "for Chinese, Japanese, accented-Latin and emoji text, /tokenize (no special tokens) gives "
    "as many tokens as the tokenizer.json in the target's model_dir",
    requires=("tokenize",),
)
def text_local_tokenizer(ctx: CheckContext) -> None:
    local, path = _local_tokenizer(ctx)
    for text in ROUND_TRIP:
        tokens, ex = _served_tokens(ctx, text)
        want = len(local.encode(text, add_special_tokens=False).ids)
        ctx.expect(
            len(tokens) == want,
            "the served tokenizer counts differently from the local one",
            expected=f"{want} tokens for {text!r} ({path})",
            received=f"{len(tokens)} tokens from /tokenize",
            exchange=ex,
            hint="the engine loaded another tokenizer than the model folder's (a wrong "
            "--tokenizer, a stale cache, a GGUF converted from another revision)",
        )
