"""The reference server's side of issue 43's production cases: ``min_tokens`` (honoured, as
vLLM does: no end and no stop string before that many tokens) and the faults of the cases
(``stop-boundary-stream``, ``min-tokens-ignored``, ``responses-reasoning-call-twice``;
``image-bomb-500`` lives in ``vision.py`` where images are decoded). ``server.py`` and
``responses.py`` call these at the points they change.
"""

from __future__ import annotations

from typing import Any

from servecheck.reference.http import ApiError


def stop_within_pieces(pieces: list[str], stops: list[str]) -> list[str]:
    """stop-boundary-stream: stop strings matched token by token, as a streaming path that
    checks each delta alone does; a stop across two pieces is never seen."""
    for k, piece in enumerate(pieces):
        hits = [piece.find(s) for s in stops if s and s in piece]
        if hits:
            return [*pieces[:k], piece[: min(hits)]]
    return pieces


def boundary_blind(faults: frozenset[str], body: dict[str, Any]) -> bool:
    return "stop-boundary-stream" in faults and body.get("stream") is True


def min_tokens(faults: frozenset[str], body: dict[str, Any], max_tokens: int) -> int:
    """The request's min_tokens, checked as vLLM checks it (0 to max_tokens, else a 400); 0
    under min-tokens-ignored."""
    value = body.get("min_tokens")
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ApiError(
            400, f"min_tokens must be a non-negative integer, got {value!r}", param="min_tokens"
        )
    if value > max_tokens:
        raise ApiError(
            400,
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {value}",
            param="min_tokens",
        )
    return 0 if "min-tokens-ignored" in faults else value


def calls_twice(
    faults: frozenset[str], body: dict[str, Any], output: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """responses-reasoning-call-twice: with reasoning asked for, the completed response lists a
    forced function call twice (the reasoning parser's copy and the tool parser's)."""
    calls = [i for i in output if i.get("type") == "function_call"]
    if "responses-reasoning-call-twice" in faults and body.get("reasoning") and calls:
        return [*output, {**calls[0], "id": calls[0].get("id", "fc") + "_2"}]
    return output
