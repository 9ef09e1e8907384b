"""Text-integrity defects of the reference server, and its ``/detokenize``.

:func:`garble` runs on a request's generated choices before they are sent and applies the
``text-*`` faults the TEXT checks hunt:

* ``text-mojibake``: non-streamed answers are UTF-8 read as Latin-1 (``café`` -> ``cafÃ©``), as
  a gateway that decodes the upstream body with the wrong charset;
* ``text-byte-tokens``: streamed multi-byte characters arrive as raw byte tokens
  (``你`` -> ``<0xE4><0xBD><0xA0>``), as a detokenizer that does not merge byte-fallback pieces;
* ``text-lossy``: non-ASCII characters of non-streamed answers become U+FFFD, as a
  detokenizer that decodes each token's bytes on their own.

``/detokenize`` turns ids from ``/tokenize`` back into text (the ids are hashes, so the server
remembers the tokens it has handed out); ``detok-mojibake`` makes it answer in mojibake.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aiohttp import web

from servecheck.reference import model
from servecheck.reference.http import STATE, ApiError, error_response, expect, read_json

VOCAB = web.AppKey("token_vocabulary", dict)


def _latin1(text: str) -> str:
    return text.encode("utf-8").decode("latin-1")


def _byte_tokens(text: str) -> str:
    return "".join(c if ord(c) < 128 else "".join(f"<0x{b:02X}>" for b in c.encode()) for c in text)


def garble(faults: frozenset[str], choices: list[Any], stream: bool) -> None:
    """Apply the text faults to the choices' pieces in place."""
    for c in choices:
        if not stream and "text-mojibake" in faults:
            c.pieces = [_latin1(p) for p in c.pieces]
        if not stream and "text-lossy" in faults:
            c.pieces = ["".join(ch if ord(ch) < 128 else "\ufffd" for ch in p) for p in c.pieces]
        if stream and "text-byte-tokens" in faults:
            c.pieces = [_byte_tokens(p) for p in c.pieces]


def remember(app: web.Application, text: str) -> None:
    """Record the tokens of a /tokenize call so /detokenize can map their ids back."""
    vocab = app[VOCAB]
    if len(vocab) > 100_000:  # bounded: a long-running server does not grow without limit
        vocab.clear()
    for token, tid in zip(model.tokenize(text), model.token_ids(text), strict=True):
        vocab[tid] = token


async def detokenize(request: web.Request) -> web.Response:
    state = request.app[STATE]
    try:
        body = await read_json(request, state)
        ids = body.get("tokens")
        expect(
            isinstance(ids, list) and all(isinstance(i, int) for i in ids),
            "'tokens' must be a list of token ids",
            "tokens",
        )
        assert isinstance(ids, list)
        vocab = request.app[VOCAB]
        unknown = [i for i in ids if i not in vocab]
        if unknown:
            raise ApiError(400, f"unknown token id(s): {unknown[:5]}", param="tokens")
    except ApiError as err:
        return error_response(state, err)
    text = " ".join(vocab[i] for i in ids)
    if "detok-mojibake" in state.faults:
        text = _latin1(text)
    return web.json_response({"prompt": text}, dumps=lambda o: json.dumps(o, ensure_ascii=False))


def served_ids(faults: frozenset[str], text: str, ids: list[int]) -> list[int]:
    """/tokenize ids; ``tokenizer-mismatch`` serves another tokenizer's (CJK split in two)."""
    if "tokenizer-mismatch" not in faults:
        return ids
    extra = [1 for t in model.tokenize(text) if len(t) == 1 and ord(t) >= 0x3040]
    return ids + extra


def write_tokenizer(directory: Path) -> Path:
    """Write the reference tokenizer as a ``tokenizer.json`` (a model_dir for TEXT-LOCAL-TOKENIZER).

    A word-level tokenizer with the reference's split rule and one unknown token: its counts
    are the reference server's, its ids are not (the server's ids are hashes).
    """
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(Regex(model.TOKEN_PATTERN), behavior="isolated"),
        ]
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.json"
    tok.save(str(path))
    return path


def register(app: web.Application) -> None:
    app[VOCAB] = {}
    app.router.add_post("/detokenize", detokenize)
