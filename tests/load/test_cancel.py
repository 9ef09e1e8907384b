"""Cancellation injection (``--cancel SHARE@POINT``, load/workload/cancel.py): the grammar, the record
class, and end to end on the reference server: a clean one drains after the cancelled requests
(PASS), one that leaks a running slot per disconnected request (``abort-leak``) does not (FAIL)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.analysis.stats import compute_stats
from servecheck.errors import UsageError
from servecheck.load.generator.stream import StreamState
from servecheck.load.generator.wire import ResponseParser
from servecheck.load.workload.cancel import CancelRule, draw, outcome, parse_cancel
from servecheck.records.parquet import read_run_records
from servecheck.reference.inprocess import RunningServer
from tests.load.test_load_cli import _cmd, _run, _summary, _targets


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        pytest.param("10%@headers", CancelRule(0.1, "headers"), id="headers"),
        pytest.param("10%@tokens:8", CancelRule(0.1, "tokens", 8), id="tokens"),
        pytest.param(" 5% @ ms:200 ", CancelRule(0.05, "ms", 200), id="ms-spaces"),
        pytest.param("100%@TOKENS:1", CancelRule(1.0, "tokens", 1), id="all-upper"),
        pytest.param("off", None, id="off"),
    ],
)
def test_parse_cancel(text: str, rule: CancelRule | None) -> None:
    assert parse_cancel(text) == rule
    if rule is not None:
        assert parse_cancel(rule.text()) == rule  # the summary's spelling reads back


@pytest.mark.parametrize(
    ("text", "why"),
    [
        pytest.param("10%", "no @POINT", id="no-point"),
        pytest.param("10@headers", "the share '10' needs % (e.g. 10%)", id="no-percent"),
        pytest.param("0%@headers", "must be above 0% and at most 100%", id="zero"),
        pytest.param("120%@headers", "must be above 0% and at most 100%", id="over"),
        pytest.param("10%@body", "unknown point 'body' (one of headers, tokens:K, ms:T)", id="pt"),
        pytest.param("10%@tokens", "tokens needs a number (tokens:8)", id="tokens-bare"),
        pytest.param("10%@tokens:0", "tokens:0: a whole number of tokens, at least 1", id="t0"),
        pytest.param("10%@tokens:2.5", "a whole number of tokens", id="tokens-frac"),
        pytest.param("10%@ms:-5", "ms:-5: a positive number of milliseconds", id="ms-neg"),
        pytest.param("10%@headers:3", "headers takes no number", id="headers-n"),
    ],
)
def test_parse_cancel_errors_name_the_problem(text: str, why: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_cancel(text)
    message = str(info.value)
    assert why in message and repr(text) in message and "10%@tokens:8" in message, message


def test_draw_takes_the_share_and_the_point() -> None:
    rng = random.Random(7)
    st = StreamState()
    rule = CancelRule(0.25, "tokens", 2)
    drawn = [draw(rule, rng, st, 0.0) for _ in range(4000)]
    share = sum(d is not None for d in drawn) / len(drawn)
    assert 0.22 < share < 0.28, share
    one = next(d for d in drawn if d is not None)
    assert not one.until()
    st.token_times += [0.1, 0.2]
    assert one.until()
    assert draw(None, rng, st, 0.0) is None
    assert outcome(one, True, None) == "tokens:2"
    assert outcome(one, True, "http-500") is None  # failed before its point: a failure
    assert outcome(one, False, None) is None  # the stream ended before the point: a success
    assert outcome(None, True, None) is None  # abandoned by the scenario, not cancelled


def test_parser_hangs_up_at_the_headers() -> None:
    seen: list[bytes] = []

    def on_data(data: bytes, t: float) -> None:
        seen.append(data)

    ex = ResponseParser(on_data, until=lambda: True)
    ex.feed(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\ndata:\r\n",
        1.0,
    )
    assert ex.done and ex.res.hung_up and ex.res.status == 200 and ex.res.error is None
    assert seen == [] and not ex.keep  # nothing read past the headers; the connection closed
    # A non-200 answer is never hung up on: its error is the record's.
    err = ResponseParser(on_data, until=lambda: True)
    err.feed(b"HTTP/1.1 500 Oops\r\nContent-Length: 2\r\n\r\n{}", 1.0)
    assert err.done and not err.res.hung_up and err.res.status == 500


def test_cancelled_requests_are_their_own_class() -> None:
    base = {"t_sent": 1.0, "t_done": 2.0, "ttft": 0.1, "e2e": 1.0, "output_tokens": 4}
    records = [
        {**base, "error": None},
        {**base, "error": None},
        {**base, "error": None, "cancelled": "tokens:2", "e2e": 0.01, "output_tokens": None},
        {**base, "error": "http-500", "output_tokens": None},
    ]
    st = compute_stats(records)
    req = st.as_dict()["requests"]
    assert (req["total"], req["ok"], req["failed"], req["cancelled"]) == (4, 2, 1, 1), req
    assert req["error_rate"] == pytest.approx(1 / 3)  # the cancelled one is not judged
    assert st.goodput == pytest.approx(2 / 3)
    assert st.latency["e2e"].count == 2  # a cancelled stream's end is the client's
    assert st.output_tokens_ok == 8


CANCEL_SLACK = 6  # tokens a cancel at 3 may still count


def _cancel_run(server: RunningServer, tmp_path: Path, *args: str) -> dict:
    targets = _targets(tmp_path, server)
    out = tmp_path / "reports"
    proc = _run(
        _cmd(targets, out, "--users", "4", "--max-requests", "32", "--no-tokenize", *args),
        timeout=120,
    )
    s = _summary(out)
    s["_proc"] = proc
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    s["_records"] = list(read_run_records(run_dir))
    return s


@pytest.mark.slow
def test_clean_engine_drains_after_cancels(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference(ttft_ms=30, itl_ms=10)
    s = _cancel_run(server, tmp_path, "--cancel", "40%@tokens:3", "--cancel-drain", "10s")
    proc = s["_proc"]
    cancelled = [r for r in s["_records"] if r.get("cancelled")]
    assert s["requests"]["cancelled"] == len(cancelled) > 0, s["requests"]
    assert all(r["cancelled"] == "tokens:3" and r["error"] is None for r in cancelled)
    # Hung up at the point: a few tokens past it at most (on a loaded machine one read can hold
    # several 10 ms tokens; 5 were seen under load average 10), far short of a whole answer.
    whole = [r["output_tokens_client"] for r in s["_records"] if not r.get("cancelled")]
    assert whole and sorted(whole)[len(whole) // 2] > CANCEL_SLACK, whole
    assert all(r["output_tokens_client"] <= CANCEL_SLACK for r in cancelled)
    assert s["requests"]["failed"] == 0
    assert s["cancel"]["drain"]["status"] == "ok", s["cancel"]
    assert s["verdict"] == "pass" and proc.returncode == 0, proc.stdout + proc.stderr
    assert any("cancel 40%@tokens:3" in r and "after the load" in r for r in s["reasons"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "point",
    [pytest.param("headers", id="headers"), pytest.param("ms:60", id="ms")],
)
def test_leaked_slots_after_cancels_fail_the_run(
    make_reference: Callable[..., RunningServer], tmp_path: Path, point: str
) -> None:
    """``abort-leak``: each disconnected request stays in num_requests_running for good."""
    server = make_reference("abort-leak", ttft_ms=30, itl_ms=10)
    s = _cancel_run(
        server,
        tmp_path,
        "--cancel",
        f"40%@{point}",
        "--cancel-drain",
        "6s",
        "--server-metrics",
        "0.5s",
    )
    proc = s["_proc"]
    assert s["requests"]["cancelled"] > 0, s["requests"]
    drain = s["cancel"]["drain"]
    assert drain["status"] == "not_drained" and drain["last_running"] > 0, drain
    assert s["verdict"] == "fail" and proc.returncode == 1, proc.stdout
    assert any("NOT DRAINED" in r for r in s["reasons"]), s["reasons"]


@pytest.mark.slow
def test_capacity_steps_cancel_and_judge_the_drain(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """``servecheck capacity --cancel``: every step cancels its share, and a step after which the
    engine kept the cancelled requests running (``abort-leak``) does not meet the SLOs."""
    from tests.load.test_capacity_stops import _capacity, write_targets

    ref = make_reference("abort-leak", models=["ref-tiny"], ttft_ms=30, itl_ms=10)
    targets = write_targets(tmp_path / "targets.yaml", ref=(ref.base_url, ["ref-tiny"]))
    data = _capacity(
        targets,
        tmp_path,
        *("--users", "2", "--step-duration", "3s", "--max-steps", "1"),
        *("--cancel", "30%@tokens:2", "--cancel-drain", "8s"),
    )
    assert len(data["steps"]) == 1
    (path,) = (tmp_path / "cap" / "steps").glob("*/summary.json")
    summary = json.loads(path.read_text())
    assert summary["requests"]["cancelled"] > 0, summary["requests"]
    assert summary["cancel"]["drain"]["status"] == "not_drained", summary["cancel"]
    assert summary["verdict"] == "fail" and data["exit_code"] == 1


def test_plan_key_and_option_reach_the_spec() -> None:
    from servecheck.commands.load.spec import spec_from_options
    from servecheck.config.model import Target

    target = Target(name="t", base_url="http://127.0.0.1:9/v1")
    base = {"users": 1, "duration": "5s"}
    spec = spec_from_options(target, base, {"cancel": "10%@tokens:8"})
    assert spec.cancel == CancelRule(0.1, "tokens", 8) and spec.cancel_drain_s == 30.0
    spec = spec_from_options(
        target, {**base, "cancel": "5%@ms:200", "cancel_drain": "10s"}, {"cancel": "10%@headers"}
    )
    assert spec.cancel == CancelRule(0.05, "ms", 200) and spec.cancel_drain_s == 10.0
    assert spec_from_options(target, base).cancel is None
    with pytest.raises(UsageError, match="cancel"):
        spec_from_options(target, base, {"cancel": "10%@nowhere"})
