"""``reference-server`` options and ``--reference-arg`` values that the server cannot run with:
one clear line naming the option, exit code 2, no traceback, nothing started (issue 24 item 14)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from servecheck.cli import main
from servecheck.embedded import embedded_reference
from servecheck.errors import ServecheckError

PORT_LINE = "--port: 99999 is not a port (0-65535; 0 picks a free one)"
LEN_LINE = "--max-model-len: -5 is too small (at least 1)"


def _usage_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--port", "99999"], PORT_LINE, id="port-out-of-range"),
        pytest.param(["--max-model-len=-5"], LEN_LINE, id="negative-context"),
        pytest.param(["--kv-blocks", "0"], "--kv-blocks: 0 is too small (at least 1)", id="no-kv"),
    ],
)
def test_reference_server_refuses_values_it_cannot_run_with(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _usage_line(["reference-server", *argv], capsys)
    assert line == f"servecheck reference-server: error: {message}"


def test_a_busy_port_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "servecheck", "reference-server", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"servecheck reference-server: error: cannot listen on 127.0.0.1:{port}: address already in use"
    ]


@pytest.mark.parametrize("command", ["check", "soak", "accept", "capacity"])
@pytest.mark.parametrize(
    ("arg", "message"),
    [
        pytest.param("--port=99999", PORT_LINE, id="port"),
        pytest.param("--max-model-len=-5", LEN_LINE, id="max-model-len"),
    ],
)
def test_bad_reference_args_stop_every_command(
    command: str, arg: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    line = _usage_line([command, f"--reference-arg={arg}", "--out", str(out)], capsys)
    assert line == f"servecheck {command}: error: --reference-arg: {message}"
    assert not out.exists() or not any(out.iterdir()), f"left behind: {list(out.iterdir())}"


def test_the_library_names_the_cause_when_the_embedded_server_cannot_start() -> None:
    """Called from Python with a bad value (no command to check it first), the error carries
    the server's own line, not only its exit code."""
    with pytest.raises(ServecheckError) as raised, embedded_reference(["--port=99999"]):
        pass
    assert str(raised.value) == (
        "the embedded reference server exited with code 2 before listening: "
        f"servecheck reference-server: error: {PORT_LINE}"
    )


@pytest.mark.parametrize("command", ["check", "soak", "accept", "capacity"])
def test_a_busy_reference_port_stops_every_command_in_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A busy ``--reference-arg=--port`` passes the up-front check (the value is a port) and
    only the server finds it taken: still the server's own line and rc 2, not a traceback."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        argv = [command, f"--reference-arg=--port={port}", "--out", str(tmp_path / "out")]
        if command == "soak":
            argv += ["--cycles", "5", "--cycle", "10s", "--idle", "10s"]
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    # accept and capacity say where the report goes first; the error is the last line
    assert err.strip().splitlines()[-1] == (
        f"servecheck {command}: error: the embedded reference server exited with code 2 before "
        "listening: servecheck reference-server: error: cannot listen on "
        f"127.0.0.1:{port}: address already in use"
    )
