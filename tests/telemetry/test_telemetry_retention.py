"""A kv_usage plateau after every drain: retention only where a prefix cache may hold it; a
sampled series that could not be judged makes the soak inconclusive; sample counts at each
sampler's real interval."""

from __future__ import annotations

import pandas as pd
import pytest

from servecheck.analysis.verdict import INCONCLUSIVE, compose
from servecheck.config.model import Target
from servecheck.errors import SpecError
from servecheck.load.soak import SoakPlan, leak_verdicts
from servecheck.telemetry import TelemetryRecorder, analyse_leak
from servecheck.telemetry.leak import prefix_cache_evidence
from servecheck.telemetry.windows import check_soak_windows


def _counter(frame: pd.DataFrame, metric: str, value: float) -> pd.DataFrame:
    rows = frame[["t", "t_mono"]].drop_duplicates()
    rows = rows.assign(source="prometheus", kind="sample", metric=metric, value=value)
    rows["labels"] = [{} for _ in range(len(rows))]
    return pd.concat([frame, rows], ignore_index=True)


def _plateau(make_soak) -> tuple[pd.DataFrame, object]:
    # 0.26 after the first drain, then 0.45 and flat: what kv-leak did on a target without cache.
    return make_soak(lambda i: 0.26 if i == 0 else 0.45)


@pytest.mark.parametrize(
    ("declared", "counter", "why"),
    [
        pytest.param(False, None, "the target declares no prefix cache", id="declared-none"),
        pytest.param("auto", None, "the target reports no prefix cache", id="no-counters"),
        pytest.param("auto", 0.0, "the target's prefix-cache counters stayed 0", id="zero"),
        pytest.param(False, 500.0, "the target declares no prefix cache", id="declared-wins"),
    ],
)
def test_plateau_without_a_prefix_cache_is_a_leak(make_soak, declared, counter, why) -> None:
    frame, phases = _plateau(make_soak)
    if counter is not None:
        frame = _counter(frame, "prefix_cache_queries_total", counter)
    verdict = analyse_leak(frame, phases, prefix_cache=prefix_cache_evidence(frame, declared))
    assert verdict.status == "leak", verdict.message
    assert verdict.message.startswith("LEAK: kv_usage stayed at 0.450 after drain")
    assert f"{why}" in verdict.message and "nothing should keep it" in verdict.message


@pytest.mark.parametrize(
    ("declared", "counter", "why"),
    [
        pytest.param(True, None, "the target declares a prefix cache", id="declared"),
        pytest.param("auto", 900.0, "the target's prefix cache was used (900", id="seen"),
    ],
)
def test_plateau_with_a_prefix_cache_is_retention(make_soak, declared, counter, why) -> None:
    frame, phases = _plateau(make_soak)
    if counter is not None:
        frame = _counter(frame, "prefix_cache_hits_total", counter)
    verdict = analyse_leak(frame, phases, prefix_cache=prefix_cache_evidence(frame, declared))
    assert verdict.status == "retention", verdict.message
    assert f"retention: {why}" in verdict.message


def _plan(**kw: float) -> SoakPlan:
    base = {"cycles": 6, "cycle_s": 10, "idle_s": 10, "baseline_s": 10, "settle_s": 5}
    return SoakPlan(model="m", concurrency=1, interval_s=0.5, **{**base, **kw})  # type: ignore[arg-type]


def test_a_sampled_series_without_a_verdict_makes_the_soak_inconclusive(make_soak) -> None:
    kv, phases = make_soak(lambda i: 0.0)
    # RSS at its one-second floor in 5 s drain windows sampled every 0.5 s would be fine; here
    # it has two samples per drain window: insufficient data.
    rss, _ = make_soak(lambda i: 0.0, metric="rss_tree_bytes", dt=5.0)
    frame = pd.concat([kv, rss], ignore_index=True)
    verdicts, primary, stages = leak_verdicts(frame, phases, _plan(), None)
    assert verdicts["kv_usage"].status == "ok", verdicts["kv_usage"].message
    assert verdicts["rss_tree_bytes"].status == "insufficient_data"
    assert compose(stages).status == INCONCLUSIVE
    reasons = [r for v in stages for r in v.reasons]
    assert [r for r in reasons if r.startswith("rss_tree_bytes")] == [
        "rss_tree_bytes: inconclusive: insufficient data, no verdict "
        "(0 usable cycle(s) of 6 (need 5 for a trend test): cycle 1: 2 sample(s) in its drain "
        "window; cycle 2: 2 sample(s) in its drain window; cycle 3: 2 sample(s) in its drain "
        "window ...)"
    ]


