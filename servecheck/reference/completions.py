"""The legacy ``/v1/completions`` route of the reference server: prompt forms, echo, logprobs.

A prompt is a string, a list of strings, a list of token ids or a list of such lists (the
OpenAI API's four forms). Each prompt of a batch gets its ``n`` choices, numbered across the
batch (prompt ``i``'s choice ``j`` has index ``i * n + j``), and usage counts every prompt
once: a text prompt's tokens plus its BOS, a token prompt's ids as given (no BOS added), as
vLLM counts them. ``echo`` puts the prompt before the completion; ``logprobs: K`` answers in
the legacy shape (``tokens``, ``token_logprobs``, ``top_logprobs``, ``text_offset``), which
covers the echoed prompt too, its first token without a logprob.

Token ids are range-checked against the vocabulary (``VOCAB_SIZE``): a negative or
out-of-vocabulary id, an empty prompt list and a missing prompt are each a 400.

The COMPL faults live here: ``completions-batch-n-short``, ``token-id-prompt-refused``,
``echo-ignored``, ``completions-prompt-tokens-off``, ``completions-logprobs-misaligned``,
``token-id-range-500``, ``empty-prompt-list-accepted``, ``completions-stream-stop-ignored``,
``completions-stream-offset-reset``, and
``completions-unknown-model-accepted`` (MODELS-UNKNOWN-404's).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servecheck.reference import model
from servecheck.reference.http import ApiError, expect, is_int
from servecheck.reference.model import Choice

BOS_ID = 1  # the id /tokenize puts first when asked for special tokens
VOCAB_SIZE = model.VOCAB_SIZE
_PIECE = re.compile(r"\s*(?:" + model.TOKEN_PATTERN + r")", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt of a request: what keys its generation, its text (None for token ids) and
    the prompt tokens it counts."""

    key: str
    text: str | None
    tokens: int


def pieces(text: str) -> list[str]:
    """``text`` cut into its tokens, each with the whitespace before it, so they join to ``text``."""
    out = [m.group() for m in _PIECE.finditer(text)]
    rest = len("".join(out))
    if rest < len(text):  # trailing whitespace goes with the last piece
        out = out[:-1] + [(out[-1] if out else "") + text[rest:]]
    return out


def screen(faults: frozenset[str], body: dict[str, Any], served: list[str]) -> dict[str, Any]:
    """The body as the legacy route sees it before validation: under
    ``completions-unknown-model-accepted`` any model name is routed to the first served model
    (a router that checks names on chat only); under ``completions-model-always-404`` every
    request is refused as naming an unknown model, a served one too."""
    if "completions-model-always-404" in faults:
        raise ApiError(
            404,
            f"The model `{body.get('model')}` does not exist",
            "NotFoundError",
            "model",
            "model_not_found",
        )
    if "completions-unknown-model-accepted" in faults and body.get("model") not in served:
        return {**body, "model": served[0]}
    return body


def _ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(is_int(i) for i in value)


def _token_lists(faults: frozenset[str], prompt: list[Any]) -> list[list[int]]:
    """The id lists of a token prompt, each id inside the vocabulary (else a 400; a 500 from the
    embedding lookup under ``token-id-range-500``)."""
    lists: list[list[int]] = prompt if isinstance(prompt[0], list) else [prompt]
    bad = [i for ids in lists for i in ids if not 0 <= i < VOCAB_SIZE]
    if bad and "token-id-range-500" in faults:
        raise ApiError(500, "IndexError: index out of range in self", "server_error")
    if bad:
        raise ApiError(
            400,
            f"token id {bad[0]} is out of vocabulary: ids are 0..{VOCAB_SIZE - 1}",
            param="prompt",
        )
    return lists


