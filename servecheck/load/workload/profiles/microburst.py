"""``microburst:rate=5,n=10,every=2s[,width=50ms][,for=30s]``: a steady rate with N requests
crammed into WIDTH every T."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from servecheck.errors import UsageError
from servecheck.load.workload.profiles.base import (
    Phase,
    Profile,
    every_period,
    periods,
    rng_for,
    warped,
)


@dataclass(frozen=True, slots=True)
class Microburst(Profile):
    kind = "microburst"
    required = ("rate", "n", "every")
    optional = ("width", "for")

    @classmethod
    def settle(cls, raw: str, params: dict[str, Any]) -> dict[str, Any]:
        params.setdefault("width", 0.05)
        if not params["width"] < params["every"]:
            raise UsageError(f"profile {raw!r}: width must be shorter than every")
        return params

    def arrivals(self, seed: int = 0, poisson: bool = False) -> Iterator[float]:
        end = self.duration
        base = warped(self.rate_at, rng_for(seed), poisson, end)
        return heapq.merge(base, self._spikes(end))

    def _spikes(self, end: float | None) -> Iterator[float]:
        """N sends spread evenly over ``width`` at ``every``, ``2 * every`` ... (none at 0: the
        base rate shows alone first)."""
        p = self.params
        n, width = int(p["n"]), float(p["width"])
        for at in every_period(1, float(p["every"]), end):
            for j in range(n):
                yield at + j * width / n

    def phases(self, duration: float | None) -> list[Phase]:
        end = self.duration or duration or 0.0
        return periods(self.kind, float(self.params["every"]), end, True)
