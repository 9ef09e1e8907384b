"""The summary's ``images`` section: tokens per image and TTFT against image size.

Added to ``summary.json`` only when the records carry images (``--images``, load/workload/images.py), so
other runs keep their summary as it was. One row per request shape ``COUNTxWIDTHxHEIGHT``:

* ``count``, ``errors``; ``ttft_ms`` (p50, p95, p99: HDR, as every other latency);
* ``prompt_tokens_p50``: the median of the server's ``prompt_tokens`` (usage) over its ok requests;
* ``tokens_per_image_p50``: the median over ok requests with usage of
  ``(prompt_tokens - text_tokens) / images``, where ``text_tokens`` is the prompt's own planned
  length (measured with the target's /tokenize, or the 4-characters-a-token estimate: the
  summary's ``prompt_method`` says which; the chat template's few tokens are in the figure too).
  A vision model's figure grows with the image's size; a figure near 0 is an image the server
  ignored.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from servecheck.analysis.sections import Images, ImageSize, ImageTtft
from servecheck.analysis.stats import Histogram


def _median(c: Counter[float]) -> float | None:
    n = sum(c.values())
    if not n:
        return None
    seen = 0
    for value in sorted(c):
        seen += c[value]
        if seen * 2 >= n:
            return value
    return None  # not reached


@dataclass(slots=True)
class _Size:
    count: int = 0
    errors: int = 0
    ttft: Histogram = field(default_factory=Histogram)
    prompt: Counter[float] = field(default_factory=Counter)  # exact medians, few distinct values
    per_image: Counter[float] = field(default_factory=Counter)

    def add(self, r: Mapping[str, Any]) -> None:
        self.count += 1
        if r.get("error"):
            self.errors += 1
            return
        if r.get("ttft") is not None:
            self.ttft.record(float(r["ttft"]))
        pt, text, n = r.get("prompt_tokens"), r.get("text_tokens"), r.get("images")
        if r.get("output_tokens") is None or not isinstance(pt, int):
            return  # no usage from the server: its prompt_tokens is our plan, not a measure
        self.prompt[pt] += 1
        if isinstance(text, int) and isinstance(n, int) and n > 0:
            self.per_image[round((pt - text) / n, 1)] += 1

    def row(self) -> ImageSize:
        d = self.ttft.summary()
        return ImageSize(
            count=self.count,
            errors=self.errors,
            ttft_ms=ImageTtft(count=d.count, p50=d.get("p50"), p95=d.get("p95"), p99=d.get("p99")),
            prompt_tokens_p50=_median(self.prompt),
            tokens_per_image_p50=_median(self.per_image),
            requests_with_usage=sum(self.per_image.values()),
        )


def _sort_key(key: str) -> tuple[int, ...]:
    return tuple(int(x) for x in key.split("x"))


def image_section(records: Iterable[Mapping[str, Any]]) -> Images | None:
    """summary.json's ``images``, or None when no record had images."""
    sizes: dict[str, _Size] = {}
    for r in records:
        n, size = r.get("images"), r.get("image_size")
        if isinstance(n, int) and size:
            sizes.setdefault(f"{n}x{size}", _Size()).add(r)
    if not sizes:
        return None
    return Images(
        requests=sum(s.count for s in sizes.values()),
        by_size={k: sizes[k].row() for k in sorted(sizes, key=_sort_key)},
    )
