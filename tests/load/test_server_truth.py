"""The engine's own counts beside the client's (analysis/server_truth.py): reconciliation and the TTFT
decomposition, unit by unit, then end to end through ``servecheck load`` on the reference server,
clean and with each engine-truth fault, whose finding must name it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.analysis import server_truth
from servecheck.analysis.server_truth import ClientCounts, Snapshot, quantile, reconcile
from servecheck.reference.inprocess import RunningServer
from tests.load.test_load_cli import _cmd, _run, _summary, _targets


def _snap(t: float, **counters: float) -> Snapshot:
    return Snapshot(t, {f"vllm:{k}": [({}, v)] for k, v in counters.items()})


def _client(n: int, prompt: int, gen: int) -> ClientCounts:
    return ClientCounts(requests=n, prompt_tokens=prompt, generation_tokens=gen, cached_reported=0)


def test_quantile_interpolates_inside_a_bucket() -> None:
    buckets = [(0.1, 0.0), (0.2, 10.0), (float("inf"), 10.0)]
    assert quantile(buckets, 0.5) == pytest.approx(0.15)
    assert quantile([(0.1, 5.0), (float("inf"), 10.0)], 0.9) is None  # in +Inf: unknown
    assert quantile([], 0.5) is None


def test_engine_counting_fewer_tokens_fails_and_names_side_and_size() -> None:
    before = _snap(0, request_success_total=0, prompt_tokens_total=0, generation_tokens_total=0)
    after = _snap(
        1, request_success_total=50, prompt_tokens_total=1000, generation_tokens_total=880
    )
    rows, findings = reconcile(before, after, _client(50, 1000, 1000), "vllm")
    assert [f["id"] for f in findings] == ["SERVER-COUNT-GENERATION-TOKENS"]
    (f,) = findings
    assert f["severity"] == "fail" and f["side"] == "client"
    assert f["message"].startswith(
        "engine counted 12% fewer generation tokens than the client's usage fields reported"
    )
    held = {r["quantity"]: r.get("held") for r in rows}
    assert held == {
        "requests": True,
        "prompt_tokens": True,
        "generation_tokens": False,
        "cached_tokens": None,
    }


def test_engine_counting_more_is_a_warning_within_tolerance_nothing() -> None:
    before = _snap(0, request_success_total=10, prompt_tokens_total=0, generation_tokens_total=0)
    after = _snap(
        1, request_success_total=112, prompt_tokens_total=2000, generation_tokens_total=2000
    )
    _, findings = reconcile(before, after, _client(100, 2000, 2000), "vllm")
    # 102 vs 100 requests: inside max(2, 2%); tokens equal
    assert findings == []
    after = _snap(
        1, request_success_total=130, prompt_tokens_total=2000, generation_tokens_total=2000
    )
    _, findings = reconcile(before, after, _client(100, 2000, 2000), "vllm")
    assert [(f["id"], f["severity"], f["side"]) for f in findings] == [
        ("SERVER-COUNT-REQUESTS", "warning", "engine")
    ]
    assert "engine counted 20% more completed requests" in findings[0]["message"]


def test_counter_that_went_down_is_not_judged() -> None:
    before = _snap(0, request_success_total=100)
    after = _snap(1, request_success_total=3)
    rows, findings = reconcile(before, after, _client(10, 0, 0), "vllm")
    assert findings == [] and "restarted" in rows[0]["note"]


def test_warnings_keep_a_pass_and_fails_fail() -> None:
    warn = {"findings": [{"severity": "warning", "message": "w"}]}
    fail = {"findings": [{"severity": "fail", "message": "f"}, *warn["findings"]]}
    assert server_truth.verdict_of(warn).status == "pass"
    assert server_truth.verdict_of(warn).reasons == ["warning: server: w"]
    assert server_truth.verdict_of(fail).status == "fail"
    assert server_truth.verdict_of(None).status == "pass"


# ------------------------------------------------------------------ end to end


def _load(server: RunningServer, tmp_path: Path) -> dict:
    targets = _targets(tmp_path, server)
    out = tmp_path / "reports"
    proc = _run(_cmd(targets, out, "--users", "2", "--max-requests", "16"), timeout=120)
    summary = _summary(out)
    assert "server" in summary, proc.stderr[-2000:]
    return summary


@pytest.fixture
def truth_server(make_reference: Callable[..., RunningServer]) -> Callable[..., RunningServer]:
    def start(*faults: str) -> RunningServer:
        return make_reference(*faults, ttft_ms=20, itl_ms=2)

    return start


@pytest.mark.slow
def test_clean_reference_reconciles_and_decomposes(
    truth_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    summary = _load(truth_server(), tmp_path)
    server = summary["server"]
    assert server["available"] is True, server
    rows = {r["quantity"]: r for r in server["reconciliation"]}
    for q in ("requests", "prompt_tokens", "generation_tokens", "cached_tokens"):
        assert rows[q].get("judged") and rows[q]["held"], rows[q]
    assert rows["requests"]["engine"] == rows["requests"]["client"] == 16
    dec = server["decomposition"]
    assert dec["engine"]["ttft_seconds"]["count"] == 16
    # the prefix cache shortens the reference's 20 ms; the client sees it a little later
    assert 0 < dec["engine"]["ttft_seconds"]["mean_ms"] <= dec["client_ttft_ms"]["mean"]
    assert dec["network_gateway_ms"] < server_truth.GAP_MS
    assert server["findings"] == [], server["findings"]
    assert summary["verdict"] == "pass", summary["reasons"]
    (run_dir,) = [p for p in (tmp_path / "reports").iterdir() if p.is_dir()]
    lines = (run_dir / "telemetry" / "prometheus.jsonl").read_text().splitlines()
    metrics = {json.loads(x)["metric"] for x in lines}
    assert {"kv_usage", "generation_tokens_total", "ttft_seconds_count"} <= metrics


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault,finding,severity,verdict",
    [
        pytest.param(
            "metrics-undercount-generation",
            "SERVER-COUNT-GENERATION-TOKENS",
            "fail",
            "fail",
            id="undercount",
        ),
        pytest.param(
            "metrics-no-ttft-histogram", "SERVER-METRIC-MISSING", "warning", "pass", id="no-ttft"
        ),
        pytest.param(
            "gateway-first-byte-delay", "SERVER-TTFT-GAP", "warning", "pass", id="gateway"
        ),
    ],
)
def test_engine_truth_fault_is_named(
    truth_server: Callable[..., RunningServer],
    tmp_path: Path,
    fault: str,
    finding: str,
    severity: str,
    verdict: str,
) -> None:
    summary = _load(truth_server(fault), tmp_path)
    found = [(f["id"], f["severity"]) for f in summary["server"]["findings"]]
    assert found == [(finding, severity)], summary["server"]["findings"]
    assert summary["verdict"] == verdict, summary["reasons"]
    # the finding rides in the run's reasons: a FAIL as "server: ...", a warning marked so
    prefix = "server: " if severity == "fail" else "warning: server: "
    assert any(r.startswith(prefix) for r in summary["reasons"]), summary["reasons"]


def _targets_with(tmp_path: Path, server: RunningServer, *extra: str) -> Path:
    p = tmp_path / "targets.yaml"
    p.write_text(
        "\n".join(
            [
                "targets:",
                "  - name: ref",
                f"    base_url: {server.base_url}",
                "    engine: reference",
                "    timeout_s: 20",
                *extra,
            ]
        )
        + "\n"
    )
    return p


@pytest.mark.slow
def test_no_metrics_is_said_once_and_the_run_goes_on(
    truth_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = truth_server()
    targets = _targets_with(tmp_path, server, "    metrics_url: http://127.0.0.1:9/metrics")
    out = tmp_path / "reports"
    cmd = [c for c in _cmd(targets, out, "--users", "1", "--max-requests", "4") if c != "--quiet"]
    proc = _run(cmd, timeout=120)
    summary = _summary(out)
    assert summary["server"]["available"] is False
    assert summary["server"]["note"].startswith("cannot read http://127.0.0.1:9/metrics")
    assert summary["verdict"] == "pass", summary["reasons"]
    assert proc.stderr.count("server metrics: cannot read") == 1, proc.stderr[-2000:]


@pytest.mark.slow
def test_metrics_url_points_the_reconciliation_upstream(
    truth_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """A gateway-like target (requests to one server, metrics from another): the counts come
    from the metrics_url's server, which served nothing here, so the engine side is short."""
    served, idle = truth_server(), truth_server()
    root = idle.base_url.removesuffix("/v1")
    targets = _targets_with(
        tmp_path,
        served,
        f"    telemetry: {{metrics_url: {root}/metrics}}",
        "    metrics_engine: vllm",
    )
    out = tmp_path / "reports"
    _run(_cmd(targets, out, "--users", "1", "--max-requests", "6"), timeout=120)
    server = _summary(out)["server"]
    assert server["metrics_url"] == f"{root}/metrics" and server["engine"] == "vllm"
    ids = {f["id"] for f in server["findings"] if f["severity"] == "fail"}
    assert "SERVER-COUNT-REQUESTS" in ids, server["findings"]


