"""Run statistics from per-request records: HDR percentiles, throughput, goodput, lag.

Percentiles come from an HDR histogram (``hdrhistogram``) at microsecond resolution with three
significant digits, never from Locust's rounded buckets. An HDR percentile is the recorded value
at that rank ("nearest rank", like ``numpy.percentile(method="inverted_cdf")``) reported as the
highest value equivalent to it in the histogram, i.e. within 0.1 % of the exact value.

Coordinated omission: every latency is also reported from the *intended* send time
(``ttft_from_intended``, ``e2e_from_intended``). In an open-loop run a generator or a server that
falls behind shows up there even when the latencies from the actual send look fine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from hdrh.histogram import HdrHistogram

from servecheck.records.record import RATE_LIMITED

_hdrfast: Any
try:  # the optional C prepare (servecheck/analysis/_hdrfast.c; built by `make venv`)
    from servecheck.analysis import _hdrfast
except ImportError:  # pragma: no cover - a pure-Python install
    _hdrfast = None

PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p50", 50.0),
    ("p90", 90.0),
    ("p95", 95.0),
    ("p99", 99.0),
    ("p99.9", 99.9),
)
_LOWEST_US = 1
_HIGHEST_US = 3600 * 1_000_000  # one hour
_SIG = 3
LATENCY_METRICS = ("ttft", "itl", "tpot", "e2e", "ttft_from_intended", "e2e_from_intended", "lag")
# Reasoning phases (docs/metrics.md): first reasoning token, first answer token, ITL per phase.
PHASE_METRICS = ("ttfr", "ttfa", "itl_reasoning", "itl_answer")


@dataclass(slots=True)
class Distribution:
    """Summary of one latency metric, in milliseconds. Empty when ``count`` is 0."""

    count: int = 0
    min: float | None = None
    mean: float | None = None
    max: float | None = None
    percentiles: dict[str, float] = field(default_factory=dict)

    def get(self, stat: str) -> float | None:
        """``p50`` ... ``p99.9``, ``mean``, ``min`` or ``max`` in ms (None when empty)."""
        if stat in ("mean", "min", "max"):
            return getattr(self, stat)
        return self.percentiles.get(stat)

    def as_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "min": self.min,
            "mean": self.mean,
            **self.percentiles,
            "max": self.max,
        }


class _PyCore:
    """A histogram's counts and totals in Python: the reference for ``_hdrfast.Hist``.

    A core holds the counts and does what touches them bucket by bucket (recording, merging,
    subtracting, copying, the buckets in order); :class:`_Ops` does the rest once, over
    :meth:`items`, :meth:`buckets` and :meth:`totals`, for either core."""

    __slots__ = ("_b", "clipped", "_sum_us", "_n", "_min", "_max")

    def __init__(self) -> None:
        self._b: dict[int, int] = {}
        self.clipped = 0
        self._sum_us = 0
        self._n = 0
        self._min = _HIGHEST_US + 1
        self._max = 0

    def record(self, seconds: float) -> None:
        us = int(seconds * 1e6 + 0.5)  # as prepare() rounds
        if us < _LOWEST_US:
            us = _LOWEST_US  # zero / negative (clock granularity) counts as 1 us
        elif us > _HIGHEST_US:
            us = _HIGHEST_US
            self.clipped += 1
        self._sum_us += us
        self._n += 1
        if us < self._min:
            self._min = us
        if us > self._max:
            self._max = us
        shift = (us | 2047).bit_length() - 11
        key = (shift << 11) | (us >> shift)
        b = self._b
        b[key] = b.get(key, 0) + 1

    def record_prepared(self, p: Prepared) -> None:
        """Add values :func:`prepare` turned into bucket keys once (a record's ITLs go into
        several histograms: the whole run's, its slice's, the answer phase's)."""
        keys, total, lo, hi, clipped = p
        if not keys:
            return
        b = self._b
        get = b.get
        for k in keys:
            b[k] = get(k, 0) + 1
        self._n += len(keys)
        self._sum_us += total
        self.clipped += clipped
        if lo < self._min:
            self._min = lo
        if hi > self._max:
            self._max = hi

    @property
    def count(self) -> int:
        return self._n

    def buckets(self) -> dict[int, int]:
        """The counts by bucket key (a copy: the caller may change it)."""
        return dict(self._b)

    def load(self, buckets: dict[int, int], sum_us: int, clipped: int, lo: int, hi: int) -> None:
        """Replace the whole state; the count is the counts' sum (empty buckets are dropped)."""
        self._b = {int(k): int(c) for k, c in buckets.items() if c}
        self._n = sum(self._b.values())
        self._sum_us, self.clipped, self._min, self._max = sum_us, clipped, lo, hi

    def totals(self) -> tuple[int, int, int, int, int]:
        """(count, sum in us, clipped, lowest us, highest us)."""
        return self._n, self._sum_us, self.clipped, self._min, self._max

    def items(self) -> tuple[list[int], list[int]]:
        """(keys, counts): the buckets in key order."""
        keys = sorted(self._b)
        return keys, [self._b[k] for k in keys]

    def add(self, other: _PyCore) -> None:
        """Merge ``other`` into this one (the buckets add exactly: per-slice ones merge)."""
        b = self._b
        for k, c in other._b.items():
            b[k] = b.get(k, 0) + c
        self._sum_us += other._sum_us
        self._n += other._n
        self.clipped += other.clipped
        self._min = min(self._min, other._min)
        self._max = max(self._max, other._max)

    def copy(self) -> Self:
        h = type(self)()
        h._b, h._sum_us, h._n = dict(self._b), self._sum_us, self._n
        h.clipped, h._min, h._max = self.clipped, self._min, self._max
        return h

    def subtract(self, other: _PyCore) -> None:
        """Take ``other`` (values that were also added here) out of this one; min and max are
        then the buckets' (which is all :meth:`summary` reports of them anyway)."""
        b = self._b
        for k, c in other._b.items():
            left = b.get(k, 0) - c
            if left > 0:
                b[k] = left
            else:
                b.pop(k, None)
        self._n -= other._n
        self._sum_us -= other._sum_us
        self.clipped -= other.clipped
        self._min = _lowest(min(b)) if b else _HIGHEST_US + 1
        self._max = _lowest(max(b)) if b else 0


class _Ops:
    """What a histogram computes from its core's ``items`` / ``buckets`` / ``totals`` / ``load``
    (state, percentiles, the HDR encoding), written once for both cores (see
    :class:`_PyHistogram`, the reference, and ``_hdrfast.Hist``)."""

    __slots__ = ()

    # What a core gives (it comes first in the bases; typed here for mypy).
    clipped: int

    @property
    def count(self) -> int:
        raise NotImplementedError

    def record(self, seconds: float) -> None:
        raise NotImplementedError

    def record_prepared(self, p: Prepared) -> None:
        raise NotImplementedError

    def buckets(self) -> dict[int, int]:
        raise NotImplementedError

    def load(self, buckets: dict[int, int], sum_us: int, clipped: int, lo: int, hi: int) -> None:
        raise NotImplementedError

    def totals(self) -> tuple[int, int, int, int, int]:
        raise NotImplementedError

    def record_many(self, values: Iterable[float | None]) -> None:
        self.record_prepared(prepare(values))

    def items(self) -> tuple[list[int], list[int]]:
        raise NotImplementedError

    def add(self, other: Any) -> None:
        """Merge ``other`` (a histogram of the same core) into this one."""
        raise NotImplementedError

    def copy(self) -> Self:
        raise NotImplementedError

    def subtract(self, other: Any) -> None:
        """Take ``other`` (values that were also added here) out of this one."""
        raise NotImplementedError

    def state(self) -> list[Any]:
        """A compact, JSON-able form for the run's aggregate files (see :meth:`from_state`)."""
        keys, counts = self.items()
        _n, total, clipped, lo, hi = self.totals()
        return [keys, counts, total, clipped, lo, hi]

    @classmethod
    def from_state(cls, st: list[Any]) -> Self:
        h = cls()
        keys, counts, total, clipped, lo, hi = st
        h.load(dict(zip(map(int, keys), map(int, counts), strict=True)), total, clipped, lo, hi)
        return h

    def encode(self) -> str:
        """The histogram in HDR's portable base64 encoding (what a worker sends its master)."""
        h = HdrHistogram(_LOWEST_US, _HIGHEST_US, _SIG)
        b = self.buckets()
        if b:
            # hdrh's counts index of a bucket is (shift * 1024 + sub-bucket): filled directly, as
            # record_value(lowest, count) would (a slice's histograms are encoded per summary;
            # hdrh's pure-Python record_value per bucket was most of a 10M-request summary).
            counts = h.counts
            for key, c in b.items():
                counts[(key >> 11) * 1024 + (key & 2047)] += c
            h.total_count = sum(b.values())
            h.min_value, h.max_value = _lowest(min(b)), _lowest(max(b))
        return h.encode().decode("ascii")

    def summary(self) -> Distribution:
        """Percentiles, min, mean and max in milliseconds."""
        n, total, _clipped, lo, hi = self.totals()
        if n == 0:
            return Distribution()
        return Distribution(
            count=n,
            min=_lowest(_key(lo)) / 1000.0,
            mean=round(total / n / 1000.0, 3),
            max=_highest(_key(hi)) / 1000.0,
            percentiles=self._percentiles(),
        )

    def _percentiles(self) -> dict[str, float]:
        return self.percentiles(PERCENTILES)

    def percentiles(self, wanted_at: Iterable[tuple[str, float]]) -> dict[str, float]:
        """Named percentiles in ms (empty when nothing was recorded), by hdrh's rule: the bucket
        where the count reaches ``int(p/100 * n + 0.5)`` (at least 1), reported as the highest
        value equivalent to it (so the 100th is :meth:`summary`'s max)."""
        n = self.count
        named = list(wanted_at)
        if n == 0:
            return {}
        wanted = sorted((max(1, int(p / 100.0 * n + 0.5)), name) for name, p in named)
        out: dict[str, float] = {}
        seen = 0
        i = 0
        for key, c in zip(*self.items(), strict=True):
            seen += c
            while i < len(wanted) and seen >= wanted[i][0]:
                out[wanted[i][1]] = _highest(key) / 1000.0
                i += 1
            if i == len(wanted):
                break
        return {name: out[name] for name, _ in named}


class _PyHistogram(_PyCore, _Ops):
    """An HDR histogram of durations given in seconds, stored in whole microseconds.

    The buckets are HdrHistogram's (lowest 1 us, three significant digits: 2048 linear
    sub-buckets per power of two), kept sparse: only the buckets that were hit. hdrh's own
    histogram holds every bucket (about 23k counters, 188 KB, from 1 us to an hour), which is
    fine for one whole-run histogram but not for one per metric per time slice per worker, and
    its ``record_value`` and percentile walk are pure Python over that array. Percentiles, min
    and max are hdrh's to the microsecond (``tests/load/test_stats.py`` holds them side by side);
    :meth:`encode` still gives HDR's portable base64 form, through hdrh, for whoever reads it.

    This is the pure-Python histogram, the reference; where ``_hdrfast`` is built,
    :data:`Histogram` is the same class over its C core (``_hdrfast.Hist``: the counts in a C
    table, a value one call; issue 46), with the same results (tests/load/test_hdrfast.py).
    """

    __slots__ = ()


if TYPE_CHECKING:
    Histogram = _PyHistogram
elif _hdrfast is not None and hasattr(_hdrfast, "Hist"):
    # (An _hdrfast built from an older source, without Hist, keeps the Python core.)

    class Histogram(_hdrfast.Hist, _Ops):
        __doc__ = _PyHistogram.__doc__
        __slots__ = ()

else:  # pragma: no cover - a pure-Python install
    Histogram = _PyHistogram


# A list of values as bucket keys: (keys, sum in us, min us, max us, clipped count).
Prepared = tuple[list[int], int, int, int, int]
_EMPTY: Prepared = ([], 0, 0, 0, 0)


def prepare_py(values: Iterable[float | None]) -> Prepared:
    """Seconds -> whole microseconds (at least 1, at most an hour) -> HDR bucket keys, in one
    pass of comprehensions: the per-token cost of the streaming summary. (The reference for
    ``_hdrfast.prepare``, which :data:`prepare` is where the C extension is built.)"""
    us = [int(v * 1e6 + 0.5) for v in values if v is not None and v == v]  # v == v: not NaN
    if not us:
        return _EMPTY
    clipped = 0
    lo, hi = min(us), max(us)
    if lo < _LOWEST_US or hi > _HIGHEST_US:
        clipped = sum(u > _HIGHEST_US for u in us)
        us = [_LOWEST_US if u < _LOWEST_US else _HIGHEST_US if u > _HIGHEST_US else u for u in us]
        lo, hi = min(us), max(us)
    keys = [(s << 11) | (u >> s) for u in us for s in ((u | 2047).bit_length() - 11,)]
    return keys, sum(us), lo, hi, clipped


prepare: Callable[[Iterable[float | None]], Prepared] = prepare_py
if _hdrfast is not None:
    prepare = _hdrfast.prepare


def record_each_py(values: Iterable[float | None], hists: tuple[Histogram, ...]) -> None:
    """``record_prepared(prepare(values))`` on each of ``hists``: one request's ITLs into every
    histogram they go into. (The reference for ``_hdrfast.record_each``, which
    :data:`record_each` is where the C extension is built and the histograms are its own.)"""
    p = prepare(values)
    for h in hists:
        h.record_prepared(p)


record_each: Callable[[Iterable[float | None], tuple[Histogram, ...]], None] = record_each_py
if _hdrfast is not None and hasattr(_hdrfast, "record_each") and Histogram is not _PyHistogram:
    record_each = _hdrfast.record_each


def native_feed() -> Any:
    """``_hdrfast.feed`` (a reservoir's add_many in C), or None: not built, or a ``random`` whose
    ``randrange`` no longer draws as the C loop does (``aggregate.Reservoir``)."""
    import random

    rng = random.Random
    if _hdrfast is None or not hasattr(_hdrfast, "feed"):
        return None
    if getattr(rng, "_randbelow", None) is not getattr(rng, "_randbelow_with_getrandbits", 0):
        return None  # pragma: no cover - a Python whose Random draws another way
    return _hdrfast.feed


def _key(us: int) -> int:
    shift = (us | 2047).bit_length() - 11
    return (shift << 11) | (us >> shift)


def _lowest(key: int) -> int:
    """The lowest microsecond value in a bucket (HDR's lowest equivalent value)."""
    return (key & 2047) << (key >> 11)


def _highest(key: int) -> int:
    """The highest microsecond value in a bucket (HDR's highest equivalent value)."""
    return (((key & 2047) + 1) << (key >> 11)) - 1


def distribution(values: Iterable[float | None]) -> Distribution:
    """HDR summary (ms) of durations given in seconds; None values are skipped."""
    h = Histogram()
    h.record_many(values)
    return h.summary()


@dataclass(slots=True)
class Schedule:
    """What the generator meant to do, for lag and shortfall detection."""

    mode: str = "closed"  # closed | fixed | poisson | gamma | shape | trace | profile
    planned: int | None = None  # requests that should have been sent (open loop), None if unknown
    max_lag_ms: float = 25.0  # lag p99 above this flags the run
    min_sent_ratio: float = 0.98  # sent/planned below this flags the run
    # Token times are the kernel's receive stamps against the send stamp: a late event loop
    # then delays sends and think time, not the latencies (the event-loop lag is a note).
    kernel_clock: bool = False
    cause: str = ""  # why the generator ran late, and the way out (analysis/host.py)
    # The native reader thread's reads, and those taken more than 10 ms after their bytes arrived
    # (load/generator/_rxthread.c): a token still unread when its stream's next one arrives
    # shares that one's time, so a share above MAX_LATE_READS flags the run.
    reads: int = 0
    late_reads: int = 0
    # The native lane's slots (closed loop, load/generator/_lane.c): time they waited for the
    # generator's next request, and time they spent in exchanges. A share held above HELD_NOTE
    # is a note (the latencies stand; the load offered was lower), above MAX_HELD it flags the
    # run: its users sent later than a closed loop would have, so its throughput is the
    # generator's rather than the server's.
    held_s: float = 0.0
    busy_s: float = 0.0


@dataclass(slots=True)
class RunStats:
    """Everything the SLOs and the summary need, computed once from the records."""

    total: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    window_s: float = 0.0
    output_tokens: int = 0
    output_tokens_ok: int = 0  # of successful requests only: what throughput counts
    output_tokens_usage: int = 0
    output_tokens_client: int = 0
    reasoning_tokens: int = 0  # usage's reasoning_tokens where reported, else reasoning chunks
    reasoning_requests: int = 0  # successful requests whose stream carried reasoning
    reasoning_usage_zero: int = (
        0  # of those, usage said 0 reasoning tokens (counted from the stream)
    )
    usage_missing: int = 0
    discrepant: int = 0
    abandoned: int = 0  # hung up by the client on purpose: counted ok, out of E2E and goodput
    rate_limited: int = 0  # shed by the server (429 / 503 + Retry-After): not ok, not failed
    cancelled: int = 0  # cancelled by the client on purpose (--cancel): not ok, not failed
    lost_requests: int = 0  # failed or never sent during the run's outages (analysis/outage.py)
    latency: dict[str, Distribution] = field(default_factory=dict)
    goodput: float | None = None  # share of requests meeting every per-request SLO
    goodput_requests: int | None = None
    schedule: Schedule = field(default_factory=Schedule)
    behind: bool = False
    behind_reasons: list[str] = field(default_factory=list)
    lag_notes: list[str] = field(default_factory=list)  # lateness that did not cost a figure
    loop_lag_ms: Distribution = field(default_factory=Distribution)

    @property
    def error_rate(self) -> float:
        """Failed requests (rate-limited ones excluded) over all requests but the cancelled."""
        judged = self.total - self.cancelled
        return self.failed / judged if judged else 0.0

    @property
    def failed(self) -> int:
        return self.total - self.ok - self.rate_limited - self.cancelled

    @property
    def rate_limited_rate(self) -> float:
        return self.rate_limited / self.total if self.total else 0.0

    @property
    def requests_per_s(self) -> float:
        """Successful requests per second: a failed request is not throughput."""
        return self.ok / self.window_s if self.window_s > 0 else 0.0

    @property
    def attempted_per_s(self) -> float:
        """Every request sent per second, failed ones included (the offered load)."""
        return self.total / self.window_s if self.window_s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Output tokens of successful requests per second."""
        return self.output_tokens_ok / self.window_s if self.window_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The statistics part of summary.json (keys documented in docs/load.md)."""
        return {
            "requests": {
                "total": self.total,
                "ok": self.ok,
                "failed": self.failed,
                "error_rate": round(self.error_rate, 6),
                "rate_limited": self.rate_limited,
                "rate_limited_rate": round(self.rate_limited_rate, 6),
                "errors": dict(sorted(self.errors.items())),
                "abandoned": self.abandoned,
                "cancelled": self.cancelled,
            },
            "window_s": round(self.window_s, 6),
            "throughput": {
                "requests_per_s": round(self.requests_per_s, 4),
                "attempted_per_s": round(self.attempted_per_s, 4),
                "output_tokens_per_s": round(self.tokens_per_s, 3),
            },
            "tokens": {
                "output": self.output_tokens,
                "output_usage": self.output_tokens_usage,
                "output_client": self.output_tokens_client,
                "usage_missing": self.usage_missing,
                "discrepant_requests": self.discrepant,
                "reasoning": self.reasoning_tokens,
                "answer": self.output_tokens - self.reasoning_tokens,
                "reasoning_requests": self.reasoning_requests,
                "reasoning_usage_zero": self.reasoning_usage_zero,
            },
            "latency_ms": {name: d.as_dict() for name, d in self.latency.items()},
            "goodput": None if self.goodput is None else round(self.goodput, 6),
            "goodput_requests": self.goodput_requests,
            "schedule": {
                "mode": self.schedule.mode,
                "planned": self.schedule.planned,
                "sent": self.total,
                "lag_ms": self.latency.get("lag", Distribution()).as_dict(),
                "loop_lag_ms": self.loop_lag_ms.as_dict(),
                "max_lag_ms": self.schedule.max_lag_ms,
                "behind": self.behind,
                "reasons": list(self.behind_reasons),
                "notes": list(self.lag_notes),
            },
        }


# A per-request predicate used for goodput: record -> meets every per-request SLO.
RequestPredicate = Any


def compute_stats(
    records: Iterable[Mapping[str, Any]],
    schedule: Schedule | None = None,
    per_request: RequestPredicate | None = None,
    loop_lag_s: Iterable[float] = (),
) -> RunStats:
    """Compute :class:`RunStats` from record dicts (as read from JSONL), in one pass: an iterator
    over a file is enough, nothing is kept but the histograms.

    ``per_request(record) -> bool`` decides goodput (see :func:`servecheck.analysis.slo.request_predicate`);
    without it goodput is the share of successful requests. ``loop_lag_s`` are the generator's
    event-loop delays sampled by the workers.
    """
    tally = Tally(per_request)
    for r in records:
        tally.add(r)
    return tally.stats(schedule, loop_lag_s)


_COUNTS = (
    "total",
    "ok",
    "rate_limited",
    "abandoned",
    "cancelled",
    "output_tokens",
    "output_tokens_ok",
    "output_tokens_usage",
    "output_tokens_client",
    "reasoning_tokens",
    "reasoning_requests",
    "reasoning_usage_zero",
    "usage_missing",
    "discrepant",
    "good",
)


class Tally:
    """What :class:`RunStats` is made of, one record at a time, and mergeable: the counts, the
    error classes, the first send and last completion, and one :class:`Histogram` per metric.

    A worker keeps one for its whole run and one per steady window (``analysis/aggregate.py``), and
    the master adds theirs up, so a summary costs the same for ten requests or ten million.
    ``per_request`` (goodput's predicate) is the caller's; it is not part of the state.
    """

    __slots__ = ("per_request", "counts", "errors", "first_send", "last_done", "hist")
    # A record without reasoning has answer ITLs = its ITLs: they go into "itl" once, and
    # "itl_answer" is made at the end as itl - itl_of_reasoned + the reasoned ones' answer ITLs.
    _INTERNAL = ("itl_of_reasoned",)

    def __init__(self, per_request: RequestPredicate | None = None) -> None:
        self.per_request = per_request
        self.counts = dict.fromkeys(_COUNTS, 0)
        self.errors: dict[str, int] = {}
        self.first_send: float | None = None
        self.last_done: float | None = None
        names = (*LATENCY_METRICS, *PHASE_METRICS, *self._INTERNAL)
        self.hist = {name: Histogram() for name in names}

    def add(self, r: Mapping[str, Any], itls: Prepared | None = None) -> None:
        """One record; ``itls``: its ITLs already :func:`prepare`d (the aggregate does it once
        for every histogram they go into)."""
        c, hist = self.counts, self.hist
        c["total"] += 1
        err = r.get("error")
        sent = float(r["t_sent"])
        intended = float(r.get("t_intended", sent))
        if self.first_send is None or sent < self.first_send:
            self.first_send = sent
        done = r.get("t_done")
        if done is not None and (self.last_done is None or done > self.last_done):
            self.last_done = done
        hist["lag"].record(max(0.0, sent - intended))
        if r.get("cancelled") and not err:  # its own class: out of every figure but its count
            c["cancelled"] += 1
            c["output_tokens_client"] += int(r.get("output_tokens_client") or 0)
            return
        abandoned = bool(r.get("abandoned"))
        if err == RATE_LIMITED:
            c["rate_limited"] += 1
        elif err:
            self.errors[err] = self.errors.get(err, 0) + 1
        else:
            c["ok"] += 1
            c["abandoned"] += abandoned
            ttft, e2e = r.get("ttft"), r.get("e2e")
            if ttft is not None:
                hist["ttft"].record(ttft)
                hist["ttft_from_intended"].record(ttft + sent - intended)
            if e2e is not None and not abandoned:  # an abandoned stream's end is the client's
                hist["e2e"].record(e2e)
                hist["e2e_from_intended"].record(e2e + sent - intended)
            if r.get("tpot") is not None:
                hist["tpot"].record(r["tpot"])
            if itls is None:
                itls = prepare(r.get("itls") or ())
            hist["itl"].record_prepared(itls)
            self._phases(r, itls)
        self._tokens(r, err)
        if abandoned and not err:
            pass  # neither good nor bad: the client gave up on purpose
        elif self.per_request is None:
            c["good"] += 0 if err else 1
        elif not err and self.per_request(r):
            c["good"] += 1

    def add_plain(self, r: Mapping[str, Any], sent: float) -> None:
        """:meth:`add` of a plain record (``analysis/aggregate.py`` ``Aggregate.add_plain``: no
        error, not cancelled, not abandoned, no reasoning phases), sent at ``sent``, but its ITLs,
        which the caller records with the other histograms they go into (issue 46: the record
        keeper's cost per request)."""
        c, hist = self.counts, self.hist
        c["total"] += 1
        c["ok"] += 1
        intended = float(r.get("t_intended", sent))
        if self.first_send is None or sent < self.first_send:
            self.first_send = sent
        done = r.get("t_done")
        if done is not None and (self.last_done is None or done > self.last_done):
            self.last_done = done
        hist["lag"].record(max(0.0, sent - intended))
        ttft, e2e, tpot = r.get("ttft"), r.get("e2e"), r.get("tpot")
        ttfa = r.get("ttfa", ttft)
        if ttft is not None:
            hist["ttft"].record(ttft)
            hist["ttft_from_intended"].record(ttft + sent - intended)
        if e2e is not None:
            hist["e2e"].record(e2e)
            hist["e2e_from_intended"].record(e2e + sent - intended)
        if tpot is not None:
            hist["tpot"].record(tpot)
        if ttfa is not None:
            hist["ttfa"].record(ttfa)
        usage = r.get("reasoning_tokens")
        if usage is not None:  # _phases with no reasoning chunks counted
            c["reasoning_tokens"] += int(usage)
        self._tokens(r, None)
        if self.per_request is None or self.per_request(r):
            c["good"] += 1

    def _tokens(self, r: Mapping[str, Any], err: Any) -> None:
        c = self.counts
        usage = r.get("output_tokens")
        client = int(r.get("output_tokens_client") or 0)
        c["output_tokens_client"] += client
        if usage is None:
            c["usage_missing"] += 1 if not err and not r.get("abandoned") else 0
            c["output_tokens"] += client
            c["output_tokens_ok"] += 0 if err else client
        else:
            c["output_tokens_usage"] += int(usage)
            c["output_tokens"] += int(usage)
            c["output_tokens_ok"] += 0 if err else int(usage)
            if int(usage) != client:
                c["discrepant"] += 1

    def _phases(self, r: Mapping[str, Any], itls: Prepared) -> None:
        """A successful record's reasoning phases: without reasoning, TTFA is its TTFT (an older
        record without ``ttfa``) and its answer ITLs are all its ITLs."""
        c, hist = self.counts, self.hist
        reasoned = "itls_reasoning" in r or r.get("ttfr") is not None
        ttfa = r.get("ttfa", None if reasoned else r.get("ttft"))
        if ttfa is not None:
            hist["ttfa"].record(ttfa)
        if r.get("ttfr") is not None:
            hist["ttfr"].record(r["ttfr"])
        if reasoned:
            hist["itl_reasoning"].record_many(r.get("itls_reasoning") or ())
            hist["itl_answer"].record_many(r.get("itls_answer") or ())
            hist["itl_of_reasoned"].record_prepared(itls)
        if reasoned:
            c["reasoning_requests"] += 1
        usage = r.get("reasoning_tokens")
        client = int(r.get("reasoning_tokens_client") or 0)
        if usage is not None and not (usage == 0 and client):
            c["reasoning_tokens"] += int(usage)
            return
        # No usage count, or a 0 from a server that streamed reasoning (vLLM 0.32 with an R1-style
        # template): the stream's own count of reasoning chunks is the better number.
        c["reasoning_tokens"] += client
        c["reasoning_usage_zero"] += usage == 0

    def merge(self, other: Tally) -> None:
        for k, v in other.counts.items():
            self.counts[k] += v
        for k, v in other.errors.items():
            self.errors[k] = self.errors.get(k, 0) + v
        if other.first_send is not None:
            mine = self.first_send
            self.first_send = other.first_send if mine is None else min(mine, other.first_send)
        if other.last_done is not None:
            mine = self.last_done
            self.last_done = other.last_done if mine is None else max(mine, other.last_done)
        for name, h in other.hist.items():
            self.hist[name].add(h)

    def minus(self, other: Tally) -> Tally:
        """This tally without ``other``'s records (which were added to both): the steady window
        is the run less what fell outside it. First send and last completion are the caller's."""
        out = Tally(self.per_request)
        out.counts = {k: v - other.counts[k] for k, v in self.counts.items()}
        out.errors = {k: v - other.errors.get(k, 0) for k, v in self.errors.items()}
        out.errors = {k: v for k, v in out.errors.items() if v > 0}
        for name, h in self.hist.items():
            mine = h.copy()
            mine.subtract(other.hist[name])
            out.hist[name] = mine
        return out

    def state(self) -> dict[str, Any]:
        return {
            "counts": self.counts,
            "errors": self.errors,
            "first_send": self.first_send,
            "last_done": self.last_done,
            "hist": {name: h.state() for name, h in self.hist.items() if h.count},
        }

    @classmethod
    def from_state(cls, d: Mapping[str, Any], per_request: RequestPredicate | None = None) -> Tally:
        t = cls(per_request)
        t.counts.update({k: int(v) for k, v in d["counts"].items() if k in t.counts})
        t.errors = {str(k): int(v) for k, v in d["errors"].items()}
        t.first_send, t.last_done = d.get("first_send"), d.get("last_done")
        for name, st in d.get("hist", {}).items():
            if name in t.hist:
                t.hist[name] = Histogram.from_state(st)
        return t

    def stats(self, schedule: Schedule | None = None, loop_lag_s: Iterable[float] = ()) -> RunStats:
        """The :class:`RunStats` of everything added, with the schedule judged."""
        c = self.counts
        st = RunStats(schedule=schedule or Schedule())
        for name in _COUNTS[:-1]:  # all but "good", which becomes goodput below
            setattr(st, name, c[name])
        st.errors = dict(self.errors)
        if self.first_send is not None and self.last_done is not None:
            st.window_s = max(0.0, self.last_done - self.first_send)
        answer = self.hist["itl"].copy()
        answer.subtract(self.hist["itl_of_reasoned"])
        answer.add(self.hist["itl_answer"])
        hists = {**self.hist, "itl_answer": answer}
        st.latency = {n: hists[n].summary() for n in (*LATENCY_METRICS, *PHASE_METRICS)}
        judged = st.total - st.abandoned - st.cancelled
        if judged:
            st.goodput = c["good"] / judged
            st.goodput_requests = c["good"]
        st.loop_lag_ms = distribution(loop_lag_s)
        _judge_schedule(st)
        return st


# Above this share of late reads (taken more than 10 ms after their bytes arrived) the reader
# thread did not keep up. Measured on one core (calibration server, a token every 10 ms, issue 46):
# 256 streams 0 late, 0 first tokens sharing a read; 512: 0.0013 % late, 0.5 % shared (TTFT
# p99 right); 768: 0.053 % late, 3.6 % shared; 1024: 0.18 % late, 11 % shared. A late read is
# rare even when many tokens share reads (the stalls that cause them are short and hit every
# stream at once), so the bar is low.
MAX_LATE_READS = 0.0001
# ... and only where a stream's tokens come close enough for a read 10 ms late to take two of them
# (ITL p50 under this): an engine streaming a token every 50 ms loses nothing to such a stall, and
# a busy machine must not make its run INCONCLUSIVE for it.
MERGING_ITL_MS = 20.0
# The share of its slots' time the lane may leave them waiting for a request to send: above
# HELD_NOTE a note, above MAX_HELD the run is behind.
HELD_NOTE = 0.01
MAX_HELD = 0.05


def _judge_schedule(st: RunStats) -> None:
    """Flag a run whose generator fell behind instead of quietly reporting its numbers, with
    the cause (its own CPU or a busy machine) and the way out."""
    sched = st.schedule
    because = f"; {sched.cause}" if sched.cause else ""
    lag = st.latency.get("lag")
    if (
        sched.mode in ("fixed", "poisson", "gamma", "trace", "profile")
        and lag is not None
        and lag.count
    ):
        p99 = lag.get("p99") or 0.0
        if p99 > sched.max_lag_ms:
            st.behind_reasons.append(
                f"schedule lag p99 {p99:.1f} ms > {sched.max_lag_ms:g} ms: the generator sent "
                f"late{because}"
            )
    if sched.planned:
        ratio = st.total / sched.planned
        if ratio < sched.min_sent_ratio:
            st.behind_reasons.append(
                f"sent {st.total} of {sched.planned} planned requests ({ratio:.1%}): the "
                f"generator fell behind{because}"
            )
    itl = st.latency.get("itl")
    itl_p50 = itl.get("p50") if itl is not None and itl.count else None
    if (
        sched.reads
        and sched.late_reads / sched.reads > MAX_LATE_READS
        and itl_p50 is not None
        and itl_p50 < MERGING_ITL_MS
    ):
        st.behind_reasons.append(
            f"the reader took {sched.late_reads / sched.reads:.3%} of its reads more than 10 ms"
            f" after their bytes arrived (at most {MAX_LATE_READS:.3%}): a token still unread"
            f" when its stream's next one arrives shares that one's time{because}"
        )
    _judge_held(st, sched, because)
    loop = st.loop_lag_ms
    if loop.count and (loop.get("p99") or 0.0) > sched.max_lag_ms:
        late = f"generator event-loop lag p99 {loop.get('p99'):.1f} ms > {sched.max_lag_ms:g} ms"
        if sched.kernel_clock:
            st.lag_notes.append(
                f"{late}{because}; the latencies stand: token times are the kernel's receive "
                f"stamps against the send stamp"
            )
        else:
            st.behind_reasons.append(f"{late}: the latencies include the delay{because}")
    st.behind = bool(st.behind_reasons)


def _judge_held(st: RunStats, sched: Schedule, because: str) -> None:
    """The lane's slots left waiting for a request: a note past :data:`HELD_NOTE`, the run
    behind past :data:`MAX_HELD`."""
    held = sched.held_s / (sched.held_s + sched.busy_s) if sched.held_s > 0 else 0.0
    if held <= HELD_NOTE:
        return
    said = f"the users' slots waited {held:.1%} of their time for the generator's next request"
    if held > MAX_HELD:
        st.behind_reasons.append(
            f"{said} (at most {MAX_HELD:.0%}): the closed loop sent later than its users would "
            f"have, so its throughput is the generator's{because}"
        )
    else:
        st.lag_notes.append(
            f"{said}{because}; the latencies stand, the load offered was a little lower"
        )


def pack_fields(obj: Any, names: Iterable[str]) -> dict[str, Any]:
    """The named fields of an accumulator as JSON: numbers as they are, a :class:`Histogram` (or
    a dict of them) as its state. :func:`unpack_fields` reads it back, :func:`add_fields` merges."""
    out: dict[str, Any] = {}
    for name in names:
        v = getattr(obj, name)
        if isinstance(v, Histogram):
            out[name] = v.state()
        elif isinstance(v, dict) and v and isinstance(next(iter(v.values())), Histogram):
            out[name] = {k: h.state() for k, h in v.items()}
        else:
            out[name] = v
    return out


def unpack_fields(obj: Any, d: Mapping[str, Any], names: Iterable[str]) -> None:
    """Set the named fields from :func:`pack_fields`' form, by the type each field has now."""
    for name in names:
        if name not in d:
            continue
        now, v = getattr(obj, name), d[name]
        if isinstance(now, Histogram):
            setattr(obj, name, Histogram.from_state(v))
        elif isinstance(now, dict) and now and isinstance(next(iter(now.values())), Histogram):
            setattr(obj, name, {k: Histogram.from_state(h) for k, h in v.items()})
        else:
            setattr(obj, name, v)


def add_fields(obj: Any, other: Any, names: Iterable[str]) -> None:
    """Add ``other``'s named fields into ``obj``'s: numbers add, histograms merge, dicts of
    either add key by key."""
    for name in names:
        mine, theirs = getattr(obj, name), getattr(other, name)
        if isinstance(mine, Histogram):
            mine.add(theirs)
        elif isinstance(mine, dict):
            for k, v in theirs.items():
                if isinstance(v, Histogram):
                    mine.setdefault(k, Histogram()).add(v)
                else:
                    mine[k] = mine.get(k, 0) + v
        else:
            setattr(obj, name, mine + theirs)
