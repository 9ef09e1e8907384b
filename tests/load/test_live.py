"""The live view (load/generator/live.py, load/generator/live_web.py) without Locust: pieces, merging, OpenMetrics,
the bind and auth rules, the routes in a Flask app, and the Grafana dashboard's metric names."""

from __future__ import annotations

import base64
import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from servecheck.analysis.aggregate import Aggregate, Rule
from servecheck.errors import SpecError
from servecheck.load.generator.live import (
    LiveFeed,
    LiveView,
    check_free,
    live_config,
    metric_names,
    registry_for,
)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "servecheck-load.json"
T0 = 1_000_000.0  # an epoch second on a slice edge (1 s slices)


def _record(t: float, ttft: float, error: str | None = None) -> dict[str, Any]:
    if error:
        return {"t_sent": t, "t_done": t + 0.01, "error": error, "status": 500}
    return {
        "t_sent": t,
        "t_done": t + 0.05,
        "ttft": ttft,
        "e2e": 0.05,
        "itls": [0.001, 0.002],
        "output_tokens": 3,
    }


def _rule() -> Rule:
    return Rule(slice_s=1.0, window="none")


def _feed(
    aggs: dict[str, Aggregate], records: list[tuple[str, dict[str, Any]]], view: LiveView
) -> None:
    """Records to their worker's aggregate in time order, a tick at every whole 0.5 s."""
    feeds = {w: LiveFeed(a, w) for w, a in aggs.items()}
    next_tick = T0 + 0.5
    for worker, r in records:
        while r["t_done"] > next_tick:
            for f in feeds.values():
                view.feed(f.tick(now=next_tick, in_flight=1))
            next_tick += 0.5
        aggs[worker].add(r)
    for f in feeds.values():
        view.feed(f.tick(now=next_tick, in_flight=0))


