"""The reference server's deterministic "model": a word tokenizer and a seeded generator.

No weights: output tokens are drawn from a small vocabulary (ASCII words, accented words, CJK
characters and one emoji, so UTF-8 handling is exercised) by a PRNG keyed on the prompt, the
seed and the choice index. Temperature 0 means "same prompt, same output"; temperature > 0
without a seed draws a fresh key each time. JSON and tool arguments are generated from the
request's JSON Schema, so they are valid unless a fault says otherwise.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import string
from dataclasses import dataclass, field
from typing import Any

TOKEN_PATTERN = r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]|\w+|[^\w\s]"
_TOKEN = re.compile(TOKEN_PATTERN, re.UNICODE)

VOCAB: tuple[str, ...] = (
    "the",
    "model",
    "server",
    "token",
    "stream",
    "cache",
    "latency",
    "quick",
    "brown",
    "river",
    "stone",
    "light",
    "window",
    "garden",
    "signal",
    "paper",
    "orbit",
    "cloud",
    "delta",
    "north",
    "kernel",
    "batch",
    "queue",
    "answer",
    "value",
    "simple",
    "green",
    "metal",
    "glass",
    "field",
    "café",
    "naïve",
    "déjà",
    "über",
    "señor",
    "façade",
    "crème",
    "Zürich",
    "你",
    "好",
    "世",
    "界",
    "数",
    "据",
    "模",
    "型",
    "東",
    "京",
    "🙂",
)


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text)


VOCAB_SIZE = 1 << 24  # token_ids hashes a token to 3 bytes


def token_ids(text: str) -> list[int]:
    return [
        int.from_bytes(hashlib.blake2s(t.encode(), digest_size=3).digest(), "little")
        for t in tokenize(text)
    ]


def content_text(content: Any) -> str:
    """Text of an OpenAI message content: a string or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            p.get("text", "")
            for p in content
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def count_chat_tokens(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> int:
    """Prompt tokens of a chat: 3 per message for the template, its words, 3 to prime the reply."""
    total = 3
    for message in messages:
        total += 3 + len(tokenize(content_text(message.get("content"))))
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict):
                total += len(tokenize(json.dumps(call.get("function", {}))))
    if tools:
        total += len(tokenize(json.dumps(tools)))
    return total


@dataclass(slots=True)
class Generation:
    pieces: list[str]  # one per output token, as streamed (leading space included)
    finish_reason: str  # stop | length
    logprobs: list[float] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def _rng(key: str, seed: int | None, temperature: float, index: int, fresh: bool) -> random.Random:
    if fresh:
        return random.Random()
    material = f"{key}\x00{seed}\x00{temperature if seed is not None else 0}\x00{index}"
    return random.Random(
        int.from_bytes(hashlib.blake2b(material.encode(), digest_size=8).digest(), "little")
    )


def generate_text(
    key: str,
    *,
    max_tokens: int,
    seed: int | None,
    temperature: float,
    index: int = 0,
    stop: list[str] | None = None,
    fresh: bool = False,
    ignore_eos: bool = False,
    min_tokens: int = 0,
) -> Generation:
    """Deterministic text for ``key``; ``fresh`` draws a random key (temperature > 0, no seed).

    ``ignore_eos`` (vLLM's extension) generates exactly ``max_tokens``, as load benchmarks need;
    ``min_tokens`` (vLLM's too) allows no end and no stop string before that many tokens.
    """
    rng = _rng(key, seed, temperature, index, fresh)
    natural = rng.randint(12, 48)
    if ignore_eos:
        natural = max_tokens
    natural = max(natural, min_tokens)
    words = [rng.choice(VOCAB) for _ in range(natural)]
    pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
    finish = "stop"
    if stop:
        text, start = "".join(pieces), len("".join(pieces[:min_tokens]))
        cut = min((p for p in (text.find(s, start) for s in stop if s) if p >= 0), default=-1)
        if cut >= 0:
            pieces = cut_pieces(pieces, cut)
    if len(pieces) > max_tokens:
        pieces = pieces[:max_tokens]
        finish = "length"
    logprobs = [-round(rng.random() * 3, 4) for _ in pieces]
    return Generation(pieces, finish, logprobs)


def banned_ids(logit_bias: Any) -> frozenset[int]:
    """The token ids a request's logit_bias bans (a bias of -100: never sampled)."""
    if not isinstance(logit_bias, dict):
        return frozenset()
    return frozenset(int(k) for k, v in logit_bias.items() if v <= -100)


