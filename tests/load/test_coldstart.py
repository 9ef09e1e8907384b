"""Cold start: the figures from a series of timed requests, and ``servecheck accept --launch``
on a reference server that takes a while to load (no timed assertions: what is checked is that
the figures are there, consistent with the series, and that the launched server is stopped)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.probes.coldstart import ColdStart
from servecheck.records.record import RequestRecord, http_error
from servecheck.reference.inprocess import RunningServer
from tests.load.test_load_cli import ROOT


def _cold(ttfts: list[float | None]) -> ColdStart:
    cs = ColdStart(launched=True, ready=True, ready_detail="ready", time_to_ready_s=2.0)
    cs.probes = [_timed(i, t) for i, t in enumerate(ttfts)]
    return cs


def _timed(seq: int, ttft_ms: float | None) -> RequestRecord:
    """A request of the series: its TTFT and an E2E 50 ms later, or an HTTP 500 (no TTFT)."""
    return RequestRecord(
        target="ref",
        scenario="cold-start",
        worker="cold-start",
        seq=seq,
        t_intended=0.0,
        t_sent=0.0,
        ttft=None if ttft_ms is None else ttft_ms / 1000,
        e2e=((ttft_ms or 0) + 50) / 1000,
        status=200 if ttft_ms is not None else 500,
        error=None if ttft_ms is not None else http_error(500),
    )


def test_first_against_warm_and_requests_to_warm() -> None:
    cs = _cold([400.0, 300.0, 150.0, 30.0, 31.0, 29.0, 30.0, 32.0, 30.0, 31.0, 30.0, 29.0])
    d = cs.as_dict()
    assert d["warm_ttft_median_ms"] == 30.0  # the last half: never the cold part
    assert d["first_ttft_ms"] == 400.0 and d["first_vs_warm_ttft"] == pytest.approx(13.333, 1e-3)
    assert d["requests_to_warm"] == 3
    # One lucky request early does not make the server warm; one slow one late does not undo it.
    assert (
        _cold([400.0, 30.0, 300.0, 250.0, 30.0, 31.0, 60.0, 30.0, 31.0, 30.0]).as_dict()[
            "requests_to_warm"
        ]
        == 4
    )
    # Failed requests count as not warm; a series that never settles says so.
    assert _cold([None, None, 30.0, 30.0, 31.0, 30.0]).requests_to_warm == 2
    assert _cold([100.0, None, None, None, 100.0, None]).requests_to_warm is None
    not_ready = ColdStart(launched=True, ready=False, ready_detail="timeout", time_to_ready_s=None)
    assert not not_ready.ok and not_ready.line() == "not ready: timeout"
    assert not _cold([None, None]).ok


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _slow_loader(port: int, loading_s: float) -> str:
    """A ``--launch`` command line: a reference server that reports "loading" for ``loading_s``."""
    return (
        f"{sys.executable} -m servecheck reference-server --port {port} --loading-s {loading_s} "
        "--ttft-ms 10 --itl-ms 1"
    )


def _servecheck(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servecheck", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )


def _accept_launch(
    tmp_path: Path, *extra: str, loading_s: float = 1.5, target_slo: str = ""
) -> tuple[subprocess.CompletedProcess[str], Path, int]:
    """``accept --launch`` of a reference server that loads for ``loading_s``; (proc, out, port)."""
    port = _free_port()
    targets = tmp_path / "targets.yaml"
    targets.write_text(
        "targets:\n  - name: cold\n"
        f"    base_url: http://127.0.0.1:{port}/v1\n    engine: reference\n    timeout_s: 20\n"
        + (f"    slo: [{target_slo!r}]\n" if target_slo else "")
    )
    out = tmp_path / "reports"
    proc = _servecheck(
        [
            "accept",
            "--target",
            "cold",
            "--targets-file",
            str(targets),
            "--out",
            str(out),
            "--launch",
            _slow_loader(port, loading_s),
            "--cold-start-requests",
            "8",
            "--no-load",
            "-k",
            "MODELS",
            "-n",
            "0",
            *extra,
        ]
    )
    return proc, out, port


@pytest.mark.slow
def test_accept_launches_measures_and_stops_the_server(tmp_path: Path) -> None:
    # Generous cold-start SLOs (one from the command line, one from targets.yaml) hold.
    proc, out, port = _accept_launch(
        tmp_path, "--cold-start-slo", "time_to_ready<=120s", target_slo="first_ttft_ratio<=1000"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = list(out.iterdir())
    data = json.loads((run_dir / "accept.json").read_text())
    cold = data["stages"]["cold_start"]
    assert cold["ok"] and cold["launched"] and cold["requests"] == 8 and cold["failed"] == 0
    # The server reported "loading" for 1.5 s after its start: ready cannot come sooner.
    assert cold["time_to_ready_s"] >= 1.5
    assert cold["first_ttft_ms"] == cold["series"][0]["ttft_ms"] > 0
    assert cold["warm_ttft_median_ms"] > 0 and cold["requests_to_warm"] is not None
    assert "Cold start" in (run_dir / "report.html").read_text()
    assert (run_dir / "launch.log").is_file()
    assert cold["verdict"] == "pass"
    assert [(v["slo"], v["source"], v["passed"]) for v in cold["slo"]] == [
        ("time_to_ready<=120s", "cli", True),
        ("first_ttft_ratio<=1000", "targets.yaml", True),
    ]
    with socket.socket() as s:  # stopped at the end: nothing listens on its port
        assert s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.slow
def test_a_cold_start_slower_than_its_slo_fails_accept(tmp_path: Path) -> None:
    # The server reports "loading" for 1.5 s: ready within 1 s cannot hold, whatever the machine.
    proc, out, port = _accept_launch(tmp_path, "--cold-start-slo", "time_to_ready<=1s")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (run_dir,) = list(out.iterdir())
    cold = json.loads((run_dir / "accept.json").read_text())["stages"]["cold_start"]
    assert not cold["ok"] and cold["verdict"] == "fail"
    (v,) = cold["slo"]
    assert v["slo"] == "time_to_ready<=1s" and not v["passed"] and v["observed"] >= 1500
    assert cold["detail"].startswith("FAIL: SLO breached: time_to_ready<=1s observed ")
    console = " ".join((proc.stdout + proc.stderr).split())  # rich may wrap the line
    assert "cold_start FAILED (FAIL: SLO breached: time_to_ready<=1s observed" in console
    assert "time_to_ready&lt;=1s" in (run_dir / "report.html").read_text()


def test_an_unmeasured_cold_start_figure_is_inconclusive_never_a_pass() -> None:
    from servecheck.analysis.slo import parse_slos
    from servecheck.probes.coldstart import cold_start_verdicts

    slos = parse_slos(["requests_to_warm<=5", "first_ttft<=5s", "time_to_ready<=60s"])
    never = _cold([100.0, None, None, None, 100.0, None])  # never settles: no requests_to_warm
    verdicts = cold_start_verdicts(slos, never)
    assert [v.passed for v in verdicts] == [False, True, True]
    assert verdicts[0].observed is None and verdicts[0].note.startswith("not measured: ")
    not_ready = ColdStart(launched=True, ready=False, ready_detail="timeout", time_to_ready_s=None)
    assert all(v.observed is None and not v.passed for v in cold_start_verdicts(slos, not_ready))
    assert "never became ready (timeout)" in cold_start_verdicts(slos, not_ready)[0].note
    slow = _cold([7200.0, 30.0, 30.0, 31.0, 30.0, 30.0])
    assert [v.passed for v in cold_start_verdicts(slos, slow)] == [True, False, True]
    assert cold_start_verdicts(slos, slow)[1].observed == 7200.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["accept", "--cold-start-slo", "ttft_p95<=1s", "--cold-start"], "not a cold-start metric"),
        (["accept", "--cold-start-slo", "first_ttft<=1s"], "needs a cold start: --launch CMD"),
        (["accept", "--slo", "first_ttft<=1s"], "a cold-start SLO, which the smoke load"),
        (["accept", "--cold-start-slo", "first_ttft<=1"], "add a unit"),
        (["load", "--target", "reference", "--users", "1", "--max-requests", "1",
          "--slo", "time_to_ready<=60s"], "a cold-start SLO, which servecheck load"),
        (["capacity", "--slo", "requests_to_warm<=3"], "which servecheck capacity does not"),
        (["cutover", "--from", "a", "--to", "b", "--cold-start-slo", "time_to_ready<=9s"],
         "needs a cold start"),
    ],
)  # fmt: skip
def test_cold_start_slos_are_checked_before_any_traffic(
    tmp_path: Path, args: list[str], message: str
) -> None:
    from tests.load.test_dataset import usage_error

    assert message in usage_error(tmp_path, *args)


def test_a_killed_accept_does_not_leave_the_launched_server_running(tmp_path: Path) -> None:
    """kill -9 of ``accept --launch`` gives it no chance to clean up: the launched server must
    still go (it dies with its parent), not stay listening as an orphan (issue 14)."""
    import contextlib
    import os
    import re
    import signal
    import time

    port = _free_port()
    targets = tmp_path / "targets.yaml"
    targets.write_text(
        "targets:\n  - name: cold\n"
        f"    base_url: http://127.0.0.1:{port}/v1\n    engine: reference\n    timeout_s: 20\n"
    )
    # Loading for 60 s: accept is still waiting for readiness when it is killed.
    launch = f"{sys.executable} -m servecheck reference-server --port {port} --loading-s 60"
    cmd = [sys.executable, "-m", "servecheck", "accept", "--target", "cold"]
    cmd += ["--targets-file", str(targets), "--out", str(tmp_path / "r"), "--launch", launch]
    cmd += ["--no-load", "-n", "0"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    pid = None
    try:
        assert proc.stdout is not None
        seen = ""
        for line in proc.stdout:  # the launch line comes before any readiness wait
            seen += line  # the console may wrap it
            found = re.search(r"cold start: launched .*?\(pid (\d+)\)", seen, re.S)
            if found:
                pid = int(found.group(1))
                break
        assert pid is not None, "accept never said what it launched"
        with socket.socket() as s:  # the server is up (loading): it listens before it is ready
            deadline = time.monotonic() + 30
            while s.connect_ex(("127.0.0.1", port)) != 0 and time.monotonic() < deadline:
                time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            # Reap it if it is our grandchild turned zombie under init: a zombie is gone.
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the launched server (pid {pid}) outlived the killed accept")
    finally:
        if proc.poll() is None:
            proc.kill()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("slo", "rc", "verdict"),
    [
        pytest.param("time_to_ready<=120s", 0, "pass", id="holds"),
        # The server reports "loading" for 1.5 s: ready within 1 s cannot hold, whatever the machine.
        pytest.param("time_to_ready<=1s", 1, "fail", id="breached"),
    ],
)
def test_cutover_launches_the_candidate_and_judges_its_cold_start(
    tmp_path: Path,
    make_reference: Callable[..., RunningServer],
    slo: str,
    rc: int,
    verdict: str,
) -> None:
    """``cutover --launch``: NEW is started by the command line, its cold start measured and
    judged before the comparison, and a breached cold-start SLO fails the cutover by name."""
    old = make_reference()
    port = _free_port()
    targets = tmp_path / "targets.yaml"
    targets.write_text(
        "targets:\n"
        f"  - name: old\n    base_url: {old.base_url}\n    engine: reference\n    timeout_s: 20\n"
        f"  - name: new\n    base_url: http://127.0.0.1:{port}/v1\n    engine: reference\n"
        "    timeout_s: 20\n"
    )
    out = tmp_path / "reports"
    proc = _servecheck(
        [
            *("cutover", "--from", "old", "--to", "new"),
            *("--targets-file", str(targets), "--out", str(out), "--run-id", "cut"),
            *("--skip-conformance", "--no-load", "--launch", _slow_loader(port, 1.5)),
            *("--cold-start-requests", "4", "--cold-start-slo", slo),
        ]
    )
    assert proc.returncode == rc, proc.stdout + proc.stderr
    data = json.loads((out / "cut" / "cutover.json").read_text())
    cold = data["parts"]["cold_start"]
    assert data["ok"] is (rc == 0) and cold["launched"] and cold["verdict"] == verdict
    assert cold["time_to_ready_s"] >= 1.5 and cold["requests"] == 4 and cold["failed"] == 0
    (v,) = cold["slo"]
    assert (v["slo"], v["source"], v["passed"]) == (slo, "cli", rc == 0)
    if rc:
        assert cold["detail"].startswith(f"FAIL: SLO breached: {slo} observed "), cold["detail"]
        assert f"SLO breached: {slo}" in " ".join((proc.stdout + proc.stderr).split())
    assert data["parts"]["agreement"]["ok"]  # the comparison still ran after the cold start
    with socket.socket() as s:  # the launched candidate is stopped at the end
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_cold_start_requests_go_to_the_target_not_to_a_proxy_of_the_environment(
    make_reference: Callable[..., RunningServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first requests are the target's, built by the client factory: a shell's HTTP_PROXY
    (here a port where nothing listens) must not swallow them and fail the cold start."""
    from servecheck.probes.coldstart import measure
    from tests.support import target_for

    target = target_for(make_reference())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, dead)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    cold = measure(target, lambda: target.models[0], lambda t: (True, "ready"), 5.0, requests=2)
    assert [p.error for p in cold.probes] == [None, None], cold.line()
