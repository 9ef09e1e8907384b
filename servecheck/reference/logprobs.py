"""The reference server's chat logprobs and their faults.

One entry per answer piece (the reference's token), its UTF-8 ``bytes``, and exactly
``top_logprobs`` alternatives: the sampled token first (temperature 0 picks the most likely
one), then other words of the vocabulary, each less likely than the one before. Every logprob
is <= 0. The ``logprobs-*`` faults break one of these promises each.
"""

from __future__ import annotations

import math
from typing import Any

from servecheck.reference.model import VOCAB


def _alternatives(piece: str, count: int) -> list[str]:
    """``count`` vocabulary words other than ``piece``, with its leading space (if any)."""
    lead = " " if piece.startswith(" ") else ""
    word = piece.strip()
    return [lead + w for w in VOCAB if w != word][:count]


def _bytes(token: str, faults: frozenset[str]) -> list[int]:
    # logprobs-bytes-utf16: a gateway that serialises the token's UTF-16 code units
    return list(token.encode("utf-16-le" if "logprobs-bytes-utf16" in faults else "utf-8"))


def _value(logprob: float, faults: frozenset[str]) -> float:
    # logprobs-positive: probabilities where log-probabilities belong
    return round(math.exp(logprob), 4) if "logprobs-positive" in faults else logprob


def entry(piece: str, logprob: float, top: int, faults: frozenset[str]) -> dict[str, Any]:
    """The logprobs entry of one answer piece with ``top`` alternatives."""
    # logprobs-tokens-mismatch: each token decoded on its own loses its leading space
    # (SentencePiece's "▁word" decoded alone is "word")
    token = piece.lstrip() if "logprobs-tokens-mismatch" in faults else piece
    alternatives: list[dict[str, Any]] = []
    if top > 0:
        count = 1 if "top-logprobs-count-wrong" in faults else top
        words = [token, *_alternatives(token, count - 1)]
        alternatives = [
            {
                "token": w,
                "logprob": _value(round(logprob - 0.75 * k, 4), faults),
                "bytes": _bytes(w, faults),
            }
            for k, w in enumerate(words)
        ]
    return {
        "token": token,
        "logprob": _value(logprob, faults),
        "bytes": _bytes(token, faults),
        "top_logprobs": alternatives,
    }


def top_count(body: dict[str, Any]) -> int:
    top = body.get("top_logprobs")
    return top if isinstance(top, int) and not isinstance(top, bool) else 0


def content(
    pieces: list[str], logprobs: list[float], top: int, faults: frozenset[str]
) -> list[dict[str, Any]]:
    """``choices[].logprobs.content`` of a whole answer."""
    return [entry(piece, lp, top, faults) for piece, lp in zip(pieces, logprobs, strict=False)]


__all__ = ["content", "entry", "top_count"]
