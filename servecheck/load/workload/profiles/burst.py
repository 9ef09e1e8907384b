"""``burst:n=20,every=5s[,for=30s]``: N requests at once, every T."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from servecheck.load.workload.profiles.base import Phase, Profile, every_period, periods


@dataclass(frozen=True, slots=True)
class Burst(Profile):
    kind = "burst"
    required = ("n", "every")
    optional = ("for",)

    def arrivals(self, seed: int = 0, poisson: bool = False) -> Iterator[float]:
        n = int(self.params["n"])
        for at in every_period(0, float(self.params["every"]), self.duration):
            for _ in range(n):
                yield at

    def phases(self, duration: float | None) -> list[Phase]:
        end = self.duration or duration or 0.0
        return periods(self.kind, float(self.params["every"]), end, False)
