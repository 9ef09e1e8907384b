"""Trace replay: the four file formats, the schedule split, prompts with shared prefixes, and a
replay end to end on the reference server (its prefix cache on)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.errors import UsageError
from servecheck.load.workload.trace import (
    Corpus,
    TraceEntry,
    TraceSchedule,
    load_trace,
    synthetic_trace,
    trace_request,
)
from servecheck.records.parquet import read_run_records
from servecheck.reference.inprocess import RunningServer
from tests.load.test_load_cli import ROOT, _cmd, _run, _summary, _targets

SHIPPED = ROOT / "loadtests" / "traces" / "synthetic.jsonl"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_each_public_format_is_read_and_offsets_start_at_zero(tmp_path: Path) -> None:
    mooncake = _write(
        tmp_path,
        "m.jsonl",
        '{"timestamp": 1000, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]}\n'
        '{"timestamp": 1500, "input_length": 300, "output_length": 0, "hash_ids": [1]}\n',
    )
    t = load_trace(mooncake)
    assert t.fmt == "mooncake" and [e.t for e in t.entries] == [0.0, 0.5]
    assert t.entries[0].hash_ids == [1, 2] and t.entries[1].output_tokens == 1  # at least one
    burst = _write(
        tmp_path,
        "b.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5.0,ChatGPT,100,20,120,Conversation log\n"
        "3.5,GPT-4,40,0,40,API log\n",
    )
    t = load_trace(burst)
    assert t.fmt == "burstgpt"
    assert [(e.t, e.input_tokens, e.output_tokens) for e in t.entries] == [
        (0.0, 40, 1),
        (1.5, 100, 20),
    ]
    azure = _write(
        tmp_path,
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n",
    )
    t = load_trace(azure)
    assert t.fmt == "azure" and t.entries[1].t == pytest.approx(4.314579, abs=1e-6)
    ours = load_trace(SHIPPED)
    assert ours.fmt == "servecheck" and len(ours.entries) == 240
    assert any(e.session for e in ours.entries) and any(e.hash_ids for e in ours.entries)


def test_the_shipped_trace_is_the_generators_output() -> None:
    rows = [json.loads(x) for x in SHIPPED.read_text().splitlines()]
    assert rows == synthetic_trace()


@pytest.mark.parametrize(
    ("text", "fmt", "message"),
    [
        ('{"a": 1}\n', "auto", "unknown JSONL trace keys"),
        ("x,y\n1,2\n", "auto", "cannot tell the trace format"),
        ('{"t": 0, "input_tokens": 5}\n', "servecheck", ":1: missing output_tokens"),
        (
            '{"t": 0, "input_tokens": 5, "output_tokens": 1}\n{"t": "soon", "input_tokens": 5, "output_tokens": 1}\n',
            "auto",
            ":2: t 'soon' is not a number",
        ),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", "auto", "is not a date-time"),
        ('{"t": 0, "input_tokens": 5, "output_tokens": 1, "hash_ids": "x"}\n', "auto", "hash_ids"),
        ("", "servecheck", "has no requests"),
    ],
)
def test_bad_trace_files_name_the_problem(
    tmp_path: Path, text: str, fmt: str, message: str
) -> None:
    p = _write(tmp_path, "bad.jsonl", text)
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        load_trace(p, fmt)
    with pytest.raises(UsageError, match="not found"):
        load_trace(tmp_path / "missing.jsonl")


def test_workers_split_a_trace_and_speed_scales_it() -> None:
    trace = load_trace(SHIPPED)
    a = TraceSchedule(trace, speed=2.0, index=0, workers=2)
    b = TraceSchedule(trace, speed=2.0, index=1, workers=2)
    oa, ob = list(a.offsets()), list(b.offsets())
    assert len(oa) + len(ob) == 240
    assert sorted(oa + ob) == [e.t / 2.0 for e in trace.entries]
    assert a.next_entry() is trace.entries[0] and b.next_entry() is trace.entries[1]
    assert a.planned(None) == 120 and a.planned(1.0) == sum(1 for x in oa if x < 1.0)


def test_prompts_share_text_exactly_where_the_trace_shares_blocks() -> None:
    corpus = Corpus(0, tokens_per_word=1.0)
    one = trace_request(TraceEntry(0, 30, 4, hash_ids=[7, 8, 9]), 1, corpus, 10, None)
    two = trace_request(TraceEntry(0, 25, 4, hash_ids=[7, 8, 5]), 2, corpus, 10, None)
    t1, t2 = one.messages[0]["content"], two.messages[0]["content"]
    shared = corpus.piece(7, 10) + corpus.piece(8, 10)
    assert t1.startswith(shared) and t2.startswith(shared)
    assert t1[len(shared) :] != t2[len(shared) :]
    assert len(t2.split()) == 25 and one.max_tokens == 4
    # Their first block is their prefix group: the summary splits its first request's TTFT.
    assert one.fields["prefix_group"] == two.fields["prefix_group"] == "block-7"
    # Sessions: a later, longer request extends the earlier one's text.
    s1 = trace_request(TraceEntry(0, 20, 4, session="s"), 3, corpus, 10, None)
    s2 = trace_request(TraceEntry(0, 40, 4, session="s"), 4, corpus, 10, None)
    assert s2.messages[0]["content"].startswith(s1.messages[0]["content"])
    assert s2.fields == {"conversation": "s", "prefix_group": "session-s"}
    # Neither: no two requests share a first word.
    n1 = trace_request(TraceEntry(0, 20, 4), 5, corpus, 10, None)
    n2 = trace_request(TraceEntry(0, 20, 4), 6, corpus, 10, None)
    assert n1.messages[0]["content"].split()[:2] != n2.messages[0]["content"].split()[:2]
    assert "prefix_group" not in n1.fields
    # Too long for the context: clipped to fit, and said so.
    big = trace_request(TraceEntry(0, 5000, 100), 7, corpus, 10, 1024)
    assert big.kind == "trace-clipped" and big.prompt_tokens + big.max_tokens <= 1024 - 16


@pytest.mark.slow
def test_replay_on_the_reference_server(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference(ttft_ms=5, itl_ms=1, max_model_len=4096, prefix_cache_blocks=8192)
    targets = _targets(tmp_path, server)
    out = tmp_path / "reports"
    proc = _run(
        _cmd(targets, out, "--trace", str(SHIPPED), "--speed", "4", "--allow-lag"), timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    assert s["mode"] == "trace" and s["scenario"] == "trace"
    assert s["requests"]["total"] == s["schedule"]["planned"] == 240
    assert s["latency_ms"]["lag"]["count"] == 240
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    recs = list(read_run_records(run_dir))
    trace = load_trace(SHIPPED)
    # Intended send times follow the trace at 4x.
    t0 = min(r["t_intended"] for r in recs)
    got = sorted(r["t_intended"] - t0 for r in recs)
    want = [e.t / 4 for e in trace.entries]
    assert max(abs(g - (w - want[0])) for g, w in zip(got, want, strict=True)) < 0.002
    # Output lengths are capped by the trace's (the reference may stop early, never later):
    # sorted, each record's count is at most its entry's.
    got_out = sorted(r["output_tokens"] for r in recs)
    want_out = sorted(e.output_tokens for e in trace.entries)
    assert all(g <= w for g, w in zip(got_out, want_out, strict=True))
    assert max(got_out) == max(want_out)  # and the longest asked-for answers came in full
    # Entries sharing block hash ids hit the server's prefix cache.
    assert s["prefix_cache"]["requests_hit"] > 40


def test_a_bad_trace_is_a_usage_error_before_any_load(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference()
    targets = _targets(tmp_path, server)
    bad = _write(tmp_path, "bad.jsonl", '{"t": 0, "input_tokens": 5}\n')
    proc = _run(_cmd(targets, tmp_path / "r", "--trace", str(bad)))
    assert proc.returncode == 2 and "unknown JSONL trace keys" in proc.stderr, proc.stderr
    proc = _run(_cmd(targets, tmp_path / "r", "--trace", str(SHIPPED), "--users", "2"))
    assert proc.returncode == 2 and "--users and --trace" in proc.stderr, proc.stderr


def _capacity(tmp_path: Path, *args: str) -> tuple[int, str]:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "servecheck", "capacity", "--out", str(tmp_path / "cap"), *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.slow
def test_capacity_sweeps_the_replay_speed(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference(ttft_ms=5, itl_ms=1, max_model_len=4096, prefix_cache_blocks=8192)
    targets = _targets(tmp_path, server)
    rc, out = _capacity(
        tmp_path,
        *("--target", "ref", "--targets-file", str(targets), "--trace", str(SHIPPED)),
        *("--speeds", "2,4", "--step-duration", "2s", "--allow-lag"),
    )
    assert rc == 0, out
    (run_dir,) = list((tmp_path / "cap").iterdir())
    data = json.loads((run_dir / "capacity.json").read_text())
    assert data["mode"] == "speed" and [s["level"] for s in data["steps"]] == [2, 4]
    for p in sorted(run_dir.glob("steps/*/summary.json")):
        s = json.loads(p.read_text())
        # Each step replays the trace (its schedule, cut at the step's 2 s) at its speed.
        assert s["mode"] == "trace" and s["scenario"] == "trace"
        sent, planned = s["requests"]["total"], s["schedule"]["planned"]
        assert 0 < sent <= planned
        if sent < 0.98 * planned:  # a busy core fell behind the schedule: the run must say so
            assert any("fell behind" in r for r in s["schedule"]["reasons"]), s["schedule"]
    # Twice the speed: more requests in the same 2 s (the trace's own arrivals, not a guess).
    first, second = data["steps"]
    assert second["total"] > first["total"]
    assert all(s["breakdown"]["requests_hit"] > 0 for s in data["steps"])  # shared blocks hit
    # TTFT of each prefix group's first request against the later ones, per step.
    for step in data["steps"]:
        b = step["breakdown"]
        assert b["ttft_first_ms"]["count"] > 0 and b["ttft_later_ms"]["count"] > 0, b
    assert "ttft p50 first" in out
    assert "x trace speed" in (run_dir / "report.html").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--speeds", "1,2"], "--speeds sweeps a trace's replay speed: give --trace FILE"),
        (["--trace", str(SHIPPED), "--users", "1,2"], "--trace sweeps replay speeds"),
        (["--trace", str(SHIPPED), "--speeds", "2,1"], "--speeds '2,1': levels must increase"),
        (["--scenario", "trace"], "the trace scenario needs --trace FILE"),
        (["--trace", "{bad}"], "unknown JSONL trace keys"),
    ],
)
def test_capacity_trace_options_are_checked_before_any_load(
    tmp_path: Path, args: list[str], message: str
) -> None:
    bad = _write(tmp_path, "bad.jsonl", '{"t": 0, "input_tokens": 5}\n')
    rc, out = _capacity(tmp_path, *(a.format(bad=bad) for a in args))
    assert rc == 2 and message in " ".join(out.split()), out
    assert "Traceback" not in out and not (tmp_path / "cap").exists()


# Shipped traces, plans and scenarios by name or checkout path, from any folder (issue 24 #12).


@pytest.mark.parametrize(
    ("kind", "name", "packaged"),
    [
        pytest.param("trace", "synthetic", "loadtests/traces/synthetic.jsonl", id="trace-name"),
        pytest.param(
            "trace",
            "loadtests/traces/synthetic.jsonl",
            "loadtests/traces/synthetic.jsonl",
            id="trace-checkout-path",
        ),
        pytest.param("plan", "loadtests/smoke.yaml", "loadtests/smoke.yaml", id="plan-path"),
        pytest.param("plan", "smoke", "loadtests/smoke.yaml", id="plan-name"),
        pytest.param("scenario", "scenarios/trace.py", "scenarios/trace.py", id="scenario-path"),
    ],
)
def test_shipped_files_are_found_outside_the_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, name: str, packaged: str
) -> None:
    import servecheck
    from servecheck.load.workload import shipped

    monkeypatch.chdir(tmp_path)  # no ./loadtests, no ./scenarios here
    found = {"trace": shipped.trace_path, "plan": shipped.plan_path}.get(
        kind, shipped.scenario_path
    )(name)
    assert found == Path(servecheck.__file__).parent.resolve() / packaged


def test_a_file_of_the_folder_wins_and_a_missing_one_lists_the_shipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from servecheck.load.workload.shipped import plan_path, trace_path

    monkeypatch.chdir(tmp_path)
    own = _write(tmp_path, "synthetic", '{"t": 0, "input_tokens": 5, "output_tokens": 2}\n')
    assert trace_path("synthetic") == own.resolve()
    (tmp_path / "loadtests").mkdir()
    mine = _write(tmp_path / "loadtests", "smoke.yaml", "users: 1\n")
    assert plan_path("smoke") == mine.resolve()
    with pytest.raises(
        UsageError,
        match=r"^unknown trace 'synthetc' \(did you mean \"synthetic\"\?\); traces: synthetic$",
    ):
        trace_path("synthetc")
    with pytest.raises(
        UsageError,
        match=r"^trace file 'loadtests/traces/nope.jsonl' not found; shipped traces: synthetic",
    ):
        trace_path("loadtests/traces/nope.jsonl")


def test_replay_of_a_shipped_trace_from_another_folder(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    import os
    import subprocess

    server = make_reference(ttft_ms=1, itl_ms=1, max_model_len=4096)
    targets = _targets(tmp_path, server)
    out = tmp_path / "reports"
    cmd = _cmd(targets, out, "--trace", "loadtests/traces/synthetic.jsonl", "--speed", "40")
    proc = subprocess.run(
        [*cmd, "--max-requests", "8"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,  # outside the checkout, as after `pip install`
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    assert s["mode"] == "trace" and s["requests"]["ok"] == 8, s["requests"]
