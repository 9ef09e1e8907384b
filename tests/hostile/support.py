"""Targets and check contexts pointed at a server of the hostile catalogue."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servecheck.checks.context import CheckContext
from servecheck.checks.discovery import discover
from servecheck.client.http import ServeClient
from servecheck.config.model import Target
from servecheck.engines.registry import profile_for, resolve_capabilities
from servecheck.reference.hostile import MODEL, HostileServer


def hostile_target(server: HostileServer, **overrides: Any) -> Target:
    values: dict[str, Any] = {
        "name": "hostile",
        "base_url": server.base_url,
        "engine": "vllm",
        "models": [MODEL],
        "context_length": 2048,
        "timeout_s": 3,
        "concurrency": 2,
    }
    values.update(overrides)
    return Target.model_validate(values)


def hostile_context(server: HostileServer, check_id: str, **overrides: Any) -> CheckContext:
    target = hostile_target(server, **overrides)
    return CheckContext(
        check_id=check_id,
        target=target,
        model=MODEL,
        profile=profile_for(target),
        capabilities=resolve_capabilities(target),
        info=discover(target),
        client=ServeClient.for_target(target),
    )


def write_targets(path: Path, server: HostileServer, *extra: str, timeout_s: float = 3) -> Path:
    """A targets.yaml with one target ``hostile`` at ``server`` (``extra``: more YAML lines)."""
    lines = [
        "targets:",
        "  - name: hostile",
        f"    base_url: {server.base_url}",
        "    engine: vllm",
        f"    models: [{MODEL}]",
        "    context_length: 2048",
        f"    timeout_s: {timeout_s}",
        *extra,
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def load_cmd(
    targets: Path, out: Path, *args: str, target: str = "hostile", tokenize: bool = False
) -> list[str]:
    """``servecheck load`` on ``target`` of ``targets``, quiet; prompts are sized without
    /tokenize unless ``tokenize`` (a hostile server has none)."""
    return [
        sys.executable,
        "-m",
        "servecheck",
        "load",
        "--target",
        target,
        "--targets-file",
        str(targets),
        "--out",
        str(out),
        "--quiet",
        *([] if tokenize else ["--no-tokenize"]),
        *args,
    ]


def wait_for(predicate: Callable[[], bool], what: str, bound_s: float = 90.0) -> None:
    """Poll until ``predicate()`` holds: a test waits for the event it needs, never for a time."""
    deadline = time.monotonic() + bound_s  # a bound against a hang, not a speed expectation
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def communicate(proc: subprocess.Popen[str], bound_s: float) -> tuple[str, str]:
    """``proc.communicate()`` bounded against a hang. Past the bound the child is asked for its
    stacks (SIGUSR1: ``servecheck.signals.install_stack_dump``) before it is killed, so the
    failure says where it was stuck, not only that it was."""
    try:
        return proc.communicate(timeout=bound_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        try:
            stdout, stderr = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        raise AssertionError(
            f"servecheck did not exit within {bound_s:g} s; its stacks:\n{stderr[-6000:]}"
            f"\nstdout:\n{stdout[-2000:]}"
        ) from None


def with_sigint(cmd: list[str], disposition: str = "SIG_DFL") -> list[str]:
    """``cmd`` started with SIGINT at ``disposition`` (``SIG_DFL`` or ``SIG_IGN``) through an
    exec, whatever the test runner's own is. A shell's background job (``nohup make test &``)
    inherits SIGINT ignored, and servecheck rightly keeps that; a test that sends SIGINT must
    start its run with the default, and one about the ignored case says so."""
    set_and_exec = (
        f"import os, signal, sys; signal.signal(signal.SIGINT, signal.{disposition}); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    return [sys.executable, "-c", set_and_exec, *cmd]
