"""The life cycle every local engine shares: install, start, wait until ready, stop.

An engine module describes *what* to install and run (:class:`Engine` subclass); this module
does the *how*: detached server processes in their own session (they outlive the ``servecheck``
command that started them), a JSON state file per running server, bounded readiness polling
that tells "still loading" from "failed", and SIGTERM-then-SIGKILL shutdown of the whole
process group. Every wait has a deadline; nothing here can hang.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

import psutil

from servecheck.engines.paths import cache_root, logs_dir, state_dir
from servecheck.errors import ServecheckError

# Progress of the slow steps (installs, builds, readiness waits): `engine up` shows these lines
# so a 15-minute llama.cpp build or a model load is never minutes of silence.
LOG = logging.getLogger("servecheck.engines")
PROGRESS_EVERY_S = 10.0


@contextlib.contextmanager
def progress_to(stream: Any) -> Iterator[None]:
    """Write the progress lines of :data:`LOG` (installing, building, waiting for ready: at
    least every :data:`PROGRESS_EVERY_S`) to ``stream`` while the block runs, indented."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("  %(message)s"))
    level, propagate = LOG.level, LOG.propagate
    LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)
    LOG.propagate = False
    try:
        yield
    finally:
        LOG.removeHandler(handler)
        LOG.setLevel(level)
        LOG.propagate = propagate


class EngineError(ServecheckError):
    """An engine could not be installed, started or stopped; the message says why."""


class Readiness(StrEnum):
    """What a readiness probe saw."""

    STARTING = "starting"  # nothing listening yet
    LOADING = "loading"  # listening, model not ready (e.g. llama.cpp 503 "Loading model")
    READY = "ready"
    FAILED = "failed"  # process gone or the server said it cannot serve


@dataclass(slots=True)
class HttpResult:
    """A tiny HTTP response record (status -1: no connection)."""

    status: int
    body: str = ""
    error: str = ""

    def json(self) -> Any:
        return json.loads(self.body)


