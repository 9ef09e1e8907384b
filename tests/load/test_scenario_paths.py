"""Every production-like scenario (multi_turn, shared_prefix, dataset, trace) through the paths a
user runs it by besides ``servecheck load`` (tested beside each scenario): plain ``locust -f``
(its settings from the environment) and a distributed run (a ``--master`` and two
``--worker`` processes on loopback, each given the dataset or trace file by its own option).
Capacity sweeps are in test_production_scenarios.py and test_trace.py.

Short runs on the reference server with its prefix cache; no timed assertions: what is checked is
that each path sent the scenario's requests (their records' fields) and that a distributed run's
master received every worker's records.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.records.parquet import read_run_records
from servecheck.reference.inprocess import RunningServer
from tests.load.test_load_cli import ROOT, _free_port, _targets, run_distributed

pytestmark = pytest.mark.slow
TRACE = ROOT / "servecheck" / "loadtests" / "traces" / "synthetic.jsonl"


@pytest.fixture(scope="module")
def server(make_reference: Callable[..., RunningServer]) -> RunningServer:
    return make_reference(ttft_ms=5, itl_ms=1, max_model_len=4096, prefix_cache_blocks=8192)


def _dataset(tmp_path: Path) -> Path:
    p = tmp_path / "conversations.jsonl"
    p.write_text(
        "".join(
            json.dumps(
                {
                    "conversations": [
                        {"from": "human", "value": f"dataset question {i} " * 3},
                        {"from": "gpt", "value": "answer " * 6},
                        {"from": "human", "value": f"dataset follow-up {i}"},
                    ]
                }
            )
            + "\n"
            for i in range(30)
        )
    )
    return p


def _check(scenario: str, recs: list[dict], data: Path | None) -> None:
    """The records are the scenario's: its kind of request, its per-record fields."""
    ok = [r for r in recs if r["error"] is None]
    assert ok, recs[:3]
    if scenario == "multi_turn":
        assert {r["turn"] for r in ok} >= {0, 1}
    elif scenario == "shared_prefix":
        assert all(r.get("prefix_group") is not None for r in ok)
        assert any(r["cached_tokens"] > 0 for r in ok)  # the groups' prefix was cached
    elif scenario == "dataset":
        assert {r["kind"] for r in ok} == {"dataset"}
    elif scenario == "trace":
        assert {r["kind"] for r in ok} <= {"trace", "trace-clipped"}
        assert all(r["t_intended"] for r in ok)


# scenario, options for servecheck load (master and workers), environment
CASES = [
    pytest.param("multi_turn", [], {"SERVECHECK_TURNS": "3"}, id="multi_turn"),
    pytest.param("shared_prefix", [], {}, id="shared_prefix"),
    pytest.param("dataset", ["--dataset", "{data}"], {}, id="dataset"),
    pytest.param("trace", ["--trace", str(TRACE), "--speed", "8"], {}, id="trace"),
]


@pytest.mark.parametrize(("scenario", "options", "env"), CASES)
def test_plain_locust_runs_the_scenario(
    server: RunningServer, tmp_path: Path, scenario: str, options: list[str], env: dict[str, str]
) -> None:
    data = _dataset(tmp_path)
    # Plain locust has no servecheck options: the same settings come from the environment.
    var = {"--dataset": "SERVECHECK_DATASET", "--trace": "SERVECHECK_TRACE"}
    var["--speed"] = "SERVECHECK_TRACE_SPEED"
    extra = {var[k]: v.format(data=data) for k, v in zip(options[::2], options[1::2], strict=True)}
    rec_dir = tmp_path / "plain"
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(ROOT / "scenarios" / f"{scenario}.py")]
        + ["--host", server.base_url, "--headless", "-u", "2", "-r", "2", "-t", "90s"]
        + ["--only-summary"],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=tmp_path,
        # The run ends after 12 requests (the -t above is only a backstop on a busy machine).
        env={
            **os.environ,
            **env,
            **extra,
            "SERVECHECK_RECORDS_DIR": str(rec_dir),
            "SERVECHECK_MAX_REQUESTS": "12",
        },
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = [
        json.loads(x) for p in rec_dir.glob("records-*.jsonl") for x in p.read_text().splitlines()
    ]
    assert len(recs) == 12, proc.stdout + proc.stderr
    _check(scenario, recs, data)
    # Locust's own table: one row per request, typed by the scenario, named after the API
    assert re.search(rf"^{scenario}\s+/chat/completions\s", proc.stdout + proc.stderr, re.M)


@pytest.mark.parametrize(("scenario", "options", "env"), CASES)
def test_distributed_master_and_two_workers_run_the_scenario(
    server: RunningServer, tmp_path: Path, scenario: str, options: list[str], env: dict[str, str]
) -> None:
    targets = _targets(tmp_path, server)
    data = _dataset(tmp_path)
    out = tmp_path / "reports"
    given = [o.format(data=data) for o in options]
    common = ["--scenario", scenario, "--run-id", "dist", "--expect-workers", "2"]
    common += ["--master-port", str(_free_port()), "--max-requests", "24", "--allow-lag", *given]
    load = [] if scenario == "trace" else ["--users", "4"]  # a trace brings its own schedule
    full_env = {**os.environ, **env}
    full_env.pop("SERVECHECK_DATASET", None)  # each process is given the file by its option
    rc, output = run_distributed(targets, out, load, common, env=full_env)
    assert rc == 0, output
    s = json.loads((out / "dist" / "summary.json").read_text())
    assert s["scenario"] == scenario and s["records"]["transport"]["verified"]
    assert len(s["records"]["per_worker"]) == 2
    assert s["requests"]["total"] == s["records"]["merged"] == 24
    recs = list(read_run_records(out / "dist"))
    _check(scenario, recs, data)
    if scenario == "dataset":
        # Each worker read the file named by its own --dataset and sized it with /tokenize.
        assert s["prompt_method"].startswith("tokenize:")


def test_a_distributed_worker_without_the_masters_dataset_makes_the_run_inconclusive(
    server: RunningServer, tmp_path: Path
) -> None:
    """The master was given --dataset, the workers were not: on multi_turn they silently send
    synthetic prompts. The run is INCONCLUSIVE, naming each worker, not a PASS on a workload
    nobody asked for."""
    targets = _targets(tmp_path, server)
    data = _dataset(tmp_path)
    out = tmp_path / "reports"
    common = ["--scenario", "multi_turn", "--run-id", "dist", "--expect-workers", "2"]
    common += ["--master-port", str(_free_port()), "--max-requests", "12", "--allow-lag"]
    env = {k: v for k, v in os.environ.items() if k != "SERVECHECK_DATASET"}
    rc, output = run_distributed(
        targets, out, ["--users", "2", "--dataset", str(data)], common, env=env
    )
    assert rc == 1, output
    s = json.loads((out / "dist" / "summary.json").read_text())
    assert s["verdict"] == "inconclusive", s["verdict"]
    said = [r for r in s["reasons"] if "ran without the master's dataset" in r]
    assert len(said) == 2, s["reasons"]
    assert s["records"]["transport"][
        "verified"
    ]  # the records arrived whole: only the workload is wrong
