"""Hung but healthy (issue 45 item 1): an engine that answers /health while it generates nothing.

The reference server's ``livelock`` fault (reference/livelock.py) does exactly that. A load and a
soak against it must stop soon after the engine stuck and fail as "hung but healthy", with the
evidence (health answers, engine counters, open streams); a clean run never says it. The bounds
on wall time are guards against a hang (a load planned for 5 minutes must end far sooner), never
speed claims. The decision itself (analysis/hung.py) is tested on scripted observations.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from servecheck.analysis.hung import (
    HungRule,
    HungWatch,
    default_stall_s,
    parse_hung_after,
)
from servecheck.errors import UsageError
from servecheck.reference.inprocess import RunningServer
from tests.hostile.support import communicate, load_cmd
from tests.soak.support import TINY, run_soak

ROOT = Path(__file__).resolve().parents[2]
NAME = "hung but healthy"
STALL = "3s"  # N in these tests; K (the canary's period) below
CANARY = "2s"


def _watch(**rule: float) -> HungWatch:
    values = {"stall_s": 5.0, "canary_every_s": 0.0, "canary_within_s": 5.0, **rule}
    return HungWatch(HungRule(**values), started=1000.0)


# ------------------------------------------------------------------ the decision, scripted


def test_the_engine_witness_needs_running_requests_and_a_flat_counter_for_n_seconds() -> None:
    w = _watch()
    for t in range(1000, 1012):
        w.saw_health(t, 200, "http://e/health")
        w.saw_engine(t, 2.0, 500.0)
        if t < 1005:
            assert w.check(t) is None, t
    found = w.check(1011)
    assert found is not None and found.witness == "engine"
    assert found.line.startswith("hung but healthy at t=11.0s: the engine reports 2 running")
    assert "counter stayed at 500" in found.line and "/health answered 200" in found.line
    evidence = found.to_dict()
    assert evidence["engine"]["generation_tokens_total"] == 500.0
    assert evidence["health"][-1]["status"] == 200


def test_a_moving_counter_or_an_idle_engine_is_not_hung() -> None:
    w = _watch()
    for k, t in enumerate(range(1000, 1030)):
        w.saw_health(t, 200, "http://e/health")
        w.saw_engine(t, 3.0, 100.0 + k)  # a token a second: slow, not hung
        assert w.check(t) is None
    idle = _watch()
    for t in range(1000, 1030):
        idle.saw_health(t, 200, "http://e/health")
        idle.saw_engine(t, 0.0, 100.0)  # nothing running: nothing to generate
        assert idle.check(t) is None


def test_no_finding_while_health_fails_the_target_is_down_not_hung() -> None:
    w = _watch()
    for t in range(1000, 1030):
        w.saw_health(t, 503, "http://e/health")
        w.saw_engine(t, 2.0, 7.0)
        w.saw_client(t, 4, t - 1000.0, None)
        assert w.check(t) is None


def test_the_client_witness_open_streams_without_a_token() -> None:
    w = _watch()
    w.saw_health(1000, 200, "http://e/health")
    w.saw_client(1000, 3, 0.0, 1000.0)
    assert w.check(1004) is None
    w.saw_health(1006, 200, "http://e/health")
    w.saw_client(1006, 3, 6.0, 1000.0)
    found = w.check(1006)
    assert found is not None and found.witness == "client"
    assert "3 open streams got no token for 6 s" in found.line
    assert found.to_dict()["streams"] == {"open": 3, "oldest_open_s": 6.0, "no_token_for_s": 6.0}


def test_a_canary_miss_counts_only_when_nothing_else_moved() -> None:
    busy = _watch(canary_every_s=2.0)
    busy.saw_health(1000, 200, "http://e/health")
    busy.saw_engine(1000, 8.0, 10.0)
    busy.saw_engine(1009, 8.0, 900.0)  # a queue that still moves: the canary waited behind it
    busy.saw_canary(1010, 5.0, False, "ReadTimeout")
    assert busy.check(1010) is None
    stuck = _watch(canary_every_s=2.0)
    stuck.saw_health(1000, 200, "http://e/health")
    stuck.saw_canary(1006, 5.0, False, "ReadTimeout")
    found = stuck.check(1006)
    assert found is not None and found.witness == "canary"
    assert "a 1-token canary request got no token within 5 s (ReadTimeout)" in found.line


def test_n_defaults_from_the_latency_budget() -> None:
    assert default_stall_s(None, None) == 30.0
    assert default_stall_s(0.5, None) == 10.0  # 4 x 0.5 s, under the 10 s floor
    assert default_stall_s(5.0, 0.1) == 20.0  # 4 x TTFT beats 50 x ITL
    assert default_stall_s(1.0, 0.5) == 25.0  # 50 x ITL beats 4 x TTFT
    rule = HungRule().resolved(5.0, None)
    assert (rule.stall_s, rule.canary_within_s) == (20.0, 20.0)


@pytest.mark.parametrize(
    ("after", "canary", "expected"),
    [
        pytest.param(None, None, HungRule(), id="defaults"),
        pytest.param("45s", "1m,20s", HungRule(45.0, 60.0, 20.0), id="given"),
        pytest.param("off", "off", HungRule(0.0, 0.0, None), id="off"),
    ],
)
def test_parse_hung_after(after: str | None, canary: str | None, expected: HungRule) -> None:
    assert parse_hung_after(after, canary) == expected


@pytest.mark.parametrize("bad", [pytest.param("soon", id="words"), pytest.param("-3s", id="neg")])
def test_a_bad_hung_after_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UsageError, match=r"hung_after .*give a duration"):
        parse_hung_after(bad)


# ------------------------------------------------------------------ load and soak, end to end


def _targets(tmp_path: Path, server: RunningServer) -> Path:
    path = tmp_path / "targets.yaml"
    path.write_text(
        f"targets:\n  - name: ref\n    base_url: {server.base_url}\n    engine: reference\n"
        "    models: [ref-tiny]\n    timeout_s: 120\n    connect_timeout_s: 2\n"
    )
    return path


def _load(tmp_path: Path, server: RunningServer, run_id: str, duration: str) -> tuple[int, str]:
    cmd = load_cmd(
        _targets(tmp_path, server),
        tmp_path / "reports",
        "--run-id",
        run_id,
        "--users",
        "3",
        "--duration",
        duration,
        "--allow-lag",
        "--hung-after",
        STALL,
        "--canary",
        CANARY,
        target="ref",
    )
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    # N + K is a few seconds; 120 s only guards against a run that never stops
    stdout, stderr = communicate(proc, 120)
    return proc.returncode, stdout + stderr


@pytest.mark.slow
def test_a_load_against_a_livelocked_engine_fails_hung_but_healthy(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference("livelock", livelock_after_requests=30, ttft_ms=5, itl_ms=5)
    started = time.monotonic()
    code, out = _load(tmp_path, server, "stuck", "5m")
    assert time.monotonic() - started < 120, "a 5-minute load was not stopped by the finding"
    assert code == 1, out
    s = json.loads((tmp_path / "reports" / "stuck" / "summary.json").read_text())
    assert s["verdict"] == "fail" and s["partial"] is True, s["reasons"]
    assert s["reasons"][0].startswith(f"{NAME} at t="), s["reasons"]
    hung = s["hung"]
    assert hung["witness"] in ("client", "engine", "canary"), hung
    assert hung["health"] and all(h["status"] == 200 for h in hung["health"]), hung["health"]
    assert hung["engine"]["requests_running"] >= 1, hung["engine"]
    assert hung["streams"]["open"] >= 1 or hung["witness"] != "client", hung["streams"]
    assert f"{NAME} at t=" in out  # the console line
    run_dir = tmp_path / "reports" / "stuck"
    for name in ("summary.txt", "summary.md", "report.html"):
        assert f"{NAME} at t=" in (run_dir / name).read_text(), name
    assert not list(run_dir.glob("heartbeat-*")), "the watch's heartbeat files stayed behind"


@pytest.mark.slow
def test_a_clean_load_never_says_hung(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference(ttft_ms=5, itl_ms=5)
    code, out = _load(tmp_path, server, "clean", "8s")
    assert code == 0, out
    s = json.loads((tmp_path / "reports" / "clean" / "summary.json").read_text())
    assert "hung" not in s and NAME not in json.dumps(s), s["reasons"]
    assert NAME not in out


@pytest.mark.slow
def test_a_soak_against_a_livelocked_engine_fails_hung_but_healthy(
    make_reference: Callable[..., RunningServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_reference("livelock", livelock_after_requests=40, kv_blocks=64, ttft_ms=5)
    plan = [*TINY[:1], "100", *TINY[2:]]  # 100 cycles would take minutes
    started = time.monotonic()
    code, run_dir = run_soak(
        server, tmp_path, "stuck", *plan, "--no-rss", "--hung-after", STALL, "--canary", CANARY
    )
    assert time.monotonic() - started < 120, "a 100-cycle soak was not stopped by the finding"
    out = capsys.readouterr().out
    assert code == 1, out
    data = json.loads((run_dir / "soak.json").read_text())
    assert data["failures"][0].startswith(f"{NAME} at t="), data["failures"]
    assert data["hung"]["health"][-1]["status"] == 200, data["hung"]
    assert len(data["cycles"]) < 100
    assert f"{NAME} at t=" in out
    for name in ("summary.md", "report.html"):
        assert f"{NAME} at t=" in (run_dir / name).read_text(), name


@pytest.mark.slow
def test_a_soak_whose_engine_sticks_while_idle_fails_by_the_canary(
    make_reference: Callable[..., RunningServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Long idle phases with a canary every second: the engine sticks at 6 s, mostly while idle,
    where no stream and no counter can tell and the canary does (should it stick during a load
    cycle, the streams tell first)."""
    server = make_reference("livelock", livelock_after_s=6.0, kv_blocks=64, ttft_ms=5)
    plan = ["--cycles", "100", "--cycle", "0.5s", "--idle", "4s", "--settle", "0.4s"]
    code, run_dir = run_soak(
        server,
        tmp_path,
        "idle",
        *plan,
        *TINY[8:],
        "--no-rss",
        "--hung-after",
        STALL,
        "--canary",
        "1s,2s",
    )
    out = capsys.readouterr().out
    assert code == 1, out
    data = json.loads((run_dir / "soak.json").read_text())
    assert data["failures"][0].startswith(f"{NAME} at t="), data["failures"]
    # the canaries sent in the idle phases are in the evidence, whichever witness spoke first
    assert data["hung"]["canaries"], data["hung"]
    if data["hung"]["witness"] == "canary":
        assert not data["hung"]["canaries"][-1]["token"], data["hung"]