# Never a proxy from the environment (as client/factory.py): these requests go to a local engine,
# and urllib sends even 127.0.0.1 through $http_proxy unless $no_proxy names it.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http(
    method: str,
    url: str,
    body: object | None = None,
    *,
    timeout: float = 5.0,
    headers: Mapping[str, str] | None = None,
) -> HttpResult:
    """One bounded HTTP request with the stdlib; never raises for HTTP or socket errors."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for key, value in (headers or {}).items():
        req.add_header(key, value)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:  # noqa: S310 - loopback only
            return HttpResult(resp.status, resp.read().decode("utf-8", "replace"))
    except urllib.error.HTTPError as exc:
        return HttpResult(exc.code, exc.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        return HttpResult(-1, error=str(getattr(exc, "reason", exc)))


@dataclass(slots=True)
class InstallResult:
    """Outcome of :meth:`Engine.install`: seconds spent and whether it was already there."""

    seconds: float
    cached: bool
    location: Path


@dataclass(slots=True)
class LaunchPlan:
    """The server command an engine wants run, and how to reach it afterwards."""

    argv: list[str]
    env: dict[str, str]
    served_model: str
    context_length: int
    cwd: Path | None = None


@dataclass(slots=True)
class RunState:
    """What ``engine up`` records so that ``down``/``status`` work from another process."""

    name: str
    port: int
    pid: int
    log: str
    served_model: str
    context_length: int
    started_at: float
    argv: list[str] = field(default_factory=list)
    ready_s: float | None = None
    extra_pids: list[int] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def path(self) -> Path:
        return state_dir() / f"{self.name}-{self.port}.json"

    def save(self) -> None:
        self.path().parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path().with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        os.replace(tmp, self.path())

    @classmethod
    def load(cls, path: Path) -> RunState:
        """Read a state file; keys this version does not know (a newer servecheck wrote it into
        the shared cache) are ignored rather than taking the file for broken."""
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError(f"{path}: not a state object")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class Engine:
    """Base class: subclasses fill in install, launch plan and readiness probe."""

    name: str = ""
    default_port: int = 0
    version: str = ""
    ready_timeout_s: float = 300.0
    stop_timeout_s: float = 20.0
    auth_key_env: str | None = None  # env var holding the API key (None: no auth)

    # -- to override -----------------------------------------------------------------
    def install(self) -> InstallResult:
        """Install the engine into its own cache folder (idempotent)."""
        raise NotImplementedError

    def plan(self, port: int) -> LaunchPlan:
        """The server command line for ``port`` (install and model already done)."""
        raise NotImplementedError

    def probe(self, port: int) -> tuple[Readiness, str]:
        """One readiness probe; returns the state and a short detail for messages."""
        raise NotImplementedError

    def wait_startup(self, port: int) -> tuple[Readiness, str]:
        """The probe ``start`` polls before :meth:`after_ready` (default: :meth:`probe`)."""
        return self.probe(port)

    def after_ready(self, state: RunState, deadline: float) -> None:
        """Hook for engines that need steps once the server listens (Xinference: launch)."""

    def api_key(self) -> str | None:
        """The key clients must send, if the engine is started with one."""
        return None

    # -- shared ----------------------------------------------------------------------
    def log_path(self, port: int) -> Path:
        return logs_dir() / f"{self.name}-{port}.log"


# --------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def file_lock(name: str, timeout_s: float = 1800.0) -> Iterator[None]:
    """An exclusive lock under the cache root so two installs of one engine never race."""
    path = cache_root() / "locks" / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        began = time.monotonic()
        reported = began
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                now = time.monotonic()
                if now - began > timeout_s:
                    raise EngineError(
                        f"timed out after {timeout_s:.0f} s waiting for lock {path}"
                    ) from None
                if now - reported >= PROGRESS_EVERY_S:
                    reported = now
                    LOG.info(
                        "%s: waiting for another install to finish (lock %s), %.0f s",
                        name,
                        path,
                        now - began,
                    )
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def run_logged(
    argv: Sequence[str],
    log: Path,
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    what: str = "",
) -> None:
    """Run a setup step with its output appended to ``log``; raise with the log tail on failure.

    Says on :data:`LOG` that it started and, every :data:`PROGRESS_EVERY_S`, how long it has run.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    name = what or argv[0]
    with open(log, "a") as fh:
        fh.write(f"\n$ {' '.join(argv)}\n")
        fh.flush()
        LOG.info("%s: started (log %s)", name, log)
        proc = subprocess.Popen(
            list(argv),
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )
        code = _wait_reporting(proc, name, timeout_s)
    if code is None:
        raise EngineError(f"{name}: timed out after {timeout_s:.0f} s; log {log}\n" + tail(log))
    if code != 0:
        raise EngineError(f"{name}: exit {code}; log {log}\n" + tail(log))


def _wait_reporting(proc: subprocess.Popen[bytes], name: str, timeout_s: float) -> int | None:
    """Wait for ``proc`` at most ``timeout_s``, saying every so often that it still runs;
    None (and the process killed) when it overran."""
    started = time.monotonic()
    while True:
        left = timeout_s - (time.monotonic() - started)
        if left <= 0:
            proc.kill()
            proc.wait()
            return None
        try:
            return proc.wait(timeout=min(PROGRESS_EVERY_S, left))
        except subprocess.TimeoutExpired:
            elapsed = time.monotonic() - started
            LOG.info("%s: running, %.0f s (limit %.0f s)", name, elapsed, timeout_s)


@dataclass(frozen=True, slots=True)
class PipStep:
    """One ``pip`` command of an engine's venv install (``pip <args>``), bounded and logged."""

    args: tuple[str, ...]
    timeout_s: float
    what: str


