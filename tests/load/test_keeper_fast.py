"""The record keeper's short paths (issue 46) against the reference paths they stand for.

``RecordKeeper.keep`` writes a record's dict and line with the C writer (``records/_line.c``) and
sends a plain record (no error, cancel, hang-up, reasoning or extras) through
``Aggregate.add_plain``, whose ITLs go into their histograms in one C call and whose reservoir
draws in C (``analysis/_hdrfast.c``). None of that may change a byte: the records file, the sample
and every checkpoint must be what the encoder's line and ``Aggregate.add`` make of the same
records, with the C parts built and without them.
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servecheck.analysis import stats
from servecheck.analysis.aggregate import Aggregate, Reservoir, Rule, is_plain
from servecheck.load.generator.keeper import RecordKeeper
from servecheck.records.record import RequestRecord

TESTS = Path(__file__).resolve().parent


def varied_records(n: int, seed: int) -> list[RequestRecord]:
    """A run's records as they finish (out of send order), mostly plain answers, and among them
    failures, shed requests, cancels, hang-ups, reasoning, extras, server timings, records with
    fields missing, slices crossed and a few outages' worth of failures in a row."""
    rng = random.Random(seed)
    out: list[RequestRecord] = []
    t = 1_765_000_000.0
    for seq in range(1, n + 1):
        t += rng.uniform(0.0, 0.02)
        sent = t + rng.uniform(0, 0.001)
        rec = RequestRecord("ref", "chat", "w0", seq, t, sent, request_id=f"r-{seq}")
        itls = [max(1e-6, rng.gauss(0.01, 0.003)) for _ in range(rng.choice((0, 1, 5, 63)))]
        ttft = rng.lognormvariate(-3.5, 0.6)
        rec.t_done = sent + ttft + sum(itls) + rng.uniform(0, 3.0) * (rng.random() < 0.05)
        rec.ttft, rec.e2e, rec.itls, rec.ttfa = ttft, rec.t_done - sent, itls, ttft
        rec.output_tokens = len(itls) + 1 if rng.random() < 0.9 else None
        rec.output_tokens_client, rec.prompt_tokens = len(itls) + 1, rng.choice((None, 20))
        rec.tpot = (rec.e2e - ttft) / len(itls) if itls else None
        rec.status = 200
        rec.stamps = {"written": 0.05, "headers": ttft * 500, "body": ttft * 900}
        rec.new_conn, rec.response_id = seq < 4, f"chatcmpl-r-{seq}"
        _vary(rec, rng, seq)
        out.append(rec)
    rng.shuffle(out)  # completion order: not send order
    return out


def _vary(rec: RequestRecord, rng: random.Random, seq: int) -> None:
    roll = rng.random()
    if 40 <= seq % 200 < 46:  # a burst of failures: an outage opens, then closes
        rec.error, rec.error_message, rec.status = "connect", "refused", None
        rec.ttft = rec.e2e = rec.tpot = rec.ttfa = None
        rec.itls = []
    elif roll < 0.04:
        rec.error, rec.status, rec.error_message = "http-503", 503, 'say "busy"'
    elif roll < 0.06:
        rec.error, rec.retry_after_s = "rate-limited", 1.0
    elif roll < 0.08:
        rec.cancelled = "mid-stream"
    elif roll < 0.10:
        rec.abandoned = True
    elif roll < 0.13:
        rec.ttfr, rec.reasoning_tokens, rec.reasoning_tokens_client = 0.01, 4, 4
        rec.itls_reasoning, rec.itls_answer = rec.itls[:2], rec.itls[2:]
    elif roll < 0.15:
        rec.cached_tokens, rec.turn, rec.conversation = 16, 1, "c1"
    elif roll < 0.17:
        rec.server_timings = {"queue_ms": 1.5, "prefill_ms": 3.0}
    elif roll < 0.19:
        rec.ttft = rec.ttfa = rec.t_done = None
    elif roll < 0.21:
        rec.reasoning_tokens = 0  # usage reported none, and no reasoning chunk came


