"""Samplers and the recorder against a local HTTP server, a fake NVML and this process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from servecheck.config.model import Target
from servecheck.errors import UsageError
from servecheck.redact import register
from servecheck.telemetry import (
    DcgmSampler,
    DeviceMemory,
    FakeNvml,
    NvmlSampler,
    ProcessMemory,
    PrometheusSampler,
    RssSampler,
    TelemetryRecorder,
    find_pid_listening,
    load_markers,
    load_series,
)
from servecheck.telemetry.nvml import PynvmlBackend

GIB = 2**30


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_prometheus_sampler_survives_the_server_going_down(
    tmp_path, metrics_server, exposition, wait
):
    metrics_server.body = exposition("vllm")
    path = tmp_path / "prometheus.jsonl"
    sampler = PrometheusSampler(path, metrics_server.url, "vllm", interval_s=0.05).start()
    assert wait(lambda: sampler.summary().samples >= 8), sampler.summary()
    metrics_server.stop()
    assert wait(lambda: sampler.summary().gaps >= 2), sampler.summary()
    summary = sampler.stop()
    assert summary.stopped == "stop event"
    assert summary.gaps >= 2 and summary.samples >= 8
    rows = _lines(path)
    samples = [r for r in rows if r["kind"] == "sample"]
    gaps = [r for r in rows if r["kind"] == "gap"]
    assert {r["metric"] for r in samples} == {
        "kv_usage",
        "requests_running",
        "requests_waiting",
        "preemptions_total",
        "prefix_cache_queries_total",
        "requests_success_total",  # the engine-truth counter and TTFT histogram
        "ttft_seconds_sum",
        "ttft_seconds_count",
    }
    # A kept-alive connection cut mid-request reads as ReadError / RemoteProtocolError first.
    assert {r["error_class"] for r in gaps} <= {"ConnectError", "ReadError", "RemoteProtocolError"}
    assert gaps[-1]["error_class"] == "ConnectError"
    assert len(gaps) == summary.gaps
    assert all(r["t"] >= samples[-1]["t"] for r in gaps)
    assert summary.last_error == f"ConnectError: {gaps[-1]['error']}"


@pytest.mark.parametrize(
    ("body", "status", "error_class", "message"),
    [
        pytest.param(
            "# TYPE x gauge\nx 1\n",
            200,
            "MetricsMissing",
            "has none of: vllm:e2e_request_latency_seconds, vllm:generation_tokens_total",
            id="no-mapped-metric",
        ),
        pytest.param("vllm:kv_cache_usage_perc{ oops\n", 200, "ValueError", "", id="invalid-text"),
        pytest.param(
            "oops",
            500,
            "HTTPStatusError",
            "Server error '500 Internal Server Error'",
            id="http-500",
        ),
    ],
)
def test_prometheus_sampler_bad_answers_are_gaps(
    tmp_path, metrics_server, body, status, error_class, message
):
    metrics_server.body, metrics_server.status = body, status
    sampler = PrometheusSampler(
        tmp_path / "p.jsonl", metrics_server.url, "vllm", interval_s=0.01, max_samples=2
    )
    sampler.run()
    summary = sampler.summary()
    assert (summary.samples, summary.gaps, summary.stopped) == (0, 2, "max_samples")
    rows = _lines(tmp_path / "p.jsonl")
    assert [r["error_class"] for r in rows] == [error_class] * 2
    assert message in rows[0]["error"]


def test_gap_messages_are_redacted(tmp_path, metrics_server):
    secret = "sk-telemetry-test-0123456789"
    register(secret)
    metrics_server.status = 503
    url = metrics_server.url + "?token=" + secret
    sampler = PrometheusSampler(tmp_path / "p.jsonl", url, "vllm", interval_s=0.01, max_samples=1)
    sampler.run()
    text = (tmp_path / "p.jsonl").read_text()
    assert secret not in text
    assert "token=***" in text


def test_prometheus_sampler_without_mapping_ends_with_one_gap(tmp_path, metrics_server):
    sampler = PrometheusSampler(
        tmp_path / "p.jsonl", metrics_server.url, "xinference", interval_s=0.01, max_samples=5
    )
    sampler.run()
    assert sampler.summary().stopped == "unavailable"
    (row,) = _lines(tmp_path / "p.jsonl")
    assert (
        row["error"]
        == "no metric mapping for engine 'xinference': give telemetry.metrics in targets.yaml"
    )
    assert metrics_server.hits == 0


def test_dcgm_sampler_records_bytes_per_gpu(tmp_path, metrics_server, exposition):
    metrics_server.body = exposition("dcgm")
    sampler = DcgmSampler(
        tmp_path / "dcgm.jsonl", metrics_server.url, interval_s=0.01, max_samples=1
    )
    sampler.run()
    rows = {(r["metric"], r["labels"]["gpu"]): r for r in _lines(tmp_path / "dcgm.jsonl")}
    assert rows[("gpu_mem_used_bytes", "0")]["value"] == 129321 * 2**20
    assert rows[("gpu_mem_free_bytes", "1")]["value"] == 143166 * 2**20
    assert (
        rows[("gpu_mem_used_bytes", "1")]["labels"]["uuid"]
        == "GPU-6f0d2a8e-1111-0000-0000-000000000000"
    )


def _fake_nvml() -> FakeNvml:
    return FakeNvml(
        device_list=[
            DeviceMemory(0, "NVIDIA H200", "GPU-aaaa", 40 * GIB, 141 * GIB),
            DeviceMemory(1, "NVIDIA H200", "GPU-bbbb", 1 * GIB, 141 * GIB),
        ],
        process_map={0: [ProcessMemory(0, 4242, 39 * GIB), ProcessMemory(0, 4243, None)]},
    )


def test_nvml_sampler_records_devices_and_processes(tmp_path):
    fake = _fake_nvml()
    sampler = NvmlSampler(tmp_path / "nvml.jsonl", backend=fake, interval_s=0.01, max_samples=1)
    sampler.run()
    rows = _lines(tmp_path / "nvml.jsonl")
    by_key = {(r["metric"], r["labels"]["gpu"], r["labels"].get("pid")): r["value"] for r in rows}
    assert by_key == {
        ("gpu_mem_used_bytes", "0", None): 40 * GIB,
        ("gpu_mem_total_bytes", "0", None): 141 * GIB,
        ("gpu_mem_used_bytes", "1", None): 1 * GIB,
        ("gpu_mem_total_bytes", "1", None): 141 * GIB,
        ("gpu_proc_mem_bytes", "0", "4242"): 39 * GIB,  # pid 4243's usage is hidden: no record
    }
    assert fake.shutdowns == 1


def test_nvml_error_is_a_gap_and_sampling_goes_on(tmp_path):
    fake = _fake_nvml()
    fake.fail_next = [RuntimeError("NVML_ERROR_GPU_IS_LOST")]

    def grow(nv: FakeNvml) -> None:
        nv.device_list[0].used += GIB

    fake.on_devices = grow
    sampler = NvmlSampler(tmp_path / "nvml.jsonl", backend=fake, interval_s=0.01, max_samples=3)
    sampler.run()
    summary = sampler.summary()
    assert (summary.gaps, summary.stopped) == (1, "max_samples")
    frame = load_series(tmp_path / "nvml.jsonl")
    gap = frame[frame["kind"] == "gap"].iloc[0]
    assert (gap["error_class"], gap["error"]) == ("RuntimeError", "NVML_ERROR_GPU_IS_LOST")
    used0 = frame[
        (frame["metric"] == "gpu_mem_used_bytes")
        & (frame["labels"].map(lambda x: x.get("gpu")) == "0")
    ]
    assert list(used0["value"]) == [42 * GIB, 43 * GIB]


def test_nvml_missing_is_one_clear_gap(tmp_path):
    fake = FakeNvml(fail_init="NVMLError_LibraryNotFound: NVML Shared Library Not Found")
    sampler = NvmlSampler(tmp_path / "nvml.jsonl", backend=fake, interval_s=0.01, max_samples=5)
    sampler.run()
    (row,) = _lines(tmp_path / "nvml.jsonl")
    assert (
        row["error"]
        == "NVML not available: NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    )
    assert row["error_class"] == "SourceUnavailable"
    assert sampler.summary().stopped == "unavailable"


def test_real_nvml_here_samples_or_says_unavailable(tmp_path):
    sampler = NvmlSampler(
        tmp_path / "nvml.jsonl", backend=PynvmlBackend(), interval_s=0.01, max_samples=1
    )
    sampler.run()
    rows = _lines(tmp_path / "nvml.jsonl")
    if sampler.summary().stopped == "unavailable":
        assert rows[0]["error"].startswith("NVML not available: ")
    else:
        assert any(r["metric"] == "gpu_mem_used_bytes" for r in rows)


def test_rss_sampler_on_this_process_and_a_child(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"])
    try:
        sampler = RssSampler(
            tmp_path / "rss.jsonl", pid=os.getpid(), interval_s=0.01, max_samples=2
        )
        sampler.run()
    finally:
        child.kill()
        child.wait(5)
    rows = _lines(tmp_path / "rss.jsonl")
    tree = [r for r in rows if r["metric"] == "rss_tree_bytes"]
    per_process = [r for r in rows if r["metric"] == "rss_process_bytes"]
    assert len(tree) == 2 and all(r["value"] > 10 * 2**20 for r in tree)
    assert {str(os.getpid()), str(child.pid)} <= {r["labels"]["pid"] for r in per_process}
    counts = [r["value"] for r in rows if r["metric"] == "process_count"]
    assert counts and min(counts) >= 2


def test_rss_sampler_gone_process_is_a_gap(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(10)
    sampler = RssSampler(tmp_path / "rss.jsonl", pid=child.pid, interval_s=0.01, max_samples=2)
    sampler.run()
    assert [r["error_class"] for r in _lines(tmp_path / "rss.jsonl")] == ["NoSuchProcess"] * 2


def test_rss_sampler_finds_the_pid_by_port(tmp_path, metrics_server):
    if find_pid_listening(metrics_server.port) is None:
        pytest.skip("this system hides socket owners from psutil")
    assert find_pid_listening(metrics_server.port) == os.getpid()
    sampler = RssSampler(
        tmp_path / "rss.jsonl", port=metrics_server.port, interval_s=0.01, max_samples=1
    )
    sampler.run()
    assert sampler.summary().gaps == 0


def test_recorder_runs_all_samplers_and_loads_a_frame(tmp_path, metrics_server, exposition, wait):
    metrics_server.body = exposition("vllm")
    nvml = _fake_nvml()  # the engine (this process) on GPU 0, so its tree's memory is seen
    nvml.process_map[0].append(ProcessMemory(0, os.getpid(), 2 * GIB))
    recorder = TelemetryRecorder(
        tmp_path,
        metrics_server.url,
        "vllm",
        pid=os.getpid(),
        interval_s=0.05,
        nvml_backend=nvml,
    )
    with recorder:
        recorder.mark("baseline-start")
        assert wait(lambda: all(s.samples > 0 for s in recorder.summaries())), recorder.summaries()
        recorder.mark("baseline-end", cycle="0")
    summaries = {s.source: s for s in recorder.summaries()}
    assert set(summaries) == {"prometheus", "nvml", "rss"}
    assert all(s.stopped == "stop event" and s.gaps == 0 for s in summaries.values())
    written = json.loads((tmp_path / "telemetry" / "summary.json").read_text())
    assert {s["source"] for s in written} == set(summaries)
    frame = recorder.frame()
    assert {"kv_usage", "gpu_mem_used_bytes", "rss_tree_bytes"} <= set(frame["metric"])
    assert (frame.loc[frame["metric"] == "kv_usage", "value"] == 0.5703125).all()
    assert frame["t"].is_monotonic_increasing
    markers = load_markers(tmp_path)
    assert list(markers["name"]) == ["baseline-start", "baseline-end"]


def test_recorder_for_target(tmp_path, metrics_server, exposition):
    metrics_server.body = exposition("sglang")
    target = Target(
        name="local", base_url=f"http://127.0.0.1:{metrics_server.port}/v1", engine="sglang"
    )
    recorder = TelemetryRecorder.for_target(target, tmp_path, {"interval_s": 0.05, "nvml": False})
    assert [s.source for s in recorder.samplers] == ["prometheus"]
    sampler = recorder.samplers[0]
    assert isinstance(sampler, PrometheusSampler)
    assert (sampler.url, sampler.interval_s) == (metrics_server.url, 0.05)
    with pytest.raises(
        UsageError, match=r'local\.telemetry\.interval: unknown key \(did you mean "interval_s"\?\)'
    ):
        TelemetryRecorder.for_target(target, tmp_path, {"interval": 1})


def test_load_series_skips_a_torn_last_line(tmp_path):
    path = tmp_path / "telemetry" / "prometheus.jsonl"
    path.parent.mkdir()
    good = {
        "t": 1.0,
        "t_mono": 1.0,
        "source": "prometheus",
        "kind": "sample",
        "metric": "kv_usage",
        "value": 0.5,
        "labels": {},
    }
    path.write_text(json.dumps(good) + "\n" + '{"t": 2.0, "t_mono": 2.0, "sour')
    frame = load_series(tmp_path)
    assert list(frame["value"]) == [0.5]
    assert list(load_series(tmp_path / "nothing-here").columns) == list(frame.columns)


def test_gap_messages_mask_url_credentials(tmp_path, metrics_server):
    metrics_server.status = 502
    url = f"http://scraper:hunter2-pass@127.0.0.1:{metrics_server.port}/metrics"
    sampler = PrometheusSampler(tmp_path / "p.jsonl", url, "vllm", interval_s=0.01, max_samples=1)
    sampler.run()
    (row,) = _lines(tmp_path / "p.jsonl")
    assert "hunter2" not in row["error"]
    assert "http://***@127.0.0.1" in row["error"]


def test_wait_ready_returns_after_the_first_tick(tmp_path, metrics_server, exposition):
    metrics_server.body = exposition("vllm")
    unavailable = FakeNvml(fail_init="no driver")
    with TelemetryRecorder(
        tmp_path, metrics_server.url, "vllm", interval_s=0.05, nvml_backend=unavailable
    ) as rec:
        assert rec.wait_ready(10)
        summaries = {s.source: s for s in rec.summaries()}
        assert summaries["prometheus"].ticks >= 1
        assert summaries["nvml"].stopped == "unavailable"


class _NoProcesses(FakeNvml):
    def processes(self, index: int) -> list[ProcessMemory]:
        raise RuntimeError("NVML_ERROR_NO_PERMISSION")


def test_nvml_per_process_failure_keeps_device_numbers(tmp_path):
    fake = _NoProcesses(
        device_list=[DeviceMemory(0, "NVIDIA H200", "GPU-aaaa", 40 * GIB, 141 * GIB)]
    )
    sampler = NvmlSampler(tmp_path / "nvml.jsonl", backend=fake, interval_s=0.01, max_samples=1)
    sampler.run()
    rows = _lines(tmp_path / "nvml.jsonl")
    assert [r["metric"] for r in rows] == ["gpu_mem_used_bytes", "gpu_mem_total_bytes", "gap"]
    assert rows[2]["error"] == "per-process memory: NVML_ERROR_NO_PERMISSION"
    assert (sampler.summary().samples, sampler.summary().gaps) == (2, 1)


def test_unwritable_series_path_ends_the_sampler_quietly(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    sampler = NvmlSampler(
        blocker / "nvml.jsonl", backend=_fake_nvml(), interval_s=0.01, max_samples=1
    )
    sampler.run()
    assert sampler.summary().stopped == "unwritable"
    assert sampler.ready.is_set()
