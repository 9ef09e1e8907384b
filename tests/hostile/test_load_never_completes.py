"""``servecheck load`` against servers whose responses never complete (issue 41): every request
before the load is bounded by a whole-body deadline, so the load runs, ends and says why.

On eaaac79 the endless-sse server's ``/tokenize`` (a 200 event stream that never ends) held the
Locust users in the prompt sizing for the whole run: no request was ever sent, and the run ended
only at Locust's run-time backstop, INCONCLUSIVE with "no request finished".
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from servecheck.reference.hostile import hostile
from tests.hostile.support import communicate, load_cmd, write_targets

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "cause"),
    [
        pytest.param(
            "endless-sse",
            "responses never complete: every request streamed tokens and none ended "
            "(no data: [DONE]) within the target's timeout_s (3 s)",
            id="endless-sse",
        ),
        pytest.param(
            "headers-then-stall",
            "no response completed: no request got a token within the target's timeout_s (3 s)",
            id="headers-then-stall",
        ),
    ],
)
def test_a_load_on_responses_that_never_complete_fails_and_says_why(
    tmp_path: Path, name: str, cause: str
) -> None:
    # max_s: the server outlives any bound of the run, so only servecheck's own bounds end it.
    with hostile(name, max_s=600) as srv:
        targets = write_targets(tmp_path / "targets.yaml", srv, timeout_s=3)
        # tokenize: the /tokenize probe is one of the requests before the load
        cmd = load_cmd(targets, tmp_path / "r", "--users", "2", "--duration", "4s", tokenize=True)
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=dict(os.environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        stdout, stderr = communicate(proc, 120)  # a guard against a hang, not a speed claim
        api_requests = srv.requests
    assert proc.returncode == 1, stdout + stderr
    (run_dir,) = (tmp_path / "r").iterdir()
    s = json.loads((run_dir / "summary.json").read_text())
    assert (s["verdict"], s["exit_code"]) == ("fail", 1), s["reasons"]
    assert s["requests"]["total"] >= 1 and s["requests"]["errors"] == {
        "timeout": s["requests"]["total"]
    }, s["requests"]
    total = s["requests"]["total"]
    assert s["reasons"][0] == (
        f"nothing succeeded: 0 of {total} requests ok ({total} timeout): {cause}"
    ), s["reasons"]
    assert cause in stdout, stdout
    assert api_requests >= 2  # /v1/models, then the load's own requests reached the server