def install_venv(engine: str, venv: Path, want: str, steps: Sequence[PipStep]) -> InstallResult:
    """Create ``venv`` and run ``steps`` in it, once: a marker file holds ``want`` (what was
    installed), so a second call with the same ``want`` is free; a file lock named after the
    venv keeps concurrent installs apart, and ``install-<venv name>.log`` gets the output."""
    start = time.monotonic()
    marker = venv / ".servecheck-installed"
    if marker.is_file() and marker.read_text() == want:
        return InstallResult(0.0, True, venv)
    with file_lock(venv.name):
        if marker.is_file() and marker.read_text() == want:
            return InstallResult(time.monotonic() - start, True, venv)
        log = logs_dir() / f"install-{venv.name}.log"
        env = clean_env({"PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        py = venv / "bin" / "python"
        if not py.is_file():
            run_logged(
                [venv_python(), "-m", "venv", str(venv)],
                log,
                timeout_s=120,
                env=env,
                what=f"{engine}: create venv",
            )
        for step in steps:
            run_logged(
                [str(py), "-m", "pip", *step.args],
                log,
                timeout_s=step.timeout_s,
                env=env,
                what=step.what,
            )
        marker.write_text(want)
    return InstallResult(time.monotonic() - start, False, venv)


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file (empty string if it does not exist)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64_000))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


def clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The current environment without the caller's venv, plus ``extra``."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    }
    env.update(extra)
    return env


def venv_python() -> str:
    """A Python 3.11+ interpreter to build engine venvs with (not the project's venv)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return base


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def port_in_use(port: int) -> bool:
    """True if something accepts TCP connections on 127.0.0.1:``port``."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


# --------------------------------------------------------------------------- life cycle


