"""The command's watch over its Locust child (load/progress.py): the records tail reads a poll's
plain answers in one batch, and must count and feed the down watch exactly as reading every line
whole does; the exit waiter must see the child end, with or without a pidfd."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servecheck.analysis.down import DownRule, DownWatch
from servecheck.load import progress
from servecheck.load.progress import ChildExit, RecordTail
from servecheck.records.record import RequestRecord, progress_batch


def _answer(seq: int, t: float, ttft: float | None = 0.1, out: int | None = 64) -> RequestRecord:
    return RequestRecord("t", "chat", "w", seq, t, t, t_done=t + 0.7, ttft=ttft, e2e=0.7,
                         itls=[0.01] * 7, output_tokens=out, output_tokens_client=8,
                         status=200)  # fmt: skip


def _failed(seq: int, t: float, error: str = "connect") -> RequestRecord:
    return RequestRecord("t", "chat", "w", seq, t, t, error=error, error_message="refused")


_kinds = st.sampled_from(["answer", "answer", "no-ttft", "no-usage", "connect", "http-500",
                          "abandoned", "timings", "failed-timings"])  # fmt: skip


def _record(kind: str, seq: int, t: float) -> RequestRecord:
    if kind in ("connect", "http-500"):
        return _failed(seq, t, kind)
    if kind == "failed-timings":  # a failure whose timings look like an answer's fields
        rec = _failed(seq, t)
        rec.server_timings = {"error": None, "abandoned": False, "ttft": 1}
        return rec
    rec = _answer(seq, t, ttft=None if kind == "no-ttft" else 0.1,
                  out=None if kind == "no-usage" else 5 + seq % 3)  # fmt: skip
    rec.abandoned = kind == "abandoned"
    if kind == "timings":  # an engine's timings that hold the keys the batch counts
        rec.server_timings = {"error": None, "ttft": 3}
    return rec


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.tuples(_kinds, st.integers(0, 1)), max_size=12), max_size=6))
def test_the_tail_counts_and_watches_as_reading_every_line_whole(
    tmp_path_factory: pytest.TempPathFactory, polls: list[list[tuple[str, int]]]
) -> None:
    """Polls of random records over two worker files: the tail's totals, its recent TTFTs and
    the down watch it feeds end where decoding every line with ``json.loads`` ends."""
    run = tmp_path_factory.mktemp("run")
    tail = RecordTail(run)
    rule = DownRule(3, 0.0)
    fast, whole = DownWatch(rule, 0.0), DownWatch(rule, 0.0)
    total = errors = tokens = seq = 0
    ttfts: list[float] = []
    for batch in polls:
        lines: list[dict[str, object]] = []
        for kind, worker in batch:
            seq += 1
            line = _record(kind, seq, 100.0 + seq).to_json()
            with (run / f"records-w{worker}.jsonl").open("a") as f:
                f.write(line + "\n")
            lines.append(json.loads(line))
        fast.feed_batch(tail.poll())
        whole.feed_batch(lines)
        for r in lines:
            total += 1
            errors += bool(r["error"])
            if not r["error"] and r["ttft"] is not None:
                ttfts.append(r["ttft"])  # type: ignore[arg-type]
            tokens += int(r["output_tokens"] or r["output_tokens_client"] or 0)  # type: ignore[call-overload]
    assert (tail.total, tail.errors, tail.tokens) == (total, errors, tokens)
    assert sorted(tail.ttfts) == sorted(ttfts)  # fewer than it trims
    assert (fast.streak, fast.streak_start, fast.down) == (
        whole.streak,
        whole.streak_start,
        whole.down,
    )


def test_a_poll_of_plain_answers_is_read_in_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The point of the batch: a second of ordinary answers never goes a line at a time."""
    with (tmp_path / "records-w0.jsonl").open("a") as f:
        for i in range(50):
            f.write(_answer(i, 100.0 + i, out=None if i == 3 else 64).to_json() + "\n")
        f.write(_answer(50, 200.0).to_json()[:40])  # a torn last line waits for its end

    def one_at_a_time(_line: bytes) -> None:
        raise AssertionError("a plain answer was read a line at a time")

    monkeypatch.setattr(progress, "progress_fields", one_at_a_time)
    assert RecordTail(tmp_path).poll() == [{"t_sent": 149.0, "error": None}]
    tail = RecordTail(tmp_path)
    tail.poll()
    assert (tail.total, tail.errors, tail.tokens, len(tail.ttfts)) == (50, 0, 49 * 64 + 8, 50)


def test_a_batch_with_anything_but_plain_answers_is_not_one() -> None:
    plain = _answer(1, 100.0).to_json().encode() + b"\n"
    assert progress_batch(plain * 3) is not None
    for other in (_failed(2, 101.0), _record("abandoned", 3, 102.0), _record("timings", 4, 103.0)):
        assert progress_batch(plain + other.to_json().encode() + b"\n" + plain) is None
    assert progress_batch(b"") is None


@pytest.mark.parametrize("pidfd", [True, False])
def test_the_exit_waiter_sees_the_child_end(pidfd: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not pidfd:
        monkeypatch.delattr(progress.os, "pidfd_open", raising=False)
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(0.5); raise SystemExit(3)"]
    )
    child = ChildExit(proc)
    try:
        assert (child._poll is not None) == (pidfd and sys.platform == "linux")
        assert child.wait(0.05) is None
        got = None
        for _ in range(100):  # bounded: 100 x 0.1 s
            got = child.wait(0.1)
            if got is not None:
                break
        assert got == 3
    finally:
        child.close()
        proc.kill()
        proc.wait()
