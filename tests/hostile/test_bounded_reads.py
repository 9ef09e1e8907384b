"""Every read has a size and a time bound: the raw client, the openai-SDK checks and the load
reader end against an endless stream, one giant SSE line or a huge body, within the target's
timeout_s, with a clear error, having read only a bounded part of what the server sends.

No timed assertions: the hostile servers stop on their own only after ``max_s`` (60 s), so a
missing bound shows as the wrong message (the server's own end), not as a slow test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servecheck.checks import CheckFailed, load_all, run_with_allowances
from servecheck.client.http import ServeClient
from servecheck.client.sse import MAX_EVENT_BYTES
from servecheck.load.generator.stream import StreamState
from servecheck.reference.hostile import hostile
from tests.hostile.support import hostile_context, hostile_target, write_targets
from tests.hostile.test_load_verdicts import load_cmd, run_cmd

CHECKS = load_all()
SERVER_S = 60.0  # the hostile server's own bound
BOUNDED = 48 * 1024 * 1024  # far below the 200 MB the giant servers send
BODY = {"model": "hostile-tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}


@pytest.mark.parametrize(
    ("name", "error", "message"),
    [
        pytest.param("endless-sse", "timeout", "did not complete within 2 s", id="endless-sse"),
        pytest.param("giant-line", "too-large", "exceeded 1048576 bytes", id="giant-line"),
        pytest.param("huge-body", "too-large", "response exceeded", id="huge-body"),
        pytest.param("headers-then-stall", "timeout", "did not complete within 2 s", id="stall"),
    ],
)
def test_the_raw_client_ends_in_time_and_bounded(name: str, error: str, message: str) -> None:
    with hostile(name, max_s=SERVER_S) as srv:
        with ServeClient.for_target(hostile_target(srv, timeout_s=2)) as client:
            ex = client.post("/chat/completions", BODY, stream=True)
        sent = srv.sent_bytes
    assert ex.error == error, (ex.error, ex.error_message)
    assert message in ex.error_message, ex.error_message
    assert len(ex.body) <= 32 * 1024 * 1024 and sent < BOUNDED, sent


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("endless-sse", "within timeout_s=2 s (servecheck's bound)", id="endless-sse"),
        # 32 MiB or 2 s, whichever comes first on the machine: both are the bound working.
        pytest.param("giant-line", "(servecheck's", id="giant-line"),
    ],
)
def test_the_sdk_stream_check_ends_in_time_and_bounded(name: str, message: str) -> None:
    with hostile(name, max_s=SERVER_S) as srv:
        ctx = hostile_context(srv, "CLIENT-SDK-STREAM", timeout_s=2)
        try:
            with pytest.raises(CheckFailed) as excinfo:
                run_with_allowances(CHECKS["CLIENT-SDK-STREAM"], ctx)
        finally:
            ctx.client.close()
        sent = srv.sent_bytes
    text = str(excinfo.value)
    assert text.startswith("CLIENT-SDK-STREAM: the openai SDK failed"), text
    assert message in text, text
    assert sent < 2 * BOUNDED, sent  # the SDK call and the raw reproduction, each bounded


def test_the_load_parser_stops_a_giant_line() -> None:
    st = StreamState()
    piece = b"x" * 65536
    reasons = [st.feed(b'data: {"a":"' if i == 0 else piece, float(i)) for i in range(40)]
    first = next(i for i, r in enumerate(reasons) if r)
    assert first == MAX_EVENT_BYTES // len(piece), first  # the prefix and 16 pieces pass 1 MiB
    assert st.problem_kind == "too-large" and "without ending an SSE event" in st.problem


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "error"),
    [
        pytest.param("giant-line", "too-large", id="giant-line"),
        pytest.param("huge-body", "too-large", id="huge-body"),
        pytest.param("endless-sse", "timeout", id="endless-sse"),
        pytest.param("accepts-never-answers", "timeout", id="accepts-never-answers"),
    ],
)
def test_load_ends_in_time_and_blames_the_server(tmp_path: Path, name: str, error: str) -> None:
    with hostile(name, max_s=SERVER_S) as srv:
        targets = write_targets(tmp_path / "targets.yaml", srv, timeout_s=2)
        proc = run_cmd(load_cmd(targets, tmp_path / "r", "--users", "2", "--max-requests", "4"))
        sent = srv.sent_bytes
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (run_dir,) = (tmp_path / "r").iterdir()
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["requests"]["errors"] == {error: 4}, s["requests"]
    assert s["reasons"][0].startswith("nothing succeeded"), s["reasons"]
    assert "generator" not in " ".join(s["reasons"]) and "CPU" not in proc.stdout, proc.stdout
    assert sent < 4 * BOUNDED, sent
