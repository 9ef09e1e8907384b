"""``recovery:normal=5,overload=40,for=20s[,before=20s][,after=40s][,within=20%]``: normal load,
overload for a while, normal again; its section measures the time to recover (``recovery_s``).

The time to recover: from the overload's end to the end of the first slice from which every
slice of the normal load after it has its p95 TTFT within ``within`` of the p95 before the
overload (to the slice width, rounded up), or "did not recover".
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servecheck.analysis.stats import Histogram
from servecheck.errors import UsageError
from servecheck.load.workload.profiles.base import (
    Phase,
    Profile,
    SliceView,
    common_value,
    piecewise_arrivals,
)

DEFAULT_WITHIN = 0.2


@dataclass(frozen=True, slots=True)
class Recovery(Profile):
    kind = "recovery"
    required = ("normal", "overload", "for")
    optional = ("before", "after", "within")
    measures = ("recovery_s",)

    @classmethod
    def value(cls, raw: str, key: str, value: str) -> Any:
        return parse_within(raw, value) if key == "within" else common_value(raw, key, value)

    @classmethod
    def settle(cls, raw: str, params: dict[str, Any]) -> dict[str, Any]:
        if not params["overload"] > params["normal"]:
            raise UsageError(f"profile {raw!r}: overload must be above normal")
        params.setdefault("before", params["for"])
        params.setdefault("after", 2.0 * params["for"])
        params.setdefault("within", DEFAULT_WITHIN)
        return params

    @property
    def duration(self) -> float | None:
        p = self.params
        return float(p["before"] + p["for"] + p["after"])

    @property
    def overload(self) -> tuple[float, float] | None:
        start = float(self.params["before"])
        return start, start + float(self.params["for"])

    def rate_at(self, t: float) -> float:
        start = float(self.params["before"])
        inside = start <= t < start + float(self.params["for"])
        return float(self.params["overload" if inside else "normal"])

    def arrivals(self, seed: int = 0, poisson: bool = False) -> Iterator[float]:
        return piecewise_arrivals(self, seed, poisson)

    def phases(self, duration: float | None) -> list[Phase]:
        end = self.duration or duration or 0.0
        a, b = self.overload or (0.0, 0.0)
        normal, overload = float(self.params["normal"]), float(self.params["overload"])
        return [
            Phase("before", 0.0, a, normal),
            Phase("overload", a, b, overload),
            Phase("after", b, end, normal),
        ]

    def figures(
        self, views: Sequence[SliceView], end: float, timings: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        return {"recovery": recovery_of(self, views, end)}


def parse_within(raw: str, value: str) -> float:
    """``within``: a share of the pre-overload p95, written as a percentage."""
    if not value.endswith("%"):
        raise UsageError(f"profile {raw!r}: within {value!r}: a percentage, e.g. within=20%")
    try:
        share = float(value[:-1]) / 100.0
    except ValueError:
        raise UsageError(f"profile {raw!r}: within {value!r}: a percentage, e.g. 20%") from None
    if not (share >= 0 and math.isfinite(share)):
        raise UsageError(f"profile {raw!r}: within {value!r}: must be 0% or more")
    return share


def recovery_of(profile: Profile, views: Sequence[SliceView], end: float) -> dict[str, Any]:
    """recovery's figures: the pre-overload p95 TTFT and the time to recover from the slices."""
    window = profile.overload
    assert window is not None
    within = float(profile.params["within"])
    pre = Histogram()
    for v in views:
        if (v.start + v.end) / 2.0 < window[0]:
            pre.add(v.hist["ttft"])
    out: dict[str, Any] = {
        "overload_s": [round(window[0], 3), round(window[1], 3)],
        "within": within,
        "pre_overload_ttft_p95_ms": None,
        "bound_ms": None,
        "recovered": None,
        "recovery_s": None,
        "after_slices": [],
    }
    if not pre.count:
        out["note"] = "no TTFT was measured before the overload: nothing to recover to"
        return out
    p95 = pre.summary().get("p95") or 0.0
    bound = p95 * (1.0 + within)
    after = [
        v for v in views if window[1] <= (v.start + v.end) / 2.0 < end and v.hist["ttft"].count
    ]
    p95s = [v.hist["ttft"].summary().get("p95") or 0.0 for v in after]
    out.update(
        pre_overload_ttft_p95_ms=round(p95, 3),
        bound_ms=round(bound, 3),
        after_slices=[
            [round(v.end - window[1], 3), round(x, 3)] for v, x in zip(after, p95s, strict=True)
        ],
    )
    # The first slice from which every later one stays within the bound.
    first = None
    for i in range(len(after) - 1, -1, -1):
        if p95s[i] > bound:
            break
        first = i
    if first is None:
        out["recovered"] = False
        out["note"] = (
            f"did not recover: p95 TTFT stayed above {bound:.1f} ms through the "
            f"{max(0.0, end - window[1]):.0f} s of normal load after the overload"
            if after
            else "no TTFT was measured after the overload"
        )
        if not after:
            out["recovered"] = None
        return out
    out["recovered"] = True
    out["recovery_s"] = round(max(0.0, after[first].end - window[1]), 3)
    return out