RULES = [
    pytest.param(Rule(mode="closed", users=8, duration_s=30.0), id="closed"),
    pytest.param(
        Rule(mode="fixed", users=8, duration_s=20.0, slice_s=0.5, slos=("ttft_p95<=30ms",)),
        id="open-slo-short-slices",
    ),
    pytest.param(Rule(mode="closed", users=4, warmup_requests=30), id="warmup-requests"),
    pytest.param(Rule(mode="fixed", users=4, warmup_s=0.5, window="1s:4s"), id="warmup-range"),
    pytest.param(Rule(mode="shape", users=4, sample_n=50), id="shape-small-reservoirs"),
]


def reference(recs: list[RequestRecord], rule: Rule, mode: str) -> tuple[list[str], Aggregate]:
    """What the keeper kept before its short paths: the encoder's lines, ``Aggregate.add``, and
    ``sample:N``'s draws."""
    agg = Aggregate(rule, seed=1)
    agg.begin(min(r.t_sent for r in recs))
    n = int(mode.split(":")[1]) if mode.startswith("sample:") else None
    kept: list[str] = []
    rng = random.Random(1)
    for count, rec in enumerate(recs, 1):
        d, line = rec._reference_encoded()
        agg.add(d)
        if mode == "all" or (n is not None and len(kept) < n):
            kept.append(line)
        elif n is not None:
            j = rng.randrange(count)
            if j < n:
                kept[j] = line
    return kept, agg


def keeper_run(tmp: Path, recs: list[RequestRecord], rule: Rule, mode: str) -> RecordKeeper:
    keeper = RecordKeeper(tmp, "w0", mode, rule, seed=1)
    keeper.begin(min(r.t_sent for r in recs))
    for rec in recs:
        keeper.keep(rec)
    return keeper


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("mode", ["all", "none", "sample:40"])
def test_the_keeper_keeps_what_the_reference_paths_keep(
    tmp_path: Path, rule: Rule, mode: str
) -> None:
    recs = varied_records(600, seed=3)
    assert 0.6 < sum(map(is_plain, recs)) / len(recs) < 0.9  # both paths are taken
    want_lines, want = reference(recs, rule, mode)
    keeper = keeper_run(tmp_path, recs, rule, mode)
    assert json.dumps(keeper.agg.state()) == json.dumps(want.state())
    checkpoint = json.loads(keeper.checkpoint().read_text())
    assert checkpoint == {**json.loads(json.dumps(want.state())), "final": False}
    keeper.close()
    path = tmp_path / "records-w0.jsonl"
    got = path.read_text().splitlines() if path.exists() else []
    assert got == ([] if mode == "none" else want_lines)


_PURE = """
import hashlib, json, sys
from pathlib import Path
if sys.argv[1] == "python":  # as an install without the C extensions
    sys.modules["servecheck.analysis._hdrfast"] = None
    sys.modules["servecheck.records._line"] = None
sys.path.insert(0, sys.argv[2])
from servecheck.analysis import aggregate, stats
from servecheck.analysis.aggregate import Rule
from servecheck.records import record
from test_keeper_fast import keeper_run, varied_records
assert (record._line is None) == (sys.argv[1] == "python")
assert (aggregate._feed is None) == (sys.argv[1] == "python")
out = Path(sys.argv[3])
rule = Rule(mode="fixed", users=8, duration_s=20.0, slice_s=0.5, slos=("ttft_p95<=30ms",))
keeper = keeper_run(out, varied_records(400, seed=5), rule, "all")
keeper.close()
print(json.dumps({p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir())}))
"""