def _records() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for k in range(60):  # 6 s, 10 requests a second; TTFT grows each second
        t = T0 + k * 0.1
        err = "http-500" if k % 9 == 0 else ("rate-limited" if k % 13 == 0 else None)
        out.append((f"w{k % 2}", _record(t, 0.01 * (1 + k // 10), err)))
    return out


def test_two_workers_merge_to_what_one_aggregate_would_show() -> None:
    records = _records()
    two = LiveView({"run_id": "r"})
    _feed({"w0": Aggregate(_rule()), "w1": Aggregate(_rule())}, records, two)
    one = LiveView({"run_id": "r"})
    _feed({"all": Aggregate(_rule())}, [("all", r) for _, r in records], one)
    now = T0 + 6.0  # the last tick: slice 6 has begun, slice 5 is the last complete one
    a, b = two.snapshot(now), one.snapshot(now)
    assert a["workers"] == 2 and b["workers"] == 1
    for key in ("count", "errors", "ttft_ms", "itl_ms", "e2e_ms", "requests_per_s"):
        assert [r[key] for r in a["series"]] == [r[key] for r in b["series"]], key
    assert a["totals"]["requests"] == 60 == sum(r["count"] for r in a["series"])
    # TTFT grows second by second: the series shows it, and the window is the last slice
    p50s = [r["ttft_ms"]["p50"] for r in a["series"] if r["ttft_ms"]["p50"] is not None]
    assert p50s == sorted(p50s) and p50s[0] < p50s[-1]
    assert a["window"]["ttft_ms"]["p50"] == pytest.approx(60.0, abs=0.1)


def test_error_classes_and_ttfa_come_by_tick() -> None:
    view = LiveView()
    _feed({"w0": Aggregate(_rule()), "w1": Aggregate(_rule())}, _records(), view)
    snap = view.snapshot(T0 + 6.0)
    failed = {"http-500": 7, "rate-limited": 4}  # k % 9 == 0; k % 13 == 0 and not % 9
    assert snap["totals"]["errors"] == failed
    by_class: dict[str, int] = {}
    for r in snap["series"]:
        for c, n in r["error_classes"].items():
            by_class[c] = by_class.get(c, 0) + n
    assert by_class == failed, "every failure lands in one window's classes"
    ttfa = sum(1 for r in snap["series"] if r["ttfa_ms"]["p50"] is not None)
    assert ttfa >= 5, "TTFA (= TTFT without reasoning) shows in the windows"


def test_a_tick_sends_only_the_slices_that_changed() -> None:
    agg = Aggregate(_rule())
    feed = LiveFeed(agg, "w0")
    for k in range(50):
        agg.add(_record(T0 + k * 0.1, 0.01))
    first = feed.tick(now=T0 + 5.1)
    assert first["full"] and len(first["slices"]) >= 5
    agg.add(_record(T0 + 5.1, 0.01))
    second = feed.tick(now=T0 + 6.0)
    assert not second["full"] and 1 <= len(second["slices"]) <= 2


def test_a_coarsened_scan_resends_everything_and_the_view_follows() -> None:
    agg = Aggregate(_rule())
    feed, view = LiveFeed(agg, "w0"), LiveView()
    view.feed(feed.tick(now=T0))
    for k in range(300):  # 300 s of 1 s slices: more than MAX_SLICES, so the width doubles
        agg.add(_record(T0 + k, 0.02))
    piece = feed.tick(now=T0 + 301)
    assert piece["full"] and piece["slice_s"] == 4.0
    view.feed(piece)
    snap = view.snapshot(T0 + 301)
    assert snap["slice_s"] == 4.0 and sum(r["count"] for r in snap["series"]) == 300


def test_a_malformed_piece_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="live piece"):
        LiveView().feed({"worker": "w0"})


def _served_names(view: LiveView) -> set[str]:
    text = generate_latest(registry_for(view)).decode()
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def _fed_view() -> LiveView:
    info = {"run_id": "r", "target": "t", "scenario": "chat", "model": "m"}
    view = LiveView(info, clock=lambda: T0 + 6.0)
    _feed({"w0": Aggregate(_rule())}, [("w0", r) for _, r in _records()], view)
    return view


def test_openmetrics_serve_every_named_family_with_the_window() -> None:
    view = _fed_view()
    assert set(metric_names()) <= _served_names(view)
    text = generate_latest(registry_for(view)).decode()
    assert 'servecheck_load_errors_total{error_class="http-500"} 7.0' in text
    assert 'servecheck_load_requests_total{outcome="ok"} 49.0' in text
    assert re.search(r'servecheck_load_window_ttft_seconds\{quantile="0.5"\} 0\.06', text)


def test_grafana_dashboard_queries_only_served_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    used = {m for e in exprs for m in re.findall(r"\bservecheck_load_[a-z0-9_]+", e)}
    served = _served_names(_fed_view())
    assert used and not used - served, f"the dashboard queries unserved metrics: {used - served}"
    for m in ("ttft", "ttfa", "itl", "e2e"):
        assert f"servecheck_load_window_{m}_seconds" in used, m
    assert {
        "servecheck_load_errors_total",
        "servecheck_load_window_output_tokens_per_second",
    } <= used


@pytest.mark.parametrize(
    ("web", "auth", "metrics", "role", "wanted"),
    [
        pytest.param("0.0.0.0:8089", None, None, "local", "needs {web_auth}", id="open-bind"),
        pytest.param("8089", "admin", None, "local", "USER:PASS", id="auth-no-password"),
        pytest.param("host:99999", None, None, "local", "port 1-65535", id="bad-port"),
        pytest.param(None, None, "9100", "worker", "the master's", id="worker"),
        pytest.param(None, "a:b", None, "local", "protects {web}", id="auth-alone"),
        pytest.param("8089", None, "127.0.0.1:8089", "local", "same address", id="same"),
    ],
)
def test_live_options_refuse_what_cannot_work(
    web: str | None, auth: str | None, metrics: str | None, role: str, wanted: str
) -> None:
    with pytest.raises(SpecError) as info:
        live_config(web, auth, metrics, role)
    assert wanted in info.value.template or wanted in str(info.value)


def test_live_options_accepted() -> None:
    assert live_config("8089", None, "9100") == {
        "web": ["127.0.0.1", 8089],
        "metrics": ["127.0.0.1", 9100],
        "otlp": None,
        "tick_s": 1.0,
    }
    assert live_config("0.0.0.0:8089", "admin:pw", None)["web"] == ["0.0.0.0", 8089]
    assert live_config("[::1]:8089", None, None)["web"] == ["::1", 8089]
    assert live_config(None, None, None) is None
    # a worker always sends its pieces (its master may serve a view), and serves nothing
    assert live_config(None, None, None, "worker") == {
        "web": None,
        "metrics": None,
        "otlp": None,
        "tick_s": 1.0,
    }


def test_a_port_in_use_is_a_usage_error_before_the_run() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(SpecError, match="cannot listen there"):
            check_free({"web": None, "metrics": ["127.0.0.1", port]})


class _WebUI:
    def __init__(self) -> None:
        from flask import Flask, jsonify

        self.app = Flask("locust-stub")
        self.template_args: dict[str, Any] = {}

        @self.app.route("/stats/requests")
        def stats() -> Any:
            return jsonify({"stats": [], "errors": []})


def test_web_routes_tab_and_basic_auth() -> None:
    from servecheck.load.generator.live_web import install

    ui, view = _WebUI(), _fed_view()
    install(ui, view, auth="admin:s3cret")
    assert ui.template_args["extendedTabs"] == [{"title": "LLM", "key": "llm"}]
    client = ui.app.test_client()
    assert client.get("/stats/requests").status_code == 401
    bad = base64.b64encode(b"admin:wrong").decode()
    assert client.get("/llm", headers={"Authorization": f"Basic {bad}"}).status_code == 401
    good = {"Authorization": "Basic " + base64.b64encode(b"admin:s3cret").decode()}
    page = client.get("/llm", headers=good)
    assert page.status_code == 200 and b"live view" in page.data
    snap = client.get("/llm/live.json", headers=good).get_json()
    assert snap["totals"]["requests"] == 60 and snap["window"] is not None
    stats = client.get("/stats/requests", headers=good).get_json()
    (ext,) = stats["extended_stats"]
    rows = {r["metric"]: r for r in ext["data"]}
    assert ext["key"] == "llm" and {"TTFT", "TTFA", "ITL", "E2E", "output tokens/s"} <= set(rows)
    assert rows["TTFT"]["p50"] == pytest.approx(60.0, abs=0.1)


def test_web_routes_open_without_auth() -> None:
    from servecheck.load.generator.live_web import install

    ui = _WebUI()
    install(ui, LiveView())
    client = ui.app.test_client()
    assert client.get("/llm/live.json").get_json()["window"] is None
    rows = client.get("/stats/requests").get_json()["extended_stats"][0]["data"]
    assert [(r["metric"], r["value"]) for r in rows] == [
        ("requests ok", 0),
        ("requests failed", 0),
    ], "before the first request: the run's counts only"
