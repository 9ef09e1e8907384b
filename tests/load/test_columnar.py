"""The compact records file: workers' JSONL -> one records.parquet, read back as the same dicts."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from servecheck.load.generator.transport import LOCAL_DIR
from servecheck.records import parquet as columnar
from servecheck.records.parquet import (
    RECORDS_PARQUET,
    compact_records,
    export_jsonl,
    iter_records,
    read_run_records,
)
from servecheck.records.record import RecordWriter, RequestRecord, iter_lines, to_dataframe

T0 = 1_764_684_149.0


def _ok(worker: str, seq: int, t: float, tokens: int = 16, jitter: float = 0.003) -> RequestRecord:
    """An ok request as locust_user.py records it: t_done is t_sent + e2e on one clock, the
    stamps a little before TTFT / E2E, the server's body id vLLM's ``chatcmpl-<request id>``."""
    rng = random.Random(f"{worker}-{seq}")
    itls = [rng.randint(round((0.02 - jitter) * 1e6), round((0.02 + jitter) * 1e6)) / 1e6
            for _ in range(tokens - 1)]  # fmt: skip
    ttft = rng.uniform(0.05, 0.3)
    e2e = ttft + sum(itls) + rng.uniform(0, 1e-4)
    sent = t + rng.uniform(0, 0.002)
    body = ttft * 1000 - rng.uniform(0, 0.2)
    rid = f"run1-{worker}-{seq}"
    return RequestRecord(
        target="ref",
        scenario="chat",
        worker=worker,
        seq=seq,
        t_intended=t,
        t_sent=sent,
        t_done=sent + e2e,
        ttft=ttft,
        e2e=e2e,
        tpot=(e2e - ttft) / (tokens - 1),
        itls=itls,
        output_tokens=tokens,
        output_tokens_client=tokens,
        prompt_tokens=120,
        status=200,
        request_id=rid,
        ttfa=ttft,
        new_conn=seq == 0,
        stamps={
            "written": round(rng.uniform(0.02, 0.06), 3),
            "headers": round(body - rng.uniform(0.02, 0.3), 3),
            "body": round(body, 3),
            "last_token": round(e2e * 1000 - rng.uniform(0, 0.1), 3),
        },
        request_id_echo=rid,
        response_id=f"chatcmpl-{rid}",
    )


def _variety(worker: str) -> list[RequestRecord]:
    """An ok request, a 503, a connect error, an abandoned stream, a reasoning stream, a
    conversation turn with images, and one with a foreign echo and an out-of-range value."""
    ok = _ok(worker, 0, T0)
    err = RequestRecord("ref", "chat", worker, 1, T0 + 1, T0 + 1.0004, t_done=T0 + 1.01,
                        status=503, error="http-503", error_message="busy", request_id="x-1")  # fmt: skip
    conn = RequestRecord("ref", "chat", worker, 2, T0 + 2, T0 + 2.5, error="connect",
                         error_message="refused")  # fmt: skip
    cut = _ok(worker, 3, T0 + 3, tokens=4)
    cut.abandoned = True
    shed = RequestRecord("ref", "chat", worker, 4, T0 + 4, T0 + 4.001, t_done=T0 + 4.002,
                         status=429, error="rate-limited", retry_after_s=3600.0)  # fmt: skip
    think = _ok(worker, 5, T0 + 5, tokens=9)
    think.ttfr, think.ttfa = 0.05, 0.4
    think.reasoning_tokens, think.reasoning_tokens_client = 5, 5
    think.itls_reasoning, think.itls_answer = think.itls[:4], think.itls[5:]
    turn = _ok(worker, 6, T0 + 6)
    turn.conversation, turn.turn, turn.history_tokens, turn.prefix_group = "c7", 2, 900, "sys-a"
    turn.model = "lora-a"  # a run split across models (load/workload/mix.py)
    turn.cached_tokens, turn.images, turn.image_size, turn.text_tokens = 640, 2, "512x512", 80
    turn.stamps = {"connect": 0.312, "tls": 1.5, "written": 0.02}
    # What a probe reads off a request (the swap probe, drain): in the same record.
    turn.served_model, turn.finish_reason, turn.outcome = "lora-b", "length", "finished"
    # An agent session's turn (load/workload/agent.py): a subagent branch after a tool wait.
    turn.session, turn.branch, turn.parent, turn.session_end = "w0-s3.1b0", 1, "w0-s3@1", "done"
    turn.context_tokens, turn.tool_wait_s = 1900, 0.734512
    odd = _ok(worker, 7, T0 + 7)
    odd.request_id_echo = "someone-else"
    odd.kind = "tools"
    odd.response_id = "chatcmpl-5f0c6a9e2b7d4c1e"  # llama.cpp's own random id
    odd.itls = [0.01, 5000.0]  # a gap past int32 microseconds: kept in `extra`
    reasoning_without_ttfr = _ok(worker, 8, T0 + 8)
    reasoning_without_ttfr.reasoning_tokens_client = 3
    return [ok, err, conn, cut, shed, think, turn, odd, reasoning_without_ttfr]


def _write(run_dir: Path, worker: str, recs: list[RequestRecord]) -> list[dict[str, Any]]:
    with RecordWriter(run_dir / f"records-{worker}.jsonl") as w:
        return [json.loads(w.write(r)) for r in recs]


def _close(got: Any, want: Any, where: str) -> None:
    """Equal, floats to 1 us (seconds written as an int come back a float)."""
    if isinstance(want, float | int) and not isinstance(want, bool) and isinstance(got, float):
        assert abs(got - want) <= 1.0001e-6, f"{where}: {got!r} != {want!r}"
    elif isinstance(want, dict) and isinstance(got, dict):
        assert got.keys() == want.keys(), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for k in want:
            _close(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list) and isinstance(got, list):
        assert len(got) == len(want), f"{where}: {len(got)} items, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _close(g, w, f"{where}[{i}]")
    else:
        assert got == want and type(got) is type(want), f"{where}: {got!r} != {want!r}"


def test_round_trip_equals_the_jsonl_lines(tmp_path: Path) -> None:
    want = _write(tmp_path, "w0", _variety("w0"))
    want[0]["usage"] = {"completion_tokens": 16}  # an unknown nested key survives in `extra`
    (tmp_path / "records-w0.jsonl").write_text("".join(json.dumps(d) + "\n" for d in want))
    res = compact_records(tmp_path)
    assert (res.count, res.bad_lines) == (len(want), 0)
    got = {d["seq"]: d for d in res.iter_records()}
    for d in want:
        _close(got[d["seq"]], d, f"seq {d['seq']}")


def test_times_come_back_exactly(tmp_path: Path) -> None:
    """Epoch times and durations come back as the very floats the JSONL line parses to."""
    want = _write(tmp_path, "w0", [_ok("w0", i, T0 + i * 0.37, tokens=32) for i in range(50)])
    compact_records(tmp_path)
    got = list(iter_records(tmp_path / RECORDS_PARQUET))
    for g, w in zip(got, want, strict=True):
        for k in ("t_sent", "ttft", "e2e", "tpot", "itls", "stamps"):
            assert g[k] == w[k], f"seq {w['seq']} {k}: {g[k]!r} != {w[k]!r}"


def test_torn_lines_are_counted_and_sources_removed(tmp_path: Path) -> None:
    _write(tmp_path, "w0", [_ok("w0", i, T0 + i) for i in range(3)])
    _write(tmp_path, "w1", [_ok("w1", i, T0 + i) for i in range(2)])
    with open(tmp_path / "records-w1.jsonl", "a") as fh:
        fh.write('[1, 2]\n{"target": "ref", "scen')  # not a record; a write cut by kill -9
    local = tmp_path / LOCAL_DIR
    local.mkdir()
    (local / "records-w1.jsonl").write_text("{}\n")
    res = compact_records(tmp_path)
    assert (res.count, res.bad_lines) == (5, 2)
    assert {Path(k).name: v for k, v in res.per_file.items()} == {
        "records-w0.jsonl": 3,
        "records-w1.jsonl": 2,
    }
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert left == [RECORDS_PARQUET], f"one copy on disk, found {left}"


def test_keep_sources_when_asked(tmp_path: Path) -> None:
    _write(tmp_path, "w0", [_ok("w0", 0, T0)])
    compact_records(tmp_path, remove_sources=False)
    assert (tmp_path / "records-w0.jsonl").exists() and (tmp_path / RECORDS_PARQUET).exists()


def test_tiny_chunks_give_the_same_records_in_send_order(tmp_path: Path) -> None:
    """Chunks of 7 lines: many row groups, each sorted; the merge gives global send order."""
    rng = random.Random(3)
    for w in ("w0", "w1", "w2"):
        starts = sorted(T0 + rng.uniform(0, 60) for _ in range(40))
        recs = [_ok(w, i, t) for i, t in enumerate(starts)]
        rng.shuffle(recs)  # written in completion order, not send order
        _write(tmp_path, w, recs)
    res = compact_records(tmp_path, chunk_rows=7)
    import pyarrow.parquet as pq

    groups = pq.ParquetFile(res.path).num_row_groups
    assert groups == 3 * 6, f"3 files of 40 lines in chunks of 7: 18 row groups, got {groups}"
    in_order = [d["t_sent"] for d in res.iter_records()]
    assert in_order == sorted(in_order) and len(in_order) == 120
    file_order = list(res.iter_records(sort_by_sent=False))
    assert sorted(d["t_sent"] for d in file_order) == in_order
    assert [d["worker"] for d in file_order] == ["w0"] * 40 + ["w1"] * 40 + ["w2"] * 40


def test_byte_bound_also_cuts_chunks(tmp_path: Path) -> None:
    _write(tmp_path, "w0", [_ok("w0", i, T0 + i, tokens=64) for i in range(10)])
    import pyarrow.parquet as pq

    res = compact_records(tmp_path, chunk_bytes=1)
    assert pq.ParquetFile(res.path).num_row_groups == 10


def test_selected_columns_read_only_those_keys(tmp_path: Path) -> None:
    _write(tmp_path, "w0", _variety("w0"))
    compact_records(tmp_path)
    got = list(iter_records(tmp_path / RECORDS_PARQUET, columns=["t_intended", "itls", "error"]))
    assert {tuple(sorted(d)) for d in got} == {("error", "itls", "t_intended")}


@pytest.mark.parametrize("form", ["parquet", "merged-jsonl", "worker-files"])
def test_read_run_records_whatever_the_folder_holds(tmp_path: Path, form: str) -> None:
    want = _write(tmp_path, "w0", [_ok("w0", i, T0 + i) for i in range(4)])
    if form == "parquet":
        compact_records(tmp_path)
    elif form == "merged-jsonl":  # a folder from before the compact form
        (tmp_path / "records-w0.jsonl").rename(tmp_path / "records.jsonl")
    got = list(read_run_records(tmp_path))
    assert [d["seq"] for d in got] == [0, 1, 2, 3]
    _close(got, want, form)


def test_export_jsonl_streams_the_lines_back(tmp_path: Path) -> None:
    want = _write(tmp_path, "w0", _variety("w0"))
    compact_records(tmp_path)
    n = export_jsonl(tmp_path, tmp_path / "export.jsonl")
    got = [d for d in iter_lines(tmp_path / "export.jsonl")]
    assert n == len(want) == len(got)
    _close(sorted(got, key=lambda d: d["seq"]), want, "export")


def test_to_dataframe_reads_parquet_like_jsonl(tmp_path: Path) -> None:
    _write(tmp_path, "w0", _variety("w0"))
    jsonl = to_dataframe(tmp_path / "records-w0.jsonl")
    compact_records(tmp_path)
    df = to_dataframe(tmp_path / RECORDS_PARQUET)
    assert set(df.columns) == set(jsonl.columns), set(df.columns) ^ set(jsonl.columns)
    assert df["ok"].tolist() == jsonl["ok"].tolist()
    assert (df["t_sent"] - jsonl["t_sent"]).abs().max() <= 1e-6
    assert (df["ttft"] - jsonl["ttft"]).abs().max() <= 1e-6
    assert df["tokens"].tolist() == jsonl["tokens"].tolist()
    assert df["itls"][7] == [0.01, 5000.0] and df["stamps"][0] == jsonl["stamps"][0]


def bytes_per_request(tmp_path: Path, tokens: int, n: int = 2000) -> float:
    """records.parquet bytes per request for ``n`` ok requests of ``tokens`` tokens with ITLs
    of 20 ms +- 3 ms (integer microseconds), 4 workers, 20 requests/s."""
    per = n // 4
    for w in range(4):
        _write(
            tmp_path,
            f"w{w}",
            [_ok(f"w{w}", i, T0 + (i * 4 + w) * 0.05, tokens) for i in range(per)],
        )
    res = compact_records(tmp_path)
    return res.path.stat().st_size / res.count


@pytest.mark.parametrize("tokens", [16, 128, 512], ids=lambda t: f"{t}-tokens")
def test_bytes_per_request(tmp_path: Path, tokens: int, capsys: pytest.CaptureFixture[str]) -> None:
    """The figure is printed (docs quote it); asserted only against the JSONL it replaces."""
    jsonl = sum(len(r.to_json()) + 1 for r in [_ok("w0", i, T0, tokens) for i in range(50)]) / 50
    size = bytes_per_request(tmp_path, tokens)
    with capsys.disabled():
        print(f"\n{tokens} tokens: {size:.1f} bytes/request in Parquet, {jsonl:.0f} in JSONL")
    assert size < jsonl, f"{size:.0f} bytes/request compact vs {jsonl:.0f} as JSONL"


def test_records_import_stays_light() -> None:
    """The generator imports records.py on every worker; pyarrow is loaded only on use."""
    import subprocess
    import sys

    code = "import sys, servecheck.records.record, servecheck.records.parquet; print('pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
    assert columnar.RECORDS_PARQUET == "records.parquet"


@pytest.mark.parametrize(
    ("change", "fast"),
    [
        pytest.param({}, True, id="clean-lines"),
        pytest.param({"retry_after_s": 3600}, True, id="int-for-float"),
        pytest.param({"stamps": {"written": 0.1, "queue": 2.0}}, False, id="unknown-stamp"),
        pytest.param({"usage": {"completion_tokens": 3}}, False, id="unknown-key"),
        pytest.param({"seq": "7"}, False, id="string-for-int"),
    ],
)
def test_json_reader_or_line_by_line(tmp_path: Path, change: dict[str, Any], fast: bool) -> None:
    """Clean lines go through pyarrow's JSON reader; a chunk it refuses is parsed line by line,
    and the odd value comes back as it was either way."""
    from servecheck.records.columns import json_table

    lines = [json.loads(_ok("w0", i, T0 + i).to_json()) for i in range(3)]
    lines[1].update(change)
    data = "".join(json.dumps(d) + "\n" for d in lines)
    assert (json_table(data.encode()) is not None) is fast, f"{change}: fast path {not fast}"
    (tmp_path / "records-w0.jsonl").write_text(data)
    compact_records(tmp_path)
    got = list(iter_records(tmp_path / RECORDS_PARQUET))
    _close(got, lines, "lines")


def test_every_key_to_json_writes_has_its_column() -> None:
    """A record with every field set writes exactly the keys the schema knows: a field added to
    RequestRecord without a column would still survive (in ``extra``), at a JSON string's cost."""
    from servecheck.records.columns import KEYS

    full = _variety("w0")[6]  # the conversation turn: every optional field set
    full.ttfr, full.reasoning_tokens, full.reasoning_tokens_client = 0.01, 2, 2
    full.retry_after_s = 1.0
    full.cancelled = "tokens:8"
    written = set(json.loads(full.to_json()))
    assert written == set(KEYS), (
        f"to_json only: {written - set(KEYS)}; schema only: {set(KEYS) - written}"
    )


