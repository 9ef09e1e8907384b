"""``servecheck_stats.csv``: the run's LLM metrics in Locust's ``*_stats.csv`` layout.

Its header is Locust's own (read from ``locust.stats`` in a child process: importing locust
monkey-patches the interpreter with gevent, which must not reach this one); its values are
``summary.json``'s ``latency_ms``, from the same merged aggregate, across two Locust workers.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servecheck.analysis.aggregate import Rule, aggregate_of
from servecheck.analysis.stats import Schedule
from servecheck.load.stats_csv import LOCUST_PERCENTILES, LOCUST_STATS_HEADER, STATS_CSV, stats_rows
from servecheck.records.record import to_dataframe
from servecheck.reference.inprocess import RunningServer
from tests.hostile.support import load_cmd

LOCUST_HEADER = (
    "import json\n"
    "from locust.stats import PERCENTILES_TO_REPORT, StatsCSV\n"
    "print(json.dumps({'header': StatsCSV(None, PERCENTILES_TO_REPORT).requests_csv_columns,\n"
    "                  'percentiles': PERCENTILES_TO_REPORT}))\n"
)
# Our column -> summary.json's latency_ms key: every value the two files share.
SHARED = {
    "Request Count": "count",
    "Median Response Time": "p50",
    "Average Response Time": "mean",
    "Min Response Time": "min",
    "Max Response Time": "max",
    "50%": "p50",
    "90%": "p90",
    "95%": "p95",
    "99%": "p99",
    "99.9%": "p99.9",
    "100%": "max",
}
ROWS = {"TTFT": "ttft", "TTFA": "ttfa", "ITL": "itl", "E2E": "e2e"}


def test_the_header_is_locusts_own() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", LOCUST_HEADER], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    locust = json.loads(proc.stdout)
    assert list(LOCUST_STATS_HEADER) == locust["header"]
    assert [p / 100 for _, p in LOCUST_PERCENTILES] == pytest.approx(locust["percentiles"])


def _record(seq: int, ok: bool = True) -> dict[str, Any]:
    t = 1_764_684_149.0 + seq * 0.1
    if not ok:
        return {"worker": "w0", "seq": seq, "t_intended": t, "t_sent": t, "t_done": t + 0.01,
                "error": "http-503", "output_tokens_client": 0}  # fmt: skip
    itls = [0.002 + 0.0001 * ((seq * 7 + i) % 13) for i in range(9)]
    ttft = 0.02 + 0.001 * (seq % 17)
    e2e = ttft + sum(itls)
    return {"worker": "w0", "seq": seq, "t_intended": t, "t_sent": t, "t_done": t + e2e,
            "ttft": ttft, "e2e": e2e, "itls": itls, "output_tokens": 10,
            "output_tokens_client": 10, "error": None}  # fmt: skip


def test_the_rows_are_the_summarys_latencies() -> None:
    agg = aggregate_of([_record(i, ok=i % 10 != 3) for i in range(60)], Rule())
    stats = agg.stats(Schedule())
    rows = stats_rows(agg.whole, "chat", stats.window_s)
    assert rows[0] == list(LOCUST_STATS_HEADER)
    latency = stats.as_dict()["latency_ms"]
    by_type = {r[0]: dict(zip(LOCUST_STATS_HEADER, r, strict=True)) for r in rows[1:]}
    assert list(by_type) == list(ROWS)
    for kind, metric in ROWS.items():
        row = by_type[kind]
        assert row["Name"] == "/chat/completions"
        assert row["Failure Count"] == 6 == stats.failed
        assert row["Average Content Size"] == 10.0
        for column, key in SHARED.items():
            assert row[column] == latency[metric][key], (kind, column)
    assert by_type["ITL"]["Request Count"] == 54 * 9
    assert by_type["TTFT"]["Requests/s"] == round(54 / stats.window_s, 6)


def test_a_metric_with_no_value_says_n_a_not_zero() -> None:
    agg = aggregate_of([_record(i, ok=False) for i in range(3)], Rule())
    rows = stats_rows(agg.whole, "messages", agg.stats(Schedule()).window_s)
    ttft = dict(zip(LOCUST_STATS_HEADER, rows[1], strict=True))
    assert ttft["Name"] == "/messages" and ttft["Request Count"] == 0
    assert ttft["Failure Count"] == 3
    assert {ttft[c] for c in (*SHARED, "66%", "99.99%") if c != "Request Count"} == {"N/A"}


@pytest.mark.slow
def test_a_distributed_run_writes_it_beside_summary_json(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """Two Locust workers: the CSV is the merged aggregate's, as summary.json is; and
    records.parquet reads into pandas, one row per request."""
    import pandas as pd

    server = make_reference(ttft_ms=20, itl_ms=2, api_key="sk-load-selftest-1234")
    targets = tmp_path / "targets.yaml"
    targets.write_text(
        "targets:\n  - name: ref\n"
        f"    base_url: {server.base_url}\n    engine: reference\n    timeout_s: 20\n"
        f"    api_key: {server.config.api_key}\n"
    )
    out = tmp_path / "reports"
    args = ("--users", "4", "--max-requests", "40", "--records", "all", "--processes", "2")
    cmd = load_cmd(targets, out, "--allow-lag", *args, "--no-tokenize", target="ref")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["workers"] == 2 and s["requests"]["ok"] == 40, (s["workers"], s["requests"])
    assert STATS_CSV in s["files"]
    with (run_dir / STATS_CSV).open(newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == list(LOCUST_STATS_HEADER)
        rows = {r["Type"]: r for r in reader}
    assert list(rows) == list(ROWS)
    for kind, metric in ROWS.items():
        assert rows[kind]["Name"] == "/chat/completions"
        for column, key in SHARED.items():
            assert float(rows[kind][column]) == s["latency_ms"][metric][key], (kind, column)
    assert int(rows["TTFT"]["Request Count"]) == 40 and int(rows["E2E"]["Failure Count"]) == 0
    # records.parquet, one row per request: the stored columns straight from pandas, the
    # records' own (seconds, the JSONL's keys) through to_dataframe (docs/load.md's example).
    assert len(pd.read_parquet(run_dir / "records.parquet")) == 40
    frame = to_dataframe(run_dir / "records.parquet")
    assert len(frame) == 40 and frame["request_id"].is_unique and frame["ok"].all()
    assert frame["worker"].nunique() == 2, frame["worker"].value_counts()
    assert frame["ttft"].max() * 1000 <= s["latency_ms"]["ttft"]["max"]
