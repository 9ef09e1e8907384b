"""Start the embedded reference server for the default target, as a subprocess.

``servecheck check`` (and ``make check``) use it so that a fresh clone has something real to
check: the server gets a random port and a random API key, exported as
``SERVECHECK_REF_URL`` / ``SERVECHECK_REF_API_KEY`` / ``SERVECHECK_REF_METRICS_URL``, which
the ``reference`` entry of targets.yaml reads.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from servecheck.errors import ServecheckError, UsageError
from servecheck.redact import register
from servecheck.signals import die_with_parent

ENV_URL = "SERVECHECK_REF_URL"
ENV_KEY = "SERVECHECK_REF_API_KEY"
ENV_METRICS = "SERVECHECK_REF_METRICS_URL"
ENV_PID = "SERVECHECK_REF_PID"  # the server's process, for `servecheck drain --target reference`


@contextmanager
def embedded_reference(
    extra_args: Sequence[str] = (),
    *,
    with_key: bool = True,
    timeout_s: float = 30.0,
    log_path: Path | None = None,
) -> Iterator[dict[str, str]]:
    """Run the reference server while the block runs; yield the env vars that point at it."""
    key = "sk-ref-" + secrets.token_hex(12) if with_key else ""
    if key:
        register(key)
    tmp = tempfile.mkdtemp(prefix="servecheck-ref-")
    try:
        ready = Path(tmp) / "port"
        cmd = [
            sys.executable,
            "-m",
            "servecheck",
            "reference-server",
            "--port",
            "0",
            "--ready-file",
            str(ready),
            *extra_args,
        ]
        env = dict(os.environ)
        if key:
            env[ENV_KEY] = key
        log = open(log_path or Path(tmp) / "server.log", "ab")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - only calls prctl
        )
        try:
            deadline = time.monotonic() + timeout_s
            while not ready.exists():
                if proc.poll() is not None:
                    # Exit code 2 is the server's usage error (a busy --port among them): a
                    # value the user gave, so one line and rc 2, as a value checked up front.
                    error = UsageError if proc.returncode == 2 else ServecheckError
                    raise error(
                        f"the embedded reference server exited with code {proc.returncode} before"
                        f" listening{_last_line(log_path or Path(tmp) / 'server.log')}"
                    )
                if time.monotonic() > deadline:
                    raise ServecheckError(
                        f"the embedded reference server did not listen within {timeout_s:.0f} s"
                    )
                time.sleep(0.05)
            port = int(ready.read_text())
            # The folder only carried the ready file (and the log when none was asked for, which
            # the server keeps open): gone now, so no kill -9 of servecheck can leave it behind.
            shutil.rmtree(tmp, ignore_errors=True)
            yield {
                ENV_URL: f"http://127.0.0.1:{port}/v1",
                ENV_METRICS: f"http://127.0.0.1:{port}/metrics",
                ENV_KEY: key,
                ENV_PID: str(proc.pid),
            }
        finally:
            stop_process(proc, timeout_s=5.0)
            log.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _last_line(log: Path) -> str:
    """': <the last line of the log>' (the child's own one-line error), or '' without one."""
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return f": {lines[-1].strip()}" if lines else ""


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM a server subprocess, SIGKILL it if it has not gone within ``timeout_s``."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout_s)