def test_compacting_again_keeps_what_the_file_holds(tmp_path: Path) -> None:
    _write(tmp_path, "w0", [_ok("w0", i, T0 + i) for i in range(3)])
    compact_records(tmp_path)
    again = compact_records(tmp_path)  # nothing new: the file is left as it is
    assert again.count == 3 and again.per_file == {str(again.path): 3}
    _write(tmp_path, "w1", [_ok("w1", i, T0 + i) for i in range(2)])  # a late worker file
    res = compact_records(tmp_path)
    assert (
        res.count == 5
        and sorted(d["worker"] for d in res.iter_records()) == ["w0"] * 3 + ["w1"] * 2
    )


def test_a_compacted_folder_is_a_used_run_folder(tmp_path: Path) -> None:
    from servecheck.errors import SpecError
    from servecheck.records.record import refuse_used_run_dir

    _write(tmp_path, "w0", [_ok("w0", 0, T0)])
    compact_records(tmp_path)
    with pytest.raises(SpecError, match="records.parquet"):
        refuse_used_run_dir(tmp_path)


@pytest.mark.parametrize("form", ["parquet", "merged-jsonl"])
def test_compare_and_report_page_read_either_form(tmp_path: Path, form: str) -> None:
    """compare's load part and the report page's figures see the same records in a compacted
    folder as in one from before the compact form."""
    from servecheck.analysis.compare import load_part, locate
    from servecheck.report.html import _load_plots

    want = _write(tmp_path, "w0", [_ok("w0", i, T0 + i * 0.1) for i in range(30)])
    (tmp_path / "summary.json").write_text(json.dumps({"requests": {"total": 30}}))
    if form == "parquet":
        compact_records(tmp_path)
    else:
        (tmp_path / "records-w0.jsonl").rename(tmp_path / "records.jsonl")
    assert locate(tmp_path).load == tmp_path
    notes: list[str] = []
    _, data = load_part(tmp_path, notes, "base")
    ttft = sorted(r["ttft"] * 1000.0 for r in want if r.get("ttft") is not None)
    assert sorted(data.latency["ttft"]) == pytest.approx(ttft, abs=1e-3)
    figures = _load_plots(tmp_path, {}, ())
    assert len(figures) == 3, f"TTFT, ITL and throughput figures, got {len(figures)}"


def test_the_itl_gaps_are_byte_stream_split_and_the_times_delta_encoded(tmp_path: Path) -> None:
    """Neighbouring ITLs are anti-correlated (a late token: a long gap, then a short one), so
    their deltas spread wider than they do: they are split into byte planes instead."""
    import pyarrow.parquet as pq

    path = tmp_path / "records.parquet"
    bytes_per_request(tmp_path, 64, n=400)
    meta = pq.ParquetFile(tmp_path / "records.parquet").metadata.row_group(0)
    encodings = {
        meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)
    }
    assert "BYTE_STREAM_SPLIT" in encodings["itls.list.element"], encodings["itls.list.element"]
    assert "DELTA_BINARY_PACKED" in encodings["t_sent"], encodings["t_sent"]
    assert path.exists()
