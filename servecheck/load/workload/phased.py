"""Phased load profiles: production traffic that is not one steady loop (pure: no locust).

A profile is written ``NAME[:PARAMS]`` (a plan's ``profile:`` key or the command line)::

    burst:n=20,every=5s[,for=30s]              N requests at once, every T
    zigzag:min=2,max=20,period=30s[,shape=sine|saw|triangle][,for=2m]
                                               the arrival rate a sinusoid, sawtooth or triangle
    microburst:rate=5,n=10,every=2s[,width=50ms][,for=30s]
                                               a steady rate with N requests crammed into WIDTH
                                               every T
    step:2,8,16,8,2@10s                        each rate (req/s) held 10 s: up, then down
    recovery:normal=5,overload=40,for=20s[,before=20s][,after=40s][,within=20%][,sustain=3]
                                               normal load, overload for a while, normal again;
                                               the report measures the time to recover
    churn[:rate=5]                             a new connection per request (keep-alive off):
                                               the report shows the connection set-up cost

Every profile but a churn without its own rate is an open-loop schedule: a rate function
``r(t)`` (or the burst instants) turned into send offsets from the run's start. Each offset is
the request's intended send time, which the record keeps beside the actual one, so latencies
from the intended time stay coordinated-omission-correct as with the other open-loop schedules
(``load/workload/schedule.py``). Offsets come from the time-warped fixed grid (arrival ``i`` where the
integral of ``r`` reaches ``i``) or, with Poisson arrivals, from exponential gaps in that
warped time (a non-homogeneous Poisson process), seeded; every worker draws the same global
series and takes every W-th offset, so W workers together send exactly the one schedule.

Phases are windows of the profile's time; summary.json's ``profile`` section gives each its
percentiles from the run's time slices (``analysis/steady.py``: a slice belongs to the phase its
middle falls in, so the slices should be narrower than the phases; a profile run's default
slice is 1 s). ``recovery``'s section: the p95 TTFT before the overload, and the time to recover:
from the overload's end to the end of the first of ``sustain`` consecutive slices whose p95 TTFT
is back within ``within`` of that value (to the slice width, rounded up), 0 when it never left
the bound (never ``sustain`` slices in a row above it), or "did not recover"
(``load/workload/profiles/recovery.py``). The ``recovery_s`` SLO judges it.

Each kind is a class in ``load/workload/profiles/`` registered by name there; this module is
the factory (:func:`parse_profile`), a worker's share of the arrivals and the summary section.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servecheck.analysis.slo import SLO, Verdict
from servecheck.analysis.stats import Histogram
from servecheck.errors import SpecError
from servecheck.load.workload.profiles import KINDS, Phase, Profile, SliceView, profile_class
from servecheck.load.workload.profiles.recovery import recovery_of

PROFILE_SLICE_S = 1.0  # a profile run's slice width unless one is asked for

__all__ = [
    "KINDS",
    "PROFILE_SLICE_S",
    "Phase",
    "Profile",
    "ProfileSchedule",
    "check_slos",
    "judge",
    "parse_profile",
    "recovery_of",
    "section",
]


@dataclass(slots=True)
class ProfileSchedule:
    """One worker's share of a profile's arrivals: offsets ``index, index + W, ...``."""

    profile: Profile
    index: int = 0
    workers: int = 1
    seed: int = 0
    poisson: bool = False

    mode = "profile"

    def offsets(self) -> Iterator[float]:
        for i, t in enumerate(self.profile.arrivals(self.seed, self.poisson)):
            if i % self.workers == self.index:
                yield t

    def planned(self, duration: float) -> int:
        return sum(1 for t in _until(self.offsets(), duration))


def _until(offsets: Iterator[float], duration: float) -> Iterator[float]:
    for t in offsets:
        if t >= duration:
            return
        yield t


# ------------------------------------------------------------------ parsing


def parse_profile(text: str) -> Profile:
    """``NAME[:PARAMS]`` -> the :class:`Profile` subclass registered as NAME; a
    :class:`UsageError` names what is wrong."""
    raw = str(text).strip()
    kind, _, rest = raw.partition(":")
    return profile_class(raw, kind.strip().lower()).parse(raw, rest)


# ------------------------------------------------------------------ the summary section


def _slices(scan: Any) -> list[SliceView]:
    """The scan's slices (analysis/steady.py's ``Scan``) on the profile's time axis."""
    if not scan.slices or scan.first_sent is None:
        return []
    t0, w = float(scan.first_sent), float(scan.slice_s)
    return [
        SliceView(max(0.0, i * w - t0), (i + 1) * w - t0, sl.count, sl.errors, sl.hist)
        for i, sl in sorted(scan.slices.items())
    ]