def ban_tokens(pieces: list[str], banned: frozenset[int]) -> list[str]:
    """``pieces`` with every banned token replaced by the next vocabulary word that is not."""
    if not banned:
        return pieces
    out = []
    for piece in pieces:
        word = piece.lstrip(" ")
        if set(token_ids(word)) & banned and word in VOCAB:
            start = VOCAB.index(word)
            for step in range(1, len(VOCAB)):
                other = VOCAB[(start + step) % len(VOCAB)]
                if not set(token_ids(other)) & banned:
                    piece = piece[: len(piece) - len(word)] + other
                    break
        out.append(piece)
    return out


def cut_pieces(pieces: list[str], cut: int) -> list[str]:
    """Keep the pieces (and part of one) that make up the first ``cut`` characters."""
    out: list[str] = []
    used = 0
    for piece in pieces:
        if used + len(piece) <= cut:
            out.append(piece)
            used += len(piece)
        else:
            if cut > used:
                out.append(piece[: cut - used])
            break
    return out


def split_json(text: str, size: int = 4) -> list[str]:
    """Split serialised JSON into token-sized pieces for streaming."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


# ---------------------------------------------------------------------------------------------
# Instances from JSON Schema (the subset structured-output engines support)


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        return node if isinstance(node, dict) else {}
    return schema


def instance(
    schema: Any, rng: random.Random, root: dict[str, Any] | None = None, depth: int = 0
) -> Any:
    """A value valid for ``schema`` (object, array, string, number, integer, boolean, null, enum, const)."""
    if not isinstance(schema, dict):
        return {}
    root = root if root is not None else schema
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            if key == "allOf":
                merged: dict[str, Any] = {}
                for part in options:
                    merged.update(_resolve(part, root) if isinstance(part, dict) else {})
                return instance(merged, rng, root, depth + 1)
            return instance(options[0], rng, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else "object")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object" or depth > 6:
        props = schema.get("properties") or {}
        required = schema.get("required") or list(props)
        out = {}
        for name, sub in props.items():
            if name in required or rng.random() < 0.5:
                out[name] = instance(sub, rng, root, depth + 1)
        return out
    if kind == "array":
        lo = int(schema.get("minItems", 1))
        hi = int(schema.get("maxItems", max(lo, 3)))
        return [
            instance(schema.get("items", {}), rng, root, depth + 1)
            for _ in range(rng.randint(lo, max(lo, min(hi, lo + 3))))
        ]
    if kind in ("integer", "number"):
        lo = schema.get("minimum")
        if lo is None and "exclusiveMinimum" in schema:
            lo = schema["exclusiveMinimum"] + (1 if kind == "integer" else 1e-3)
        lo = 0 if lo is None else lo
        hi = schema.get("maximum")
        if hi is None and "exclusiveMaximum" in schema:
            hi = schema["exclusiveMaximum"] - (1 if kind == "integer" else 1e-3)
        hi = lo + 100 if hi is None else hi
        if kind == "integer":
            return rng.randint(int(math.ceil(lo)), max(int(math.ceil(lo)), int(math.floor(hi))))
        return round(rng.uniform(float(lo), float(max(lo, hi))), 3)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    lo = int(schema.get("minLength", 1))
    hi = int(schema.get("maxLength", max(lo, 12)))
    length = rng.randint(lo, max(lo, min(hi, lo + 10)))
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(length))


def json_key_rng(key: str, seed: int | None) -> random.Random:
    return _rng(key, seed, 0.0, 0, False)


@dataclass(slots=True)
class Choice:
    """One generated choice: its answer pieces, finish reason, logprobs, tool calls and reasoning."""

    index: int
    pieces: list[str]
    finish_reason: str
    logprobs: list[float]
    tool_call: dict[str, Any] | None = None  # {"id", "name", "arguments"}
    extra_calls: list[dict[str, Any]] = field(
        default_factory=list
    )  # parallel calls after the first
    reasoning: list[str] = field(default_factory=list)  # reasoning pieces, before the answer
    echo: list[str] = field(default_factory=list)  # the echoed prompt's pieces (legacy echo)

    def calls(self) -> list[dict[str, Any]]:
        return [] if self.tool_call is None else [self.tool_call, *self.extra_calls]
