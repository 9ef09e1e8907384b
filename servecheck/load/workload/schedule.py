"""Arrival schedules and load shapes (pure: no locust, no gevent).

* Closed loop: N users, each sends its next request as soon as the previous one ends.
* Open loop: requests are *scheduled* at absolute offsets from the start, ``i / rate`` (fixed)
  or cumulative exponential gaps (Poisson, seeded), whether or not earlier requests have
  finished. The sender sleeps until ``start + offset(i)``; it never sleeps "a fresh interval
  after each send" (that drifts by the send cost every time). The intended time is recorded
  beside the actual one, so lag is measured, not hidden.

Distributed runs split an open-loop schedule between W workers: worker k of a fixed-rate
schedule takes slots ``k, k+W, k+2W ...``; Poisson workers each run at ``rate / W`` with their
own seed (the superposition of independent Poisson processes is Poisson at the summed rate).

Shapes (ramps, steps, spikes) are lists of :class:`Stage`; the locust adapter wraps them in a
``LoadTestShape``.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from servecheck.errors import UsageError

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:/\s*(s|sec|second|m|min|minute|h|hour))?\s*$")


def parse_duration(text: str | float | int) -> float:
    """``90``, ``90s``, ``5m``, ``1h30m``, ``250ms`` -> seconds (float)."""
    if isinstance(text, int | float):
        value = float(text)
    else:
        s = text.strip().lower()
        if re.fullmatch(r"\d+(?:\.\d+)?", s):
            value = float(s)
        else:
            pos, value = 0, 0.0
            for m in _DURATION_PART.finditer(s):
                if m.start() != pos:
                    break
                n, unit = float(m.group(1)), m.group(2)
                value += n * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]
                pos = m.end()
            if pos != len(s) or not s:
                raise UsageError(
                    f"duration {text!r}: write e.g. 30s, 5m, 1h30m or a number of seconds"
                )
    if value <= 0 or math.isinf(value):
        raise UsageError(f"duration {text!r}: must be positive")
    return value


def parse_rate(text: str | float | int) -> float:
    """``5``, ``5/s``, ``300/min``, ``2.5/s`` -> requests per second."""
    if isinstance(text, int | float):
        value = float(text)
    else:
        m = _RATE.match(text)
        if not m:
            raise UsageError(
                f"rate {text!r}: write requests per second, e.g. 5/s, 0.5/s or 300/min"
            )
        per = {
            None: 1.0,
            "s": 1.0,
            "sec": 1.0,
            "second": 1.0,
            "m": 60.0,
            "min": 60.0,
            "minute": 60.0,
            "h": 3600.0,
            "hour": 3600.0,
        }[m.group(2)]
        value = float(m.group(1)) / per
    if value <= 0:
        raise UsageError(f"rate {text!r}: must be positive")
    return value


@dataclass(slots=True)
class FixedRate:
    """Slots at ``(i * stride + phase) / rate``: worker ``phase`` of ``stride`` workers."""

    rate: float
    phase: int = 0
    stride: int = 1

    mode = "fixed"

    def offsets(self) -> Iterator[float]:
        """Intended send offsets (seconds from start), forever, increasing."""
        i = 0
        while True:
            yield (i * self.stride + self.phase) / self.rate
            i += 1

    def planned(self, duration: float) -> int:
        """How many slots fall in ``[0, duration)``."""
        total = math.ceil(duration * self.rate - 1e-9)
        return max(0, (total - self.phase + self.stride - 1) // self.stride)


def _count_before(offsets: Iterator[float], duration: float) -> int:
    """How many of an increasing, endless series of offsets fall in ``[0, duration)``."""
    n = 0
    for t in offsets:
        if t >= duration:
            return n
        n += 1
    return n  # pragma: no cover - the series is endless


@dataclass(slots=True)
class Poisson:
    """Exponential gaps with mean ``1/rate``, seeded: the same seed gives the same offsets."""

    rate: float
    seed: int = 0

    mode = "poisson"

    def offsets(self) -> Iterator[float]:
        rng = random.Random(self.seed)
        t = 0.0
        while True:
            t += rng.expovariate(self.rate)
            yield t

    def planned(self, duration: float) -> int:
        return _count_before(self.offsets(), duration)


@dataclass(slots=True)
class Gamma:
    """Gamma-distributed gaps with mean ``1/rate`` and shape ``burstiness``, seeded, as
    ``vllm bench serve --burstiness`` draws them: 1 is Poisson, below 1 burstier (the gaps'
    coefficient of variation is ``1/sqrt(burstiness)``), above 1 more even."""

    rate: float
    burstiness: float = 1.0
    seed: int = 0

    mode = "gamma"

    def offsets(self) -> Iterator[float]:
        rng = random.Random(self.seed)
        scale = 1.0 / (self.rate * self.burstiness)
        t = 0.0
        while True:
            t += rng.gammavariate(self.burstiness, scale)
            yield t

    def planned(self, duration: float) -> int:
        return _count_before(self.offsets(), duration)


# The open-loop modes whose arrivals come from a rate (a trace brings its own times).
RATE_MODES = ("fixed", "poisson", "gamma")


def parse_burstiness(text: str | float | int) -> float:
    """``--burstiness B``: the gamma shape, a positive number."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UsageError(f"burstiness {text!r}: a positive number (1 is Poisson)") from None
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(f"burstiness {text!r}: must be a positive number (1 is Poisson)")
    return value


