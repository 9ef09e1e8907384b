"""What every load profile shares: the parsed profile's base class, its phases, the parameter
grammar (``key=value`` pairs) and the arrival generators the kinds are built from.

A kind is a subclass in its own module of this package, listed once in ``PROFILES``
(``__init__.py``); it overrides only what makes it different (GuideLLM's
``benchmark/profiles/``: one class per profile, a factory that picks it by name).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import Any, ClassVar

from servecheck.analysis.stats import Histogram
from servecheck.errors import UsageError, did_you_mean
from servecheck.load.workload.schedule import parse_duration, parse_rate

MAX_PHASES = 60  # more periods than this: the periodic phases become one
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
class SliceView:
    """One time slice of the run (analysis/steady.py's ``Scan``) on the profile's time axis."""

    start: float  # seconds from the run's first send
    end: float
    count: int
    errors: int
    hist: Mapping[str, Histogram]


@dataclass(frozen=True, slots=True)
class Profile:
    """A parsed profile: the text it came from and its parameters (seconds, req/s); the
    subclass is its kind."""

    text: str
    params: Mapping[str, Any] = field(default_factory=dict)

    kind: ClassVar[str] = ""
    required: ClassVar[tuple[str, ...]] = ()  # the keys it needs
    optional: ClassVar[tuple[str, ...]] = ()
    measures: ClassVar[tuple[str, ...]] = ()  # the SLO metrics its own section measures

    # -- parsing -----------------------------------------------------------------------
    @classmethod
    def parse(cls, raw: str, rest: str) -> Profile:
        """``rest`` (what follows ``NAME:``) as ``key=value`` pairs; a :class:`UsageError`
        names what is wrong."""
        keys = cls.required + cls.optional
        params: dict[str, Any] = {}
        for part in (p.strip() for p in rest.split(",") if p.strip()):
            key, eq, value = part.partition("=")
            key = key.strip().lower()
            if key not in keys:
                raise UsageError(
                    f"profile {raw!r}: unknown key {key!r}{did_you_mean(key, keys)}"
                    + (f"; keys: {', '.join(keys)}" if keys else f"; {cls.kind} takes no keys")
                )
            if not eq or not value.strip():
                raise UsageError(f"profile {raw!r}: {key} needs a value ({key}=...)")
            params[key] = cls.value(raw, key, value.strip())
        missing = [k for k in cls.required if k not in params]
        if missing:
            raise UsageError(
                f"profile {raw!r}: {cls.kind} needs {', '.join(k + '=' for k in missing)}"
            )
        return cls(raw, cls.settle(raw, params))

    @classmethod
    def value(cls, raw: str, key: str, value: str) -> Any:
        """One parameter's value (a kind with keys of its own overrides this)."""
        return common_value(raw, key, value)

    @classmethod
    def settle(cls, raw: str, params: dict[str, Any]) -> dict[str, Any]:
        """The parameters checked together and their defaults filled in."""
        return params

    # -- the schedule --------------------------------------------------------------------
    @property
    def duration(self) -> float | None:
        """How long the profile runs by itself (None: the run's duration bounds it)."""
        end = self.params.get("for")
        return None if end is None else float(end)

    @property
    def schedules(self) -> bool:
        """True when the profile sets the arrivals (else the run's own loop sends)."""
        return True

    @property
    def keepalive(self) -> bool:
        return True

    @property
    def overload(self) -> tuple[float, float] | None:
        """The overload's window, for a profile that has one."""
        return None

    def rate_at(self, t: float) -> float:
        """The arrival rate at ``t`` (req/s) of a rate-shaped profile."""
        return float(self.params["rate"])

    def arrivals(self, seed: int = 0, poisson: bool = False) -> Iterator[float]:
        """Every intended send offset of the whole run (all workers), increasing."""
        return warped(self.rate_at, rng_for(seed), poisson, self.duration)

    def phases(self, duration: float | None) -> list[Phase]:
        """The profile's phases over a run of ``duration`` seconds."""
        raise NotImplementedError

    # -- the summary ---------------------------------------------------------------------
    def figures(
        self, views: Sequence[SliceView], end: float, timings: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """The kind's own sections of summary.json's ``profile`` (none by default)."""
        return {}

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.kind, "text": self.text, "params": dict(self.params)}


def common_value(raw: str, key: str, value: str) -> Any:
    """A value of the keys profiles share: rates, times and ``n``."""
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
    raise UsageError(f"profile {raw!r}: {key} {value!r}: no grammar for this key")


def rng_for(seed: int) -> random.Random:
    """The profile's random source for a seed (the same series on every worker)."""
    return random.Random(seed * 7919 + 17)


def warped(
    rate: Callable[[float], float], rng: random.Random, poisson: bool, end: float | None
) -> Iterator[float]:
    """Arrivals where the integral of ``rate`` steps by 1 (fixed) or by Exp(1) gaps (Poisson):
    a midpoint step per arrival, so a gap reads the rate in its middle, not at its start."""
    t = 0.0
    while end is None or t < end:
        yield t
        gap = rng.expovariate(1.0) if poisson else 1.0
        t += gap / rate(t + 0.5 * gap / rate(t))


def piecewise(
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


def piecewise_arrivals(profile: Profile, seed: int, poisson: bool) -> Iterator[float]:
    """A piecewise-constant profile's arrivals from its phases' rates: exact, no step error."""
    segments = [(ph.start, ph.end, ph.rate or 0.0) for ph in profile.phases(profile.duration)]
    return piecewise(segments, rng_for(seed), poisson)


def periods(name: str, every: float, end: float, base_first: bool) -> list[Phase]:
    """One phase per period of ``every`` seconds (one phase when there are too many)."""
    n = math.ceil(end / every - 1e-9) if end else 0
    if n > MAX_PHASES:
        return [Phase(name, 0.0, end)]
    out = []
    for k in range(n):
        label = "base" if base_first and k == 0 else f"{name} {k + (0 if base_first else 1)}"
        out.append(Phase(label, k * every, min(end, (k + 1) * every)))
    return out


def every_period(start: int, every: float, end: float | None) -> Iterator[float]:
    """``start * every``, ``(start + 1) * every`` ... up to ``end``."""
    for k in count(start):
        at = k * every
        if end is not None and at >= end:
            return
        yield at
