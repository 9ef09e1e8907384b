"""Greedy-output agreement between two targets (``servecheck cutover``, before a cutover).

Each prompt is sent to OLD and NEW with ``temperature: 0`` (and ``seed: 0``); the outputs are
compared exactly, and where they differ by word-level Levenshtein distance normalised by the
longer output (0 = same words, 1 = nothing in common).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from servecheck.client.models import model_for_target
from servecheck.config.model import Target

DEFAULT_PROMPTS: tuple[str, ...] = (
    "What is the capital of France? Answer in one word.",
    "Count from one to ten in words, separated by commas.",
    "Write one sentence about the sea.",
    "Translate 'good morning' into German.",
    "What is 17 multiplied by 3?",
    "Name three primary colours.",
    "Give a synonym for 'happy'.",
    "Complete the sequence: 2, 4, 8, 16, ...",
    "Write a haiku about autumn.",
    "Explain in one sentence what a CPU does.",
    "List the days of the week.",
    "Reply with the word 'ready' and nothing else.",
)


def words(text: str) -> list[str]:
    return text.split()


def levenshtein(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Edit distance between two sequences (insertions, deletions, substitutions), O(len(a)*len(b))."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def normalised_distance(a: str, b: str) -> float:
    """Word-level Levenshtein distance divided by the longer output's word count (0..1)."""
    wa, wb = words(a), words(b)
    longest = max(len(wa), len(wb))
    return 0.0 if longest == 0 else levenshtein(wa, wb) / longest


@dataclass(slots=True)
class PromptResult:
    prompt: str
    old: str | None
    new: str | None
    identical: bool
    distance: float | None
    old_error: str = ""
    new_error: str = ""


@dataclass(slots=True)
class Agreement:
    """Greedy-output agreement over a prompt set."""

    results: list[PromptResult] = field(default_factory=list)
    old_model: str = ""
    new_model: str = ""

    @property
    def compared(self) -> list[PromptResult]:
        return [r for r in self.results if r.old is not None and r.new is not None]

    @property
    def identical_share(self) -> float | None:
        c = self.compared
        return None if not c else sum(r.identical for r in c) / len(c)

    @property
    def mean_distance(self) -> float | None:
        c = self.compared
        return None if not c else sum(r.distance or 0.0 for r in c) / len(c)

    @property
    def errors(self) -> int:
        return sum(1 for r in self.results if r.old is None or r.new is None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "old_model": self.old_model,
            "new_model": self.new_model,
            "prompts": len(self.results),
            "compared": len(self.compared),
            "identical_share": self.identical_share,
            "mean_distance": self.mean_distance,
            "errors": self.errors,
            "results": [asdict(r) for r in self.results],
        }


def read_prompts(path: str | Path | None) -> list[str]:
    """Prompts from a file (one per line; ``#`` comments and blank lines skipped), or the built-in set."""
    if path is None:
        return list(DEFAULT_PROMPTS)
    lines = [ln.strip() for ln in Path(path).read_text(encoding="utf-8").splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def greedy_outputs(
    target: Target, model: str, prompts: Sequence[str], max_tokens: int = 64
) -> list[tuple[str | None, str]]:
    """(text or None, error) per prompt, ``temperature: 0, seed: 0``, one request at a time."""
    from servecheck.client.http import ServeClient

    out: list[tuple[str | None, str]] = []
    with ServeClient.for_target(target) as client:
        for p in prompts:
            body = {
                "model": model,
                "messages": [{"role": "user", "content": p}],
                "temperature": 0,
                "seed": 0,
                "max_tokens": max_tokens,
            }
            ex = client.post("/chat/completions", body)
            data = ex.json() if ex.ok else None
            try:
                out.append((str(data["choices"][0]["message"]["content"] or ""), ""))  # type: ignore[index]
            except (TypeError, KeyError, IndexError):
                out.append((None, ex.describe(300)))
    return out


def agreement(old: Target, new: Target, prompts: Sequence[str], max_tokens: int = 64) -> Agreement:
    """Send every prompt to both targets greedily and compare the answers."""
    # The one model discovery (never a pooling model: a chat prompt sent there only errors).
    mo, mn = model_for_target(old).model, model_for_target(new).model
    a = greedy_outputs(old, mo, prompts, max_tokens)
    b = greedy_outputs(new, mn, prompts, max_tokens)
    res = Agreement(old_model=mo, new_model=mn)
    for p, (ta, ea), (tb, eb) in zip(prompts, a, b, strict=True):
        both = ta is not None and tb is not None
        res.results.append(
            PromptResult(
                p,
                ta,
                tb,
                both and ta == tb,
                normalised_distance(ta or "", tb or "") if both else None,
                ea,
                eb,
            )
        )
    return res


__all__ = [
    "DEFAULT_PROMPTS",
    "Agreement",
    "PromptResult",
    "agreement",
    "greedy_outputs",
    "levenshtein",
    "normalised_distance",
    "read_prompts",
]
