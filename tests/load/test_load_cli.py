"""``servecheck load`` end to end against the reference server (Locust in subprocesses).

No timed assertions: the reference server's latencies are only used to make SLOs fail for a
reason (its latency-spikes fault), never to check how fast anything was measured.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from servecheck.load.generator.lane import lane_wanted
from servecheck.records.parquet import read_run_records
from servecheck.reference.hostile import hostile
from servecheck.reference.inprocess import RunningServer
from tests.hostile.support import communicate, load_cmd

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _targets(tmp_path: Path, server: RunningServer, slo: list[str] | None = None) -> Path:
    lines = [
        "targets:",
        "  - name: ref",
        f"    base_url: {server.base_url}",
        "    engine: reference",
        "    timeout_s: 20",
    ]
    if server.config.api_key:
        lines.append(f"    api_key: {server.config.api_key}")
    if slo:
        lines.append("    slo: [" + ", ".join(json.dumps(s) for s in slo) + "]")
    p = tmp_path / "targets.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p


def _cmd(targets: Path, out: Path, *args: str) -> list[str]:
    """``servecheck load`` on the self-test's reference target. ``--allow-lag``: these tests judge
    what the run measured and how it ended, not whether a busy CI core kept up (there a run is
    rightly INCONCLUSIVE for generator lag, which flaked them); the lag rule itself is tested in
    tests/load/test_stats.py and tests/hostile/test_load_verdicts.py."""
    lag = [] if "--allow-lag" in args else ["--allow-lag"]
    return load_cmd(targets, out, *lag, *args, target="ref", tokenize=True)


def _run(
    cmd: list[str], timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **env} if env else None,
    )


def _summary(out: Path) -> dict:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return json.loads((run_dir / "summary.json").read_text())


@pytest.fixture(scope="module")
def fast_server(make_reference: Callable[..., RunningServer]) -> RunningServer:
    return make_reference(ttft_ms=20, itl_ms=2, api_key="sk-load-selftest-1234")


def test_closed_loop_run_writes_the_report(fast_server: RunningServer, tmp_path: Path) -> None:
    targets = _targets(tmp_path, fast_server, slo=["error_rate<=1%"])
    out = tmp_path / "reports"
    proc = _run(
        _cmd(
            targets,
            out,
            "--users",
            "3",
            "--max-requests",
            "12",
            "--slo",
            "ttft_p95<=30s",
            "--no-tokenize",
        )
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    assert s["requests"]["total"] == 12 and s["requests"]["ok"] == 12, s["requests"]
    assert s["records"]["merged"] == 12 and s["records"]["bad_lines"] == 0
    assert [v["slo"] for v in s["slo"]] == ["ttft_p95<=30s", "error_rate<=1%"]
    assert [v["source"] for v in s["slo"]] == ["cli", "targets.yaml"]
    assert s["verdict"] == "pass" and s["exit_code"] == 0
    assert s["tokens"]["output"] == s["tokens"]["output_usage"] > 0
    assert s["prompt_method"].startswith("approx:chars-per-token")
    run_dir = Path(out) / s["run_id"]
    for name in ("records.parquet", "summary.txt", "locust_stats.csv", "load-config.json"):
        assert (run_dir / name).is_file(), f"{name} missing from {sorted(os.listdir(run_dir))}"
    assert "sk-load-selftest-1234" not in (run_dir / "load-config.json").read_text()
    recs = list(read_run_records(run_dir))
    ids = {r["request_id"] for r in recs}
    assert len(ids) == 12 and all(i.startswith(s["run_id"] + "-") for i in ids), (
        ids
    )  # sent as X-Request-Id
    assert "PASS ttft_p95<=30s" in proc.stdout
    if sys.platform == "linux":  # the native lane (or reader thread) read them, kernel-timed
        kind = "lane" if lane_wanted() else "thread"
        assert s["generator"]["reader"]["kinds"] == [kind], s["generator"]["reader"]
        assert s["generator"]["reader"]["clock"] == "kernel", s["generator"]["reader"]
        thread = s["generator"]["reader"]["thread"]
        assert thread["reads"] >= 12 and 0 < thread["cpu_s"] <= s["generator"]["cpu_s"], thread


def test_open_loop_plans_and_sends(fast_server: RunningServer, tmp_path: Path) -> None:
    targets = _targets(tmp_path, fast_server)
    out = tmp_path / "reports"
    # The pure-Python reader (what runs where the C extension is not built), under Locust.
    proc = _run(
        _cmd(targets, out, "--rate", "10/s", "--duration", "2s", "--allow-lag"),
        env={"SERVECHECK_READER": "loop"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    assert s["generator"]["reader"]["kinds"] == ["loop"], s["generator"]["reader"]
    assert s["mode"] == "fixed" and s["schedule"]["planned"] == 20
    assert s["requests"]["total"] == 20, s["schedule"]
    assert s["latency_ms"]["lag"]["count"] == 20
    assert s["prompt_method"] == "tokenize:vllm"


def test_gamma_arrivals_send_what_they_planned(fast_server: RunningServer, tmp_path: Path) -> None:
    targets = _targets(tmp_path, fast_server)
    out = tmp_path / "reports"
    args = ("--rate", "10/s", "--duration", "3s", "--burstiness", "0.5", "--seed", "7")
    proc = _run(_cmd(targets, out, *args, "--allow-lag"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    assert s["mode"] == "gamma" and s["burstiness"] == 0.5, s["schedule"]
    planned = s["schedule"]["planned"]
    assert planned is not None and planned > 0
    # every planned arrival was sent and measured, at its scheduled time (lag recorded per send)
    assert s["requests"]["total"] == planned, s["schedule"]
    assert s["latency_ms"]["lag"]["count"] == planned


@pytest.mark.parametrize(
    ("mode", "processes", "lines"),
    [
        pytest.param("none", "1", 0, id="none"),
        pytest.param("sample:7", "1", 7, id="sample"),
        pytest.param("sample:7", "2", 7, id="sample-two-processes"),
        pytest.param("none", "2", 0, id="none-two-processes"),
        pytest.param("all", "2", 40, id="all-two-processes"),
    ],
)
def test_records_keep_what_was_asked_and_the_summary_comes_from_the_aggregates(
    fast_server: RunningServer, tmp_path: Path, mode: str, processes: str, lines: int
) -> None:
    """Whatever --records keeps, the figures are every request's (the workers' aggregates), the
    records are on disk once (no per-worker copies), and the report and compare still work."""
    targets = _targets(tmp_path, fast_server)
    out = tmp_path / "reports"
    args = ("--users", "4", "--max-requests", "40", "--records", mode, "--processes", processes)
    proc = _run(_cmd(targets, out, *args, "--no-tokenize"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    run_dir = out / s["run_id"]
    assert s["requests"]["total"] == s["requests"]["ok"] == 40, s["requests"]
    assert s["aggregate"]["source"] == "workers", s["aggregate"]
    assert s["latency_ms"]["ttft"]["count"] == 40 and s["latency_ms"]["itl"]["count"] > 40
    assert s["records"]["kept"]["lines"] == lines, s["records"]
    assert s["aggregate"]["samples"]["ttft"] == {"kept": 40, "of": 40}
    if processes != "1":  # the workers sent what they kept, and the master's ledger agrees
        transport = s["records"]["transport"]
        assert transport["verified"] and transport["requests_lost"] == 0, transport
    assert not list(run_dir.glob("records-*.jsonl")) and not list(run_dir.glob("local/records-*"))
    assert len(list(read_run_records(run_dir))) == lines
    assert (run_dir / "records.parquet").exists() == bool(lines)  # the one copy, compact
    export = _run(
        [
            sys.executable,
            "-m",
            "servecheck",
            "records",
            str(run_dir),
            "--jsonl",
            str(tmp_path / "x.jsonl"),
        ]
    )
    if lines:
        assert export.returncode == 0 and f"wrote {lines} lines" in export.stdout, export.stderr
        assert len((tmp_path / "x.jsonl").read_text().splitlines()) == lines
    else:
        assert export.returncode == 2 and "--records none" in export.stderr, export.stderr
    assert "TTFT distribution" in (run_dir / "report.html").read_text()  # from samples.json
    cmp = _run([sys.executable, "-m", "servecheck", "compare", str(run_dir), str(run_dir)])
    assert cmp.returncode == 0 and "ttft_p50" in cmp.stdout, cmp.stdout + cmp.stderr


def test_two_runs_with_several_processes_on_one_host_do_not_collide(
    fast_server: RunningServer, tmp_path: Path
) -> None:
    """Locust's forked workers reach their master on port 5557 unless told otherwise: two
    ``--processes 2`` runs at once on one host made the second fail with "Address already in
    use" (a CI flake between parallel tests, and two users' runs on one box). Each run's master
    now takes a free loopback port."""
    targets = _targets(tmp_path, fast_server)
    args = ("--users", "2", "--duration", "4s", "--processes", "2", "--no-tokenize")
    procs = [
        subprocess.Popen(
            _cmd(targets, tmp_path / f"reports-{i}", *args),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outs = [communicate(p, 90)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    for i in range(2):
        assert _summary(tmp_path / f"reports-{i}")["requests"]["ok"] > 0


def _records(out: Path) -> list[dict]:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return list(read_run_records(run_dir))


def test_output_tokens_are_exact_where_the_engine_ignores_eos(
    fast_server: RunningServer, tmp_path: Path
) -> None:
    targets = _targets(tmp_path, fast_server)
    out = tmp_path / "reports"
    args = ("--users", "2", "--max-requests", "12", "--input-tokens", "40", "--output-tokens", "9")
    proc = _run(_cmd(targets, out, *args))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    assert s["lengths"]["output_length"] == "exact (ignore_eos)", s["lengths"]
    recs = _records(out)
    assert len(recs) == 12 and {r["output_tokens"] for r in recs} == {9}
    prompts = [r["prompt_tokens"] for r in recs]  # 40 measured with /tokenize, plus the template
    assert min(prompts) >= 40 and max(prompts) - min(prompts) <= 3, prompts


def test_output_tokens_spread(fast_server: RunningServer, tmp_path: Path) -> None:
    targets = _targets(tmp_path, fast_server)
    out = tmp_path / "reports"
    args = ("--users", "2", "--max-requests", "24", "--output-tokens", "12:6", "--seed", "3")
    proc = _run(_cmd(targets, out, *args))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = [r["output_tokens"] for r in _records(out)]
    assert len(got) == 24 and min(got) >= 1 and len(set(got)) > 3, got


def test_slo_breach_exits_1(make_reference: Callable[..., RunningServer], tmp_path: Path) -> None:
    server = make_reference("latency-spikes", ttft_ms=5, itl_ms=1)
    targets = _targets(tmp_path, server)
    out = tmp_path / "reports"
    proc = _run(
        _cmd(
            targets,
            out,
            "--users",
            "2",
            "--max-requests",
            "10",
            "--slo",
            "ttft_max<=500ms",
            "--slo",
            "error_rate<=1%",
            "--no-tokenize",
        )
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    s = _summary(out)
    verdicts = {v["slo"]: v for v in s["slo"]}
    assert (
        not verdicts["ttft_max<=500ms"]["passed"] and verdicts["ttft_max<=500ms"]["observed"] > 500
    )
    assert verdicts["error_rate<=1%"]["passed"]
    assert s["verdict"] == "fail" and s["goodput"] < 1.0
    assert "FAIL ttft_max<=500ms" in proc.stdout and "verdict: FAIL" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--users", "2"],
            "servecheck load: error: refusing to start an unbounded load test: give --duration (e.g. 5m) or --max-requests N",
            id="no-bound",
        ),
        pytest.param(
            ["--users", "2", "--rate", "3/s", "--duration", "1s"],
            "servecheck load: error: give exactly one of --users N (closed loop), --rate R/s (open loop) or a plan with a shape; got --users and --rate",
            id="two-modes",
        ),
        pytest.param(
            ["--users", "2", "--duration", "1s", "--slo", "tfft_p95<=1s"],
            "servecheck load: error: SLO 'tfft_p95<=1s': unknown metric 'tfft' (did you mean \"ttft_p95\"?)*",
            id="bad-slo",
        ),
        pytest.param(
            ["--users", "2", "--duration", "1s", "--burstiness", "0.5"],
            "servecheck load: error: --burstiness shapes open-loop arrivals: give --rate R/s with it",
            id="burstiness-without-rate",
        ),
        pytest.param(
            ["--rate", "5/s", "--duration", "1s", "--arrival", "poisson", "--burstiness", "2"],
            "servecheck load: error: --burstiness shapes gamma arrivals, not --arrival poisson",
            id="burstiness-with-poisson",
        ),
        pytest.param(
            ["--rate", "5/s", "--duration", "1s", "--burstiness", "0"],
            "servecheck load: error: burstiness '0': must be a positive number (1 is Poisson)",
            id="burstiness-zero",
        ),
        pytest.param(
            ["--users", "2", "--duration", "1s", "--output-tokens", "0"],
            "servecheck load: error: --output-tokens '0': the mean must be at least 1 token",
            id="output-tokens-zero",
        ),
        pytest.param(
            ["--users", "2", "--duration", "1s", "--scenario", "chta"],
            "servecheck load: error: unknown scenario 'chta' (did you mean \"chat\"?)*",
            id="bad-scenario",
        ),
    ],
)
def test_usage_errors_exit_2(
    fast_server: RunningServer,
    tmp_path: Path,
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import fnmatch

    from servecheck.cli import main

    cmd = _cmd(_targets(tmp_path, fast_server), tmp_path / "reports", *args)
    assert main(cmd[3:]) == 2  # in-process: usage errors stop before Locust starts
    err = capsys.readouterr().err.strip()
    assert fnmatch.fnmatch(err, message), err
    assert not (tmp_path / "reports").exists(), (
        "nothing may be written before the options are valid"
    )


def test_records_survive_kill_9(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference(ttft_ms=20, itl_ms=5)
    out = tmp_path / "reports"
    cmd = _cmd(
        _targets(tmp_path, server), out, "--users", "4", "--duration", "60s", "--no-tokenize"
    )
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        files: list[Path] = []
        for _ in range(600):  # bounded wait (60 s) for at least 10 finished requests
            files = list(out.glob("*/records-*.jsonl"))
            if files and sum(f.read_bytes().count(b"\n") for f in files) >= 10:
                break
            time.sleep(0.1)
        assert files, "no record file appeared"
        victims = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=20)
    time.sleep(0.2)
    total = 0
    for f in files:
        data = f.read_bytes()
        complete = data[: data.rfind(b"\n") + 1].splitlines()
        for line in complete:
            rec = json.loads(line)  # every finished line parses
            assert rec["error"] is None and rec["ttft"] is not None
        total += len(complete)
    assert total >= 10
    assert not list(out.glob("*/summary.json")), "a killed run must not pretend to have a summary"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_distributed(
    targets: Path,
    out: Path,
    master_only: list[str],
    common: list[str],
    env: dict[str, str] | None = None,
    workers: int = 2,
) -> tuple[int, str]:
    """A ``--master`` (with ``master_only`` and ``common``) and ``workers`` ``--worker``
    processes (``common``) on loopback; the master's exit code and output."""
    master = subprocess.Popen(
        _cmd(targets, out, "--master", *master_only, *common),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    procs = [
        subprocess.Popen(
            _cmd(targets, out, "--worker", *common),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        for _ in range(workers)
    ]
    try:
        stdout, stderr = master.communicate(timeout=120)
    finally:
        for w in procs:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
    return master.returncode, stdout + stderr


def test_distributed_master_and_two_workers(fast_server: RunningServer, tmp_path: Path) -> None:
    targets = _targets(tmp_path, fast_server)
    out = tmp_path / "reports"
    port = str(_free_port())
    common = [
        "--run-id",
        "dist",
        "--expect-workers",
        "2",
        "--master-port",
        port,
        "--max-requests",
        "24",
        "--no-tokenize",
        "--allow-lag",  # about distribution: a loaded CI core's loop lag would make it INCONCLUSIVE
    ]
    rc, output = run_distributed(targets, out, ["--users", "4"], common)
    assert rc == 0, output
    s = json.loads((out / "dist" / "summary.json").read_text())
    per_worker = s["records"]["per_worker"]
    assert len(per_worker) == 2, per_worker
    assert s["records"]["merged"] == sum(per_worker.values()) == s["requests"]["total"] == 24
    assert all(n == 12 for n in per_worker.values()), per_worker
    stats = (out / "dist" / "locust_stats.csv").read_text().splitlines()
    rows = [line.split(",") for line in stats if ",/chat/completions," in line]
    assert int(rows[0][2]) == 24, f"Locust's own count differs from the records: {rows}"


def _max_in_flight(records: list[dict], start: float, end: float) -> int:
    """The most requests open at once between ``start`` and ``end`` (epoch seconds)."""
    events = sorted([(r["t_sent"], 1) for r in records] + [(r["t_done"], -1) for r in records])
    open_now, peak = 0, 0
    for t, step in events:
        open_now += step
        if start <= t <= end:
            peak = max(peak, open_now)
    return peak


def test_plan_shape_drives_the_user_count(fast_server: RunningServer, tmp_path: Path) -> None:
    """A LoadTestShape run end to end: 1 user, 4 users from 2 s to 4.5 s, then 1 user again. The
    records must show that concurrency (closed loop, no wait: each user always has a request open)."""
    targets = _targets(tmp_path, fast_server)
    plan = tmp_path / "spike.yaml"
    plan.write_text(
        "description: test spike\nscenario: chat\nshape: {kind: spike, base: 1, peak: 4, at: 2s, length: 2.5s, total: 6.5s}\n"
    )
    out = tmp_path / "reports"
    res = _run(_cmd(targets, out, "--plan", str(plan), "--no-tokenize", "--allow-lag"), timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    s = _summary(out)
    assert s["mode"] == "shape" and s["requests"]["errors"] == {}
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    records = list(read_run_records(run_dir))
    t0 = min(r["t_sent"] for r in records)
    assert _max_in_flight(records, t0 + 0.5, t0 + 1.7) == 1, "base stage: one user"
    assert _max_in_flight(records, t0 + 2.8, t0 + 4.2) == 4, "spike stage: four users"
    assert _max_in_flight(records, t0 + 5.5, t0 + 6.2) == 1, "after the spike: back to one user"


def test_abandon_scenario_hangs_up_on_purpose(fast_server: RunningServer, tmp_path: Path) -> None:
    targets = _targets(tmp_path, fast_server)
    out = tmp_path / "reports"
    proc = _run(
        _cmd(
            targets,
            out,
            "--scenario",
            "abandon",
            "--users",
            "4",
            "--max-requests",
            "40",
            "--no-tokenize",
        )
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    recs = list(read_run_records(out / s["run_id"]))
    abandoned = [r for r in recs if r["abandoned"]]
    assert s["requests"]["errors"] == {} and s["requests"]["abandoned"] == len(abandoned)
    assert 0 < len(abandoned) < 40, "a quarter of the requests, drawn per request"
    assert all(
        r["output_tokens"] is None and 4 <= r["output_tokens_client"] < 64 for r in abandoned
    )
    assert (
        s["latency_ms"]["e2e"]["count"] == 40 - len(abandoned)
        and s["latency_ms"]["ttft"]["count"] == 40
    )
    assert "abandoned on purpose" in proc.stdout


def test_the_progress_line_says_when_the_run_is_stopping(tmp_path: Path) -> None:
    """Issue 24.15: past the planned duration the line read ``load 8s/6s``."""
    from servecheck.load.progress import RecordTail

    tail = RecordTail(tmp_path)
    assert tail.line(3.0, 6.0, 60.0).startswith("load     3s/6s  done 0")
    stopping = tail.line(8.0, 6.0, 60.0)
    assert "8s/6s" not in stopping
    assert stopping.startswith(
        "load 6s done, stopping: requests in flight finish (2s of at most 60s)"
    )


def test_load_on_the_reference_target_starts_the_embedded_server(tmp_path: Path) -> None:
    """Issue 24.15: ``load --target reference`` did not start the built-in server (check, soak,
    accept and capacity do); a load run wrote no junit.xml."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SERVECHECK_REF_URL", "SERVECHECK_TARGETS_FILE", "SERVECHECK_TARGET")
    }
    env["PYTHONPATH"] = str(ROOT)
    cmd = [sys.executable, "-m", "servecheck", "load", "--target", "reference", "--quiet"]
    proc = subprocess.run(
        [*cmd, "--users", "1", "--max-requests", "5", "--allow-lag", "--out", "r"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,  # no targets.yaml here: the built-in one
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = (tmp_path / "r").iterdir()
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["requests"]["ok"] == 5 and s["base_url"] != "http://127.0.0.1:8000/v1", s["base_url"]
    import xml.etree.ElementTree as ET

    root = ET.parse(run_dir / "junit.xml").getroot()
    names = [c.get("name") for c in root.iter("testcase")]
    assert names == ["SLO ttft_p95<=500ms", "SLO error_rate<=0.5%", "load run verdict"], names
    assert root.find("testsuite").get("failures") == "0"  # type: ignore[union-attr]


def test_the_lane_hands_the_run_to_the_reactor_at_its_first_failure(tmp_path: Path) -> None:
    """Every other request answers 500: the lane's first failure ends the lane, the reactor sends
    the rest (where the error paths live), and the run still counts each request once."""
    with hostile("every-other-500") as srv:
        targets = tmp_path / "targets.yaml"
        targets.write_text(
            f"targets:\n  - name: ref\n    base_url: {srv.base_url}\n    timeout_s: 20\n"
        )
        out = tmp_path / "reports"
        proc = _run(_cmd(targets, out, "--users", "2", "--max-requests", "16", "--no-tokenize"))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the failures break the budget
    s = _summary(out)
    assert s["requests"]["total"] == 16, s["requests"]
    assert 4 <= s["requests"]["failed"] <= 12, s["requests"]
    recs = list(read_run_records(Path(out) / s["run_id"]))
    assert sorted(r["seq"] for r in recs) == list(range(1, 17))
    assert len({r["request_id"] for r in recs}) == 16
    if lane_wanted():
        assert s["generator"]["reader"]["kinds"] == ["lane"], s["generator"]["reader"]


def test_the_lane_keeps_its_slots_busy_on_a_fast_server(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """A server that answers in about a millisecond: the lane's Python side settles every 20 ms,
    so its queue must cover a pass at that rate. It once held 8 requests: the slots waited a
    fortieth of the run for the next one, and a clean run was flagged (a false failure)."""
    if not (sys.platform == "linux" and lane_wanted()):
        pytest.skip("the native lane is not built here")
    targets = _targets(tmp_path, make_reference(itl_ms=0))  # no pause between tokens
    out = tmp_path / "reports"
    proc = _run(_cmd(targets, out, "--users", "4", "--duration", "3s", "--no-tokenize"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    thread = s["generator"]["reader"]["thread"]
    assert s["generator"]["reader"]["kinds"] == ["lane"], s["generator"]["reader"]
    assert s["requests"]["ok"] > 500, s["requests"]  # answers of about a millisecond each
    held = thread["held_s"] / (thread["held_s"] + thread["busy_s"])
    assert held < 0.05, thread  # under the share that flags a run (stats.MAX_HELD)


def test_the_reader_set_to_thread_reads_with_the_reactor(
    fast_server: RunningServer, tmp_path: Path
) -> None:
    targets = _targets(tmp_path, fast_server)
    out = tmp_path / "reports"
    proc = _run(
        _cmd(targets, out, "--users", "2", "--max-requests", "6", "--no-tokenize"),
        env={"SERVECHECK_READER": "thread"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    assert s["requests"]["ok"] == 6
    if sys.platform == "linux" and lane_wanted():
        assert s["generator"]["reader"]["kinds"] == ["thread"], s["generator"]["reader"]
