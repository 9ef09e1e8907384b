"""Phased load profiles: production traffic that is not one steady loop (pure: no locust).

A profile is written ``NAME[:PARAMS]`` (a plan's ``profile:`` key or the command line)::

    burst:n=20,every=5s[,for=30s]              N requests at once, every T
    zigzag:min=2,max=20,period=30s[,shape=sine|saw|triangle][,for=2m]
                                               the arrival rate a sinusoid, sawtooth or triangle
    microburst:rate=5,n=10,every=2s[,width=50ms][,for=30s]
                                               a steady rate with N requests crammed into WIDTH
                                               every T
    step:2,8,16,8,2@10s                        each rate (req/s) held 10 s: up, then down
    recovery:normal=5,overload=40,for=20s[,before=20s][,after=40s][,within=20%]
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
from the overload's end to the end of the first slice from which every slice of the normal load
after it has its p95 TTFT within ``within`` of that value (to the slice width, rounded up), or
"did not recover". The ``recovery_s`` SLO judges it.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from servecheck.analysis.slo import SLO, Verdict
from servecheck.analysis.stats import Histogram
from servecheck.errors import SpecError, UsageError, did_you_mean
from servecheck.load.workload.schedule import parse_duration, parse_rate

KINDS = ("burst", "zigzag", "microburst", "step", "recovery", "churn")
SHAPES = ("sine", "saw", "triangle")
PROFILE_SLICE_S = 1.0  # a profile run's slice width unless one is asked for
MAX_PHASES = 60  # more periods than this: the periodic phases become one
DEFAULT_WITHIN = 0.2
_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # (required, optional)
    "burst": (("n", "every"), ("for",)),
    "zigzag": (("min", "max", "period"), ("shape", "for")),
    "microburst": (("rate", "n", "every"), ("width", "for")),
    "step": ((), ()),
    "recovery": (("normal", "overload", "for"), ("before", "after", "within")),
    "churn": ((), ("rate", "for")),
}
_RATES = ("min", "max", "rate", "normal", "overload")
_TIMES = ("every", "period", "for", "width", "before", "after")


@dataclass(frozen=True, slots=True)
class Phase:
    """A window of the profile's time, seconds from the run's first send."""

    name: str
    start: float
    end: float
    rate: float | None = None  # the offered rate in it (req/s), where one is set


@dataclass(frozen=True, slots=True)
class Profile:
    """A parsed profile: its kind, the text it came from and its parameters (seconds, req/s)."""

    kind: str
    text: str
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def duration(self) -> float | None:
        """How long the profile runs by itself (None: the run's duration bounds it)."""
        p = self.params
        if self.kind == "step":
            return float(p["hold"]) * len(p["rates"])
        if self.kind == "recovery":
            return float(p["before"] + p["for"] + p["after"])
        return None if p.get("for") is None else float(p["for"])

    @property
    def schedules(self) -> bool:
        """True when the profile sets the arrivals (churn without a rate keeps the run's loop)."""
        return self.kind != "churn" or self.params.get("rate") is not None

    @property
    def keepalive(self) -> bool:
        return self.kind != "churn"

    @property
    def overload(self) -> tuple[float, float] | None:
        """recovery: the overload's window."""
        if self.kind != "recovery":
            return None
        start = float(self.params["before"])
        return start, start + float(self.params["for"])

    def rate_at(self, t: float) -> float:
        """The arrival rate at ``t`` (req/s) of a rate-shaped profile."""
        p = self.params
        if self.kind == "zigzag":
            x = (t / p["period"]) % 1.0
            lo, hi = p["min"], p["max"]
            wave = {
                "sine": (1.0 - math.cos(2.0 * math.pi * x)) / 2.0,
                "saw": x,
                "triangle": 1.0 - abs(2.0 * x - 1.0),
            }[p["shape"]]
            return float(lo + (hi - lo) * wave)
        if self.kind == "step":
            rates = p["rates"]
            return float(rates[min(int(t / p["hold"]), len(rates) - 1)])
        if self.kind == "recovery":
            window = self.overload
            assert window is not None
            return float(p["overload"] if window[0] <= t < window[1] else p["normal"])
        return float(p["rate"])  # microburst's base, churn's rate

    def arrivals(self, seed: int = 0, poisson: bool = False) -> Iterator[float]:
        """Every intended send offset of the whole run (all workers), increasing."""
        rng = random.Random(seed * 7919 + 17)
        end = self.duration
        if self.kind == "burst":
            return _bursts(int(self.params["n"]), float(self.params["every"]), end)
        if self.kind in ("step", "recovery"):  # piecewise constant: exact, no step error
            return _piecewise(
                [(ph.start, ph.end, ph.rate or 0.0) for ph in self.phases(end)], rng, poisson
            )
        base = _warped(self.rate_at, rng, poisson, end)
        if self.kind == "microburst":
            p = self.params
            spikes = _micro(int(p["n"]), float(p["every"]), float(p["width"]), end)
            return heapq.merge(base, spikes)
        return base

    def phases(self, duration: float | None) -> list[Phase]:
        """The profile's phases over a run of ``duration`` seconds."""
        end = self.duration or duration or 0.0
        p = self.params
        if self.kind == "step":
            h = float(p["hold"])
            return [
                Phase(f"step {i + 1} ({r:g}/s)", i * h, (i + 1) * h, float(r))
                for i, r in enumerate(p["rates"])
            ]
        if self.kind == "recovery":
            a, b = self.overload or (0.0, 0.0)
            return [
                Phase("before", 0.0, a, float(p["normal"])),
                Phase("overload", a, b, float(p["overload"])),
                Phase("after", b, end, float(p["normal"])),
            ]
        if self.kind in ("burst", "microburst"):
            return _periods(self.kind, float(p["every"]), end, self.kind == "microburst")
        if self.kind == "zigzag":
            half = float(p["period"]) / 2.0
            if p["shape"] == "saw":
                return _periods("ramp", 2.0 * half, end, False)
            n = math.ceil(end / half - 1e-9) if end else 0
            if n > MAX_PHASES:
                return [Phase("zigzag", 0.0, end)]
            names = ("rising", "falling")
            return [
                Phase(f"{names[i % 2]} {i // 2 + 1}", i * half, min(end, (i + 1) * half))
                for i in range(n)
            ]
        return [Phase("churn", 0.0, end, p.get("rate"))]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.kind, "text": self.text, "params": dict(self.params)}


