"""Records over Locust's channel (servecheck/load/generator/transport.py), without a Locust process: the
worker's BatchSender feeds the master's Collector directly, as Locust's message handler would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hdrh.histogram import HdrHistogram

from servecheck.analysis.aggregate import Rule
from servecheck.load.generator.keeper import RecordKeeper
from servecheck.load.generator.transport import (
    BatchSender,
    Collector,
    decode_batch,
    encode_batch,
    read_transport,
    transport_reasons,
)
from servecheck.records.record import RecordWriter, RequestRecord, merge_records


def _record(worker: str, seq: int, error: str | None = None) -> RequestRecord:
    t = 1_700_000_000.0 + seq * 0.01
    return RequestRecord(
        target="ref",
        scenario="chat",
        worker=worker,
        seq=seq,
        t_intended=t,
        t_sent=t,
        t_done=t + 0.1,
        ttft=0.02,
        e2e=0.1,
        itls=[0.002] * 9,
        output_tokens=None if error else 10,
        output_tokens_client=0 if error else 10,
        error=error,
        request_id=f"run-{worker}-{seq}",
    )


class _Wire:
    """Stands in for Locust's connection: what the worker sends, the master receives."""

    def __init__(self, collector: Collector, node: str) -> None:
        self.collector, self.node = collector, node
        self.sent: list[dict[str, Any]] = []
        self.drop: set[int] = set()

    def __call__(self, data: dict[str, Any]) -> None:
        self.sent.append(data)
        if data["batch"] not in self.drop:
            self.collector.on_batch(self.node, data)


def _run_worker(
    tmp: Path, collector: Collector, node: str, name: str, n: int, batch: int = 7
) -> tuple[BatchSender, Path, _Wire]:
    wire = _Wire(collector, node)
    sender = BatchSender(name, wire, max_records=batch)
    local = tmp / node / "local" / f"records-{name}.jsonl"
    with RecordWriter(local) as w:
        for seq in range(1, n + 1):
            line = w.write(_record(name, seq, error="http-503" if seq % 5 == 0 else None))
            if sender.add(line):
                sender.flush(sent=seq)
    sender.flush(sent=n)
    return sender, local, wire


def _done(
    collector: Collector,
    node: str,
    sender: BatchSender,
    local: Path,
    n: int,
    dataset: str | None = None,
) -> None:
    (local.parent / "keeper").mkdir(exist_ok=True)
    keeper = RecordKeeper(local.parent / "keeper", sender.worker, "all", Rule(mode="fixed"))
    for line in local.read_text().splitlines():
        keeper.keep(RequestRecord.from_dict(json.loads(line)))
    hist = keeper.totals()  # what a worker's done message carries
    collector.on_done(
        node,
        {
            "worker": sender.worker,
            "sent": n,
            "complete": True,
            "dataset": dataset,
            "totals": {**sender.totals(), "ok": hist["ok"], "tokens": hist["tokens"]},
            "info": {"planned": None, "cpu_s": 0.1, "histograms": hist["histograms"]},
            "aggregate": keeper.agg.state(),
        },
    )


def test_batches_compress_and_round_trip() -> None:
    small, big = b'{"a":1}\n', b'{"seq":1,"itls":[0.002,0.002]}\n' * 200
    assert encode_batch(small) == (small, "raw")
    data, enc = encode_batch(big)
    assert enc == "zlib" and len(data) < len(big) // 4
    assert decode_batch(data, enc) == big
    with pytest.raises(ValueError, match="unknown batch encoding 'lz4'"):
        decode_batch(data, "lz4")


