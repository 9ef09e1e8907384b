"""Traffic split across models by weight: a load plan's ``models:`` (``{base: 3, lora-a: 1}``),
the load command's model mix (``base=3,lora-a=1``) and the cutover probe's models.

A base model and its LoRA adapters are served side by side under their own names, so a mix is
how a load test sends each its share. The split is smooth weighted round robin
(:class:`WeightedCycle`, nginx's): every window of requests holds each model's share to within
one request, in the same order every run, so a short run is split as planned and two runs of a
plan send the same models. Each record carries the model it named (``model``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from servecheck.errors import UsageError

if TYPE_CHECKING:
    from servecheck.load.workload.planned import Send

Mix = list[tuple[str, float]]


class WeightedCycle:
    """Smooth weighted round robin: each pick adds every weight to its credit and takes the name
    with the most, less the total; n picks give each name its share to within one."""

    def __init__(self, mix: Sequence[tuple[str, float]]) -> None:
        self.mix = list(mix)
        self.credit = [0.0] * len(self.mix)
        self.total = sum(w for _, w in self.mix)

    def next(self) -> str:
        for i, (_, w) in enumerate(self.mix):
            self.credit[i] += w
        best = max(range(len(self.mix)), key=lambda i: self.credit[i])
        self.credit[best] -= self.total
        return self.mix[best][0]

    def shape(self, send: Send) -> None:
        """The run's step: each request names the next model of the cycle, and its record too."""
        send.model = self.next()
        send.named = True


def parse_model_mix(value: Any, where: str = "the model mix") -> Mix:
    """``NAME=W,NAME=W`` (a bare NAME weighs 1) or a mapping name -> weight; every weight a
    positive number and every name once, else a :class:`UsageError` naming ``where``."""
    if value is None or value == "" or value == {}:
        return []
    items: list[tuple[str, Any]]
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, str):
        items = []
        for part in value.split(","):
            label, eq, text = part.strip().partition("=")
            items.append((label.strip(), text.strip() if eq else 1.0))
    else:
        raise UsageError(f"{where}: a mapping of model -> weight, or NAME=W,NAME=W")
    mix: Mix = []
    for name, raw in items:
        try:
            weight = float(raw)
        except (TypeError, ValueError):
            weight = -1.0
        if not name or not weight > 0 or weight == float("inf"):
            raise UsageError(f"{where}: {name or '(no name)'}={raw}: a model name and a weight > 0")
        if name in (n for n, _ in mix):
            raise UsageError(f"{where}: {name} is named twice")
        mix.append((name, weight))
    return mix


__all__ = ["Mix", "WeightedCycle", "parse_model_mix"]
