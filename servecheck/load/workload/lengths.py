"""Request lengths from the command line: ``--input-tokens N[:SD]`` and ``--output-tokens N[:SD]``.

Either replaces the scenario's lengths with draws from a normal distribution (mean N, standard
deviation SD, 0 by default; clipped at 1 token), seeded by the run's seed, over a fixed number of
distinct prompts. An exact output length needs the engine to ignore its end-of-sequence token:
vLLM, SGLang, llama.cpp server and the reference server take ``ignore_eos`` (llama.cpp with
``max_tokens`` as its ``n_predict``); elsewhere the length is a ceiling, and the run says so.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from servecheck.errors import UsageError
from servecheck.load.workload.prompts import PromptSpec

# Distinct prompts drawn for a run: enough to spread the lengths, few enough to measure each
# with /tokenize before the load starts.
DRAWS = 16
# Engines whose OpenAI-compatible chat route honours ``ignore_eos`` (generate until max_tokens).
IGNORE_EOS_ENGINES = ("vllm", "sglang", "llamacpp", "reference")


@dataclass(frozen=True, slots=True)
class Lengths:
    """A length in tokens: the mean and the standard deviation of its draws."""

    mean: int
    sd: float = 0.0

    def text(self) -> str:
        return f"{self.mean}" + (f":{self.sd:g}" if self.sd else "")


def parse_lengths(text: str, option: str) -> Lengths:
    """``N`` or ``N:SD`` (tokens) -> :class:`Lengths`; a :class:`UsageError` naming ``option``."""
    mean_text, _, sd_text = str(text).strip().partition(":")
    try:
        mean = int(mean_text)
        sd = float(sd_text) if sd_text else 0.0
    except ValueError:
        raise UsageError(f"{option} {text!r}: N or N:SD tokens, e.g. 512 or 512:128") from None
    if mean < 1:
        raise UsageError(f"{option} {text!r}: the mean must be at least 1 token")
    if not (sd >= 0 and math.isfinite(sd)):
        raise UsageError(f"{option} {text!r}: the standard deviation must be >= 0")
    return Lengths(mean, sd)


def _draw(rng: random.Random, lengths: Lengths) -> int:
    if not lengths.sd:
        return lengths.mean
    return max(1, round(rng.gauss(lengths.mean, lengths.sd)))


def apply_lengths(
    mix: Sequence[PromptSpec],
    input_tokens: Lengths | None,
    output_tokens: Lengths | None,
    seed: int,
) -> list[PromptSpec]:
    """The scenario's ``mix`` with the lengths the command line set: ``DRAWS`` entries of equal
    weight, each a scenario entry in turn with its prompt and/or output length drawn. The mix
    as it was when neither is set."""
    if input_tokens is None and output_tokens is None:
        return list(mix)
    rng = random.Random(seed * 6151 + 17)
    out = []
    for i in range(DRAWS):
        base = mix[i % len(mix)]
        out.append(
            replace(
                base,
                prompt_tokens=_draw(rng, input_tokens) if input_tokens else base.prompt_tokens,
                output_tokens=_draw(rng, output_tokens) if output_tokens else base.output_tokens,
                weight=1.0,
            )
        )
    return out


def exact_output(engine: str, extra_body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The request body's extra keys that make the output length exact on ``engine``, and how
    the length is held: ``"exact (ignore_eos)"``, or why it is only a ceiling. A user's own
    ``ignore_eos`` in ``extra_body`` is kept as they set it."""
    if "ignore_eos" in extra_body:
        held = "exact (ignore_eos)" if extra_body["ignore_eos"] is True else "a ceiling"
        return {}, f"{held}: extra_body sets ignore_eos"
    if engine in IGNORE_EOS_ENGINES:
        return {"ignore_eos": True}, "exact (ignore_eos)"
    return {}, (
        f"a ceiling: engine {engine!r} has no ignore_eos on its chat route that servecheck knows "
        "of, so a reply may end early (max_tokens is an upper bound)"
    )


def section(
    input_tokens: Lengths | None, output_tokens: Lengths | None, held: str | None
) -> dict[str, Any] | None:
    """summary.json's ``lengths``: what the command line asked for and how the output was held."""
    if input_tokens is None and output_tokens is None:
        return None
    return {
        "input_tokens": input_tokens.text() if input_tokens else None,
        "output_tokens": output_tokens.text() if output_tokens else None,
        "output_length": held,
        "draws": DRAWS,
    }