def _warped(
    rate: Callable[[float], float], rng: random.Random, poisson: bool, end: float | None
) -> Iterator[float]:
    """Arrivals where the integral of ``rate`` steps by 1 (fixed) or by Exp(1) gaps (Poisson):
    a midpoint step per arrival, so a gap reads the rate in its middle, not at its start."""
    t = 0.0
    while end is None or t < end:
        yield t
        gap = rng.expovariate(1.0) if poisson else 1.0
        t += gap / rate(t + 0.5 * gap / rate(t))


def _piecewise(
    segments: Sequence[tuple[float, float, float]], rng: random.Random, poisson: bool
) -> Iterator[float]:
    """The same warped grid over constant-rate segments, solved exactly in each."""
    target = 0.0  # the integral of the rate at the next arrival
    done = 0.0  # the integral at the segment's start
    for start, end, rate in segments:
        while True:
            t = start + (target - done) / rate
            if t >= end:
                break
            yield t
            target += rng.expovariate(1.0) if poisson else 1.0
        done += (end - start) * rate


def _bursts(n: int, every: float, end: float | None) -> Iterator[float]:
    for k in count():
        at = k * every
        if end is not None and at >= end:
            return
        for _ in range(n):
            yield at


def _micro(n: int, every: float, width: float, end: float | None) -> Iterator[float]:
    """N sends spread evenly over ``width`` at ``every``, ``2 * every`` ... (none at 0: the base
    rate shows alone first)."""
    for k in count(1):
        at = k * every
        if end is not None and at >= end:
            return
        for j in range(n):
            yield at + j * width / n


def _periods(name: str, every: float, end: float, base_first: bool) -> list[Phase]:
    n = math.ceil(end / every - 1e-9) if end else 0
    if n > MAX_PHASES:
        return [Phase(name, 0.0, end)]
    out = []
    for k in range(n):
        label = "base" if base_first and k == 0 else f"{name} {k + (0 if base_first else 1)}"
        out.append(Phase(label, k * every, min(end, (k + 1) * every)))
    return out


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
    """``NAME[:PARAMS]`` -> a :class:`Profile`; a :class:`UsageError` names what is wrong."""
    raw = str(text).strip()
    kind, _, rest = raw.partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise UsageError(
            f"profile {raw!r}: unknown profile {kind!r}{did_you_mean(kind, KINDS)}; "
            f"one of {', '.join(KINDS)}"
        )
    if kind == "step":
        return Profile(kind, raw, _parse_step(raw, rest))
    required, optional = _KEYS[kind]
    params: dict[str, Any] = {}
    for part in (p.strip() for p in rest.split(",") if p.strip()):
        key, eq, value = part.partition("=")
        key = key.strip().lower()
        if key not in required + optional:
            keys = required + optional
            raise UsageError(
                f"profile {raw!r}: unknown key {key!r}{did_you_mean(key, keys)}"
                + (f"; keys: {', '.join(keys)}" if keys else f"; {kind} takes no keys")
            )
        if not eq or not value.strip():
            raise UsageError(f"profile {raw!r}: {key} needs a value ({key}=...)")
        params[key] = _value(raw, key, value.strip())
    missing = [k for k in required if k not in params]
    if missing:
        raise UsageError(f"profile {raw!r}: {kind} needs {', '.join(k + '=' for k in missing)}")
    return Profile(kind, raw, _defaults(raw, kind, params))


