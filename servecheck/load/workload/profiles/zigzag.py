"""``zigzag:min=2,max=20,period=30s[,shape=sine|saw|triangle][,for=2m]``: the arrival rate a
sinusoid, sawtooth or triangle."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from servecheck.errors import UsageError, did_you_mean
from servecheck.load.workload.profiles.base import (
    MAX_PHASES,
    Phase,
    Profile,
    common_value,
    periods,
)

SHAPES = ("sine", "saw", "triangle")


@dataclass(frozen=True, slots=True)
class Zigzag(Profile):
    kind = "zigzag"
    required = ("min", "max", "period")
    optional = ("shape", "for")

    @classmethod
    def value(cls, raw: str, key: str, value: str) -> Any:
        if key != "shape":
            return common_value(raw, key, value)
        if value not in SHAPES:
            raise UsageError(
                f"profile {raw!r}: shape {value!r}{did_you_mean(value, SHAPES)}; one of "
                + ", ".join(SHAPES)
            )
        return value

    @classmethod
    def settle(cls, raw: str, params: dict[str, Any]) -> dict[str, Any]:
        if not params["max"] > params["min"]:
            raise UsageError(f"profile {raw!r}: max must be above min")
        params.setdefault("shape", "sine")
        return params

    def rate_at(self, t: float) -> float:
        p = self.params
        x = (t / p["period"]) % 1.0
        lo, hi = p["min"], p["max"]
        wave = {
            "sine": (1.0 - math.cos(2.0 * math.pi * x)) / 2.0,
            "saw": x,
            "triangle": 1.0 - abs(2.0 * x - 1.0),
        }[p["shape"]]
        return float(lo + (hi - lo) * wave)

    def phases(self, duration: float | None) -> list[Phase]:
        end = self.duration or duration or 0.0
        half = float(self.params["period"]) / 2.0
        if self.params["shape"] == "saw":
            return periods("ramp", 2.0 * half, end, False)
        n = math.ceil(end / half - 1e-9) if end else 0
        if n > MAX_PHASES:
            return [Phase("zigzag", 0.0, end)]
        names = ("rising", "falling")
        return [
            Phase(f"{names[i % 2]} {i // 2 + 1}", i * half, min(end, (i + 1) * half))
            for i in range(n)
        ]
