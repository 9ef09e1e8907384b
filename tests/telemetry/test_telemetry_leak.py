"""Leak analysis and drain check on synthetic series."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from servecheck.telemetry import Cycle, Phases, analyse_leak, check_drain
from servecheck.telemetry.leak import inconclusive_reason


@pytest.mark.parametrize(
    ("per_cycle", "noise"),
    [
        pytest.param(0.05, 0.0, id="fast-clean"),
        pytest.param(0.05, 0.01, id="fast-noisy"),
        pytest.param(0.008, 0.003, id="slow-climb"),
    ],
)
def test_growing_post_drain_level_is_a_leak(make_soak, per_cycle, noise):
    frame, phases = make_soak(lambda i: per_cycle * (i + 1), noise=noise, seed=3)
    verdict = analyse_leak(frame, phases, "kv_usage", tolerance=0.02)
    assert verdict.status == "leak", verdict.message
    assert verdict.message.startswith("LEAK: kv_usage post-drain level rose ")
    assert verdict.mk_p is not None and verdict.mk_p < 0.05
    assert verdict.slope_ci is not None and verdict.slope_ci[0] > 0
    assert verdict.slope == pytest.approx(per_cycle, rel=0.3)


def test_leak_message_is_pinned(make_soak):
    frame, phases = make_soak(lambda i: 0.05 * i)
    verdict = analyse_leak(frame, phases)
    assert verdict.message == (
        "LEAK: kv_usage post-drain level rose 0.000 -> 0.250 over 6 cycles (baseline 0.000; "
        "Theil-Sen slope 0.050/cycle, 95% CI [0.050, 0.050]; Mann-Kendall p=0.00139)"
    )


def test_clean_series_returns_to_baseline(make_soak):
    frame, phases = make_soak(lambda i: 0.0)
    verdict = analyse_leak(frame, phases)
    assert verdict.status == "ok", verdict.message
    assert verdict.passed
    assert verdict.message == (
        "kv_usage returned to baseline 0.000 within tolerance 0.020 after drain 10 s in 6/6 "
        "cycles (max post-drain 0.000; Theil-Sen slope 0.000/cycle, 95% CI [0.000, 0.000]; "
        "Mann-Kendall p=1)"
    )
    assert verdict.peaks == pytest.approx([0.6] * 6)
    json.dumps(verdict.to_dict())  # summary.json-ready


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed-{s}") for s in range(12)])
def test_noisy_but_flat_is_not_a_leak(make_soak, seed):
    frame, phases = make_soak(lambda i: 0.0, noise=0.01, baseline=0.05, seed=seed)
    verdict = analyse_leak(frame, phases, tolerance=0.02)
    assert verdict.status == "ok", verdict.message


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed-{s}") for s in range(12)])
def test_per_cycle_jitter_below_tolerance_is_not_a_leak(make_soak, seed):
    rng = np.random.default_rng(100 + seed)
    jitter = rng.uniform(0.0, 0.015, size=6)
    frame, phases = make_soak(lambda i: float(jitter[i]), noise=0.003, seed=seed)
    verdict = analyse_leak(frame, phases, tolerance=0.02)
    assert verdict.status == "ok", verdict.message


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed-{s}") for s in range(6)])
def test_prefix_cache_plateau_is_retention(make_soak, seed):
    # The first cycle fills the prefix cache; later identical cycles reuse it: flat at 0.3.
    frame, phases = make_soak(lambda i: 0.3, noise=0.01, seed=seed)
    verdict = analyse_leak(frame, phases)
    assert verdict.status == "retention", verdict.message
    assert "possible retention (prefix cache?), not a growing leak" in verdict.message
    assert not verdict.passed


def test_plateau_reached_after_first_cycle_is_retention(make_soak):
    frame, phases = make_soak(lambda i: 0.1 if i == 0 else 0.3, noise=0.005)
    assert analyse_leak(frame, phases).status == "retention"


def test_plateau_that_keeps_growing_is_a_leak(make_soak):
    frame, phases = make_soak(lambda i: 0.3 + 0.04 * i, noise=0.005)
    assert analyse_leak(frame, phases).status == "leak"


def test_leak_that_saturated_early_is_still_a_leak(make_soak):
    # Seen on the reference server's kv-leak fault with a small cache: full after cycle 1.
    frame, phases = make_soak(lambda i: 0.47 if i == 0 else 1.0, peak=0.0)
    verdict = analyse_leak(frame, phases)
    assert verdict.status == "leak", verdict.message
    assert verdict.message == (
        "LEAK: kv_usage stays saturated at 1.000 after drain in 5/6 cycles (baseline 0.000, "
        "ceiling 1.000): full with no load; levels 0.470, 1.000, 1.000, 1.000, 1.000, 1.000"
    )


def test_ceiling_applies_to_other_metrics_only_when_given(make_soak):
    frame, phases = make_soak(lambda i: 100.0, peak=0.0, metric="requests_running")
    assert analyse_leak(frame, phases, "requests_running", tolerance=1).status == "retention"
    assert (
        analyse_leak(frame, phases, "requests_running", tolerance=1, ceiling=100).status == "leak"
    )


def test_load_that_never_moved_the_metric_is_inconclusive(make_soak):
    frame, phases = make_soak(lambda i: 0.0, peak=0.01)
    verdict = analyse_leak(frame, phases)
    assert verdict.status == "inconclusive" and not verdict.passed
    assert verdict.message.startswith(
        "INCONCLUSIVE: load never moved kv_usage beyond tolerance 0.020 (baseline 0.000, "
        "highest peak 0.010), so a leak could not show"
    ), verdict.message


def test_too_few_cycles_is_insufficient_data(make_soak):
    frame, phases = make_soak(lambda i: 0.1 * i, cycles=3)
    verdict = analyse_leak(frame, phases)
    assert verdict.status == "insufficient_data"
    assert verdict.message == (
        "INSUFFICIENT DATA: kv_usage: 3 usable cycle(s) of 3 (need 5 for a trend test)"
    )


def test_no_baseline_is_insufficient_data(make_soak):
    frame, phases = make_soak(lambda i: 0.0)
    late = Phases((phases.baseline[0] - 100, phases.baseline[0] - 50), phases.cycles)
    verdict = analyse_leak(frame, late)
    assert verdict.status == "insufficient_data"
    assert "0 sample(s) in the baseline window" in verdict.message


def test_gaps_in_drain_windows_make_cycles_unusable(make_soak):
    frame, phases = make_soak(lambda i: 0.05 * i)
    # The scrape failed through the drains of cycles 2-4: gap records instead of samples.
    lost = pd.Series(False, index=frame.index)
    for cycle in phases.cycles[1:4]:
        lost |= (frame["t"] >= cycle.measure_start) & (frame["t"] <= cycle.drain_end)
    frame.loc[lost, ["kind", "metric", "value", "error_class"]] = [
        "gap",
        "gap",
        np.nan,
        "ConnectError",
    ]
    verdict = analyse_leak(frame, phases)
    assert verdict.status == "insufficient_data", verdict.message
    assert verdict.cycles_used == 3
    assert verdict.gaps == int(lost.sum())
    assert "cycle 2: 0 sample(s) in its drain window" in verdict.message


def test_other_metrics_and_sources_are_ignored(make_soak):
    frame, phases = make_soak(lambda i: 0.05 * i)
    other, _ = make_soak(lambda i: 0.0, metric="requests_running")
    both = pd.concat([frame, other], ignore_index=True)
    assert analyse_leak(both, phases, "kv_usage").status == "leak"
    assert analyse_leak(both, phases, "requests_running", tolerance=0.5).status == "ok"


def test_vram_leak_in_bytes_summed_over_gpus(make_soak):
    gib = 2**30
    gpu0, phases = make_soak(
        lambda i: 0.25 * gib * i, baseline=40 * gib, peak=gib, metric="gpu_mem_used_bytes"
    )
    gpu1, _ = make_soak(lambda i: 0.0, baseline=40 * gib, peak=gib, metric="gpu_mem_used_bytes")
    gpu0["labels"] = [{"gpu": "0"} for _ in range(len(gpu0))]
    gpu1["labels"] = [{"gpu": "1"} for _ in range(len(gpu1))]
    frame = pd.concat([gpu0, gpu1], ignore_index=True)
    verdict = analyse_leak(frame, phases, "gpu_mem_used_bytes", tolerance=256 * 2**20)
    assert verdict.status == "leak", verdict.message
    assert "rose 81920.0 MiB -> 83200.0 MiB" in verdict.message
    only_gpu1 = analyse_leak(
        frame, phases, "gpu_mem_used_bytes", tolerance=256 * 2**20, labels={"gpu": "1"}
    )
    assert only_gpu1.status == "ok", only_gpu1.message


def test_phases_round_trip_and_schedule():
    phases = Phases.from_schedule(100.0, baseline_s=5, load_s=10, drain_s=4, cycles=2, settle_s=1)
    assert phases.baseline == (100.0, 105.0)
    assert phases.cycles == [Cycle(105.0, 115.0, 119.0, 116.0), Cycle(119.0, 129.0, 133.0, 130.0)]
    assert Phases.from_dict(json.loads(json.dumps(phases.to_dict()))) == phases
    with pytest.raises(ValueError, match="settle_s"):
        Phases.from_schedule(0.0, baseline_s=1, load_s=1, drain_s=2, cycles=1, settle_s=2)


# -- drain check ---------------------------------------------------------------------------


def _probe_frame(
    running: list[float], kv: list[float] | None, since: float = 1000.0, dt: float = 0.1
) -> pd.DataFrame:
    rows = []
    for i, value in enumerate(running):
        rows.append(
            {
                "t": since + i * dt,
                "kind": "sample",
                "source": "prometheus",
                "metric": "requests_running",
                "value": value,
                "labels": {},
            }
        )
    for i, value in enumerate(kv or []):
        rows.append(
            {
                "t": since + i * dt,
                "kind": "sample",
                "source": "prometheus",
                "metric": "kv_usage",
                "value": value,
                "labels": {},
            }
        )
    return pd.DataFrame(rows)


def test_drain_ok_reports_the_time_it_took():
    frame = _probe_frame(
        [12, 12, 3, 0, 0, 0, 0, 0, 0, 0, 0], [0.57, 0.57, 0.3, 0.1, 0.01, 0, 0, 0, 0, 0, 0]
    )
    verdict = check_drain(frame, since=1000.0, bound_s=1.0, baseline=0.0)
    assert verdict.status == "ok", verdict.message
    assert verdict.running_zero_after_s == pytest.approx(0.3)
    assert verdict.kv_baseline_after_s == pytest.approx(0.4)
    assert verdict.drained_after_s == pytest.approx(0.4)
    assert verdict.message == (
        "drained 0.40 s after the probe (bound 1 s): requests_running 0 after 0.30 s, "
        "kv_usage at baseline 0.000 +/- 0.02 after 0.40 s"
    )


def test_drain_stuck_kv_is_not_drained():
    frame = _probe_frame([12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [0.57] + [0.31] * 10)
    verdict = check_drain(frame, since=1000.0, bound_s=1.0, baseline=0.0)
    assert verdict.status == "not_drained"
    assert verdict.message == (
        "NOT DRAINED within 1 s after the probe: last requests_running=0, "
        "kv_usage=0.310 (baseline 0.000 +/- 0.02)"
    )


def test_drain_running_that_comes_back_counts_from_the_last_return():
    frame = _probe_frame([5, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0], None)
    verdict = check_drain(frame, since=1000.0, bound_s=1.0)
    assert verdict.status == "ok"
    assert verdict.running_zero_after_s == pytest.approx(0.4)
    assert "kv_usage not exported, judged on requests_running alone" in verdict.message


def test_drain_baseline_from_window():
    frame = _probe_frame([0] * 11, [0.2] * 11)
    early = _probe_frame([0] * 5, [0.19] * 5, since=900.0)
    verdict = check_drain(
        pd.concat([early, frame]), since=1000.0, bound_s=1.0, baseline_window=(900.0, 901.0)
    )
    assert verdict.status == "ok", verdict.message
    assert verdict.baseline == pytest.approx(0.19)


@pytest.mark.parametrize(
    ("running", "expected"),
    [
        pytest.param(
            [],
            "INSUFFICIENT DATA: no requests_running samples in the 5 s after the probe",
            id="no-samples",
        ),
        pytest.param(
            [4, 4, 4],
            "INSUFFICIENT DATA: telemetry ends 0.20 s after the probe, before the 5 s bound, "
            "not yet drained: requests_running=4; kv_usage not exported, judged on requests_running alone",
            id="ends-early",
        ),
    ],
)
def test_drain_insufficient_data(running, expected):
    frame = _probe_frame(running, None) if running else _probe_frame([1], None, since=0.0)
    verdict = check_drain(frame, since=1000.0, bound_s=5.0)
    assert verdict.status == "insufficient_data"
    assert verdict.message == expected


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        pytest.param(16, "not_drained", id="telemetry-goes-on-past-the-bound"),
        pytest.param(8, "insufficient_data", id="telemetry-stops-inside-the-bound"),
    ],
)
def test_drain_coverage_counts_samples_after_the_window(samples: int, expected: str) -> None:
    """A sample a second, the first 0.09 s after the load: the last one inside an 8 s window is
    at 7.09 s, below 90 % of the bound. Samples after the window show it was covered (a stuck
    engine is NOT DRAINED, not INSUFFICIENT DATA); without them it cannot be told."""
    since = 1000.0
    frame = _probe_frame([9] * samples, [0.3] * samples, since=since + 0.09, dt=1.0)
    verdict = check_drain(frame, since=since, bound_s=8.0, baseline=0.0)
    assert verdict.status == expected, verdict.message


MIB = 2**20


def test_sustained_rise_below_a_fixed_tolerance_is_still_a_leak(make_soak):
    """Issue 42's vLLM soak: +88 MiB over 5 cycles, Mann-Kendall p=0.008, against a 256 MiB
    tolerance; judged INCONCLUSIVE ("load never moved it") and the soak passed."""
    frame, phases = make_soak(
        lambda i: 22 * MIB * i,
        cycles=5,
        metric="rss_tree_bytes",
        baseline=1.5 * 2**30,
        peak=40 * MIB,
        noise=MIB,
        seed=1,
    )
    verdict = analyse_leak(frame, phases, "rss_tree_bytes", tolerance=256 * MIB)
    assert verdict.status == "leak", verdict.message
    assert "kept rising to the last cycle, a significant sustained rise" in verdict.message
    assert "below the tolerance 256.0 MiB" in verdict.message, verdict.message
    assert verdict.floor is not None and verdict.floor < 88 * MIB


def test_a_rise_that_flattens_is_growth_not_a_pass(make_soak):
    levels = [0.0, 50 * MIB, 60 * MIB, 61 * MIB, 61.5 * MIB]
    frame, phases = make_soak(
        lambda i: levels[i], cycles=5, metric="rss_tree_bytes", baseline=1.5 * 2**30, peak=0.0
    )
    verdict = analyse_leak(frame, phases, "rss_tree_bytes", tolerance=256 * MIB)
    assert verdict.status == "growth", verdict.message
    assert verdict.message.startswith("GROWTH: rss_tree_bytes post-drain level rose ")
    assert "flattened in the later cycles" in verdict.message
    assert not verdict.passed


def test_a_significant_trend_within_the_noise_floor_passes(make_soak):
    # 0.0008 a cycle: a perfect order (p small) but 0.004 in all, under kv's 0.005 floor.
    frame, phases = make_soak(lambda i: 0.0008 * i)
    verdict = analyse_leak(frame, phases, tolerance=0.02)
    assert verdict.status == "ok", verdict.message
    assert "upward trend below the noise floor 0.005" in verdict.message


def test_rss_tolerance_scales_with_the_baseline_when_none_is_given(make_soak):
    frame, phases = make_soak(
        lambda i: 0.0, cycles=5, metric="rss_tree_bytes", baseline=2 * 2**30, peak=200 * MIB
    )
    verdict = analyse_leak(frame, phases, "rss_tree_bytes", tolerance=None)
    assert verdict.status == "ok", verdict.message
    assert verdict.tolerance_auto
    assert verdict.tolerance == pytest.approx(0.05 * 2 * 2**30)
    small, phases = make_soak(
        lambda i: 0.0, cycles=5, metric="rss_tree_bytes", baseline=80 * MIB, peak=60 * MIB
    )
    assert analyse_leak(small, phases, "rss_tree_bytes", tolerance=None).tolerance == 32 * MIB


def _spiky(frame: pd.DataFrame, phases: Phases, keep: int) -> pd.DataFrame:
    """``frame`` with the load shown in only the first ``keep`` samples of each cycle's load
    window: the rest read the idle level, as vLLM's gauges did in issue 42's soak."""
    frame = frame.copy()
    for cycle in phases.cycles:
        inside = frame.index[(frame["t"] >= cycle.start) & (frame["t"] <= cycle.end)]
        frame.loc[inside[keep:], "value"] = 0.0
    return frame


@pytest.mark.parametrize("metric", ["kv_usage", "requests_running"])
def test_an_engine_gauge_that_shows_the_load_in_a_few_spikes_is_inconclusive(make_soak, metric):
    """Issue 42 item 10: 4 streams through every load window, yet vLLM's running and KV gauges
    sat at 0 with a few one-sample spikes, and the soak judged them ok on those spikes."""
    frame, phases = make_soak(lambda i: 0.0, cycles=5, metric=metric, peak=4.0)
    verdict = analyse_leak(_spiky(frame, phases, keep=1), phases, metric, tolerance=0.02)
    assert verdict.status == "inconclusive" and not verdict.passed, verdict.message
    assert (verdict.load_samples, verdict.moved_samples, verdict.cycles_moved) == (105, 5, 5)
    assert verdict.message.startswith(
        f"INCONCLUSIVE: the engine's {metric} gauge moved beyond tolerance 0.020 in only 5 of "
        "105 samples under load (5%, in 5 of 5 cycles; need 10% and half the cycles): the "
        "engine sets it after each step and most samples found its batch empty"
    ), verdict.message


def test_an_engine_gauge_that_shows_the_load_in_half_its_samples_is_judged(make_soak):
    """The soak measured on vLLM CPU on 2026-12-06: 53 of 112 samples under load moved."""
    frame, phases = make_soak(lambda i: 0.0, cycles=5, peak=0.19)
    verdict = analyse_leak(_spiky(frame, phases, keep=10), phases, tolerance=0.02)
    assert verdict.status == "ok", verdict.message
    assert (verdict.load_samples, verdict.moved_samples) == (105, 50)


def test_a_process_series_is_not_held_to_the_gauges_coverage(make_soak):
    """RSS is our own sample of the process, not an engine gauge: one peak still shows load."""
    frame, phases = make_soak(lambda i: 0.0, cycles=5, metric="rss_tree_bytes", peak=64 * MIB)
    verdict = analyse_leak(_spiky(frame, phases, keep=1), phases, "rss_tree_bytes", 32 * MIB)
    assert verdict.status == "ok", verdict.message


def test_the_soak_names_a_coarse_gauge_in_its_reason(make_soak):
    frame, phases = make_soak(lambda i: 0.0, cycles=5, peak=0.19)
    verdict = analyse_leak(_spiky(frame, phases, keep=1), phases, tolerance=0.02)
    assert inconclusive_reason(verdict) == (
        "the engine's gauge showed the load in only 5 of 105 samples, too coarse for a verdict"
    )


# Post-drain RSS of a 24-cycle soak on vLLM CPU 0.32 (2026-12-06, 20 s load / 10 s idle, 4
# streams, 2125 requests): the worker process grew fast, then slower, then nearly flat.
VLLM_24 = [
    1831075840, 1846677504, 1864572928, 1872470016, 1876803584, 1891844096, 1903230976,
    1910915072, 1921310720, 1929166848, 1939390464, 1943932928, 1949024256, 1956003840,
    1971163136, 1975066624, 1983102976, 1983451136, 1983483904, 1983500288, 1987960832,
    1991524352, 1991548928, 1991569408,
]  # fmt: skip


def _vllm_24(make_soak, cycles, tolerance):
    """The RSS verdict on the first ``cycles`` cycles of :data:`VLLM_24` (idle at 1719.3 MiB)."""
    frame, phases = make_soak(
        lambda i: VLLM_24[i] - 1719.3 * MIB,
        cycles=cycles,
        metric="rss_tree_bytes",
        baseline=1719.3 * MIB,
        peak=0.0,
    )
    return analyse_leak(frame, phases, "rss_tree_bytes", tolerance=tolerance)


def test_a_rise_beyond_the_tolerance_that_flattened_over_many_cycles_is_growth(make_soak):
    """The measured vLLM series rose 167 MiB (beyond its 90 MiB tolerance) but its later half
    rose at under half the run's slope: a warm-up, judged GROWTH (not a pass), not LEAK."""
    verdict = _vllm_24(make_soak, cycles=24, tolerance=90 * MIB)
    assert verdict.status == "growth", verdict.message
    assert "beyond the tolerance 90.0 MiB" in verdict.message
    assert not verdict.passed


@pytest.mark.parametrize("cycles", [5, 24])
def test_a_rise_beyond_the_tolerance_that_keeps_going_is_a_leak(make_soak, cycles):
    frame, phases = make_soak(
        lambda i: 10 * MIB * i,
        cycles=cycles,
        metric="rss_tree_bytes",
        baseline=1.5 * 2**30,
        peak=0.0,
        noise=MIB,
        seed=2,
    )
    verdict = analyse_leak(frame, phases, "rss_tree_bytes", tolerance=32 * MIB)
    assert verdict.status == "leak", verdict.message


def test_few_cycles_cannot_call_a_large_rise_a_warm_up(make_soak):
    """Under SETTLE_MIN_CYCLES the later half is too short to judge: the first 6 cycles of the
    vLLM series (+60 MiB beyond a 32 MiB tolerance) stay a leak."""
    verdict = _vllm_24(make_soak, cycles=6, tolerance=32 * MIB)
    assert verdict.status == "leak", verdict.message
