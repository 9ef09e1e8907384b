"""``recovery:normal=5,overload=40,for=20s[,before=20s][,after=40s][,within=20%][,sustain=3]``:
normal load, overload for a while, normal again; its section measures the time to recover
(``recovery_s``).

The bound: the p95 TTFT before the overload, plus ``within``. The p95 *left* the bound when
``sustain`` consecutive slices (that measured a TTFT) from the overload's start on were above it,
and *came back* at the first ``sustain`` consecutive slices within it after the overload's end
and after its last departure. The time to recover: from the overload's end to the end of the
first slice of that return (to the slice width, rounded up); 0 with "never left the bound" when
it never left; "did not recover" when it left and did not come back. A slice holds a handful of
requests at a normal rate, so its p95 is nearly its slowest request: one slow request in one
slice must neither start an overload nor end a recovery, hence runs of slices, not slices.
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
DEFAULT_SUSTAIN = 3  # consecutive slices (1 s each by default) that make a departure or a return


@dataclass(frozen=True, slots=True)
class Recovery(Profile):
    kind = "recovery"
    required = ("normal", "overload", "for")
    optional = ("before", "after", "within", "sustain")
    measures = ("recovery_s",)

    @classmethod
    def value(cls, raw: str, key: str, value: str) -> Any:
        if key == "sustain":
            if not value.isdigit() or int(value) < 1:
                raise UsageError(
                    f"profile {raw!r}: sustain {value!r}: a whole number of slices >= 1, "
                    "e.g. sustain=3"
                )
            return int(value)
        return parse_within(raw, value) if key == "within" else common_value(raw, key, value)

    @classmethod
    def settle(cls, raw: str, params: dict[str, Any]) -> dict[str, Any]:
        if not params["overload"] > params["normal"]:
            raise UsageError(f"profile {raw!r}: overload must be above normal")
        params.setdefault("before", params["for"])
        params.setdefault("after", 2.0 * params["for"])
        params.setdefault("within", DEFAULT_WITHIN)
        params.setdefault("sustain", DEFAULT_SUSTAIN)
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
    sustain = int(profile.params["sustain"])
    pre = Histogram()
    for v in views:
        if (v.start + v.end) / 2.0 < window[0]:
            pre.add(v.hist["ttft"])
    out: dict[str, Any] = {
        "overload_s": [round(window[0], 3), round(window[1], 3)],
        "within": within,
        "sustain_slices": sustain,
        "pre_overload_ttft_p95_ms": None,
        "bound_ms": None,
        "recovered": None,
        "never_left": None,
        "recovery_s": None,
        "after_slices": [],
    }
    if not pre.count:
        out["note"] = "no TTFT was measured before the overload: nothing to recover to"
        return out
    p95 = pre.summary().get("p95") or 0.0
    bound = p95 * (1.0 + within)
    # The slices that measured a TTFT from the overload's start to the profile's end: an empty
    # slice says nothing, so it neither breaks nor extends a run of slices.
    judged = [
        (v, v.hist["ttft"].summary().get("p95") or 0.0)
        for v in views
        if window[0] <= (v.start + v.end) / 2.0 < end and v.hist["ttft"].count
    ]
    after = [(v, x) for v, x in judged if (v.start + v.end) / 2.0 >= window[1]]
    out.update(
        pre_overload_ttft_p95_ms=round(p95, 3),
        bound_ms=round(bound, 3),
        after_slices=[[round(v.end - window[1], 3), round(x, 3)] for v, x in after],
    )
    out.update(_judge(judged, len(judged) - len(after), bound, sustain, window[1], end))
    return out


def _runs_above(p95s: Sequence[float], bound: float, sustain: int) -> list[tuple[int, int]]:
    """[start, stop) of every run of at least ``sustain`` consecutive slices above ``bound``."""
    runs: list[tuple[int, int]] = []
    start = None
    for i, x in enumerate([*p95s, -math.inf]):  # the sentinel closes a run at the end
        if x > bound and start is None:
            start = i
        elif x <= bound and start is not None:
            if i - start >= sustain:
                runs.append((start, i))
            start = None
    return runs


def _judge(
    judged: Sequence[tuple[SliceView, float]],
    first_after: int,
    bound: float,
    sustain: int,
    overload_end: float,
    end: float,
) -> dict[str, Any]:
    """Whether (and when) the p95 got back within ``bound`` for good. A departure is
    ``sustain`` consecutive slices above the bound, a return ``sustain`` consecutive slices
    within it: one slow slice of a few requests neither starts nor ends an overload."""
    p95s = [x for _, x in judged]
    left = _runs_above(p95s, bound, sustain)
    after = len(judged) - first_after
    rule = f"{sustain} consecutive slices"
    if not after:
        return {"note": "no TTFT was measured after the overload"}
    above = sum(1 for x in p95s if x > bound)
    if not left:
        lone = f"; {above} single slice(s) above it, fewer than {sustain} in a row" if above else ""
        return {
            "recovered": True,
            "never_left": True,
            "recovery_s": 0.0,
            "note": f"never left the bound: p95 TTFT was not above {bound:.1f} ms for {rule} "
            f"during or after the overload{lone}",
        }
    # The return: the first run of ``sustain`` slices within the bound after the overload's
    # end and after the last departure (a relapse restarts the wait).
    since = max(first_after, left[-1][1])
    streak = 0
    for i in range(since, len(judged)):
        streak = streak + 1 if p95s[i] <= bound else 0
        if streak == sustain:
            first = judged[i - sustain + 1][0]
            return {
                "recovered": True,
                "never_left": False,
                "recovery_s": round(max(0.0, first.end - overload_end), 3),
            }
    if after < sustain:
        return {
            "note": f"the recovery was not measured: {after} slice(s) with a TTFT after the "
            f"overload, fewer than the {rule} a return needs"
        }
    return {
        "recovered": False,
        "never_left": False,
        "note": f"did not recover: p95 TTFT was not back within {bound:.1f} ms for {rule} "
        f"in the {max(0.0, end - overload_end):.0f} s of normal load after the overload",
    }
