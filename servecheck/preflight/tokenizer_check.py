"""Tokenizer files: presence, loadability, special-token ids, vocab size and chat template."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servecheck.preflight.config_check import config_value
from servecheck.preflight.context import Context
from servecheck.preflight.findings import Severity


@dataclass(slots=True)
class TokenizerInfo:
    """What we could learn cheaply: token -> id lookups and the total number of tokens.

    ``lookup`` answers one token at a time: building a Python dict of a 128k-token vocabulary
    costs more than loading the tokenizer itself, and we only ask about two tokens.
    """

    lookup: Callable[[str], int | None]
    size: int | None = None


def _load_tokenizer_json(ctx: Context, path: Path) -> TokenizerInfo | None:
    try:
        if importlib.util.find_spec("tokenizers") is not None:
            # Optional dependency: a full load also validates the tokenizer model.
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(path))
            return TokenizerInfo(
                lookup=tok.token_to_id, size=tok.get_vocab_size(with_added_tokens=True)
            )
        data = json.loads(path.read_text(encoding="utf-8"))
        vocab: dict[str, int] = {}
        model_vocab = data.get("model", {}).get("vocab")
        if isinstance(model_vocab, dict):
            vocab.update({k: v for k, v in model_vocab.items() if isinstance(v, int)})
        elif isinstance(model_vocab, list):  # Unigram: [[piece, score], ...]
            vocab.update({str(p[0]): i for i, p in enumerate(model_vocab) if p})
        for added in data.get("added_tokens") or []:
            vocab[added["content"]] = added["id"]
        return TokenizerInfo(lookup=vocab.get, size=(max(vocab.values()) + 1) if vocab else 0)
    except Exception as exc:  # noqa: BLE001 - any load failure is the finding itself
        ctx.add(
            "PF-TOK-UNREADABLE",
            path,
            f"does not load: {type(exc).__name__}: {str(exc)[:300]}",
            "re-download tokenizer.json; if it is new, upgrade the engine's tokenizers package",
        )
        return None


def _load_json(ctx: Context, path: Path) -> dict[str, Any] | None:
    if not path.is_file() or path in ctx.broken:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        ctx.add("PF-TOK-UNREADABLE", path, f"does not parse: {exc}", f"re-download {path.name}")
        return None
    return data if isinstance(data, dict) else None


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):  # {"content": "<s>", "lstrip": false, ...}
        value = value.get("content")
    return value if isinstance(value, str) else None


def _ids(value: Any) -> set[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return {value}
    if isinstance(value, list):
        return {v for v in value if isinstance(v, int) and not isinstance(v, bool)}
    return set()


def check_tokenizer(
    ctx: Context, model_dir: Path, config: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Check tokenizer files against config.json; return tokenizer_config.json (or None)."""
    tok_json = model_dir / "tokenizer.json"
    present = [
        p.name
        for p in (
            tok_json,
            model_dir / "tokenizer.model",
            model_dir / "vocab.txt",
            model_dir / "tiktoken.model",
        )
        if p.is_file() and p not in ctx.broken
    ]
    if (model_dir / "vocab.json").is_file() and (model_dir / "merges.txt").is_file():
        present.append("vocab.json+merges.txt")
    present.extend(p.name for p in model_dir.glob("*.tiktoken"))
    if not present:
        ctx.add(
            "PF-TOK-MISSING",
            model_dir,
            "no tokenizer.json, tokenizer.model, vocab.json+merges.txt or *.tiktoken file",
            "download the tokenizer files from the same repo, or pass --tokenizer to the engine",
        )
    info = (
        _load_tokenizer_json(ctx, tok_json)
        if tok_json.is_file() and tok_json not in ctx.broken
        else None
    )
    tok_config = _load_json(ctx, model_dir / "tokenizer_config.json")
    if info is not None and config is not None:
        _check_special(ctx, model_dir, config, tok_config or {}, info)
        vocab_size = config_value(config, "vocab_size")
        if isinstance(vocab_size, int) and info.size is not None and info.size > vocab_size:
            ctx.add(
                "PF-TOK-VOCAB-SIZE",
                tok_json,
                f"tokenizer has {info.size} tokens but config.json vocab_size is {vocab_size}: ids "
                f"{vocab_size}..{info.size - 1} index past the embedding",
                "use the tokenizer that belongs to these weights",
            )
    return tok_config


def _check_special(
    ctx: Context,
    model_dir: Path,
    config: dict[str, Any],
    tok_config: dict[str, Any],
    info: TokenizerInfo,
) -> None:
    generation = _load_json(ctx, model_dir / "generation_config.json") or {}
    for role in ("bos", "eos"):
        key = f"{role}_token_id"
        declared = _ids(config_value(config, key)) | _ids(generation.get(key))
        text = _token_text(tok_config.get(f"{role}_token"))
        if text is None:
            continue
        tok_id = info.lookup(text)
        if tok_id is None:
            ctx.add(
                "PF-TOK-SPECIAL-UNKNOWN",
                model_dir / "tokenizer_config.json",
                f"{role}_token {text!r} is not a token of tokenizer.json",
                "use tokenizer_config.json and tokenizer.json from the same revision",
            )
            continue
        if declared and tok_id not in declared:
            ctx.add(
                "PF-TOK-SPECIAL-MISMATCH",
                model_dir / "config.json",
                f"{key} {sorted(declared)} (config.json/generation_config.json) but the tokenizer's "
                f"{role}_token {text!r} is id {tok_id}"
                + ("; generation may not stop" if role == "eos" else ""),
                "use config and tokenizer from the same revision, or fix the id in config.json",
            )


def check_chat_template(
    ctx: Context, model_dir: Path, tok_config: dict[str, Any] | None, gguf_template: bool = False
) -> None:
    """A chat template exists (tokenizer_config, chat_template.jinja/.json, or GGUF metadata)."""
    template = (tok_config or {}).get("chat_template")
    if template or gguf_template:
        return
    if (model_dir / "chat_template.jinja").is_file() or (
        model_dir / "chat_template.json"
    ).is_file():
        return
    chat = ctx.options.chat
    ctx.add(
        "PF-TOK-NO-CHAT-TEMPLATE",
        model_dir,
        "no chat template (tokenizer_config.json chat_template, chat_template.jinja, "
        "chat_template.json or GGUF tokenizer.chat_template)"
        + ("; /v1/chat/completions will fail or use a wrong default" if chat else ""),
        "pass --chat-template to the engine, or add chat_template.jinja"
        + ("" if chat else " (ignored: the model is declared not to chat)"),
        severity=Severity.ERROR if chat else Severity.WARNING,
    )
