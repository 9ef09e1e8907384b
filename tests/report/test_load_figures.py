"""The load page's pictures of client latency beside the engine (report/load_figures.py), from
summary dicts: readable without a server, the decomposition's segments add up, nothing drawn
from nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servecheck.report import load_figures as lf
from tests.report.svgtext import has_text


def _slices(n: int = 3) -> dict[str, Any]:
    rows = [
        {
            "start_s": float(i),
            "end_s": float(i + 1),
            "ttft_ms": {"p50": 10.0 + i, "p95": 20.0 + i},
            "itl_ms": {"p50": 1.0, "p95": 2.0},
        }
        for i in range(n)
    ]
    return {"slice_s": 1.0, "t0": 100.0, "rows": rows}


PHASES = {
    "connect": {"count": 2, "mean": 5.0},  # two new connections among ten requests
    "send": {"count": 10, "mean": 0.5},
    "wait_headers": {"count": 10, "mean": 8.0},
    "headers_to_body": {"count": 10, "mean": 1.0},
    "body_to_token": {"count": 10, "mean": 0.5},
}
SERVER = {
    "decomposition": {
        "client_ttft_ms": {"count": 10, "mean": 12.0},
        "engine": {
            "queue_seconds": {"mean_ms": 2.0},
            "prefill_seconds": {"mean_ms": 5.0},
            "ttft_seconds": {"mean_ms": 9.0},
        },
        "network_gateway_ms": 3.0,
    }
}


def test_without_a_server_the_page_still_draws_the_client_side(tmp_path: Path) -> None:
    summary = {"slices": _slices(), "timings": {"phases_ms": PHASES}}
    html = lf.load_figures_html(summary, tmp_path)  # no telemetry/ in the run
    assert has_text(html, lf.TIMELINE_TITLE) and not has_text(html, lf.ENGINE_TITLE)
    assert "no engine series" in html
    assert has_text(html, lf.DECOMP_TITLE) and "the engine reported no phase" in html
    assert not has_text(html, "engine queue")


def test_the_decomposition_segments_add_up() -> None:
    bars = dict(lf.decomposition_bars({"timings": {"phases_ms": PHASES}, "server": SERVER}))
    client = dict(bars["client TTFT phases"])
    assert client["connect"] == pytest.approx(1.0)  # 5 ms on 2 of 10 requests: 1 ms a request
    assert sum(client.values()) == pytest.approx(11.0)
    engine = dict(bars["engine + gap"])
    assert engine == {
        "engine queue": 2.0,
        "engine prefill": 5.0,
        "engine TTFT rest": 2.0,
        "network + gateway": 3.0,
    }
    assert sum(engine.values()) == pytest.approx(12.0)  # the client's mean TTFT


@pytest.mark.parametrize(
    "summary",
    [
        pytest.param({}, id="empty"),
        pytest.param({"slices": {"rows": []}, "timings": {}}, id="no-rows"),
        pytest.param({"slices": {"rows": [{"start_s": "x"}]}, "server": None}, id="junk"),
    ],
)
def test_nothing_measured_draws_nothing(summary: dict[str, Any], tmp_path: Path) -> None:
    assert lf.load_figures_html(summary, tmp_path) == ""


def test_the_server_part_lists_gauges_and_counter_rises() -> None:
    from servecheck.report.server_html import server_html

    section = {
        "available": True,
        "gauges": {"requests_waiting": {"min": 0, "mean": 1.5, "max": 4, "last": 0, "samples": 9}},
        "counters": {
            "preemptions_total": {"delta": 3.0, "from": "scrapes"},
            "prompt_tokens_total": {"delta": None, "note": "the counter went down"},
        },
    }
    page = server_html(section)
    assert "Engine gauges over the run window" in page and "<td>requests_waiting</td>" in page
    assert '<td class="num">4.000</td>' in page and '<td class="num">3</td>' in page
    assert "the counter went down" in page
    assert "Engine gauges" not in server_html({"available": True})