def _target(**telemetry: object) -> Target:
    return Target(name="t", base_url="http://127.0.0.1:8000/v1", engine="vllm", telemetry=telemetry)


def test_recorder_reports_each_samplers_real_interval() -> None:
    target = _target(nvml=False)
    assert TelemetryRecorder.intervals_for(target, target.telemetry.as_settings()) == {
        "prometheus": 0.5
    }
    got = TelemetryRecorder.intervals_for(target, {}, interval_s=0.1, port=8000, nvml=True)
    assert got == {"prometheus": 0.1, "nvml": 1.0, "rss": 1.0}


@pytest.mark.parametrize(
    ("plan", "overrides", "message"),
    [
        pytest.param(
            {"idle_s": 4, "settle_s": 2},
            {"interval_s": 0.5, "port": 8000},
            "--idle 4s with --settle 2s leaves 2s to measure each drain: fewer than 3 samples of "
            "engine RSS (rss_tree_bytes), sampled every 1s (never faster than 1s, whatever "
            "--interval); lengthen --idle, or leave RSS out with --no-rss",
            id="drain-window-rss",
        ),
        pytest.param(
            {"baseline_s": 2},
            {"interval_s": 0.5, "pid": 42},
            "--baseline 2s: fewer than 3 samples of engine RSS (rss_tree_bytes), sampled every 1s "
            "(never faster than 1s, whatever --interval); lengthen --baseline, or leave RSS out "
            "with --no-rss",
            id="baseline-rss",
        ),
    ],
)
def test_plan_check_counts_samples_at_each_samplers_real_interval(plan, overrides, message):
    with pytest.raises(SpecError) as info:
        check_soak_windows(_plan(**plan), _target(nvml=False), overrides)
    # The library names plan fields; `servecheck soak` shows them as its options.
    assert info.value.render(_soak_options()) == message


def _soak_options() -> dict[str, str]:
    import argparse

    from servecheck.cli import field_options
    from servecheck.commands import soak

    parser = argparse.ArgumentParser()
    soak.add_arguments(parser)
    return field_options(parser, getattr(soak, "FIELD_OPTIONS", {}))


def test_plan_check_passes_without_rss_and_ignores_unjudged_samplers() -> None:
    # NVML and DCGM are slow too, but plotted, not judged: they do not lengthen the plan.
    plan = _plan(idle_s=4, settle_s=2, baseline_s=2)
    check_soak_windows(plan, _target(dcgm_url="http://127.0.0.1:9400/metrics"), {"port": None})


def test_rss_that_rises_and_flattens_makes_the_soak_inconclusive(make_soak) -> None:
    kv, phases = make_soak(lambda i: 0.0)
    levels = [0.0, 50 * 2**20, 60 * 2**20, 61 * 2**20, 61.5 * 2**20, 61.6 * 2**20]
    rss, _ = make_soak(lambda i: levels[i], metric="rss_tree_bytes", baseline=2**30, peak=0.0)
    frame = pd.concat([kv, rss], ignore_index=True)
    verdicts, _, stages = leak_verdicts(frame, phases, _plan(), None)
    assert verdicts["rss_tree_bytes"].status == "growth", verdicts["rss_tree_bytes"].message
    verdict = compose(stages)
    assert verdict.status == INCONCLUSIVE, verdict
    assert any("rss_tree_bytes: inconclusive: rose significantly" in r for r in verdict.reasons)


def test_rss_that_keeps_rising_below_the_tolerance_fails_the_soak(make_soak) -> None:
    kv, phases = make_soak(lambda i: 0.0)
    rss, _ = make_soak(lambda i: 18 * 2**20 * i, metric="rss_tree_bytes", baseline=2**30, peak=0.0)
    frame = pd.concat([kv, rss], ignore_index=True)
    verdicts, _, stages = leak_verdicts(frame, phases, _plan(rss_tolerance=256 * 2**20), None)
    assert verdicts["rss_tree_bytes"].status == "leak", verdicts["rss_tree_bytes"].message
    assert compose(stages).status == "fail"
