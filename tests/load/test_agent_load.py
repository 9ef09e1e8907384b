"""``servecheck load --scenario agent`` end to end on the reference server (its prefix cache on):
sessions with tool calls, tool waits and subagent forks; the agent section the same in
summary.json, summary.txt, summary.md and report.html; an agent SLO missed fails the run (rc 1);
recorded AIPerf sessions replayed. No timed assertions: what the records and the outputs say,
and that they agree with each other."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.records.parquet import read_run_records
from servecheck.reference.inprocess import RunningServer
from tests.load.test_load_cli import _cmd, _run, _summary, _targets

pytestmark = pytest.mark.slow
AGENT = "turns=3,tools=4,system_tokens=256,fork=0.5x2,branch_turns=1,tool_wait=fixed:0.05"


@pytest.fixture(scope="module")
def server(make_reference: Callable[..., RunningServer]) -> RunningServer:
    return make_reference(ttft_ms=5, itl_ms=1, max_model_len=8192, prefix_cache_blocks=8192)


def _run_dir(out: Path) -> Path:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def test_agent_sessions_with_forks_and_the_per_turn_summary_in_every_output(
    server: RunningServer, tmp_path: Path
) -> None:
    targets = _targets(tmp_path, server)
    out = tmp_path / "reports"
    proc = _run(
        _cmd(targets, out, "--agent", AGENT, "--users", "4", "--duration", "4s"), timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = _run_dir(out)
    recs = list(read_run_records(run_dir))
    assert recs and all(r["error"] is None for r in recs), recs[:2]
    assert {r["scenario"] for r in recs} == {"agent"} and {r["kind"] for r in recs} == {"agent"}
    assert all(r["session"] and isinstance(r["context_tokens"], int) for r in recs)
    branches = [r for r in recs if r.get("parent")]
    assert branches and all(isinstance(r["branch"], int) for r in branches)
    later = [r for r in recs if r["turn"] > 0 and not r.get("parent")]
    assert later and any(r.get("tool_wait_s") == 0.05 for r in later)
    # The shared system prompt and each session's history are cached by the reference.
    assert any(r["turn"] > 0 and r["cached_tokens"] > 0 for r in recs)

    s = _summary(out)
    a = s["agent"]
    counts = Counter(str(r["turn"]) for r in recs)
    assert {t: row["count"] for t, row in a["by_turn"].items()} == dict(counts)
    assert sum(row["count"] for row in a["by_context"].values()) == len(recs)
    assert a["branches"] == len({r["session"] for r in branches}) and a["forks"] >= 1
    assert a["by_turn"]["1"]["cache_hit_rate"] > 0
    assert a["by_turn"]["1"]["cache_source"] == "usage.cached_tokens"
    assert a["session_e2e_ms"]["count"] == a["completed"] >= 1
    assert a["fanout_ms"]["count"] >= 1 and a["tool_wait_s"] > 0
    assert a["cache_note"] is None

    # The same rows in summary.txt (and the console), summary.md and the page.
    text = (run_dir / "summary.txt").read_text()
    assert text.strip() in proc.stdout.replace("\r", "")
    for turn, row in a["by_turn"].items():
        line = re.search(rf"^{turn}\s+(\d+)\s+(\d+)\s", text, re.M)
        assert line and int(line.group(1)) == row["count"], (turn, text)
        assert (
            f"| {turn} | {row['count']} | {row['errors']} |" in (run_dir / "summary.md").read_text()
        )
    assert f"agent sessions {a['sessions']}: completed {a['completed']}" in text
    page = (run_dir / "report.html").read_text()
    assert "<h3>Agent sessions</h3>" in page and "TTFT by context length" in page
    assert f"agent sessions {a['sessions']}: completed {a['completed']}" in page


def test_a_missed_agent_slo_fails_the_run(server: RunningServer, tmp_path: Path) -> None:
    targets = _targets(tmp_path, server)
    out = tmp_path / "reports"
    proc = _run(
        _cmd(
            targets,
            out,
            "--agent",
            AGENT,
            "--users",
            "2",
            "--duration",
            "3s",
            "--slo",
            "session_e2e_p95<=1ms",
            "--slo",
            "turn_ttft_p95<=60s",
        ),
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    s = _summary(out)
    verdicts = {v["metric"]: v for v in s["slo"]}
    assert not verdicts["session_e2e_p95"]["passed"]
    assert verdicts["session_e2e_p95"]["observed"] == s["agent"]["session_e2e_ms"]["p95"]
    assert (
        verdicts["turn_ttft_p95"]["passed"]
        and verdicts["turn_ttft_p95"]["note"] == "the worst turn"
    )
    assert s["verdict"] == "fail" and "FAIL session_e2e_p95<=1ms" in proc.stdout


def test_recorded_aiperf_sessions_are_replayed(server: RunningServer, tmp_path: Path) -> None:
    sessions = tmp_path / "sessions.jsonl"
    sessions.write_text(
        "".join(
            json.dumps(
                {
                    "session_id": f"rec{i}",
                    "turns": [
                        {"role": "system", "text": "You are a careful coding agent."},
                        {"text": f"Fix bug {i} in parser.py", "output_length": 16},
                        {"text": "Now run the tests.", "delay": 100, "output_length": 8},
                    ],
                }
            )
            + "\n"
            for i in range(3)
        )
    )
    targets = _targets(tmp_path, server)
    out = tmp_path / "reports"
    proc = _run(
        _cmd(targets, out, "--agent", f"source={sessions}", "--users", "2", "--max-requests", "8"),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = list(read_run_records(_run_dir(out)))
    assert len(recs) == 8 and {r["turn"] for r in recs} == {0, 1}
    assert all(r["output_tokens"] <= (16 if r["turn"] == 0 else 8) for r in recs)
    assert all(r["tool_wait_s"] == 0.1 for r in recs if r["turn"] == 1)
    assert {r.get("session_end") for r in recs if r["turn"] == 1} == {"done"}


def test_a_bad_sessions_file_stops_before_any_request(
    server: RunningServer, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"session_id": "x", "turns": "no"}\n')
    out = tmp_path / "out"
    args = ("--agent", f"source={bad}", "--duration", "1s", "--users", "1")
    proc = _run(_cmd(_targets(tmp_path, server), out, *args))
    assert proc.returncode == 2 and not out.exists()  # no run folder: nothing was sent
    assert f"{bad}:1: an AIPerf multi_turn line has a list of turns" in proc.stderr
    assert "Traceback" not in proc.stderr
