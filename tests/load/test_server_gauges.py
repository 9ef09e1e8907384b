"""summary.json's server.gauges and server.counters (analysis/server_gauges.py): only the samples
inside the run window count, counters rise from the bounding scrapes (else the series), and a
counter that went down is not a rise."""

from __future__ import annotations

import json
from pathlib import Path

from servecheck.analysis import server_gauges
from servecheck.analysis.server_truth import Snapshot
from servecheck.report.load_text import server_gauges_lines


def _series(run_dir: Path, rows: list[tuple[float, str, float]]) -> None:
    path = run_dir / "telemetry" / "prometheus.jsonl"
    path.parent.mkdir(parents=True)
    lines = [
        {
            "t": t,
            "t_mono": t,
            "source": "prometheus",
            "kind": "sample",
            "metric": m,
            "value": v,
            "labels": {"from": f"vllm:{m}"},
        }
        for t, m, v in rows
    ]
    lines.append(
        {
            "t": 12.0,
            "t_mono": 12.0,
            "source": "prometheus",
            "kind": "gap",
            "metric": "gap",
            "value": None,
            "labels": {},
        }
    )
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"t": 13, "torn')


def _snap(t: float, **values: float) -> Snapshot:
    names = {
        "preemptions_total": "vllm:num_preemptions_total",
        "requests_success_total": "vllm:request_success_total",
    }
    return Snapshot(t, {names[k]: [({}, v)] for k, v in values.items()})


def test_gauges_reduce_the_samples_inside_the_window(tmp_path: Path) -> None:
    _series(
        tmp_path,
        [
            (9.0, "requests_waiting", 50.0),  # before the window: left out
            (10.0, "requests_waiting", 0.0),
            (11.0, "requests_waiting", 4.0),
            (12.0, "requests_waiting", 2.0),
            (11.0, "kv_usage", 0.5),
            (30.0, "requests_waiting", 99.0),  # after it: left out
        ],
    )
    section = {"available": True, "engine": "vllm", "window": {"start": 10.0, "end": 20.0}}
    out = server_gauges.add_to(
        section, tmp_path, _snap(10, preemptions_total=3), _snap(20, preemptions_total=7)
    )
    waiting = out["gauges"]["requests_waiting"]
    assert waiting == {
        "min": 0.0,
        "max": 4.0,
        "mean": 2.0,
        "last": 2.0,
        "samples": 3,
        "source_metric": "vllm:requests_waiting",
    }
    assert out["gauges"]["kv_usage"]["max"] == 0.5
    assert "requests_running" not in out["gauges"]  # not exposed: absent, not zero
    pre = out["counters"]["preemptions_total"]
    assert (pre["delta"], pre["from"], pre["source_metric"]) == (
        4.0,
        "scrapes",
        "vllm:num_preemptions_total",
    )


def test_counters_fall_back_to_the_series_and_a_restart_is_no_rise(tmp_path: Path) -> None:
    _series(tmp_path, [(10.0, "preemptions_total", 5.0), (15.0, "preemptions_total", 8.0)])
    rows = server_gauges.window_rows(tmp_path, 10.0, 20.0)
    got = server_gauges.counters(None, None, "vllm", None, rows)
    assert got["preemptions_total"]["delta"] == 3.0 and got["preemptions_total"]["from"] == "series"
    went_down = server_gauges.counters(
        _snap(0, requests_success_total=100), _snap(1, requests_success_total=3), "vllm", None, {}
    )
    entry = went_down["requests_success_total"]
    assert entry["delta"] is None and "restarted" in entry["note"]


def test_summary_line_names_the_maxima_and_preemptions() -> None:
    section = {
        "gauges": {"requests_waiting": {"max": 4.0}, "kv_usage": {"max": 0.25}},
        "counters": {"preemptions_total": {"delta": 2.0}},
    }
    assert server_gauges_lines(section) == [
        "server gauges (max over the window): waiting 4, kv_usage 0.25, preemptions +2"
    ]
    assert server_gauges_lines({"available": False}) == [] and server_gauges_lines(None) == []


def test_an_unavailable_section_is_left_as_it_is(tmp_path: Path) -> None:
    section = {"available": False, "note": "refused"}
    assert server_gauges.add_to(dict(section), tmp_path, None, None) == section
