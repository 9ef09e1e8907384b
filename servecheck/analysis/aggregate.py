"""A run's streaming summary: what each worker keeps as it records, and the master adds up.

Why: the summary used to be made after the load, from every record, in several passes. Its cost
grew with the run (about 0.6 ms a request, half a minute for a 20 s run at 1024 streams), and so
did the disk (about 1 KB a request, twice). Now every Locust process feeds each finished request
into one :class:`Aggregate` as it records it, and writes the aggregate's state at the end
(``aggregate-<worker>.json``; a distributed worker sends it to the master in its done message).
The master merges them and the summary is made from the merged aggregate: its cost is the
number of slices and histogram buckets, not the number of requests. Records on disk are then
optional (``--records``).

An aggregate holds:

* the whole run's :class:`~servecheck.analysis.stats.Tally` (every statistic of ``summary.json``);
* the time slices (:class:`~servecheck.analysis.steady.Scan`, aligned to the epoch so that the
  workers' slices add up slice by slice);
* the steady window's own tally. A request is in the window when it was sent after the ramp and
  finished before the stop (``analysis/steady.py``). A worker judges that as each request finishes,
  against its own clock of the run's start (its first send; the workers' differ by the spread of
  their start times, milliseconds) and its own share of the users and of a warm-up given as a
  request count. Whether the window applies at all (a run too short for one, a shape or a trace)
  is decided by the master on the merged slices, as before;
* the TTFT decomposition tally (``analysis/timings.py``), the client counts the engine's counters
  are reconciled with (``analysis/server_truth.py``), the warm-up's own figures;
* seeded reservoir samples of TTFT, ITL, E2E and TPOT, of a stated size, for the statistics that
  need values rather than a histogram (compare's tests, capacity's intervals).

Fed in send order (the master's fallback from a records file, a test), it is exact: the same
window, warm-up and figures the record passes gave.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from servecheck.analysis import stats
from servecheck.analysis.outage import OutageLog
from servecheck.analysis.server_truth import ClientCounts
from servecheck.analysis.slo import parse_slos, request_predicate
from servecheck.analysis.stats import (
    Histogram,
    RunStats,
    Schedule,
    Tally,
    prepare,
    record_each,
)
from servecheck.analysis.steady import (
    DEFAULT_SLICE_S,
    Measured,
    Scan,
    SteadyWindow,
    parse_steady_window,
    window_bounds,
)
from servecheck.analysis.timings import TimingsTally
from servecheck.analysis.warmup import Warmup
from servecheck.errors import SpecError
from servecheck.records.record import rounded6, rounded6_json

__all__ = [
    "AGGREGATE_GLOB",
    "SAMPLE_N",
    "SAMPLED",
    "SAMPLES_NAME",
    "Aggregate",
    "Reservoir",
    "Rule",
    "aggregate_of",
    "aggregate_path",
    "is_plain",
    "parse_records",
    "resolve_records",
    "sample_size",
    "steady_of",
    "read_aggregates",
]

AGGREGATE_GLOB = "aggregate-*.json"
SAMPLE_N = 10_000  # values kept per sampled metric (a reservoir: uniform over the run)
SAMPLED = ("ttft", "itl", "e2e", "tpot", "ttfa", "ttfr")
SAMPLES_NAME = "samples.json"
_STATE_VERSION = 2
# A reservoir's add_many in C (servecheck/analysis/_hdrfast.c feed), where it is built and
# random.Random still draws randrange(n) as getrandbits(n.bit_length()) until below n: the C loop
# draws the same way (tests/load/test_keeper_fast.py holds the two reservoirs together).
_feed: Any = stats.native_feed()
_EXTRAS = ("turn", "prefix_group", "cached_tokens", "images", "session")


@dataclass(frozen=True, slots=True)
class Rule:
    """What an aggregate must know before the first record: the slice width, the steady window,
    the warm-up, goodput's SLOs (their text), the request id header, the sample size. The run
    config carries it to every worker (``RunConfig.aggregate``)."""

    slice_s: float = DEFAULT_SLICE_S
    window: str = "auto"
    mode: str = "closed"
    users: int = 1
    duration_s: float | None = None
    slos: tuple[str, ...] = ()
    warmup_s: float | None = None
    warmup_requests: int | None = None
    request_id_header: str | None = "X-Request-Id"
    sample_n: int = SAMPLE_N

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "slos": list(self.slos)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Rule:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**{**known, "slos": tuple(known.get("slos") or ())})

    def share(self, index: int, workers: int) -> Rule:
        """This rule for one of ``workers`` processes: its share of the users and of a warm-up
        counted in requests (as the run splits them)."""
        from servecheck.load.workload.schedule import split_count

        n = max(1, workers)
        users = split_count(self.users, index % n, n) if self.mode == "closed" else self.users
        warm = self.warmup_requests
        return replace(
            self,
            users=max(1, users),
            warmup_requests=None if warm is None else split_count(warm, index % n, n),
        )


class Reservoir:
    """A uniform sample of at most ``size`` values from a stream of unknown length, and the
    merge of two by their counts.

    Li's algorithm L (seeded): once full, it draws how many values to skip before the next one
    that replaces a random slot, so a value that is skipped costs a comparison, not a random
    draw (ITLs come a token at a time)."""

    __slots__ = ("size", "seen", "values", "_rng", "_w", "_next")

    def __init__(self, size: int, seed: int = 0) -> None:
        self.size = size
        self.seen = 0
        self.values: list[float] = []
        self._rng = random.Random(seed)
        self._w = 1.0
        self._next = size  # the index (0-based, in the stream) of the next value kept

    def _advance(self) -> None:
        rng = self._rng
        self._w *= math.exp(math.log(rng.random() or 1e-300) / self.size)
        gap = math.log(rng.random() or 1e-300) / math.log1p(-self._w) if self._w < 1.0 else 0.0
        self._next += int(gap) + 1

    def add(self, v: float) -> None:
        values = self.values
        if len(values) < self.size:  # filling: add_many's first branch, without a call
            values.append(v)
            self.seen += 1
            if len(values) == self.size and self.seen == self.size:
                self._advance_first()
            return
        if self._next > self.seen:
            self.seen += 1  # full, and this one is skipped: add_many's first test, without a call
            return
        self._keep_some((v,))

    def add_many(self, values: Iterable[float]) -> None:
        vals = values if isinstance(values, list | tuple) else list(values)
        if self._next - self.seen >= len(vals) and len(self.values) == self.size:
            self.seen += len(vals)  # full, and none of these is kept: the loop's first test
            return
        self._keep_some(vals)

    def _keep_some(self, vals: list[float] | tuple[float, ...]) -> None:
        if _feed is not None and type(self._rng) is random.Random:
            # The C loop (_hdrfast.feed): the same draws from the same generator (issue 46).
            self.seen, self._next, self._w = _feed(
                vals, self.values, self.size, self.seen, self._next, self._w, self._rng
            )
            return
        self._add_many_py(vals)

    def _add_many_py(self, vals: list[float] | tuple[float, ...]) -> None:
        """:meth:`add_many` in Python: the reference for ``_hdrfast.feed``."""
        i, n = 0, len(vals)
        room = self.size - len(self.values)
        if room > 0:
            self.values.extend(vals[:room])
            taken = min(room, n)
            self.seen += taken
            i = taken
            if len(self.values) == self.size and self.seen == self.size:
                self._advance_first()
        while i < n:
            # The next kept value is at stream index self._next; this batch covers
            # [self.seen, self.seen + n - i).
            ahead = self._next - self.seen
            if ahead >= n - i:
                self.seen += n - i
                return
            i += ahead
            self.seen += ahead
            self.values[self._rng.randrange(self.size)] = vals[i]
            i += 1
            self.seen += 1
            self._advance()

    def _advance_first(self) -> None:
        self._next = self.size - 1  # the last filled index
        self._advance()

    def merge(self, other: Reservoir) -> None:
        """Draw the merged sample from both, each value's chance in proportion to the stream it
        stands for (``seen`` over ``len(values)``), so the result stays uniform over both."""
        if not other.seen:
            return
        if self.seen + other.seen <= self.size:
            self.values += other.values
            self.seen += other.seen
            return
        mine, theirs = list(self.values), list(other.values)
        self._rng.shuffle(mine)
        self._rng.shuffle(theirs)
        left = [self.seen, other.seen]
        pools = [mine, theirs]
        out: list[float] = []
        while len(out) < self.size and (pools[0] or pools[1]):
            pick = 0 if not pools[1] else 1 if not pools[0] else None
            if pick is None:
                pick = 0 if self._rng.random() * (left[0] + left[1]) < left[0] else 1
            out.append(pools[pick].pop())
            left[pick] = max(0, left[pick] - 1)
        self.values, self.seen = out, self.seen + other.seen
        self._w, self._next = 1.0, self.seen  # a merged sample is not fed again

    def state(self) -> dict[str, Any]:
        return {"size": self.size, "seen": self.seen, "values": rounded6(self.values)}

    @classmethod
    def from_state(cls, d: Mapping[str, Any], seed: int = 0) -> Reservoir:
        r = cls(int(d["size"]), seed)
        r.seen, r.values = int(d["seen"]), [float(v) for v in d["values"]]
        r._next = r.seen
        return r


@dataclass(slots=True)
class _Edges:
    """The steady window's edges as a stream can know them (see the module's note)."""

    origin: float | None = None  # the run's first send, warm-up included
    first: float | None = None  # the first measured send
    nth_sent: float | None = None  # closed loop: the send of the users-th measured request
    measured: int = 0


@dataclass(slots=True)
class Aggregate:
    """One process's streaming summary (or, merged, the run's). ``ordered``: records come in
    send order (then the window and the warm-up are exact); a worker's come as they finish."""

    rule: Rule = field(default_factory=Rule)
    ordered: bool = False
    seed: int = 0
    count: int = 0
    whole: Tally = field(init=False)
    # The steady window is the run less the requests outside it (the ramp, the drain): those
    # are few, so a request in the window costs nothing twice. None: no window is judged.
    outside: Tally | None = field(init=False)
    window_edges: list[float | None] = field(default_factory=lambda: [None, None])
    scan: Scan = field(init=False)
    timings: TimingsTally = field(init=False)
    client: ClientCounts = field(default_factory=ClientCounts)
    warm: Warmup = field(init=False)
    samples: dict[str, Reservoir] = field(init=False)
    edges: _Edges = field(default_factory=_Edges)
    # What the records carry that only a pass over them summarises (conversation turns, prefix
    # groups, cached tokens, images): the summary reads the records only when one is here.
    extras: set[str] = field(default_factory=set)
    # Completions per wall-clock second (ok, failed, output tokens of the ok ones): compare's
    # throughput test and the report's throughput picture.
    seconds: dict[int, list[int]] = field(default_factory=dict)
    # The target's outages as this process saw them (analysis/outage.py; its breaker reads it).
    outages: OutageLog = field(default_factory=OutageLog)
    _steady: SteadyWindow = field(init=False, repr=False)

    def __post_init__(self) -> None:
        rule = self.rule
        predicate = request_predicate(parse_slos(list(rule.slos), "the run's SLOs"))
        self.whole = Tally(predicate)
        steady = self._steady = parse_steady_window(rule.window)
        judged = steady.mode == "range" or (
            steady.mode == "auto" and rule.mode not in ("shape", "trace", "profile")
        )
        self.outside = Tally(predicate) if judged else None
        self.scan = Scan(slice_s=rule.slice_s, nth=rule.users if rule.mode == "closed" else 0)
        self.timings = TimingsTally(header=rule.request_id_header)
        self.warm = Warmup(rule.warmup_s, rule.warmup_requests)
        self.samples = {m: Reservoir(rule.sample_n, self.seed + i) for i, m in enumerate(SAMPLED)}

    def begin(self, origin: float) -> None:
        """A worker says when it sent its first request (the run's start on its clock)."""
        if self.edges.origin is None or origin < self.edges.origin:
            self.edges.origin = origin

    def add(self, r: Mapping[str, Any]) -> None:
        sent = float(r.get("t_sent") or 0.0)
        edges = self.edges
        if edges.origin is None:
            edges.origin = sent
        self.count += 1
        for key in _EXTRAS:
            if r.get(key) is not None:
                self.extras.add(key)
        self.client.add(r)  # the engine's counters count the warm-up too
        self.outages.add(r)
        if self.warm.active and self._is_warm(r, sent):
            self.warm.add(r, sent)
            return
        edges.measured += 1
        if edges.first is None or (not self.ordered and sent < edges.first):
            edges.first = sent
        if edges.measured == self.rule.users and self.ordered:
            edges.nth_sent = sent
        if r.get("cancelled") and not r.get(
            "error"
        ):  # its own class (load/workload/cancel.py): counted
            self.whole.add(r)
            if self.outside is not None and not self._in_window(r, sent):
                self.outside.add(r)
            return
        itls = prepare(r.get("itls") or ()) if not r.get("error") else None
        self.whole.add(r, itls)
        self._second(r, sent)
        self.scan.add(r, itls)
        self.timings.add(r)
        self._sample(r)
        if self.outside is not None:
            if self._in_window(r, sent):
                self._window_edge(sent, r.get("t_done"))
            else:
                self.outside.add(r, itls)

    def add_plain(self, r: Mapping[str, Any]) -> None:
        """:meth:`add` of a plain record, in fewer steps: the record keeper's cost per request
        (issue 46). Plain is what :func:`is_plain` says of the record it came from: no error, not
        cancelled, not abandoned, no reasoning phases, none of the extras. Its ITLs are recorded
        into the run's, its slice's and the outside tally's histograms in one call
        (``stats.record_each``) and its tallies skip the branches a plain record never takes;
        tests/load/test_keeper_fast.py holds the state to :meth:`add`'s."""
        sent = float(r.get("t_sent") or 0.0)
        if self.warm.active and self._is_warm(r, sent):
            self.add(r)
            return
        edges = self.edges
        if edges.origin is None:
            edges.origin = sent
        self.count += 1
        self.client.add(r)
        outages = self.outages
        if outages.open is not None or outages.pending_start is not None:
            outages.add(r)  # else a success changes nothing there
        edges.measured += 1
        if edges.first is None or (not self.ordered and sent < edges.first):
            edges.first = sent
        if edges.measured == self.rule.users and self.ordered:
            edges.nth_sent = sent
        self._measure_plain(r, sent)

    def _measure_plain(self, r: Mapping[str, Any], sent: float) -> None:
        outside = self.outside
        hists: tuple[Histogram, ...] = (
            self.whole.hist["itl"],
            self.scan.add_plain(r, sent).hist["itl"],
        )
        self.whole.add_plain(r, sent)
        if outside is not None:
            if self._in_window(r, sent):
                self._window_edge(sent, r.get("t_done"))
            else:
                outside.add_plain(r, sent)
                hists += (outside.hist["itl"],)
        itls = r.get("itls") or ()
        record_each(itls, hists)
        self._second(r, sent)
        self.timings.add(r)
        s = self.samples
        for m in ("ttft", "tpot", "ttfa"):
            v = r.get(m)
            if v is not None:
                s[m].add(float(v))
        e2e = r.get("e2e")
        if e2e is not None:
            s["e2e"].add(float(e2e))
        if itls:
            s["itl"].add_many(itls)

    def _window_edge(self, sent: float, done: float | None) -> None:
        edges = self.window_edges
        if edges[0] is None or sent < edges[0]:
            edges[0] = sent
        if done is not None and (edges[1] is None or done > edges[1]):
            edges[1] = done

    @property
    def window(self) -> Tally | None:
        """The steady window's tally: the whole run's less what fell outside it."""
        if self.outside is None:
            return None
        t = self.whole.minus(self.outside)
        t.first_send, t.last_done = self.window_edges
        return t

    def _is_warm(self, r: Mapping[str, Any], sent: float) -> bool:
        warm, origin = self.warm, float(self.edges.origin or sent)
        if warm.requests:
            if self.ordered:
                return warm.count < warm.requests
            return int(r.get("seq") or 1) - 1 < warm.requests  # seq counts sends from 1
        return sent - origin < float(warm.seconds or 0.0)

    def _in_window(self, r: Mapping[str, Any], sent: float) -> bool:
        rule, edges, steady = self.rule, self.edges, self._steady
        origin, first = float(edges.origin or sent), float(edges.first or sent)
        done = r.get("t_done")
        end = float(done) if done is not None and not r.get("error") else sent
        stop = origin + rule.duration_s if rule.duration_s else float("inf")
        if steady.mode == "range":
            upper = stop if steady.end_s is None else first + steady.end_s
            return sent >= first + steady.start_s and end <= upper
        if rule.mode == "closed":
            if sent < origin + 1.0:  # the spawn time: users / spawn rate (Locust's default)
                return False
            if self.ordered:
                if edges.nth_sent is None:
                    return False
            else:
                index = int(r.get("seq") or 1) - 1 - int(self.warm.requests or 0)
                if index < rule.users - 1:  # sent before this worker's users had all started
                    return False
        return end <= stop

    def _second(self, r: Mapping[str, Any], sent: float) -> None:
        done = r.get("t_done")
        row = self.seconds.setdefault(int(float(sent if done is None else done)), [0, 0, 0])
        if r.get("error"):
            row[1] += 1
        else:
            row[0] += 1
            row[2] += int(r.get("output_tokens") or r.get("output_tokens_client") or 0)

    def _sample(self, r: Mapping[str, Any]) -> None:
        if r.get("error"):
            return
        s = self.samples
        for m in ("ttft", "tpot", "ttfa", "ttfr"):
            v = r.get(m)
            if v is not None:
                s[m].add(float(v))
        if r.get("e2e") is not None and not r.get("abandoned"):
            s["e2e"].add(float(r["e2e"]))
        itls = r.get("itls")
        if itls:
            s["itl"].add_many(itls)

    def merge(self, other: Aggregate) -> None:
        self.count += other.count
        self.whole.merge(other.whole)
        if self.outside is not None and other.outside is not None:
            self.outside.merge(other.outside)
            for i, pick in ((0, min), (1, max)):
                theirs = other.window_edges[i]
                if theirs is not None:
                    mine = self.window_edges[i]
                    self.window_edges[i] = theirs if mine is None else pick(mine, theirs)
        self.scan.merge(other.scan)
        self.timings.merge(other.timings)
        self.client.merge(other.client)
        self.outages.merge(other.outages)
        self.warm.merge(other.warm)
        self.extras |= other.extras
        for t, (ok, bad, tokens) in other.seconds.items():
            row = self.seconds.setdefault(t, [0, 0, 0])
            row[0], row[1], row[2] = row[0] + ok, row[1] + bad, row[2] + tokens
        for m, res in other.samples.items():
            self.samples[m].merge(res)
        for name in ("origin", "first"):
            theirs = getattr(other.edges, name)
            mine = getattr(self.edges, name)
            if theirs is not None:
                setattr(self.edges, name, theirs if mine is None else min(mine, theirs))

    # ---------------------------------------------------------------- what the summary reads

    def stats(self, schedule: Schedule, loop_lag_s: Iterable[float] = ()) -> RunStats:
        st = self.whole.stats(schedule, loop_lag_s)
        st.lost_requests = sum(w.lost for w in self.outages.all())
        return st

    def samples_section(self) -> dict[str, Any]:
        """summary.json's ``samples``: each reservoir's size against what it was drawn from."""
        return {m: {"kept": len(r.values), "of": r.seen} for m, r in self.samples.items()}

    def write_samples(self, run_dir: str | os.PathLike[str]) -> Path:
        """``samples.json`` (:meth:`samples_doc`): what compare and the report read instead of
        the records."""
        p = Path(run_dir) / SAMPLES_NAME
        p.write_text(json.dumps(self.samples_doc(), separators=(",", ":")) + "\n", encoding="utf-8")
        return p

    def samples_doc(self) -> dict[str, Any]:
        """The reservoirs' values (seconds), whether any request reasoned, and the completions
        per second from the first (``per_second``: ``t0``, ``ok``, ``failed``, ``tokens``)."""
        t0 = min(self.seconds, default=0)
        span = range(t0, max(self.seconds, default=t0 - 1) + 1)
        rows = [self.seconds.get(t, [0, 0, 0]) for t in span]
        return {
            "samples": {m: r.state() for m, r in self.samples.items()},
            "reasoned": bool(self.whole.counts["reasoning_requests"]),
            "per_second": {
                "t0": t0,
                "ok": [r[0] for r in rows],
                "failed": [r[1] for r in rows],
                "tokens": [r[2] for r in rows],
            },
        }

    def state(self) -> dict[str, Any]:
        return self._state({m: r.state() for m, r in self.samples.items()})

    def _state(self, samples: Any) -> dict[str, Any]:
        return {
            "version": _STATE_VERSION,
            "rule": self.rule.as_dict(),
            "ordered": self.ordered,
            "count": self.count,
            "edges": asdict(self.edges),
            "whole": self.whole.state(),
            "outside": None if self.outside is None else self.outside.state(),
            "window_edges": self.window_edges,
            "scan": self.scan.state(),
            "timings": self.timings.state(),
            "client": self.client.state(),
            "warm": self.warm.state(),
            "samples": samples,
            "extras": sorted(self.extras),
            "seconds": {str(t): row for t, row in self.seconds.items()},
            "outages": self.outages.state(),
        }

    @classmethod
    def from_state(cls, d: Mapping[str, Any], rule: Rule | None = None) -> Aggregate:
        """An aggregate from :meth:`state`; ``rule`` (the master's, with the whole run's users)
        replaces the worker's share, so the merged one judges the whole run."""
        if d.get("version") != _STATE_VERSION:
            raise ValueError(f"aggregate state version {d.get('version')!r}")
        agg = cls(rule or Rule.from_dict(d["rule"]), bool(d["ordered"]))
        pred = agg.whole.per_request
        agg.count = int(d["count"])
        agg.edges = _Edges(**d["edges"])
        agg.whole = Tally.from_state(d["whole"], pred)
        if agg.outside is not None and d.get("outside") is not None:
            agg.outside = Tally.from_state(d["outside"], pred)
            agg.window_edges = list(d["window_edges"])
        agg.scan = Scan.from_state(d["scan"])
        agg.timings = TimingsTally.from_state(d["timings"], agg.rule.request_id_header)
        agg.client = ClientCounts.from_state(d["client"])
        agg.warm = Warmup.from_state(d["warm"])
        agg.samples = {
            m: Reservoir.from_state(s, i) for i, (m, s) in enumerate(d["samples"].items())
        }
        agg.extras = set(d.get("extras") or ())
        agg.seconds = {int(t): [int(x) for x in row] for t, row in d["seconds"].items()}
        agg.outages = OutageLog.from_state(d.get("outages"))
        return agg

    def write(self, path: str | os.PathLike[str], final: bool = True) -> Path:
        """The state, atomically (a reader never sees half a file); ``final`` False: a
        checkpoint of a process still running."""
        p = Path(path)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(self._state_text(final), encoding="utf-8")
        os.replace(tmp, p)
        return p

    def _state_text(self, final: bool) -> str:
        """``json.dumps({**state(), "final": final})`` (compact), the reference, with the
        reservoirs written apart: their values are rounded and written by C
        (``records.record.rounded6_json``) and spliced in where a placeholder stood. Where the
        placeholder does not come out once (it cannot: a string's quotes are escaped), the
        reference is written instead."""
        samples = "\x00"
        state = {**self._state(samples), "final": final}
        parts = json.dumps(state, separators=(",", ":")).split('"samples":"\\u0000"')
        if len(parts) != 2:  # pragma: no cover - see above
            return json.dumps({**self.state(), "final": final}, separators=(",", ":"))
        each = (
            f'"{m}":{{"size":{r.size},"seen":{r.seen},"values":{rounded6_json(r.values)}}}'
            for m, r in self.samples.items()
        )
        return parts[0] + '"samples":{' + ",".join(each) + "}" + parts[1]