def test_master_file_equals_each_workers_local_copy(tmp_path: Path) -> None:
    master = tmp_path / "master"
    col = Collector(master, expect_workers=2)
    runs = {}
    for node, name, n in (("hostA_1", "w0-7", 40), ("hostB_2", "w1-7", 33)):
        sender, local, _ = _run_worker(tmp_path, col, node, name, n)
        _done(col, node, sender, local, n)
        runs[name] = (local, n)
    col.close()
    rep = read_transport(master)
    assert rep is not None and rep["verified"] is True and transport_reasons(rep) == []
    assert rep["received"] == 73 and rep["lost_workers"] == []
    for name, (local, n) in runs.items():
        assert (master / f"records-{name}.jsonl").read_bytes() == local.read_bytes()
        w = rep["workers"][name]
        assert (w["state"], w["records"], w["batches"]) == ("done", n, -(-n // 7))
        assert w["ok"] == n - n // 5 and w["sha256"] == w["reported"]["sha256"]
        info = json.loads((master / f"worker-{name}.json").read_text())
        ttft = HdrHistogram.decode(info["histograms"]["ttft"])
        assert ttft.get_total_count() == w["ok"]  # the worker's histogram covers its ok records
        agg = json.loads((master / f"aggregate-{name}.json").read_text())
        assert agg["count"] == n and agg["final"] is True  # its streaming summary, kept
    merged = merge_records(master)
    assert merged.count == sum(merged.per_file.values()) == 73


def test_a_killed_worker_keeps_its_batches_and_counts_the_rest_as_lost(tmp_path: Path) -> None:
    col = Collector(tmp_path / "m", expect_workers=2)
    s0, l0, _ = _run_worker(tmp_path, col, "a", "w0-1", 20)
    _done(col, "a", s0, l0, 20)
    # Worker b sent 3 batches (21 records) and had 25 requests out at its last batch, then died.
    wire = _Wire(col, "b")
    sender = BatchSender("w1-1", wire, max_records=7)
    for seq in range(1, 22):
        if sender.add(_record("w1-1", seq).to_json()):
            sender.flush(sent=seq + 4)
    assert not col.finished(connected=1)  # b has not ended yet
    led = col.on_lost("b")
    assert led is not None and (led.state, led.records, led.lost_requests) == ("lost", 21, 4)
    assert col.finished(connected=1)
    col.close()
    rep = read_transport(tmp_path / "m")
    assert rep is not None and rep["lost_workers"] == ["w1-1"] and rep["requests_lost"] == 4
    assert rep["verified"] is False
    (reason,) = transport_reasons(rep)
    assert reason == (
        "worker w1-1 disconnected mid-run: its 21 records up to batch 3 are kept, "
        "at least 4 requests it had sent are lost"
    )


def test_a_worker_whose_totals_differ_is_not_trusted(tmp_path: Path) -> None:
    col = Collector(tmp_path / "m", expect_workers=1)
    wire = _Wire(col, "a")
    wire.drop = {2}  # a batch the master never got
    sender = BatchSender("w0-1", wire, max_records=5)
    for seq in range(1, 16):
        if sender.add(_record("w0-1", seq).to_json()):
            sender.flush(sent=seq)
    col.on_done("a", {"worker": "w0-1", "sent": 15, "totals": sender.totals()})
    rep = col.report()
    w = rep["workers"]["w0-1"]
    assert w["missing_batches"] == 1 and w["verified"] is False
    (reason,) = transport_reasons(rep)
    assert reason.startswith("worker w0-1: what the master received differs from what it sent (")
    assert "records: worker 15, master 10" in reason and "sha256: worker" in reason


@pytest.mark.parametrize(
    ("master", "worker", "says"),
    [
        pytest.param("sha256:aa", None, "ran without the master's dataset", id="worker-has-none"),
        pytest.param("sha256:aa", "sha256:bb", "another dataset file", id="another-file"),
        pytest.param(None, "sha256:bb", "the master was not given", id="master-has-none"),
    ],
)
def test_a_worker_that_read_another_dataset_is_a_reason(
    tmp_path: Path, master: str | None, worker: str | None, says: str
) -> None:
    """A distributed worker started without the master's --dataset sends synthetic prompts: its
    records are whole and verified, yet the run did not measure the workload it names."""
    col = Collector(tmp_path / "master", expect_workers=2, dataset=master)
    for node, name, theirs in (("hostA_1", "w0-1", master), ("hostB_2", "w1-2", worker)):
        sender, local, _ = _run_worker(tmp_path, col, node, name, 10)
        _done(col, node, sender, local, 10, dataset=theirs)
    col.close()
    rep = read_transport(tmp_path / "master")
    assert rep is not None and rep["verified"] is True  # the records themselves arrived whole
    reasons = transport_reasons(rep)
    assert len(reasons) == 1 and reasons[0].startswith("worker w1-2 ") and says in reasons[0], (
        reasons
    )


def test_fewer_workers_than_expected_is_a_reason(tmp_path: Path) -> None:
    col = Collector(tmp_path / "m", expect_workers=3)
    s, local, _ = _run_worker(tmp_path, col, "a", "w0-1", 5)
    _done(col, "a", s, local, 5)
    assert not col.finished(connected=1)  # still waiting for the other two
    assert transport_reasons(col.report()) == ["3 workers expected, 1 sent records"]


def test_a_late_worker_is_counted_from_its_first_request(tmp_path: Path) -> None:
    col = Collector(tmp_path / "m", expect_workers=1)
    s0, l0, _ = _run_worker(tmp_path, col, "a", "w0-1", 10)
    # The second worker joins later: nothing of it exists until its first batch.
    assert set(col.report()["workers"]) == {"w0-1"}
    wire = _Wire(col, "b")
    late = BatchSender("w1-1", wire, max_records=4)
    for seq in range(1, 7):
        rec = _record("w1-1", seq)
        rec.t_sent += 500.0  # its first request is long after the first worker's
        late.add(rec.to_json())
    late.flush(sent=6)
    assert not col.finished(connected=2)  # the late worker is running
    _done(col, "a", s0, l0, 10)
    assert not col.finished(connected=2)
    col.on_done("b", {"worker": "w1-1", "sent": 6, "totals": late.totals()})
    assert col.finished(connected=2)
    rep = col.report()
    assert rep["received"] == 16 and rep["verified"] is True
    assert rep["workers"]["w1-1"]["first_request_at"] == pytest.approx(1_700_000_500.01)


def test_two_workers_with_one_name_on_two_hosts_stay_apart(tmp_path: Path) -> None:
    col = Collector(tmp_path / "m", expect_workers=2)
    for node in ("podA_x", "podB_y"):  # same index and pid in two pods
        s, local, _ = _run_worker(tmp_path, col, node, "w0-7", 6)
        _done(col, node, s, local, 6)
    col.close()
    files = sorted(p.name for p in (tmp_path / "m").glob("records-*.jsonl"))
    assert len(files) == 2 and "records-w0-7.jsonl" in files, files
    assert merge_records(tmp_path / "m").count == 12


def test_a_worker_keeping_no_records_still_tells_what_it_finished(tmp_path: Path) -> None:
    """--records none: batches carry no lines, only the finished count, so a lost worker's
    lost requests are the ones it never finished, not every request it sent."""
    col = Collector(tmp_path / "m", expect_workers=1)
    sender = BatchSender("w0-1", lambda data: col.on_batch("a", data))
    sender.flush(sent=0)  # nothing finished yet: nothing to say
    assert sender.batches == 0
    sender.finished = 30
    sender.flush(sent=34)
    sender.flush(sent=34)  # nothing new since: no batch
    assert sender.batches == 1 and sender.records == 0
    led = col.on_lost("a")
    assert led is not None and led.records == 0 and led.lost_requests == 4