@pytest.mark.parametrize(
    ("error", "status", "alive"),
    [
        pytest.param(None, 200, True, id="finished"),
        pytest.param("rate-limited", 429, True, id="refused-429"),
        pytest.param("http-error", 500, True, id="answered-500"),
        pytest.param("timeout", 200, False, id="stuck-after-200"),
        pytest.param("connect", None, False, id="no-connection"),
    ],
)
def test_only_an_answer_is_a_sign_of_life(
    error: str | None, status: int | None, alive: bool
) -> None:
    """A server that refuses fast is not hung; a stream stuck after its 200 that timed out is
    no progress, so timeouts shorter than N do not hide a livelock from the client witness."""
    from servecheck.load.hung_watch import answered
    from servecheck.records.record import RequestRecord

    rec = RequestRecord(target="t", scenario="s", worker="w", seq=1, t_intended=0.0, t_sent=0.0)
    rec.error, rec.status = error, status
    assert bool(answered(rec)) is alive


def _one_chunk_server(content: str) -> tuple[ThreadingHTTPServer, str]:
    """A server whose every chat stream is one chunk with ``content``, a finish and [DONE]."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            chunk = {
                "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": "length"}]
            }
            body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


@pytest.mark.parametrize("content", ["", "OK"], ids=["empty-token", "text-token"])
def test_a_canary_answered_whole_is_life_even_without_a_text_token(content: str) -> None:
    """vLLM CPU's tiny random model answered the 1-token canary with a token that decodes to
    nothing; a soak then said "hung but healthy" on a healthy engine. A whole answer is life."""
    from servecheck.config.model import Target
    from servecheck.load.hung_watch import HungMonitor

    server, base = _one_chunk_server(content)
    try:
        rule = HungRule(10.0, 1.0, 5.0).resolved(None, None)
        monitor = HungMonitor.for_target(Target(name="t", base_url=base), "m", rule, time.time())
        monitor._one_canary(httpx.Client(), {}, 5.0)
    finally:
        server.shutdown()
    assert [c["token"] for c in monitor.watch.canaries] == [True]


class _Page:
    status_code = 200
    text = (
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\n"
        "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total 7\n"
    )


class _Http:
    def __init__(self) -> None:
        self.urls: list[str] = []

    def get(self, url: str) -> _Page:
        self.urls.append(url)
        return _Page()


def test_the_watch_reads_the_samplers_scrapes_instead_of_scraping_again() -> None:
    """The run's Prometheus sampler already scrapes /metrics every second; the watch reads its
    readings while they are fresh (one scrape of the engine, not two), in time order, and
    scrapes the page itself when they are stale or are not of its page and names."""
    from servecheck.config.model import Target
    from servecheck.load.hung_watch import HungMonitor
    from servecheck.telemetry.samplers import PrometheusSampler

    target = Target(name="t", base_url="http://127.0.0.1:9/v1", engine="vllm")
    rule = HungRule(10.0, 1.0, 5.0).resolved(None, None)

    def monitor() -> HungMonitor:
        return HungMonitor.for_target(target, "m", rule, 1000.0)

    sampler = PrometheusSampler(Path("unused.jsonl"), "http://127.0.0.1:9/metrics", "vllm",
                                interval_s=1.0)  # fmt: skip
    m, http = monitor().share(sampler), _Http()
    sampler.latest = (1000.5, {"requests_running": 3.0, "generation_tokens_total": 40.0})
    m._engine(http, 1001.0)
    assert http.urls == [] and (m.watch.running, m.watch.generated) == (3.0, 40.0)
    m._engine(http, 1001.5)  # the same reading again: nothing new to say
    assert http.urls == [] and m.watch.flat_since == 1000.5
    m._engine(http, 1000.5 + 2 * m.poll_s + 1)  # the sampler went quiet: scrape here
    assert http.urls == ["http://127.0.0.1:9/metrics"]
    assert (m.watch.running, m.watch.generated) == (2.0, 7.0)
    own = m._engine_at
    sampler.latest = (own - 0.5, {"requests_running": 9.0, "generation_tokens_total": 1.0})
    m._engine(http, own + 0.1)  # fresh, but older than the watch's own scrape: not taken back
    assert m.watch.running == 2.0 and len(http.urls) == 1
    for other in (
        PrometheusSampler(Path("u.jsonl"), "http://127.0.0.1:9/other", "vllm", interval_s=1.0),
        PrometheusSampler(Path("u.jsonl"), "http://127.0.0.1:9/metrics", "vllm", interval_s=10.0),
        PrometheusSampler(Path("u.jsonl"), "http://127.0.0.1:9/metrics", "sglang", interval_s=1.0),
    ):
        assert monitor().share(other).shared is None