def is_plain(r: Any) -> bool:
    """Whether a record (a ``RequestRecord``: read by attribute, so that the record keeper asks
    before it makes the dict) may go through :meth:`Aggregate.add_plain`: no error, not
    cancelled, not abandoned, no reasoning phases (``ttfr``, reasoning chunks), none of
    :data:`_EXTRAS`."""
    return (
        r.error is None
        and r.cancelled is None
        and not r.abandoned
        and r.ttfr is None
        and not r.reasoning_tokens_client
        and r.turn is None
        and r.prefix_group is None
        and r.cached_tokens is None
        and r.images is None
        and r.session is None
    )


def steady_of(
    agg: Aggregate,
    window: SteadyWindow,
    *,
    mode: str,
    users: int | None,
    duration_s: float | None,
    max_lag_ms: float = 25.0,
) -> Measured:
    """The steady window (``analysis/steady.py``'s rules) placed on the merged slices; its
    statistics are the window's own tally (None: the window does not apply)."""
    bounds = window_bounds(
        window, agg.scan, mode=mode, users=users, run_start=agg.edges.origin, duration_s=duration_s
    )
    tally = agg.window
    if not bounds.applied or tally is None:
        return Measured(bounds, agg.scan, None)
    sched = Schedule(mode=mode, planned=None, max_lag_ms=max_lag_ms)
    return Measured(bounds, agg.scan, tally.stats(sched))


