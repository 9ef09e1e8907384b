"""Locust's own figures agree with the records (issue 41): one Locust request event per request,
so its header and Statistics tab (RPS, failure share) and its ``locust_stats.csv`` count what the
records count; no size column that holds tokens; the final CSV has the run's last requests."""

from __future__ import annotations

import csv
import json
import re
import socket
import subprocess
from pathlib import Path

import pytest

from servecheck.load.generator.keeper import request_event
from servecheck.records.parquet import read_run_records
from servecheck.records.record import RATE_LIMITED, RequestRecord
from servecheck.reference.hostile import hostile
from tests.hostile.support import communicate, load_cmd, write_targets

T0 = 1_800_000_000.0


def _record(**fields: object) -> RequestRecord:
    base: dict[str, object] = {
        "target": "t",
        "scenario": "chat",
        "worker": "w0",
        "seq": 1,
        "t_intended": T0,
        "t_sent": T0,
        "t_done": T0 + 0.25,
    }
    return RequestRecord(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "name", "ms", "failed"),
    [
        pytest.param(
            {"ttft": 0.05, "e2e": 0.2, "output_tokens": 16},
            "/chat/completions",
            200.0,
            False,
            id="ok",
        ),
        pytest.param(
            {"status": 500, "error": "http-500", "error_message": "internal"},
            "/chat/completions",
            250.0,
            True,
            id="failed",
        ),
        pytest.param(
            {"status": 429, "error": RATE_LIMITED},
            "/chat/completions (rate-limited)",
            250.0,
            True,
            id="rate-limited",
        ),
        pytest.param(
            {"ttft": 0.05, "e2e": 0.1, "abandoned": True},
            "/chat/completions (abandoned)",
            100.0,
            False,
            id="abandoned",
        ),
    ],
)
def test_one_request_event_per_request(
    fields: dict[str, object], name: str, ms: float, failed: bool
) -> None:
    event = request_event(_record(**fields), "chat", "chat")
    assert event["request_type"] == "chat" and event["name"] == name
    assert event["response_time"] == pytest.approx(ms)
    assert event["response_length"] == 0, "Locust's size column is bytes, never tokens"
    assert (event["exception"] is not None) is failed, event


def test_the_messages_api_is_named_after_its_path() -> None:
    event = request_event(_record(ttft=0.01, e2e=0.02), "messages", "messages")
    assert event["name"] == "/messages" and event["request_type"] == "messages"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_locust_counts_each_request_once_on_a_half_failing_server(tmp_path: Path) -> None:
    """Every second request answers 500: Locust's own stats (under ``--web``, as a user reads
    them) count 20 requests, 10 failed (50 %), as the records and summary.json do. Before issue
    41 each answer was two Locust requests ("TTFT chat" and "E2E chat"): 30 requests, 33 %."""
    port = _free_port()
    with hostile("every-other-500") as srv:
        targets = write_targets(tmp_path / "targets.yaml", srv)
        cmd = load_cmd(
            targets,
            tmp_path / "r",
            *("--users", "2", "--max-requests", "20", "--run-id", "half"),
            *("--allow-lag", "--error-budget", "60%", "--web", f"127.0.0.1:{port}"),
        )
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stdout, stderr = communicate(proc, 120)  # a bound against a hang, not a speed claim
    assert proc.returncode == 0, stdout + stderr
    run = tmp_path / "r" / "half"
    summary = json.loads((run / "summary.json").read_text())
    records = list(read_run_records(run))
    failed = sum(1 for r in records if r.get("error") is not None)
    assert len(records) == summary["requests"]["total"] == 20 and failed == 10, summary["requests"]
    with (run / "locust_stats.csv").open(newline="") as f:
        rows = {row["Name"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"/chat/completions", "Aggregated"}, f"one row per request: {set(rows)}"
    total = rows["Aggregated"]
    assert int(total["Request Count"]) == len(records), total
    assert int(total["Failure Count"]) == failed, total
    share = int(total["Failure Count"]) / int(total["Request Count"])
    assert share == pytest.approx(summary["requests"]["error_rate"]), (share, summary["requests"])
    assert float(rows["/chat/completions"]["Average Content Size"]) == 0, "no tokens as bytes"


def test_each_column_of_the_llm_tab_holds_one_kind_of_value() -> None:
    """The LLM tab's "Value" column held the window ("5-10 s") for latency rows and a rate for
    the others: now the window has its own column, and Value holds only a row's one number."""
    from servecheck.load.generator.live_web import tab_rows
    from tests.load.test_live import _fed_view, _records

    rows = tab_rows(_fed_view().snapshot())
    keys = ("metric", "window", "p50", "p95", "p99", "value")
    assert all(tuple(r) == keys for r in rows), rows
    windowed = [r for r in rows if r["window"] != "run so far"]
    assert windowed and all(re.fullmatch(r"\d+-\d+ s", r["window"]) for r in windowed), rows
    latency = [r for r in rows if r["metric"] in ("TTFT", "TTFA", "ITL", "E2E")]
    assert len(latency) == 4 and all(r["value"] == "" for r in latency), latency
    assert all(isinstance(r[q], float) for r in latency for q in ("p50", "p95", "p99")), latency
    others = [r for r in rows if r not in latency]
    assert all(isinstance(r["value"], int | float) for r in others), others
    assert all(r[q] == "" for r in others for q in ("p50", "p95", "p99")), others
    so_far = {r["metric"]: r["value"] for r in rows if r["window"] == "run so far"}
    failed = sum(1 for _, r in _records() if r.get("error"))  # 7 http-500, 4 rate-limited
    assert so_far == {"requests ok": 60 - failed, "requests failed": failed}, so_far


def _drawn_series(page: str) -> list[set[str]]:
    """Each ``draw(...)`` call of the /llm page's script: the snapshot fields it plots."""
    calls = re.findall(r"\bdraw\((.*?)\);", page)
    return [set(re.findall(r"\br\.(\w+)", call)) for call in calls if "r." in call]


def test_the_live_page_draws_requests_and_tokens_per_second_on_their_own_axes() -> None:
    """requests/s (~60) and output tokens/s (~1,400) on one axis drew requests/s as a flat
    line: each chart of /llm now plots fields of one unit, so each gets its own scale."""
    from servecheck.load.generator.live_web import live_page

    charts = _drawn_series(live_page())
    rate = [c for c in charts if c & {"requests_per_s", "output_tokens_per_s"}]
    assert sorted(map(sorted, rate)) == [["output_tokens_per_s"], ["requests_per_s"]], charts
