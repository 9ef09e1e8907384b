"""Per-request server timings (servecheck/analysis/server_timings.py): llama.cpp's ``timings``
and vLLM's ``metrics`` parsed into one shape, joined to the client's record by a real load run
against the reference server (``--quirk timings``), their checks in summary.json's
``timings.server``, the decomposition table's engine rows, and the ``timings-disagree`` fault
failing the run with the checks it breaks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.analysis.server_timings import server_timings, verdict_of, violations
from servecheck.analysis.timings import TimingsTally
from servecheck.load.generator.stream import StreamState
from servecheck.records.parquet import read_run_records
from servecheck.reference.inprocess import RunningServer
from tests.load.test_load_cli import _cmd, _run, _summary, _targets

LLAMA_FINAL = {
    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    "timings": {
        "cache_n": 4,
        "prompt_n": 8,
        "prompt_ms": 12.5,
        "predicted_n": 16,
        "predicted_ms": 80.0,
        "predicted_per_second": 200.0,
    },
}
VLLM_FINAL = {
    "choices": [],
    "usage": {"prompt_tokens": 12, "completion_tokens": 16, "total_tokens": 28},
    "metrics": {
        "time_to_first_token_ms": 9.0,
        "generation_time_ms": 70.0,
        "queue_time_ms": 3.0,
        "mean_itl_ms": 4.6,
        "tokens_per_second": 200.0,
    },
}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            LLAMA_FINAL,
            {
                "prefill_ms": 12.5,
                "ttft_ms": 12.5,
                "decode_ms": 80.0,
                "predicted_n": 16.0,
                "prompt_n": 12.0,
                "cached_n": 4.0,  # the prompt tokens its cache served (agent_stats reads it)
            },
            id="llamacpp-timings",
        ),
        pytest.param(
            VLLM_FINAL,
            {"queue_ms": 3.0, "prefill_ms": 9.0, "ttft_ms": 9.0, "decode_ms": 70.0},
            id="vllm-metrics",
        ),
        pytest.param({"choices": [], "usage": {}}, None, id="none"),
        pytest.param({"timings": {"prompt_ms": "fast"}}, None, id="not-numbers"),
    ],
)
def test_server_timings_of_each_engine_shape(obj: dict, expected: dict | None) -> None:
    assert server_timings(obj) == expected


def test_the_stream_reader_keeps_the_final_chunk_for_the_join() -> None:
    st = StreamState()
    for obj in ({"choices": [{"index": 0, "delta": {"content": "hi"}}]}, LLAMA_FINAL):
        st.feed(b"data: " + json.dumps(obj).encode() + b"\n\n", 1.0)
    assert st.timed is not None and server_timings(st.timed) is not None


def _rec(st: dict, ttft: float = 0.020, out: int = 16, prompt: int = 12) -> dict:
    return {
        "server_timings": st,
        "ttft": ttft,
        "output_tokens": out,
        "prompt_tokens": prompt,
        "error": None,
    }


def test_checks_per_request() -> None:
    good = server_timings(LLAMA_FINAL)
    assert violations(_rec(good)) == {
        "SRV-TTFT": False,
        "SRV-QUEUE-PREFILL": False,
        "SRV-TOKENS": False,
    }
    # The engine says 12.5 ms to its first token; the client saw it after 10 ms: impossible.
    assert violations(_rec(good, ttft=0.010))["SRV-TTFT"] is True
    assert violations(_rec(good, out=15))["SRV-TOKENS"] is True
    queued = server_timings(VLLM_FINAL)  # 3 ms queue + 9 ms prefill against a 10 ms TTFT
    assert violations(_rec(queued, ttft=0.010)) == {"SRV-TTFT": False, "SRV-QUEUE-PREFILL": True}
    assert violations({**_rec(good), "error": "http-500"}) == {}


def test_tally_merges_and_the_verdict_names_the_broken_check() -> None:
    a, b = TimingsTally(), TimingsTally()
    a.add(_rec(server_timings(LLAMA_FINAL)))
    b.add(_rec(server_timings(LLAMA_FINAL), out=17))
    a.merge(b)
    section = a.server_section()
    assert section is not None and section.requests == 2
    tokens = next(c for c in section.checks if c.id == "SRV-TOKENS")
    assert (tokens.checked, tokens.violated) == (2, 1)
    verdict = verdict_of(section)
    assert verdict.status == "fail"
    assert verdict.reasons == [
        "server timings: SRV-TOKENS: 1 of 2 request(s) break it (the engine's token counts in "
        "its timings equal its usage)"
    ]
    assert a.hist["server_decode"].summary().count == 2


def _load(server: RunningServer, tmp_path: Path) -> tuple[dict, list[dict], str]:
    targets = _targets(tmp_path, server)
    out = tmp_path / "reports"
    proc = _run(_cmd(targets, out, "--users", "2", "--max-requests", "12"), timeout=120)
    summary = _summary(out)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    records = list(read_run_records(run_dir))  # records.parquet: the join survives compaction
    return summary, records, proc.stdout + proc.stderr


@pytest.mark.slow
def test_reference_timings_are_joined_per_request_and_hold(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference(quirks=("timings",), ttft_ms=15, itl_ms=2)
    summary, records, out = _load(server, tmp_path)
    ok = [r for r in records if r.get("error") is None]
    assert ok and all(isinstance(r.get("server_timings"), dict) for r in ok), out[-2000:]
    st = ok[0]["server_timings"]
    assert st["predicted_n"] == ok[0]["output_tokens"] and st["prompt_n"] == ok[0]["prompt_tokens"]
    assert st["ttft_ms"] <= ok[0]["ttft"] * 1000 + 1.0
    server_part = summary["timings"]["server"]
    assert server_part["requests"] == len(ok)
    assert [(c["id"], c["checked"], c["violated"]) for c in server_part["checks"]] == [
        ("SRV-TTFT", len(ok), 0),
        ("SRV-QUEUE-PREFILL", len(ok), 0),
        ("SRV-TOKENS", len(ok), 0),
    ]
    assert {"server_prefill", "server_decode"} <= set(summary["timings"]["phases_ms"])
    assert summary["verdict"] == "pass", summary.get("failures")


@pytest.mark.slow
def test_timings_that_disagree_fail_the_run_naming_each_check(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference("timings-disagree", ttft_ms=15, itl_ms=2)
    summary, records, out = _load(server, tmp_path)
    checks = {c["id"]: c for c in summary["timings"]["server"]["checks"]}
    assert all(c["violated"] == c["checked"] > 0 for c in checks.values()), checks
    assert summary["verdict"] == "fail"
    text = json.dumps(summary)
    assert "server timings: SRV-TOKENS:" in text and "server timings: SRV-TTFT:" in text, out[
        -2000:
    ]


def test_a_run_without_server_timings_has_no_server_part() -> None:
    tally = TimingsTally()
    tally.add({"ttft": 0.01, "error": None, "stamps": {"written": 0.1}})
    section = tally.section()
    assert section is not None and section.server is None


def test_the_decomposition_figure_draws_the_engine_per_request() -> None:
    from servecheck.report import load_figures as lf

    phases = {
        "send": {"count": 4, "mean": 0.5},
        "wait_headers": {"count": 4, "mean": 9.0},
        "server_prefill": {"count": 4, "mean": 6.0},
        "server_decode": {"count": 4, "mean": 40.0},
    }
    bars = dict(lf.decomposition_bars({"timings": {"phases_ms": phases}}))
    assert bars["engine, per request"] == [("engine prefill", 6.0)]
    without = dict(lf.decomposition_bars({"timings": {"phases_ms": {"send": phases["send"]}}}))
    assert "engine, per request" not in without
