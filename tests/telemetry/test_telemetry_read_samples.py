"""read_samples (no pandas) gives the rows load_series' frame gives, for the summary and report."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from servecheck.telemetry.series import load_series, read_samples, select

ROWS = [
    {"t": 3.0, "source": "prometheus", "kind": "sample", "metric": "kv_usage", "value": 0.5,
     "labels": {"from": "vllm:kv_cache_usage_perc"}},
    {"t": 1.0, "source": "prometheus", "kind": "sample", "metric": "kv_usage", "value": 0.25},
    {"t": 2.0, "source": "prometheus", "kind": "gap", "metric": "kv_usage", "value": None,
     "error_class": "timeout"},
    {"t": 2.5, "source": "prometheus", "metric": "requests_running", "value": "4"},  # no kind
    {"t": 2.5, "source": "nvml", "kind": "sample", "metric": "gpu_mem_used", "value": "n/a"},
    {"t": 1.0, "source": "prometheus", "kind": "sample", "metric": "requests_running", "value": 2},
]  # fmt: skip


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "prometheus.jsonl"
    lines = [json.dumps(r) for r in ROWS] + ['{"t": 9, "metric": "torn"']  # a killed writer's
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_read_samples_holds_the_frames_sample_rows_in_its_order(tmp_path: Path) -> None:
    path = _file(tmp_path)
    rows = read_samples(path)
    frame = load_series(path)
    for metric, source in (("kv_usage", "prometheus"), ("requests_running", "prometheus"),
                           ("gpu_mem_used", "nvml")):  # fmt: skip
        want = select(frame, metric, source=source)
        got = [r for r in rows if r[2] == metric and r[1] == source]
        assert [r[0] for r in got] == list(want["t"])
        for (_, _, _, v, labels), fv, flab in zip(got, want["value"], want["labels"], strict=True):
            assert (math.isnan(v) and math.isnan(fv)) or v == fv
            assert labels == flab
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    assert not any(r[2] == "torn" for r in rows) and len(rows) == 5  # the gap is left out


def test_read_samples_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_samples(tmp_path / "nope.jsonl") == []


def test_the_summary_and_report_readers_do_not_import_pandas() -> None:
    code = (
        "import sys; import servecheck.analysis.server_gauges, servecheck.report.load_figures;"
        "import servecheck.telemetry.recorder; print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