def _pcts(hist: Histogram) -> dict[str, float | None]:
    d = hist.summary()
    return {k: d.get(k) for k in ("p50", "p95", "p99")}


def _phase_row(ph: Phase, views: Sequence[SliceView]) -> dict[str, Any]:
    inside = [v for v in views if ph.start <= (v.start + v.end) / 2.0 < ph.end]
    hists = {m: Histogram() for m in ("ttft", "e2e")}
    for v in inside:
        for m, h in hists.items():
            h.add(v.hist[m])
    return {
        "name": ph.name,
        "start_s": round(ph.start, 3),
        "end_s": round(ph.end, 3),
        "offered_rate": ph.rate,
        "count": sum(v.count for v in inside),
        "errors": sum(v.errors for v in inside),
        "ttft_ms": _pcts(hists["ttft"]),
        "e2e_ms": _pcts(hists["e2e"]),
    }


def section(
    profile: Profile, scan: Any, duration: float | None, timings: Mapping[str, Any] | None
) -> dict[str, Any]:
    """summary.json's ``profile``: the phases with their windows and percentiles, and
    recovery's or churn's own figures."""
    views = _slices(scan)
    own = [x for x in (profile.duration, duration) if x]  # a shorter run cuts the profile
    end = min(own) if own else (views[-1].end if views else 0.0)
    out: dict[str, Any] = {
        **profile.as_dict(),
        "duration_s": end,
        "slice_s": float(scan.slice_s),
        "phases": [_phase_row(ph, views) for ph in profile.phases(end)],
    }
    out.update(profile.figures(views, end, timings))
    return out


# ------------------------------------------------------------------ SLOs


def check_slos(slos: Sequence[SLO], profile: Profile | None) -> None:
    """Before any traffic: an SLO a profile measures needs that profile."""
    for slo in slos:
        if slo.profile and (profile is None or slo.metric not in profile.measures):
            raise SpecError(
                "SLO {slo}: recovery_s is measured by a recovery profile; give {profile} "
                "recovery:normal=R,overload=R,for=TIME",
                slo=repr(slo.text),
            )


def judge(slos: Sequence[SLO], sec: Mapping[str, Any] | None) -> tuple[list[Verdict], list[str]]:
    """The profile SLOs' verdicts, and what they could not measure (the run is then
    inconclusive): ``recovery_s`` is the time to recover; "did not recover" fails it."""
    verdicts: list[Verdict] = []
    unmeasured: list[str] = []
    rec = (sec or {}).get("recovery")
    for slo in slos:
        if not isinstance(rec, dict) or rec.get("recovered") is None:
            why = (rec or {}).get("note") if isinstance(rec, dict) else None
            unmeasured.append(f"{slo.text}: {why or 'the recovery was not measured'}")
        elif not rec["recovered"]:
            verdicts.append(Verdict(slo, None, False, str(rec.get("note") or "did not recover")))
        else:
            value = float(rec["recovery_s"])
            verdicts.append(Verdict(slo, value, slo.holds(value)))
    return verdicts, unmeasured
