"""Outages during a run (analysis/outage.py): the breaker's rules on records, the summary's windows
merged across workers, the verdict (never a silent pass), the ``lost_requests`` SLO, and end to
end: a reference server stopped mid-run and started again on the same port."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from servecheck.analysis.down import DownRule, DownWatch
from servecheck.analysis.outage import (
    HOLD,
    OPEN_AFTER,
    PROBE,
    PROBE_FIRST_S,
    SEND,
    Breaker,
    OutageLog,
    section,
    verdict_of,
)
from servecheck.analysis.slo import evaluate, parse_slo
from servecheck.analysis.stats import RunStats
from servecheck.errors import UsageError
from servecheck.records.record import LOST
from servecheck.reference.inprocess import RunningServer
from servecheck.reference.server import ServerConfig
from tests.load.test_load_cli import _cmd, _targets


def _rec(t: float, error: str | None = None, status: int | None = None) -> dict[str, Any]:
    return {"t_sent": t, "t_done": t + 0.01, "error": error, "status": status}


def _outage(log: OutageLog, start: float, lost: int = 2, back: float | None = None) -> None:
    log.add(_rec(start - 1.0))  # a success before
    log.add(_rec(start, "stream-error", 200))  # a stream the dying server broke mid-body
    for i in range(OPEN_AFTER):
        log.add(_rec(start + 0.1 * (i + 1), "connect"))
    for i in range(lost):
        log.add(_rec(start + 0.5 + 0.1 * i, LOST))
    if back is not None:
        log.add(_rec(back - 0.5, "http-503", 503))  # up, still loading: not recovered
        log.add(_rec(back))


def test_connection_failures_open_an_outage_that_a_success_ends() -> None:
    log = OutageLog()
    _outage(log, 10.0, lost=4, back=15.0)
    (w,) = log.all()
    assert w.start == pytest.approx(10.01)  # the first failure after the last success
    assert w.end == 15.0 and log.open is None
    assert w.failures == {"stream-error": 1, "connect": OPEN_AFTER, LOST: 4, "http-503": 1}
    assert w.lost == 1 + OPEN_AFTER + 4 + 1


def test_a_success_sent_before_the_failures_does_not_end_the_outage() -> None:
    log = OutageLog()
    for i in range(OPEN_AFTER):
        log.add(_rec(5.0 + 0.01 * i, "connect"))
    log.add({"t_sent": 4.9, "t_done": 5.2, "error": None})  # in flight through the stop
    assert log.open is not None and not log.windows
    log.add(_rec(9.0))
    (w,) = log.all()
    assert w.end == 9.0 and w.end > w.start


def test_a_target_that_accepts_and_never_answers_opens_one() -> None:
    log = OutageLog()
    for i in range(OPEN_AFTER):
        log.add(_rec(float(i), "timeout"))  # no status: not even the headers came
    assert log.open is not None
    up = OutageLog()
    for i in range(OPEN_AFTER):
        up.add(_rec(float(i), "timeout", 200))  # a stream that stalled after its headers: up
    assert up.open is None


def test_answers_that_are_errors_open_no_outage() -> None:
    log = OutageLog()
    for i in range(10):  # a server that answers 500s is up: its errors are failures, not an outage
        log.add(_rec(float(i), "http-500", 500))
        log.add(_rec(i + 0.5, "connect") if i % 2 else _rec(i + 0.5, "http-500", 500))
    assert log.all() == []


def test_breaker_probes_one_at_a_time_at_a_bounded_rate() -> None:
    log = OutageLog()
    breaker = Breaker(log)
    assert breaker.admit(0.0) == SEND
    _outage(log, 1.0)
    assert breaker.admit(100.0) == HOLD  # just opened: the first probe waits
    assert breaker.admit(100.0 + PROBE_FIRST_S) == PROBE
    assert breaker.admit(100.0 + PROBE_FIRST_S + 0.01) == HOLD  # one probe at a time
    breaker.probed(102.0)
    gaps = []
    now = 102.0
    for _ in range(8):  # every probe fails: the gaps grow, capped
        while breaker.admit(now) != PROBE:
            now += 0.05
        gaps.append(now)
        log.add(_rec(now, "connect"))
        breaker.probed(now)
    steps = [b - a for a, b in zip(gaps, gaps[1:], strict=False)]
    assert all(s >= PROBE_FIRST_S for s in steps), steps  # never more than 1 request/s
    assert all(b >= a - 0.06 for a, b in zip(steps, steps[1:], strict=False)), steps  # backs off
    assert steps[-1] <= 4.1, steps  # capped
    log.add(_rec(now + 1.0))  # a success closes it
    assert breaker.admit(now + 1.0) == SEND


def test_windows_merge_across_workers_and_state_round_trips() -> None:
    a, b = OutageLog(), OutageLog()
    _outage(a, 10.0, lost=3, back=14.0)
    _outage(b, 10.2, lost=5, back=14.5)
    _outage(b, 30.0, lost=1, back=31.0)
    merged = OutageLog.from_state(json.loads(json.dumps(a.state())))
    merged.merge(OutageLog.from_state(b.state()))
    s = section(merged, 0.0)
    first, second = s.windows
    assert (s.count, first.workers, second.workers) == (2, 2, 1)
    assert first.start_s == pytest.approx(10.01) and first.end_s == 14.5
    assert first.failures[LOST] == 8 and first.recovered
    assert s.lost_requests == first.lost_requests + second.lost_requests
    assert first.resolution_s == pytest.approx(0.49)  # the last failed try ended at 14.01


def test_verdict_is_never_a_silent_pass() -> None:
    ended = OutageLog()
    _outage(ended, 10.0, back=12.0)
    assert verdict_of(section(OutageLog(), 0.0), judged=False) == ("pass", [])
    status, reasons = verdict_of(section(ended, 0.0), judged=False)
    assert status == "inconclusive" and "no lost_requests SLO judged it" in reasons[-1]
    assert "recovered after 2.0 s" in reasons[0], reasons
    assert verdict_of(section(ended, 0.0), judged=True)[0] == "pass"  # the SLO's verdict judges
    still = OutageLog()
    _outage(still, 10.0)
    status, reasons = verdict_of(section(still, 0.0), judged=True)
    assert status == "fail" and "not recovered by the run's end" in reasons[0]


def test_lost_requests_slo() -> None:
    slo = parse_slo("lost_requests<=5")
    assert (slo.metric, slo.bound, slo.unit) == ("lost_requests", 5.0, "requests")
    st = RunStats(total=10, ok=2)
    st.lost_requests = 8
    (v,) = evaluate([slo], st)
    assert not v.passed and v.observed == 8 and "8 requests" in v.line()
    st.lost_requests = 0
    assert evaluate([slo], st)[0].passed  # no outage, nothing lost
    for bad in ("lost_requests<=5%", "lost_requests<=2.5", "lost_requests_p95<=3"):
        with pytest.raises(UsageError, match="lost_requests"):
            parse_slo(bad)


def test_down_watch_ignores_sends_that_were_never_made() -> None:
    watch = DownWatch(DownRule(3, 0.0), started=0.0)
    for i in range(2):
        watch.feed(_rec(float(i), "connect"))
    for i in range(20):
        assert watch.feed(_rec(3.0 + i, LOST)) is None
    assert watch.feed(_rec(30.0, "connect")) is not None  # the third probe failure in a row


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _restart_mid_run(tmp_path: Path, *args: str, down_s: float = 4.0) -> dict[str, Any]:
    """``servecheck load`` on a reference server stopped once the run is under way and started
    again, on the same port, ``down_s`` later."""
    cfg = ServerConfig(ttft_ms=30, itl_ms=5)
    port = _free_port()
    box = [RunningServer(cfg, port=port).start()]
    out = tmp_path / "reports"
    proc = subprocess.Popen(
        _cmd(_targets(tmp_path, box[0]), out, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(out.glob("*/records-*.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.2)  # the run is under way: its first records are written
        time.sleep(1.5)
        box[0].stop()
        time.sleep(down_s)
        box[0] = RunningServer(cfg, port=port).start()
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        threading.Thread(target=box[0].stop).start()
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    s = json.loads((run_dir / "summary.json").read_text())
    s["_rc"], s["_out"], s["_dir"] = proc.returncode, stdout + stderr, run_dir
    return s


@pytest.mark.slow
def test_open_loop_rides_out_a_restart(tmp_path: Path) -> None:
    s = _restart_mid_run(
        tmp_path, "--rate", "10", "--duration", "14s", "--error-budget", "90%", "--records", "all"
    )
    (w,) = s["outages"]["windows"]
    assert w["recovered"] and w["recover_s"] > 0, w
    assert w["failures"].get("connect", 0) >= OPEN_AFTER and w["failures"].get(LOST, 0) > 0, w
    sent = w["lost_requests"] - w["failures"][LOST]  # what was sent at the dead target
    assert sent < 0.5 * 10 * w["recover_s"], w  # bounded: far below the run's 10/s
    assert s["outages"]["lost_requests"] == w["lost_requests"]
    assert s["requests"]["errors"][LOST] == w["failures"][LOST]
    assert s["requests"]["ok"] > 0  # it came back and served again
    # No lost_requests SLO: INCONCLUSIVE, and the outage is in the reasons.
    assert s["verdict"] == "inconclusive" and s["_rc"] == 1, s["reasons"]
    assert any("recovered after" in r for r in s["reasons"]), s["reasons"]
    assert s["server"].get("voided_by_outage") is True
    assert "<h4>Outages</h4>" in (s["_dir"] / "report.html").read_text()


@pytest.mark.slow
def test_lost_requests_slo_fails_a_run_with_an_outage(tmp_path: Path) -> None:
    s = _restart_mid_run(
        tmp_path,
        "--users",
        "3",
        "--duration",
        "12s",
        "--error-budget",
        "90%",
        "--slo",
        "lost_requests<=0",
    )
    (w,) = s["outages"]["windows"]
    assert w["recovered"] and LOST not in w["failures"], w  # closed loop: the users waited
    slo = next(v for v in s["slo"] if v["metric"] == "lost_requests")
    assert not slo["passed"] and slo["observed"] == w["lost_requests"] > 0, slo
    assert s["verdict"] == "fail" and s["_rc"] == 1


def test_an_outage_still_open_at_the_end_counts_its_time_down() -> None:
    """Issue 42 item 8: an outage from 14.3 s to the end was reported with down_s 0.0."""
    log = OutageLog()
    log.add(_rec(1.0))
    for i in range(OPEN_AFTER):
        log.add(_rec(14.3 + 0.01 * i, "connect"))
    assert log.open is not None
    out = section(log, origin=0.0, end=30.6)
    (w,) = out.windows
    assert not w.recovered and w.end_s is None
    assert out.down_s == pytest.approx(30.6 - w.start_s, abs=1e-3)
    assert section(log, origin=0.0).down_s == 0.0  # no end known: nothing to count to
