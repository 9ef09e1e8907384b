"""The multi-turn and shared-prefix scenarios end to end on the reference server (its optional
prefix cache on or off), through ``servecheck load``, distributed workers and plain ``locust``.

No timed assertions: the reference's TTFT model only makes cached and uncached requests differ;
what is checked is what the records and the summary say, and that they agree with the server.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.records.parquet import read_run_records
from servecheck.reference.inprocess import RunningServer
from tests.load.test_load_cli import ROOT, _cmd, _run, _summary, _targets

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cache_server(make_reference: Callable[..., RunningServer]) -> RunningServer:
    return make_reference(ttft_ms=20, itl_ms=1, max_model_len=4096, prefix_cache_blocks=8192)


def _records(out: Path) -> list[dict]:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return list(read_run_records(run_dir))


def _check_conversations(recs: list[dict]) -> dict[str, list[dict]]:
    convs: dict[str, list[dict]] = defaultdict(list)
    for r in recs:
        assert r["error"] is None, r
        convs[r["conversation"]].append(r)
    for cid, turns in convs.items():
        turns.sort(key=lambda r: r["turn"])
        assert [r["turn"] for r in turns] == list(range(len(turns))), cid
        assert len(turns) <= 3
        assert turns[0]["history_tokens"] == 0 and turns[0]["cached_tokens"] == 0
        for prev, cur in zip(turns, turns[1:], strict=False):
            # Each turn resends the previous one as the server counted it (prompt + reply) ...
            assert cur["history_tokens"] == prev["prompt_tokens"] + prev["output_tokens"], cid
            # ... plus a new message on top; and the cache served some of that history.
            assert cur["prompt_tokens"] > cur["history_tokens"]
            assert 0 < cur["cached_tokens"] <= cur["history_tokens"]
            assert cur["t_sent"] >= prev["t_done"]  # a turn waits for its reply
    return convs


def test_multi_turn_builds_history_from_replies(
    cache_server: RunningServer, tmp_path: Path
) -> None:
    targets = _targets(tmp_path, cache_server)
    out = tmp_path / "reports"
    proc = _run(
        _cmd(targets, out, "--scenario", "multi_turn", "--users", "3", "--max-requests", "24"),
        env={"SERVECHECK_TURNS": "3"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = _records(out)
    assert len(recs) == 24
    convs = _check_conversations(recs)
    assert len(convs) >= 8
    s = _summary(out)
    by_turn = s["turns"]["by_turn"]
    assert set(by_turn) == {"0", "1", "2"}
    assert sum(t["count"] for t in by_turn.values()) == 24
    assert by_turn["0"]["cache_hit_rate"] == 0 and by_turn["2"]["cache_hit_rate"] > 0
    assert by_turn["2"]["history_tokens_mean"] > by_turn["1"]["history_tokens_mean"] > 0
    assert s["turns"]["conversations"] == len(convs)
    pc = s["prefix_cache"]
    assert pc["requests_reporting"] == 24 and pc["engine"]["source"] == "vllm:prefix_cache"
    assert "turns (" in proc.stdout and "turn 2" in proc.stdout
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    assert "turns (" in (run_dir / "report.html").read_text()  # the HTML page shows them too


def test_shared_prefix_hit_rate_from_usage_and_engine_agree(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference(ttft_ms=20, itl_ms=1, max_model_len=4096, prefix_cache_blocks=8192)
    targets = _targets(tmp_path, server)
    out = tmp_path / "reports"
    proc = _run(
        _cmd(targets, out, "--scenario", "shared_prefix", "--users", "4", "--max-requests", "40"),
        env={"SERVECHECK_PREFIX_TOKENS": "256", "SERVECHECK_PREFIX_GROUPS": "3"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = _records(out)
    assert {r["prefix_group"] for r in recs} == {"g0", "g1", "g2"}
    # A fresh server: exactly the first request of each group (in arrival order at the server,
    # which sends overlap can reorder) finds nothing cached; every later one finds its prefix.
    misses = [r for r in recs if r["cached_tokens"] == 0]
    assert 3 <= len(misses) <= 3 + 3  # concurrent firsts of a group may both miss
    hits = [r for r in recs if r["cached_tokens"] > 0]
    assert all(240 <= r["cached_tokens"] < r["prompt_tokens"] for r in hits)
    s = _summary(out)
    pc = s["prefix_cache"]
    used = sum(r["cached_tokens"] for r in recs) / sum(r["prompt_tokens"] for r in recs)
    assert pc["hit_rate"] == pytest.approx(used, abs=1e-4)
    assert pc["engine"]["hit_rate"] == pytest.approx(used, abs=1e-3), pc["engine"]
    assert pc["requests_hit"] == len(hits)
    assert pc["ttft_cached_ms"]["count"] == len(hits)
    assert pc["ttft_uncached_ms"]["count"] == len(misses)
    assert pc["ttft_first_of_group_ms"]["count"] == 3
    assert "prefix cache (usage.cached_tokens): hit rate" in proc.stdout


def test_without_a_prefix_cache_the_report_says_not_reported(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    # No prefix cache at all (the self-test factory turns one on for the CACHE checks).
    server = make_reference(ttft_ms=5, itl_ms=1, max_model_len=4096, prefix_cache_blocks=0)
    targets = _targets(tmp_path, server)
    out = tmp_path / "reports"
    proc = _run(
        _cmd(targets, out, "--scenario", "shared_prefix", "--users", "2", "--max-requests", "8")
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pc = _summary(out)["prefix_cache"]
    assert pc["requests_reporting"] == 0 and pc["hit_rate"] is None
    assert pc["engine"] == {"note": "the engine exposes no prefix-cache counters"}
    assert "not reported by the server" in proc.stdout
    assert pc["ttft_first_of_group_ms"]["count"] + pc["ttft_later_in_group_ms"]["count"] == 8


def test_multi_turn_in_open_loop_and_with_two_processes(
    cache_server: RunningServer, tmp_path: Path
) -> None:
    targets = _targets(tmp_path, cache_server)
    out = tmp_path / "open"
    proc = _run(
        _cmd(targets, out, "--scenario", "multi_turn", "--rate", "30/s", "--max-requests", "30"),
        env={"SERVECHECK_TURNS": "3"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = _records(out)
    assert len(recs) == 30
    _check_conversations(recs)

    out = tmp_path / "procs"
    proc = _run(
        _cmd(
            targets,
            out,
            "--scenario",
            "multi_turn",
            "--users",
            "4",
            "--max-requests",
            "24",
            "--processes",
            "2",
        ),
        env={"SERVECHECK_TURNS": "3"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = _records(out)
    assert len({r["worker"] for r in recs}) == 2 and len(recs) == 24
    convs = _check_conversations(recs)
    assert all(len({r["worker"] for r in turns}) == 1 for turns in convs.values())


def test_plain_locust_runs_the_scenario(cache_server: RunningServer, tmp_path: Path) -> None:
    rec_dir = tmp_path / "plain"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(ROOT / "scenarios" / "multi_turn.py"),
            "--host",
            cache_server.base_url,
            "--headless",
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            "5s",
            "--only-summary",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "SERVECHECK_RECORDS_DIR": str(rec_dir), "SERVECHECK_TURNS": "3"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = rec_dir.glob("records-*.jsonl")
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(recs) >= 3  # a timed run on a busy machine: a few turns are enough to check
    # The run stops mid-conversation: drop requests cut by the stop, check the rest.
    _check_conversations([r for r in recs if r["error"] is None])
    # Locust's own table: one row a request, the scenario as its type and the API path as its
    # name (issue 41: a TTFT row and an E2E row per request counted every request twice).
    assert re.search(r"multi_turn\s+/chat/completions", proc.stdout + proc.stderr)


@pytest.mark.parametrize(
    ("scenario", "dataset"),
    [("shared_prefix", False), ("multi_turn", True), ("dataset", True)],
)
def test_capacity_sweeps_the_scenario_and_shows_turns_and_cache_per_level(
    cache_server: RunningServer, tmp_path: Path, scenario: str, dataset: bool
) -> None:
    targets = _targets(tmp_path, cache_server)
    out = tmp_path / "cap"
    extra: list[str] = []
    if dataset:
        data = tmp_path / "sg.jsonl"
        data.write_text(
            "".join(
                json.dumps(
                    {
                        "conversations": [
                            {"from": "system", "value": "You answer briefly. " * 20},
                            {"from": "human", "value": f"question {i} " * 4},
                            {"from": "gpt", "value": "an answer " * 4},
                            {"from": "human", "value": f"and then {i}?"},
                        ]
                    }
                )
                + "\n"
                for i in range(20)
            )
        )
        extra = ["--dataset", str(data)]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "servecheck",
            "capacity",
            "--target",
            "ref",
            "--targets-file",
            str(targets),
            "--out",
            str(out),
            "--users",
            "1,2",
            "--step-duration",
            "2s",
            "--scenario",
            scenario,
            "--allow-lag",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "SERVECHECK_TURNS": "3"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = list(out.iterdir())
    data_ = json.loads((run_dir / "capacity.json").read_text())
    steps = data_["steps"]
    assert [s["level"] for s in steps] == [1, 2] and all(s["total"] for s in steps)
    # Each step is a load run of the scenario; its turns / prefix-cache figures reach the
    # sweep's per-level table, the same numbers as the step's own summary.
    summaries = sorted(run_dir.glob("steps/*/summary.json"))
    assert len(summaries) == 2
    for p, step in zip(summaries, steps, strict=True):
        s = json.loads(p.read_text())
        assert s["scenario"] == scenario
        b = step["breakdown"]
        if scenario == "dataset":  # single turn, no groups: only the usage hit rate
            assert b["requests_reporting"] == s["prefix_cache"]["requests_reporting"] > 0
            continue
        assert b["hit_rate"] == s["prefix_cache"]["hit_rate"] and b["hit_rate"] > 0
        assert b["requests_hit"] > 0 and b["engine_hit_rate"] is not None
        assert b["ttft_later_ms"]["count"] == s["prefix_cache"]["ttft_later_in_group_ms"]["count"]
        if scenario == "multi_turn":
            assert set(b["by_turn"]) >= {"0", "1"}
            assert b["by_turn"]["0"]["ttft_p50"] == s["turns"]["by_turn"]["0"]["ttft_ms"]["p50"]
    if scenario != "dataset":
        # Issue 42 item 12c: a step line ended "(engine 42%)", a figure without a name.
        said = " ".join((proc.stdout + proc.stderr).split())
        assert re.search(r"step 1 .* cache hit \d+% \(engine's own hit rate \d+%\)", said), said
        assert not re.search(r"\(engine \d+%\)", said), said
    page = (run_dir / "report.html").read_text()
    assert "Turns and prefix cache per level" in page and "hit rate (engine)" in page
    assert "Turns and prefix cache per level" in (run_dir / "summary.md").read_text()
