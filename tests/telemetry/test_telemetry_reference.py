"""End to end against the reference server: abandoned streams, recorder, leak and drain verdicts.

The reference server exposes vLLM's metric names; its ``kv-leak`` fault never frees the KV
blocks of requests whose client disconnected. Cycles are short (a few abandoned streams, then a
half second idle) so the whole test stays near four seconds per server.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from servecheck.telemetry import Cycle, Phases, TelemetryRecorder, analyse_leak, check_drain

CYCLES = 5
# Windows long enough for >= 3 samples at 20 ms even when a busy CI machine (five engines up and
# pytest -n auto) delays the in-process sampler: shorter ones gave "insufficient_data" there.
DRAIN_S = 0.5
BASELINE_S = 0.5


def _one_whole_stream(base_url: str) -> None:
    """A stream read to its end beside the abandoned ones: it holds blocks through the load
    window, so the gauge moves in most samples under load. Four instant abandoned streams alone
    moved it in under 10 % of them on a busy machine (2 runs in 4), which is INCONCLUSIVE by
    design; a whole stream frees its blocks, so it changes no leak verdict."""
    body = {
        "model": "ref-tiny",
        "stream": True,
        "max_tokens": 200,
        "messages": [{"role": "user", "content": "hi"}],
    }
    url = base_url + "/chat/completions"
    with (
        httpx.Client(timeout=10, trust_env=False) as client,
        client.stream("POST", url, json=body) as response,
    ):
        for _line in response.iter_lines():
            pass


def _abandon_streams(base_url: str, count: int) -> None:
    body = {
        "model": "ref-tiny",
        "stream": True,
        "max_tokens": 200,
        "messages": [{"role": "user", "content": "hello " * 40}],
    }
    with httpx.Client(timeout=5, trust_env=False) as client:
        for _ in range(count):
            with client.stream("POST", base_url + "/chat/completions", json=body) as response:
                for n, _line in enumerate(response.iter_lines()):
                    if n >= 4:
                        break  # the client goes away mid-stream


def _soak(server, tmp_path):
    with TelemetryRecorder(
        tmp_path, server.root + "/metrics", "reference", interval_s=0.02, nvml=False
    ) as rec:
        assert rec.wait_ready(10), rec.summaries()
        t0 = time.time()
        time.sleep(BASELINE_S)
        cycles = []
        for _ in range(CYCLES):
            start = time.time()
            whole = threading.Thread(target=_one_whole_stream, args=(server.base_url,))
            whole.start()
            _abandon_streams(server.base_url, 4)
            whole.join(timeout=30)
            end = time.time()
            time.sleep(DRAIN_S)
            cycles.append(Cycle(start, end, time.time(), end + 0.1))
    return rec.frame(), Phases((t0, t0 + BASELINE_S), cycles)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("faults", "leak_status", "drain_status"),
    [
        pytest.param((), "ok", "ok", id="clean"),
        pytest.param(("kv-leak",), "leak", "not_drained", id="kv-leak"),
    ],
)
def test_reference_server_soak(make_reference, tmp_path, faults, leak_status, drain_status):
    # Few enough blocks that the load moves kv_usage past the tolerance: on 1024 blocks its peak
    # stayed at 0.4 %, where no leak could show (servecheck now calls that INCONCLUSIVE).
    server = make_reference(*faults, kv_blocks=128)
    frame, phases = _soak(server, tmp_path)
    verdict = analyse_leak(frame, phases, "kv_usage", tolerance=0.01)
    assert verdict.status == leak_status, verdict.message
    assert max(verdict.peaks) > 0.01 or leak_status == "leak", "the load never moved the KV cache"
    drain = check_drain(
        frame, phases.cycles[-1].end, DRAIN_S, baseline_window=phases.baseline, tolerance=0.01
    )
    assert drain.status == drain_status, drain.message
