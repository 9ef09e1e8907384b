"""``step:2,8,16,8,2@10s``: each rate (req/s) held 10 s: up, then down."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from servecheck.errors import UsageError
from servecheck.load.workload.profiles.base import Phase, Profile, piecewise_arrivals
from servecheck.load.workload.schedule import parse_duration, parse_rate


@dataclass(frozen=True, slots=True)
class Step(Profile):
    kind = "step"

    @classmethod
    def parse(cls, raw: str, rest: str) -> Profile:
        """Its own grammar: rates, then ``@`` and the hold."""
        rates_text, at, hold = rest.partition("@")
        if not at or not rates_text.strip():
            raise UsageError(
                f"profile {raw!r}: write step:R1,R2,...@HOLD, e.g. step:2,8,16,8,2@10s"
            )
        try:
            rates = [parse_rate(r.strip()) for r in rates_text.split(",") if r.strip()]
            held = parse_duration(hold.strip())
        except UsageError as exc:
            raise UsageError(f"profile {raw!r}: {exc}") from None
        return cls(raw, {"rates": rates, "hold": held})

    @property
    def duration(self) -> float | None:
        return float(self.params["hold"]) * len(self.params["rates"])

    def rate_at(self, t: float) -> float:
        rates = self.params["rates"]
        return float(rates[min(int(t / self.params["hold"]), len(rates) - 1)])

    def arrivals(self, seed: int = 0, poisson: bool = False) -> Iterator[float]:
        return piecewise_arrivals(self, seed, poisson)

    def phases(self, duration: float | None) -> list[Phase]:
        h = float(self.params["hold"])
        return [
            Phase(f"step {i + 1} ({r:g}/s)", i * h, (i + 1) * h, float(r))
            for i, r in enumerate(self.params["rates"])
        ]