def _value(raw: str, key: str, value: str) -> Any:
    try:
        if key in _RATES:
            return parse_rate(value)
        if key in _TIMES:
            return parse_duration(value)
    except UsageError as exc:
        raise UsageError(f"profile {raw!r}: {key}: {exc}") from None
    if key == "n":
        if not value.isdigit() or int(value) < 1:
            raise UsageError(f"profile {raw!r}: n {value!r}: a whole number >= 1")
        return int(value)
    if key == "shape":
        if value not in SHAPES:
            raise UsageError(
                f"profile {raw!r}: shape {value!r}{did_you_mean(value, SHAPES)}; one of "
                + ", ".join(SHAPES)
            )
        return value
    # within: a share of the pre-overload p95, written as a percentage
    if not value.endswith("%"):
        raise UsageError(f"profile {raw!r}: within {value!r}: a percentage, e.g. within=20%")
    try:
        share = float(value[:-1]) / 100.0
    except ValueError:
        raise UsageError(f"profile {raw!r}: within {value!r}: a percentage, e.g. 20%") from None
    if not (share >= 0 and math.isfinite(share)):
        raise UsageError(f"profile {raw!r}: within {value!r}: must be 0% or more")
    return share


def _defaults(raw: str, kind: str, p: dict[str, Any]) -> dict[str, Any]:
    if kind == "zigzag":
        if not p["max"] > p["min"]:
            raise UsageError(f"profile {raw!r}: max must be above min")
        p.setdefault("shape", "sine")
    if kind == "microburst":
        p.setdefault("width", 0.05)
        if not p["width"] < p["every"]:
            raise UsageError(f"profile {raw!r}: width must be shorter than every")
    if kind == "recovery":
        if not p["overload"] > p["normal"]:
            raise UsageError(f"profile {raw!r}: overload must be above normal")
        p.setdefault("before", p["for"])
        p.setdefault("after", 2.0 * p["for"])
        p.setdefault("within", DEFAULT_WITHIN)
    return p


def _parse_step(raw: str, rest: str) -> dict[str, Any]:
    rates_text, at, hold = rest.partition("@")
    if not at or not rates_text.strip():
        raise UsageError(f"profile {raw!r}: write step:R1,R2,...@HOLD, e.g. step:2,8,16,8,2@10s")
    try:
        rates = [parse_rate(r.strip()) for r in rates_text.split(",") if r.strip()]
        held = parse_duration(hold.strip())
    except UsageError as exc:
        raise UsageError(f"profile {raw!r}: {exc}") from None
    return {"rates": rates, "hold": held}


# ------------------------------------------------------------------ the summary section


@dataclass(frozen=True, slots=True)
class _SliceView:
    start: float  # seconds from the run's first send
    end: float
    count: int
    errors: int
    hist: Mapping[str, Histogram]


def _slices(scan: Any) -> list[_SliceView]:
    """The scan's slices (analysis/steady.py's ``Scan``) on the profile's time axis."""
    if not scan.slices or scan.first_sent is None:
        return []
    t0, w = float(scan.first_sent), float(scan.slice_s)
    return [
        _SliceView(max(0.0, i * w - t0), (i + 1) * w - t0, sl.count, sl.errors, sl.hist)
        for i, sl in sorted(scan.slices.items())
    ]


def _pcts(hist: Histogram) -> dict[str, float | None]:
    d = hist.summary()
    return {k: d.get(k) for k in ("p50", "p95", "p99")}


def _phase_row(ph: Phase, views: Sequence[_SliceView]) -> dict[str, Any]:
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


def recovery_of(profile: Profile, views: Sequence[_SliceView], end: float) -> dict[str, Any]:
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


def _churn(timings: Mapping[str, Any] | None) -> dict[str, Any]:
    """churn: what setting up a connection cost, from the TTFT decomposition (analysis/timings.py)."""
    t = timings or {}
    ph = t.get("phases_ms") or {}
    conns = t.get("connections") or {}
    setup = {k: ph[k] for k in ("connect", "tls") if k in ph}
    mean_setup = sum(float(v.get("mean") or 0.0) for v in setup.values())
    parts = [float((ph.get(k) or {}).get("mean") or 0.0) for k in ("send", "wait_headers")]
    parts += [
        float((ph.get(k) or {}).get("mean") or 0.0) for k in ("headers_to_body", "body_to_token")
    ]
    ttft_mean = sum(parts)
    return {
        "connections": {"new": conns.get("new", 0), "reused": conns.get("reused", 0)},
        "setup_ms": setup,
        "setup_mean_ms": round(mean_setup, 3),
        # The set-up as a share of what the request waited for its first token, set-up included.
        "setup_share": round(mean_setup / (mean_setup + ttft_mean), 4)
        if mean_setup + ttft_mean > 0
        else None,
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
    if profile.kind == "recovery":
        out["recovery"] = recovery_of(profile, views, end)
    if profile.kind == "churn":
        out["churn"] = _churn(timings)
    return out


# ------------------------------------------------------------------ SLOs


def check_slos(slos: Sequence[SLO], profile: Profile | None) -> None:
    """Before any traffic: an SLO a profile measures needs that profile."""
    for slo in slos:
        if slo.profile and (profile is None or profile.kind != "recovery"):
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
