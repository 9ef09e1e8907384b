"""The shared engine life cycle (start, readiness, failure, stop) with a fake engine.

The fake engine is a stdlib HTTP server in a subprocess that first answers 503 ("loading"),
then 200, so these tests exercise the real process handling without installing anything.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from servecheck.engines import base
from servecheck.engines.base import Engine, EngineError, LaunchPlan, Readiness, RunState

FAKE_SERVER = textwrap.dedent("""
    import http.server, sys, time
    port, load_s, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    if mode == "crash":
        print("fatal: cannot load model", flush=True)
        sys.exit(3)
    started = time.monotonic()
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = time.monotonic() - started >= load_s
            self.send_response(200 if ok else 503)
            self.end_headers()
            self.wfile.write(b"ok" if ok else b"loading")
        def log_message(self, *a):
            pass
    if mode == "with-core":
        # Like vLLM's API server and its engine core: a child that stays in our group.
        import subprocess
        core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        open(sys.argv[4], "w").write(str(core.pid))
    if mode == "ignore-term":
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FakeEngine(Engine):
    name = "fake"
    ready_timeout_s = 10.0
    stop_timeout_s = 1.0

    def __init__(
        self, script: Path, *, load_s: float = 0.3, mode: str = "serve", pid_file: str = ""
    ) -> None:
        self.script, self.load_s, self.mode, self.pid_file = script, load_s, mode, pid_file
        self.default_port = _free_port()

    def plan(self, port: int) -> LaunchPlan:
        argv = [sys.executable, str(self.script), str(port), str(self.load_s), self.mode]
        argv += [self.pid_file] if self.pid_file else []
        return LaunchPlan(
            argv=argv, env=base.clean_env({}), served_model="fake-model", context_length=64
        )

    def probe(self, port: int) -> tuple[Readiness, str]:
        r = base.http("GET", f"http://127.0.0.1:{port}/health", timeout=1.0)
        if r.status == -1:
            return Readiness.STARTING, r.error
        return (Readiness.READY, "ok") if r.status == 200 else (Readiness.LOADING, r.body)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SERVECHECK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "fake_server.py"
    path.write_text(FAKE_SERVER)
    return path


def test_start_waits_through_loading_then_stop(cache: Path, script: Path) -> None:
    engine = FakeEngine(script, load_s=0.8)
    state = base.start(engine, echo=lambda *_: None)
    try:
        assert engine.probe(state.port)[0] is Readiness.READY
        assert state.ready_s is not None and state.ready_s >= 0.5, (
            f"ready too early: {state.ready_s}"
        )
        recorded = [s.pid for s in base.running_states()]
        assert recorded == [state.pid], f"state dir holds {recorded}, expected [{state.pid}]"
        again = base.start(engine, echo=lambda *_: None)
        assert again.pid == state.pid, "a second `up` must reuse the running server"
    finally:
        assert base.stop_state(state, timeout_s=5.0), "stop found nothing running"
    assert not base.pid_alive(state.pid)
    assert base.running_states() == []


def test_crash_before_ready_reports_exit_code_and_log_tail(cache: Path, script: Path) -> None:
    engine = FakeEngine(script, mode="crash")
    with pytest.raises(EngineError) as info:
        base.start(engine, echo=lambda *_: None)
    message = str(info.value)
    assert "exited with code 3 before it was ready" in message
    assert "fatal: cannot load model" in message, f"log tail missing from: {message}"
    assert base.running_states() == []


def test_not_ready_in_time_is_bounded_and_cleans_up(cache: Path, script: Path) -> None:
    engine = FakeEngine(script, load_s=60)
    engine.ready_timeout_s = 1.5
    t0 = time.monotonic()
    with pytest.raises(EngineError, match=r"not ready after 2 s \(last state: loading"):
        base.start(engine, echo=lambda *_: None)
    assert time.monotonic() - t0 < 10, "readiness wait overran its deadline"
    assert base.running_states() == []