def parse_prompts(faults: frozenset[str], body: dict[str, Any]) -> list[Prompt]:
    """The prompts of a completions body, or a 400 naming the forms it accepts (and a bad
    legacy ``logprobs`` or ``echo``)."""
    k = body.get("logprobs")
    expect(
        k is None or (is_int(k) and 0 <= k <= 20), "logprobs must be an integer 0..20", "logprobs"
    )
    expect(body.get("echo") in (None, True, False), "echo must be a boolean", "echo")
    prompt = body.get("prompt")
    if prompt == [] and "empty-prompt-list-accepted" in faults:
        return [Prompt("", "", 1)]  # generated from the BOS alone
    expect(prompt is not None, "'prompt' is required", "prompt")
    expect(prompt != [], "prompt must not be an empty list", "prompt")
    if isinstance(prompt, str):
        return [Prompt(prompt, prompt, len(model.tokenize(prompt)) + 1)]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return [Prompt(p, p, len(model.tokenize(p)) + 1) for p in prompt]
    tokens = _ids(prompt) or (
        isinstance(prompt, list) and bool(prompt) and all(_ids(p) for p in prompt)
    )
    if "token-id-prompt-refused" in faults or not tokens:
        raise ApiError(
            400,
            "prompt must be a string or a list of strings"
            if "token-id-prompt-refused" in faults
            else "prompt must be a string, a list of strings, a list of token ids or a list of "
            "lists of token ids",
            param="prompt",
        )
    assert isinstance(prompt, list)  # checked by _ids above
    return [Prompt(f"ids:{ids}", None, len(ids)) for ids in _token_lists(faults, prompt)]


def prompt_tokens(faults: frozenset[str], prompts: list[Prompt]) -> int:
    """Usage's prompt_tokens of a batch: every prompt once (``completions-prompt-tokens-off``:
    one more, a BOS counted twice)."""
    return sum(p.tokens for p in prompts) + (1 if "completions-prompt-tokens-off" in faults else 0)


def batch_choices(
    faults: frozenset[str],
    body: dict[str, Any],
    prompts: list[Prompt],
    make: Callable[[dict[str, Any]], list[Choice]],
) -> list[Choice]:
    """Each prompt's choices (``make`` generates for one prompt), numbered across the batch;
    with ``echo`` each carries its prompt's pieces."""
    if "completions-batch-n-short" in faults:
        prompts = prompts[:1]  # only the first prompt is answered
    if "completions-stream-stop-ignored" in faults and body.get("stream") is True:
        body = {k: v for k, v in body.items() if k != "stop"}  # the stream path never sees stop
    out: list[Choice] = []
    echo = body.get("echo") is True and "echo-ignored" not in faults
    for prompt in prompts:
        for choice in make({**body, "prompt": prompt.key}):
            choice.index = len(out)
            if echo and prompt.text is not None:
                choice.echo = pieces(prompt.text)
            out.append(choice)
    return out


def _top(piece: str, logprob: float, k: int) -> dict[str, float]:
    """K alternatives with the chosen piece first (distinct strings, each logprob <= 0)."""
    top = {piece: logprob}
    others = (w for w in model.VOCAB if " " + w != piece and w != piece)
    while len(top) < max(k, 1):
        top[" " + next(others)] = round(logprob - 0.5 * len(top), 4)
    return top


def legacy_logprobs(faults: frozenset[str], choice: Choice, k: int) -> dict[str, Any]:
    """The legacy logprobs object of a choice, echoed prompt included."""
    tokens = [*choice.echo, *choice.pieces]
    token_logprobs: list[float | None] = [
        *([None] + [-1.0] * (len(choice.echo) - 1) if choice.echo else []),
        *choice.logprobs[: len(choice.pieces)],
    ]
    top: list[dict[str, float] | None] = [
        None if lp is None else _top(t, lp, k) for t, lp in zip(tokens, token_logprobs, strict=True)
    ]
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t)
    if "completions-logprobs-misaligned" in faults and offsets:
        offsets = offsets[1:]  # an offset list one short, every offset shifted a token
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top,
        "text_offset": offsets,
    }


def stream_logprobs(
    faults: frozenset[str], token: str, logprob: float, k: int, offset: int
) -> dict[str, Any]:
    """The legacy logprobs of one streamed piece; ``offset`` is where it starts in the choice's
    text (``completions-stream-offset-reset``: where it starts in its own chunk, always 0)."""
    return {
        "tokens": [token],
        "token_logprobs": [logprob],
        "top_logprobs": [_top(token, logprob, k)],
        "text_offset": [0 if "completions-stream-offset-reset" in faults else offset],
    }


def choice_entry(faults: frozenset[str], body: dict[str, Any], choice: Choice) -> dict[str, Any]:
    """One choice of a text_completion body."""
    k = body.get("logprobs")
    if k is None and "logprobs-unasked" in faults:
        k = 0  # logprobs-unasked: computed and sent on every answer
    return {
        "index": choice.index,
        "text": "".join(choice.echo) + "".join(choice.pieces),
        "logprobs": None if k is None else legacy_logprobs(faults, choice, k),
        "finish_reason": choice.finish_reason,
    }
