"""``servecheck cutover --swap ACTION``: servecheck swaps a LoRA adapter itself under the probe,
and the swap SLOs judge what the probe saw. Each verdict is shown to catch its defect on a
reference-server fault (``lora-swap-fails``: requests fail right after the swap;
``lora-swap-stalls``: they wait a second) and to hold on the clean server. No timing is asserted
beyond what the faults make unmistakable (a 1 s stall against a 500 ms bound)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.analysis.slo import parse_slos
from servecheck.cli import main
from servecheck.errors import UsageError
from servecheck.load.workload.mix import WeightedCycle
from servecheck.probes.swap import SwapAction, parse_swap, swap_impact, swap_verdicts
from servecheck.records.record import RequestRecord, http_error
from servecheck.reference.inprocess import RunningServer
from tests.report.conftest import write_targets

SLOS = ["swap_failed_requests<=0", "swap_ttft_spike<=500ms"]


def _cutover(tmp_path: Path, server: RunningServer, *extra: str) -> tuple[int, dict]:
    targets = write_targets(tmp_path / "targets.yaml", ref=(server.base_url, ["ref-tiny"]))
    argv = ["cutover", "--via", "ref", "--swap", f"lora-load:ref-lora={tmp_path}"]
    argv += ["--swap-at", "1.5s", "--duration", "4s", "--rate", "10/s"]
    argv += ["--targets-file", str(targets), "--out", str(tmp_path), "--run-id", "own"]
    for slo in SLOS:
        argv += ["--swap-slo", slo]
    code = main([*argv, *extra])
    return code, json.loads((tmp_path / "own" / "cutover.json").read_text())


@pytest.mark.parametrize(
    "fault,failing",
    [
        pytest.param(None, set(), id="clean"),
        pytest.param("lora-swap-fails", {"swap_failed_requests<=0"}, id="lora-swap-fails"),
        pytest.param("lora-swap-stalls", {"swap_ttft_spike<=500ms"}, id="lora-swap-stalls"),
    ],
)
def test_each_swap_verdict_catches_its_fault(
    tmp_path: Path,
    make_reference: Callable[..., RunningServer],
    fault: str | None,
    failing: set[str],
) -> None:
    server = make_reference(*([fault] if fault else []), lora=True, ttft_ms=5.0)
    code, data = _cutover(tmp_path, server)
    part = data["parts"]["swap_impact"]
    assert part["outcome"]["ok"], part["outcome"]  # the load itself was done
    failed = {v["slo"] for v in part["slos"] if not v["passed"]}
    assert failed == failing, part
    assert code == (1 if failing else 0), data["reasons"]
    if fault == "lora-swap-fails":
        assert part["failed"] >= 3 and part["failed"] == part["failed_after_swap"], part
        # a second of 503s cannot be settled before it is over (None: a busy machine's last
        # second was slow too; the time to settle is not asserted further)
        assert part["settle_s"] is None or part["settle_s"] >= 0.9, part
    if fault == "lora-swap-stalls":
        assert part["ttft_spike_ms"] > 500, part
        page = (tmp_path / "own" / "report.html").read_text()
        assert "TTFT p95 per second after the swap" in page and page.count("<svg") == 2
    if fault is None:
        assert part["failed"] == 0 and part["failed_after_swap"] == 0, part


def test_probe_splits_traffic_by_weight_and_records_the_model(
    tmp_path: Path, make_reference: Callable[..., RunningServer]
) -> None:
    server = make_reference(lora=True)
    targets = write_targets(tmp_path / "targets.yaml", ref=(server.base_url, ["ref-tiny"]))
    code = main(
        ["cutover", "--via", "ref", "--swap", "lora-unload:never-loaded", "--swap-at", "1s"]
        + ["--duration", "3s", "--rate", "20/s", "--probe-model", "ref-tiny=3"]
        + ["--probe-model", "other=1", "--targets-file", str(targets)]
        + ["--out", str(tmp_path), "--run-id", "mix"]
    )
    data = json.loads((tmp_path / "mix" / "cutover.json").read_text())
    part = data["parts"]["swap_impact"]
    by_model = part["by_model"]
    # 'other' is not served: every request to it fails, none to the base does; the weights
    # split the requests 3:1, to within one request (smooth weighted round robin).
    assert by_model["ref-tiny"]["failed"] == 0 and by_model["other"]["failed"] > 0, by_model
    assert by_model["other"]["requests"] == by_model["other"]["failed"]
    total = by_model["ref-tiny"]["requests"] + by_model["other"]["requests"]
    assert abs(by_model["other"]["requests"] - total / 4) <= 1, by_model
    # Unloading an adapter that was never loaded is a 404: the swap failed, so the cutover does.
    assert not part["outcome"]["ok"] and "404" in part["outcome"]["detail"], part
    assert code == 1 and any(
        r.startswith("swap_impact: lora-unload:never-loaded FAILED") for r in data["reasons"]
    ), data["reasons"]


def test_weighted_cycle_keeps_every_window_to_its_shares() -> None:
    cycle = WeightedCycle([("a", 3.0), ("b", 1.0)])
    picks = [cycle.next() for _ in range(40)]
    assert picks.count("b") == 10
    assert all(picks[i : i + 4].count("b") == 1 for i in range(0, 40, 4))


def test_swap_ttft_spike_without_ttft_is_not_a_pass() -> None:
    records = [
        RequestRecord(
            "alias",
            "swap-probe",
            "probe",
            i,
            t,
            t,
            t_done=t + 0.1,
            status=500,
            error=http_error(500),
        )
        for i, t in enumerate((0.0, 1.0, 2.0))
    ]
    impact = swap_impact(records, 1.0)
    (failed, spike) = swap_verdicts(parse_slos(SLOS), impact)
    assert not failed.passed and failed.observed == 3
    assert not spike.passed and spike.observed is None and "no streamed answer" in spike.note


@pytest.mark.parametrize(
    "text,expected",
    [
        pytest.param("lora-load:a=/p", SwapAction("lora-load", "a", "/p"), id="load"),
        pytest.param("lora-unload:a", SwapAction("lora-unload", "a"), id="unload"),
        pytest.param(
            "xinference-relaunch:m", SwapAction("xinference-relaunch", "m"), id="relaunch"
        ),
    ],
)
def test_parse_swap(text: str, expected: SwapAction) -> None:
    assert parse_swap(text) == expected


@pytest.mark.parametrize(
    "text,message",
    [
        pytest.param("lora-lod:a=/p", 'did you mean "lora-load"', id="typo"),
        pytest.param("lora-load:a", "lora-load needs NAME=PATH", id="no-path"),
        pytest.param("lora-unload:a=/p", "takes a name only", id="unload-path"),
    ],
)
def test_parse_swap_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_swap(text)


@pytest.mark.parametrize(
    "argv,message",
    [
        pytest.param(["--swap-slo", "ttft_p95<=1s"], "not a swap SLO", id="not-swap-slo"),
        pytest.param(
            ["--swap-slo", "swap_failed_requests<=0", "--swap-under-load"],
            "need --swap",
            id="slo-without-swap",
        ),
        pytest.param(
            ["--swap", "lora-unload:a", "--swap-at", "90s"], "inside the probe", id="swap-after-end"
        ),
        pytest.param(
            ["--swap", "lora-unload:a", "--probe-model", "a=0"], "weight > 0", id="zero-weight"
        ),
    ],
)
def test_swap_usage_errors_come_before_traffic(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["cutover", "--via", "reference", "--duration", "60s", *argv])
    assert code == 2
    assert message in capsys.readouterr().err