def _leader_alive(state: RunState) -> bool:
    """True while the recorded server process itself lives (and is the one we started: a pid
    the kernel handed to a newer process after ours exited is not ours)."""
    try:
        proc = psutil.Process(state.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        # started_at is stamped right after the spawn: a process created later is another one.
        return proc.create_time() <= state.started_at + 5.0
    except psutil.Error:
        return False


def server_processes(state: RunState) -> list[psutil.Process]:
    """Every live process of a recorded server, whether or not its main process still lives.

    The server starts in its own session, so its session and group ids are its pid, and they
    stay on every process it started (vLLM's engine core and workers, Xinference's model actor)
    after the main process exits: Linux does not hand out a pid that is still a live group or
    session id. ``extra_pids`` (processes an engine records beside the main one) count with
    their descendants.
    """
    leaders = {state.pid, *state.extra_pids}
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if os.getpgid(proc.pid) in leaders or os.getsid(proc.pid) in leaders:
                found[proc.pid] = proc
    for pid in state.extra_pids:
        with contextlib.suppress(psutil.Error):
            extra = psutil.Process(pid)
            for proc in [extra, *extra.children(recursive=True)]:
                found.setdefault(proc.pid, proc)
    if not _leader_alive(state):
        found.pop(state.pid, None)
    return [found[pid] for pid in sorted(found)]


def label(proc: psutil.Process) -> str:
    """``pid (name)``: how messages name a process (the name read while it lives)."""
    try:
        return f"{proc.pid} ({proc.name()})"
    except psutil.Error:
        return str(proc.pid)


def describe(procs: Sequence[psutil.Process | str], limit: int = 6) -> str:
    """``pid (name), ...`` for messages: what a stop found or left."""
    parts = [p if isinstance(p, str) else label(p) for p in procs[:limit]]
    more = len(procs) - limit
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def running_states() -> list[RunState]:
    """Every recorded server of which some process still lives.

    A state file is removed only when no process of its server is left: a server whose main
    process died while its engine core or workers live (an orphaned engine) is still listed,
    so that ``engine status`` shows it and ``engine down`` stops it.
    """
    out: list[RunState] = []
    if not state_dir().is_dir():
        return out
    for path in sorted(state_dir().glob("*.json")):
        try:
            state = RunState.load(path)
        except (OSError, ValueError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if _leader_alive(state) or server_processes(state):
            out.append(state)
        else:
            path.unlink(missing_ok=True)
    return out


def orphaned(state: RunState) -> bool:
    """True when the server's main process is gone but processes it started still run."""
    return not _leader_alive(state) and bool(server_processes(state))


def start(engine: Engine, port: int | None = None, *, echo: Any = print) -> RunState:
    """Start ``engine`` on ``port`` and wait until it serves; return its recorded state.

    If the same engine already runs there and is ready, it is reused. A port taken by anything
    else is an error (never silently talk to a different server).
    """
    port = port or engine.default_port
    for state in running_states():
        if state.port == port:
            if state.name == engine.name and engine.probe(port)[0] is Readiness.READY:
                echo(f"{engine.name}: already running on port {port} (pid {state.pid})")
                return state
            raise EngineError(
                f"port {port} is used by {state.name} (pid {state.pid}); "
                f"run `servecheck engine down {state.name}` first"
            )
    if port_in_use(port):
        raise EngineError(f"port {port} on 127.0.0.1 is already in use by another program")

    plan = engine.plan(port)
    log = engine.log_path(port)
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log, "w") as fh:
        fh.write(f"$ {' '.join(plan.argv)}\n")
        fh.flush()
        proc = subprocess.Popen(
            plan.argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=plan.env,
            cwd=plan.cwd,
            start_new_session=True,
        )
    state = RunState(
        name=engine.name,
        port=port,
        pid=proc.pid,
        log=str(log),
        served_model=plan.served_model,
        context_length=plan.context_length,
        started_at=time.time(),
        argv=plan.argv,
    )
    state.save()
    deadline = started + engine.ready_timeout_s
    try:
        wait_ready(engine, state, proc, deadline)
        engine.after_ready(state, deadline)
    except BaseException:
        stop_state(state, timeout_s=engine.stop_timeout_s)
        raise
    state.ready_s = round(time.monotonic() - started, 1)
    state.save()
    return state


def wait_ready(
    engine: Engine, state: RunState, proc: subprocess.Popen[bytes] | None, deadline: float
) -> None:
    """Poll ``engine.wait_startup`` until ready, the process dies, or ``deadline`` (monotonic)
    passes; every :data:`PROGRESS_EVERY_S` say on :data:`LOG` what it is waiting for."""
    last: tuple[Readiness, str] = (Readiness.STARTING, "")
    began = time.monotonic()
    reported = began
    LOG.info(
        "%s: started (pid %d, log %s); waiting until it serves", engine.name, state.pid, state.log
    )
    while True:
        exited = proc.poll() if proc is not None else (None if pid_alive(state.pid) else -1)
        if exited is not None:
            raise EngineError(
                f"{engine.name}: server exited with code {exited} before it was ready; "
                f"log {state.log}\n{tail(Path(state.log))}"
            )
        last = engine.wait_startup(state.port)
        if last[0] is Readiness.READY:
            return
        if last[0] is Readiness.FAILED:
            raise EngineError(
                f"{engine.name}: server reports failure ({last[1]}); log {state.log}\n"
                + tail(Path(state.log))
            )
        now = time.monotonic()
        if now > deadline:
            raise EngineError(
                f"{engine.name}: not ready after {engine.ready_timeout_s:.0f} s "
                f"(last state: {last[0].value} {last[1]}); log {state.log}\n{tail(Path(state.log))}"
            )
        if now - reported >= PROGRESS_EVERY_S:
            reported = now
            detail = f" ({last[1][:80]})" if last[1] else ""
            LOG.info(
                "%s: %s%s, %.0f s of at most %.0f s",
                engine.name,
                last[0].value,
                detail,
                now - began,
                engine.ready_timeout_s,
            )
        time.sleep(0.5)


def stop_state(state: RunState, timeout_s: float = 20.0) -> list[str]:
    """SIGTERM every process of the server (its group, its session, the extra pids' trees),
    SIGKILL what is left after ``timeout_s``; return what was running as ``pid (name)`` labels
    (empty: nothing was).

    The state file is removed once nothing of the server lives; if something survives SIGKILL
    it stays, and the error names the survivors.
    """
    procs = server_processes(state)
    if _leader_alive(state) and all(p.pid != state.pid for p in procs):
        with contextlib.suppress(psutil.Error):
            procs.insert(0, psutil.Process(state.pid))
    stopped = [label(p) for p in procs]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in {state.pid, *state.extra_pids}:
            # The server runs in its own session: its pgid is its pid, and it outlives the
            # main process while any member lives.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)
        _, alive = psutil.wait_procs(procs, timeout=timeout_s if sig == signal.SIGTERM else 5.0)
        procs = alive
        if not procs:
            break
    if procs:
        raise EngineError(f"{state.name}: processes {describe(procs)} survived SIGKILL")
    state.path().unlink(missing_ok=True)
    return stopped
