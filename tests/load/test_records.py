"""Per-request records: line-per-request writing, tolerant reading, merging, DataFrames."""

from __future__ import annotations

import json
from pathlib import Path

from servecheck.records.record import (
    RecordWriter,
    RequestRecord,
    merge_records,
    read_files,
    to_dataframe,
)


def _rec(worker: str, seq: int, t: float, error: str | None = None) -> RequestRecord:
    return RequestRecord(
        target="ref",
        scenario="chat",
        worker=worker,
        seq=seq,
        t_intended=t,
        t_sent=t + 0.001,
        t_done=t + 0.5,
        ttft=0.1,
        e2e=0.5,
        tpot=0.01,
        itls=[0.01, 0.0123456789],
        output_tokens=3,
        output_tokens_client=2,
        error=error,
    )


def test_each_write_is_on_disk_before_close(tmp_path: Path) -> None:
    w = RecordWriter(tmp_path / "records-w0.jsonl")
    w.write(_rec("w0", 1, 10.0))
    # read through another handle without closing the writer: the line is already there
    lines = (tmp_path / "records-w0.jsonl").read_text().splitlines()
    assert len(lines) == 1
    d = json.loads(lines[0])
    assert d["token_discrepancy"] == 1 and d["itls"] == [0.01, 0.012346] and d["lag"] == 0.001
    w.close()


def test_truncated_last_line_is_skipped_and_counted(tmp_path: Path) -> None:
    p = tmp_path / "records-w0.jsonl"
    with RecordWriter(p) as w:
        for i in range(3):
            w.write(_rec("w0", i, float(i)))
    with open(p, "a") as fh:
        fh.write('{"target": "ref", "scen')  # a process killed inside write()
    got = read_files([p])
    assert len(got.records) == 3 and got.bad_lines == 1


def test_merge_sums_workers(tmp_path: Path) -> None:
    for worker, n in (("w0", 5), ("w1", 7)):
        with RecordWriter(tmp_path / f"records-{worker}.jsonl") as w:
            for i in range(n):
                w.write(_rec(worker, i, i * 0.1 + (0.05 if worker == "w1" else 0.0)))
    merged = merge_records(tmp_path)
    assert merged.count == 12 == sum(merged.per_file.values()) == len(list(merged.iter_records()))
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert len(lines) == 12
    sent = [json.loads(x)["t_sent"] for x in lines]
    assert sent == sorted(sent)
    df = to_dataframe(tmp_path / "records.jsonl")
    assert len(df) == 12 and bool(df["ok"].all()) and set(df["worker"]) == {"w0", "w1"}
    assert df["tokens"].sum() == 36