def aggregate_path(out_dir: str | os.PathLike[str], worker: str) -> Path:
    return Path(out_dir) / f"aggregate-{worker}.json"


def read_aggregates(
    run_dir: str | os.PathLike[str], rule: Rule
) -> tuple[Aggregate | None, dict[str, int], list[str]]:
    """Merge every worker's aggregate in ``run_dir``: the merged one (None: none was there), the
    record count each worker's said it holds, and what is wrong with the others (a file that
    could not be read; a checkpoint, left by a process that did not reach its end)."""
    merged: Aggregate | None = None
    counts: dict[str, int] = {}
    bad: list[str] = []
    for p in sorted(Path(run_dir).glob(AGGREGATE_GLOB)):
        worker = p.name[len("aggregate-") : -len(".json")]
        try:
            state = json.loads(p.read_text(encoding="utf-8"))
            agg = Aggregate.from_state(state, rule)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            bad.append(f"{worker}: its aggregate could not be read ({exc})")
            continue
        if not state.get("final", True):
            bad.append(f"{worker}: stopped before its end; counted up to its last checkpoint")
        counts[worker] = agg.count
        if merged is None:
            merged = agg
        else:
            merged.merge(agg)
    return merged, counts, bad


def aggregate_of(records: Iterable[Mapping[str, Any]], rule: Rule) -> Aggregate:
    """The aggregate of records given in send order (exact: see the module's note)."""
    agg = Aggregate(rule, ordered=True)
    for r in records:
        agg.add(r)
    return agg


RECORDS_ALL_MAX = 200_000  # "auto" keeps every record up to this many planned requests
RECORDS_SAMPLE_N = 20_000  # ... and a uniform sample of this many beyond


def parse_records(text: str | None) -> str:
    """``--records``: ``auto`` (default), ``all``, ``sample:N`` or ``none``; a usage error names
    the value."""
    value = (text or "auto").strip().lower()
    if value in ("auto", "all", "none"):
        return value
    head, _, n = value.partition(":")
    if head == "sample" and n.isdigit() and int(n) > 0:
        return f"sample:{int(n)}"
    raise SpecError("{records} {text!r}: auto, all, sample:N (N > 0) or none", text=str(text))


def resolve_records(mode: str, planned: int | None) -> str:
    """``auto`` made concrete: every record below :data:`RECORDS_ALL_MAX` planned requests (a
    closed loop bounded only by time plans no count: every record), a sample above."""
    if mode != "auto":
        return mode
    if planned is not None and planned > RECORDS_ALL_MAX:
        return f"sample:{RECORDS_SAMPLE_N}"
    return "all"


def sample_size(mode: str) -> int | None:
    """N of ``sample:N``, else None."""
    return int(mode.split(":", 1)[1]) if mode.startswith("sample:") else None