def test_a_coarse_bucket_gives_a_bound_not_an_invented_percentile() -> None:
    # vLLM's queue histogram starts at 0.3 s: every 0.02 ms wait sits in (0, 0.3]
    coarse = [(0.3, 100.0), (0.5, 100.0), (float("inf"), 100.0)]
    assert server_truth._percentile(coarse, 0.5, "p50") == {"p50_ms": None, "p50_le_ms": 300.0}
    fine = [(0.01, 0.0), (0.02, 100.0), (float("inf"), 100.0)]
    assert server_truth._percentile(fine, 0.5, "p50") == {"p50_ms": 15.0}


def test_the_ttft_gap_is_not_judged_when_the_generator_fell_behind() -> None:
    family = "vllm:time_to_first_token_seconds"
    before = Snapshot(0, {f"{family}_sum": [({}, 0.0)], f"{family}_count": [({}, 0.0)]})
    after = Snapshot(1, {f"{family}_sum": [({}, 1.0)], f"{family}_count": [({}, 100.0)]})
    client = ClientCounts.of(_ok_record(0.2) for _ in range(100))  # 200 ms vs the engine's 10 ms
    _, found = server_truth.decompose(before, after, client, "vllm")
    assert "SERVER-TTFT-GAP" in {f["id"] for f in found}
    out, found = server_truth.decompose(before, after, client, "vllm", behind=True)
    assert "SERVER-TTFT-GAP" not in {f["id"] for f in found} and "behind" in out["note"]


def _ok_record(ttft: float) -> dict[str, object]:
    return {"ttft": ttft, "prompt_tokens": 10, "output_tokens": 5}