def for_worker(
    rate: float,
    poisson: bool,
    seed: int,
    index: int,
    workers: int,
    burstiness: float | None = None,
) -> FixedRate | Poisson | Gamma:
    """This worker's share of an open-loop schedule of ``rate`` req/s over ``workers`` workers.
    With ``burstiness`` each worker draws gamma gaps at its share of the rate (with several
    workers the merged arrivals are their superposition, as with Poisson)."""
    if workers < 1 or not 0 <= index < workers:
        raise ValueError(f"worker index {index} out of range for {workers} workers")
    if burstiness is not None:
        return Gamma(rate / workers, burstiness, seed=seed * 1009 + index)
    if poisson:
        return Poisson(rate / workers, seed=seed * 1009 + index)
    return FixedRate(rate, phase=index, stride=workers)


def split_count(total: int, index: int, workers: int) -> int:
    """Worker ``index``'s share of a request cap (shares differ by at most one)."""
    return total // workers + (1 if index < total % workers else 0)


# ---------------------------------------------------------------- shapes


@dataclass(slots=True)
class Stage:
    """Hold ``users`` (reached at ``spawn_rate`` users/s) until ``end`` seconds into the run."""

    end: float
    users: int
    spawn_rate: float


@dataclass(slots=True)
class StageShape:
    """A piecewise-constant user count over time; ``tick`` is what a LoadTestShape returns."""

    stages: list[Stage] = field(default_factory=list)

    @property
    def duration(self) -> float:
        return self.stages[-1].end if self.stages else 0.0

    @property
    def peak_users(self) -> int:
        return max((s.users for s in self.stages), default=0)

    def tick(self, run_time: float) -> tuple[int, float] | None:
        for stage in self.stages:
            if run_time < stage.end:
                return stage.users, stage.spawn_rate
        return None


def ramp(start: int, end: int, over: float, steps: int = 10, hold: float = 0.0) -> StageShape:
    """Go from ``start`` to ``end`` users in ``steps`` equal steps over ``over`` s, then hold."""
    if steps < 1 or over <= 0:
        raise UsageError("ramp: steps must be >= 1 and the ramp time positive")
    stages = []
    for k in range(1, steps + 1):
        users = round(start + (end - start) * k / steps)
        stages.append(
            Stage(
                end=over * k / steps,
                users=max(1, users),
                spawn_rate=max(1.0, abs(end - start) / over * 4),
            )
        )
    if hold > 0:
        stages.append(Stage(end=over + hold, users=end, spawn_rate=stages[-1].spawn_rate))
    return StageShape(stages)


def steps(start: int, step: int, every: float, count: int) -> StageShape:
    """``count`` plateaus of ``every`` seconds: start, start+step, ... (a capacity staircase)."""
    if count < 1 or every <= 0:
        raise UsageError("steps: count must be >= 1 and every positive")
    return StageShape(
        [
            Stage(
                end=every * (k + 1),
                users=start + step * k,
                spawn_rate=float(min(100, max(1, abs(step)) * 10)),
            )
            for k in range(count)
        ]
    )


def spike(base: int, peak: int, at: float, length: float, total: float) -> StageShape:
    """``base`` users, ``peak`` users from ``at`` for ``length`` seconds, then ``base`` again."""
    if not 0 <= at < at + length <= total:
        raise UsageError("spike: need 0 <= at < at+length <= total")
    fast = float(min(100, max(peak, 1) * 4))
    stages = [Stage(end=at, users=base, spawn_rate=fast)] if at > 0 else []
    stages += [
        Stage(end=at + length, users=peak, spawn_rate=fast),
        Stage(end=total, users=base, spawn_rate=fast),
    ]
    return StageShape([s for s in stages if s.end > 0])


def _ramp_from(args: dict[str, Any]) -> StageShape:
    return ramp(
        int(args["start"]),
        int(args["end"]),
        parse_duration(args["over"]),
        int(args.get("steps", 10)),
        parse_duration(args["hold"]) if args.get("hold") else 0.0,
    )


def _steps_from(args: dict[str, Any]) -> StageShape:
    return steps(
        int(args["start"]), int(args["step"]), parse_duration(args["every"]), int(args["count"])
    )


def _spike_from(args: dict[str, Any]) -> StageShape:
    return spike(
        int(args["base"]),
        int(args["peak"]),
        parse_duration(args["at"]),
        parse_duration(args["length"]),
        parse_duration(args["total"]),
    )


def _stages_from(args: dict[str, Any]) -> StageShape:
    raw = args.get("stages")
    if not isinstance(raw, Sequence):
        raise UsageError("shape stages: give a list of {end, users, spawn_rate}")
    return StageShape(
        [
            Stage(parse_duration(s["end"]), int(s["users"]), float(s.get("spawn_rate", 10)))
            for s in raw
        ]
    )


# A shape's kind -> its builder from the mapping's other keys: a new shape is one function here.
SHAPE_BUILDERS: dict[str, Callable[[dict[str, Any]], StageShape]] = {
    "ramp": _ramp_from,
    "steps": _steps_from,
    "spike": _spike_from,
    "stages": _stages_from,
}


def shape_from_spec(spec: dict[str, Any]) -> StageShape:
    """Build a shape from a YAML/JSON mapping: ``{kind: ramp|steps|spike|stages, ...}``."""
    kind = str(spec.get("kind", ""))
    args = {k: v for k, v in spec.items() if k != "kind"}
    build = SHAPE_BUILDERS.get(kind)
    if build is None:
        raise UsageError(f"shape kind {kind!r}: use ramp, steps, spike or stages")
    try:
        return build(args)
    except KeyError as exc:
        raise UsageError(f"shape {kind!r}: missing key {exc.args[0]!r}") from None
