"""``servecheck soak --cancel SHARE@tokens:K``: load/workload/cancel.py's grammar for the cycles'
abandoned streams. On ``abort-leak`` (a disconnected request never leaves
num_requests_running) the leak verdict on ``requests_running`` fails the soak; at the headers or
after T ms it is a usage error that says where those points are."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.commands.soak import add_arguments, plan_from_args
from servecheck.config.model import Target
from servecheck.errors import UsageError
from servecheck.reference.inprocess import RunningServer
from tests.soak.support import PROBE, TINY, run_soak


def _plan(*argv: str) -> object:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        ["--cycles", "5", "--cycle", "2s", "--idle", "2s", "--interval", "0.1s", "--no-rss", *argv]
    )
    return plan_from_args(args, Target(name="t", base_url="http://127.0.0.1:9/v1"), "m")


def test_cancel_is_the_cycles_abandoned_streams() -> None:
    plan = _plan("--cancel", "20%@tokens:4")
    assert (plan.abandon, plan.abandon_share, plan.abandon_chunks) == (True, 0.2, 4)  # type: ignore[attr-defined]
    for bad in ("20%@headers", "20%@ms:100"):
        with pytest.raises(UsageError, match="cancel after K tokens"):
            _plan("--cancel", bad)
    with pytest.raises(UsageError, match="needs %"):
        _plan("--cancel", "20@tokens:4")


@pytest.mark.slow
def test_soak_cancel_on_a_server_that_keeps_cancelled_slots_fails(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference("abort-leak", kv_blocks=64, ttft_ms=5, itl_ms=5)
    code, run_dir = run_soak(
        server, tmp_path, "cancel", *TINY, "--cancel", "30%@tokens:3", "--no-rss", *PROBE
    )
    data = json.loads((run_dir / "soak.json").read_text())
    assert code == 1 and not data["ok"], data["failures"]
    assert data["requests"]["abandoned"] > 0
    assert data["leak"]["requests_running"]["status"] == "leak", data["leak"]["requests_running"]