def test_the_keeper_writes_the_same_files_without_its_c_parts(tmp_path: Path) -> None:
    """The records file and the final aggregate, byte for byte, from a process with the C writer,
    ITL recording and reservoir feed, and from one where neither extension can be imported."""
    got = {}
    for kind in ("native", "python"):
        out = tmp_path / kind
        out.mkdir()
        run = subprocess.run(
            [sys.executable, "-c", _PURE, kind, str(TESTS), str(out)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr
        got[kind] = json.loads(run.stdout)
    assert set(got["native"]) == {"records-w0.jsonl", "aggregate-w0.json"}
    assert got["native"] == got["python"]


# -- the C parts against their Python references ------------------------------------------------


def _hdrfast() -> Any:
    """The C extension: built on Linux (``make venv``), where its absence is a failure."""
    try:
        from servecheck.analysis import _hdrfast
    except ImportError:  # pragma: no cover - depends on the build
        if sys.platform == "linux":
            raise
        pytest.skip("servecheck.analysis._hdrfast is not built (make venv builds it)")
    return _hdrfast


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 40),
    st.lists(st.lists(st.floats(0.0, 1.0), max_size=70), max_size=40),
    st.integers(0, 2**32),
)
def test_a_reservoir_fed_in_c_is_the_python_one(
    size: int, batches: list[list[float]], seed: int
) -> None:
    """``_hdrfast.feed`` keeps the same values, in the same slots, with the same generator state
    afterwards, as ``Reservoir._add_many_py``, whether fed in batches or one value at a time."""
    _hdrfast()
    fast, ref = Reservoir(size, seed), Reservoir(size, seed)
    for i, batch in enumerate(batches):
        if i % 3 == 2:
            for v in batch:
                fast.add(v)
        else:
            fast.add_many(batch if i % 2 else tuple(batch))
        ref._add_many_py(batch)
    assert (fast.seen, fast.values, fast._next, fast._w) == (
        ref.seen,
        ref.values,
        ref._next,
        ref._w,
    )
    assert fast._rng.getstate() == ref._rng.getstate()


def test_the_reservoir_uses_the_c_feed_where_it_is_built() -> None:
    from servecheck.analysis import aggregate

    assert aggregate._feed is _hdrfast().feed
    assert stats.record_each is _hdrfast().record_each


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(st.floats(-1.0, 4000.0), st.none(), st.just(float("nan")), st.integers(-2, 5000)),
        max_size=80,
    ),
    st.integers(1, 3),
)
def test_recording_in_each_histogram_at_once_is_recording_prepared(
    values: list[Any], n: int
) -> None:
    fast = tuple(stats.Histogram() for _ in range(n))
    ref = tuple(stats.Histogram() for _ in range(n))
    for h in (*fast, *ref):
        h.record(0.5)  # not empty: the bounds are kept across calls
    _hdrfast().record_each(values, fast)
    stats.record_each_py(values, ref)
    assert [h.state() for h in fast] == [h.state() for h in ref]


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        pytest.param([0.1, float("inf")], OverflowError, id="infinite"),
        pytest.param([0.1, "0.2"], TypeError, id="a-string"),
    ],
)
def test_recording_in_each_refuses_what_prepare_refuses(bad: list[Any], error: type) -> None:
    """An error leaves every histogram as it was (prepare refuses before any is touched)."""
    fast = (stats.Histogram(),)
    with pytest.raises(error):
        _hdrfast().record_each(bad, fast)
    with pytest.raises(error):
        stats.record_each_py(bad, (stats.Histogram(),))
    assert fast[0].count == 0


def test_the_checkpoint_digest_is_stable(tmp_path: Path) -> None:
    """Two keepers fed the same records write the same checkpoint bytes (no set or dict order
    leaks into the file)."""
    recs = varied_records(200, seed=9)
    rule = Rule(mode="closed", users=4)
    digests = set()
    for i in range(2):
        out = tmp_path / str(i)
        out.mkdir()
        keeper = keeper_run(out, recs, rule, "none")
        digests.add(hashlib.sha256(keeper.checkpoint().read_bytes()).hexdigest())
    assert len(digests) == 1


@pytest.mark.parametrize("rule", RULES)
def test_a_checkpoint_s_text_is_json_dumps_of_its_state(rule: Rule) -> None:
    """``Aggregate.write`` splices the reservoirs' values (rounded and written in C) into the
    state's JSON: the same bytes as ``json.dumps`` of the whole state, for a worker's aggregate,
    an empty one, a merged one, and reservoirs holding what records never put there."""
    recs = varied_records(300, seed=11)
    _, agg = reference(recs, rule, "none")
    merged = Aggregate.from_state(json.loads(json.dumps(agg.state())), rule)
    merged.merge(agg)
    odd = Aggregate(rule)
    odd.samples["ttft"].values = [float("nan"), float("inf"), 1e-7, 2.0000005, 1 / 128]
    odd.samples["e2e"].values = [1, 0.5]  # an int: the Python writer's
    for a in (agg, Aggregate(rule), merged, odd):
        for final in (False, True):
            want = json.dumps({**a.state(), "final": final}, separators=(",", ":"))
            assert a._state_text(final) == want