def test_stop_escalates_to_sigkill(cache: Path, script: Path) -> None:
    engine = FakeEngine(script, load_s=0, mode="ignore-term")
    state = base.start(engine, echo=lambda *_: None)
    t0 = time.monotonic()
    base.stop_state(state, timeout_s=0.5)
    assert not base.pid_alive(state.pid)
    assert time.monotonic() - t0 < 8


def test_port_taken_by_another_program_is_refused(cache: Path, script: Path) -> None:
    engine = FakeEngine(script)
    with socket.socket() as s:
        s.bind(("127.0.0.1", engine.default_port))
        s.listen()
        with pytest.raises(EngineError, match="already in use by another program"):
            base.start(engine, echo=lambda *_: None)


def test_stale_state_files_are_dropped(cache: Path) -> None:
    dead = RunState(
        name="fake",
        port=1,
        pid=2**22 + 12345,
        log="x",
        served_model="m",
        context_length=1,
        started_at=0.0,
    )
    dead.save()
    assert base.running_states() == []
    assert not dead.path().exists()


def test_an_orphaned_engine_core_is_listed_and_stopped(
    cache: Path, script: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The API server dies and leaves its engine core running (issue 42 item 6): status lists
    it as orphaned and keeps its state file; down stops the core and says what it stopped."""
    import os
    import signal

    from servecheck.cli import main

    pid_file = tmp_path / "core.pid"
    engine = FakeEngine(script, mode="with-core", pid_file=str(pid_file))
    state = base.start(engine, echo=lambda *_: None)
    core = int(pid_file.read_text())
    try:
        os.kill(state.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while base.pid_alive(state.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert base.pid_alive(core), "the fake engine core should outlive its server"
        assert [s.pid for s in base.running_states()] == [state.pid]
        assert base.orphaned(state)
        assert state.path().exists(), "state deleted while a process of the engine lives"
        from servecheck.engines.status import status_rows

        (row,), notes = status_rows()
        assert row["state"] == "orphaned" and str(core) in row["detail"], row
        assert any("engine down fake" in n for n in notes), notes
        assert main(["engine", "down", "all"]) == 0
        out = capsys.readouterr().out
        assert f"{core} (" in out and "had exited" in out, out
        deadline = time.monotonic() + 10
        while base.pid_alive(core) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not base.pid_alive(core), "engine down left the orphaned core running"
        assert base.running_states() == [] and not state.path().exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(core, signal.SIGKILL)


def test_readiness_wait_says_what_it_waits_for(
    cache: Path, script: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A slow load is never silence (issue 42 item 11): the wait reports its state and how long
    of its limit it has waited, every PROGRESS_EVERY_S (shortened here)."""
    monkeypatch.setattr(base, "PROGRESS_EVERY_S", 0.3)
    engine = FakeEngine(script, load_s=1.5)
    with caplog.at_level("INFO", logger="servecheck.engines"):
        state = base.start(engine, echo=lambda *_: None)
    try:
        lines = [r.getMessage() for r in caplog.records]
        assert lines[0].startswith(f"fake: started (pid {state.pid}, log "), lines
        waits = [line for line in lines if "s of at most 10 s" in line]
        assert len(waits) >= 2 and all(w.startswith("fake: ") for w in waits), lines
        assert any("loading" in w for w in waits), lines
    finally:
        base.stop_state(state, timeout_s=5.0)


def test_a_long_setup_step_reports_progress_and_stays_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(base, "PROGRESS_EVERY_S", 0.2)
    log = tmp_path / "install.log"
    with caplog.at_level("INFO", logger="servecheck.engines"):
        base.run_logged(
            [sys.executable, "-c", "import time; time.sleep(1)"], log, timeout_s=30, what="build x"
        )
        with pytest.raises(EngineError, match=r"build y: timed out after 1 s"):
            base.run_logged(
                [sys.executable, "-c", "import time; time.sleep(60)"],
                log,
                timeout_s=1,
                what="build y",
            )
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == f"build x: started (log {log})", lines
    assert sum(line.startswith("build x: running, ") for line in lines) >= 2, lines
