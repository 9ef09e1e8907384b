"""Phased load profiles (servecheck/load/workload/phased.py): the grammar and its errors, the schedules
they send (each offset the request's intended time, so the latency from it stays
coordinated-omission-correct), the recovery measurement and its SLO, and every profile run end
to end against the reference server; ``overload-never-recovers`` fails ``recovery_s``, the
clean server passes it."""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

from servecheck.analysis.slo import parse_slo
from servecheck.analysis.steady import Scan
from servecheck.commands.load.spec import spec_from_options
from servecheck.config.model import Target
from servecheck.errors import SpecError, UsageError
from servecheck.load.plan import load_plan
from servecheck.load.run import validate
from servecheck.load.workload.phased import (
    ProfileSchedule,
    judge,
    parse_profile,
    recovery_of,
    section,
)
from servecheck.records.parquet import read_run_records
from servecheck.reference.inprocess import RunningServer
from tests.load.test_load_cli import _cmd, _run, _summary, _targets

# ------------------------------------------------------------------ grammar


@pytest.mark.parametrize(
    ("text", "pinned"),
    [
        pytest.param(
            "bust:n=2,every=1s", "unknown profile 'bust' (did you mean \"burst\"?)", id="kind"
        ),
        pytest.param("burst:n=2", "burst needs every=", id="missing"),
        pytest.param("burst:n=0,every=1s", "n '0': a whole number >= 1", id="n"),
        pytest.param(
            "burst:n=2,every=1s,fro=3s", "unknown key 'fro' (did you mean \"for\"?)", id="key"
        ),
        pytest.param("zigzag:min=5,max=2,period=4s", "max must be above min", id="zigzag-order"),
        pytest.param("zigzag:min=1,max=2,period=4s,shape=sin", 'did you mean "sine"?', id="shape"),
        pytest.param("step:1,2", "write step:R1,R2,...@HOLD", id="step-hold"),
        pytest.param("step:1,x@2s", "rate 'x'", id="step-rate"),
        pytest.param(
            "recovery:normal=5,overload=40,for=2s,within=20",
            "within '20': a percentage, e.g. within=20%",
            id="within",
        ),
        pytest.param(
            "recovery:normal=5,overload=40,for=2s,sustain=0",
            "sustain '0': a whole number of slices >= 1",
            id="sustain",
        ),
        pytest.param(
            "recovery:normal=5,overload=4,for=2s", "overload must be above normal", id="over"
        ),
        pytest.param(
            "microburst:rate=2,n=3,every=1s,width=2s", "width must be shorter", id="width"
        ),
        pytest.param("churn:rate=fast", "rate 'fast'", id="churn-rate"),
    ],
)
def test_bad_profiles_say_what_is_wrong(text: str, pinned: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_profile(text)
    assert pinned in str(info.value) and text in str(info.value)


def test_recovery_defaults_and_phases() -> None:
    p = parse_profile("recovery:normal=5,overload=40,for=20s")
    assert (p.params["before"], p.params["after"], p.params["within"]) == (20.0, 40.0, 0.2)
    assert p.params["sustain"] == 3
    assert p.duration == 80.0 and p.overload == (20.0, 40.0)
    assert [(ph.name, ph.start, ph.end, ph.rate) for ph in p.phases(None)] == [
        ("before", 0.0, 20.0, 5.0),
        ("overload", 20.0, 40.0, 40.0),
        ("after", 40.0, 80.0, 5.0),
    ]


# ------------------------------------------------------------------ schedules


def _arrivals(text: str, **kw: Any) -> list[float]:
    return list(islice(parse_profile(text).arrivals(**kw), 100_000))


def test_burst_sends_n_at_once_every_t() -> None:
    assert _arrivals("burst:n=3,every=2s,for=5s") == [0.0] * 3 + [2.0] * 3 + [4.0] * 3


def test_step_holds_each_rate() -> None:
    got = _arrivals("step:2,8,4@2s")
    per = [sum(1 for t in got if k * 2.0 <= t < (k + 1) * 2.0) for k in range(3)]
    assert per == [4, 16, 8], per


def test_zigzag_sine_swings_between_min_and_max() -> None:
    p = parse_profile("zigzag:min=2,max=20,period=10s,for=20s")
    assert p.rate_at(0.0) == pytest.approx(2.0) and p.rate_at(5.0) == pytest.approx(20.0)
    got = _arrivals(p.text)
    # The mean of a sine between 2 and 20 is 11/s: 220 sends in 20 s (a grid in warped time).
    assert abs(len(got) - 220) <= 2, len(got)
    low = sum(1 for t in got if t < 1.0)
    high = sum(1 for t in got if 4.5 <= t < 5.5)
    assert high > 4 * low, (low, high)


def test_zigzag_saw_and_triangle() -> None:
    saw = parse_profile("zigzag:min=1,max=9,period=4s,shape=saw")
    tri = parse_profile("zigzag:min=1,max=9,period=4s,shape=triangle")
    assert saw.rate_at(3.99) == pytest.approx(9.0, abs=0.05) and saw.rate_at(4.0) == 1.0
    assert tri.rate_at(2.0) == 9.0 and tri.rate_at(4.0) == 1.0
    assert [ph.name for ph in tri.phases(8.0)] == ["rising 1", "falling 1", "rising 2", "falling 2"]


def test_microburst_adds_n_within_width_to_the_base_rate() -> None:
    got = _arrivals("microburst:rate=2,n=5,every=2s,width=100ms,for=4s")
    assert len(got) == 8 + 5  # the base (2/s for 4 s) and one microburst at 2 s
    assert sum(1 for t in got if 2.0 <= t < 2.1) == 5 + 1  # the base's send at 2.0 as well
    assert got == sorted(got)


def test_recovery_overloads_only_in_its_window() -> None:
    got = _arrivals("recovery:normal=2,overload=20,for=2s,before=2s,after=2s")
    assert [sum(1 for t in got if k * 2.0 <= t < (k + 1) * 2.0) for k in range(3)] == [4, 40, 4]


def test_workers_share_one_schedule_exactly() -> None:
    p = parse_profile("zigzag:min=2,max=20,period=4s,for=8s")
    whole = list(p.arrivals(seed=3, poisson=True))
    shares = [list(ProfileSchedule(p, k, 3, seed=3, poisson=True).offsets()) for k in range(3)]
    assert sorted(t for s in shares for t in s) == whole
    assert sum(
        ProfileSchedule(p, k, 3, seed=3, poisson=True).planned(8.0) for k in range(3)
    ) == len(whole)


def test_poisson_profile_is_seeded() -> None:
    a = _arrivals("step:5,10@5s", seed=1, poisson=True)
    assert a == _arrivals("step:5,10@5s", seed=1, poisson=True)
    assert a != _arrivals("step:5,10@5s", seed=2, poisson=True)
    assert a != _arrivals("step:5,10@5s")


# ------------------------------------------------------------------ recovery from slices


def _scan(points: list[tuple[float, float]]) -> Scan:
    """A scan of requests done at ``t`` (seconds from 1000.0, the first send) with TTFT ``ttft``."""
    sc = Scan(slice_s=1.0)
    for t, ttft in points:
        sc.add({"t_sent": 1000.0 + t - ttft, "t_done": 1000.0 + t, "ttft": ttft, "e2e": ttft})
    sc.add({"t_sent": 1000.0, "t_done": 1000.0, "ttft": 0.1, "e2e": 0.1})  # the first send
    return sc


def _recovery(points: list[tuple[float, float]], text: str) -> dict[str, Any]:
    p = parse_profile(text)
    return section(p, _scan(points), None, None)["recovery"]


TEXT = "recovery:normal=1,overload=9,for=2s,before=2s,after=4s,within=50%"


def test_recovery_time_is_where_p95_stays_within_the_bound() -> None:
    pts = [
        (0.5, 0.1),
        (1.5, 0.1),
        (2.5, 1.0),
        (3.5, 1.0),
        (4.5, 0.9),
        (5.5, 0.12),
        (6.5, 0.11),
        (7.5, 0.1),
    ]
    rec = _recovery(pts, TEXT)
    assert rec["recovered"] is True
    assert rec["pre_overload_ttft_p95_ms"] == pytest.approx(100.0, rel=0.01)
    assert rec["recovery_s"] == pytest.approx(2.0, abs=0.01)  # the slice [5, 6) ends 2 s after 4 s
    verdicts, unmeasured = judge([parse_slo("recovery_s<=3s")], {"recovery": rec})
    assert unmeasured == [] and verdicts[0].passed and verdicts[0].observed == rec["recovery_s"]
    assert not judge([parse_slo("recovery_s<=1s")], {"recovery": rec})[0][0].passed


# A longer recovery (overload 2-5 s, normal again to 15 s), for runs of slices.
LONG = "recovery:normal=1,overload=9,for=3s,before=2s,after=10s,within=50%"


def _long(overload: tuple[float, ...], after: tuple[float, ...], text: str = LONG) -> Any:
    """One request a slice: 100 ms before the overload, then the given TTFTs (s) a second."""
    pts = [(0.5, 0.1), (1.5, 0.1)] + [(2.5 + i, v) for i, v in enumerate(overload + after)]
    return _recovery(pts, text)


def test_one_slow_slice_does_not_set_the_recovery_time() -> None:
    """Issue 41: the p95 never left its bound during the overload, yet one slow request in one
    slice 7 s after it made "recovered 8.0 s after the overload"."""
    rec = _long((0.11, 0.12, 0.1), (0.1, 0.11, 0.1, 0.1, 0.1, 0.1, 0.9, 0.1, 0.1, 0.1))
    assert rec["recovered"] is True and rec["never_left"] is True, rec
    assert rec["recovery_s"] == 0.0 and rec["sustain_slices"] == 3
    assert rec["note"].startswith("never left the bound: p95 TTFT was not above 150.0 ms for 3")
    assert "1 single slice(s) above it" in rec["note"]
    (v,), unmeasured = judge([parse_slo("recovery_s<=1s")], {"recovery": rec})
    assert v.passed and v.observed == 0.0 and unmeasured == []


def test_never_left_is_said_as_such_in_the_text_and_the_page() -> None:
    from servecheck.report.load_text import profile_lines
    from servecheck.report.profile_html import profile_html

    rec = _long((0.11, 0.12, 0.1), (0.1,) * 10)
    lines = profile_lines({"text": LONG, "phases": [], "recovery": rec})
    assert lines[-1].startswith("  never left the bound: p95 TTFT was not above 150.0 ms"), lines
    assert not any("recovered" in line for line in lines)
    page = profile_html({"text": LONG, "phases": [], "recovery": rec})
    assert "never left the bound" in page and "Recovered" not in page


def test_a_genuine_slow_recovery_is_still_measured() -> None:
    """Above the bound through the overload and 4 s after it, then back for good (one lone slow
    slice later changes nothing): 5 s, to the end of the return's first slice."""
    rec = _long((0.9, 0.9, 0.9), (0.8, 0.7, 0.6, 0.5, 0.1, 0.12, 0.1, 0.9, 0.1, 0.1))
    assert rec["recovered"] is True and rec["never_left"] is False, rec
    assert rec["recovery_s"] == pytest.approx(5.0, abs=0.01)
    from servecheck.report.load_text import profile_lines

    line = profile_lines({"text": LONG, "phases": [], "recovery": rec})[-1]
    assert line.startswith(
        "  recovered 5.0 s after the overload (p95 TTFT back within 50% of 100.0 ms for 3 "
    ), line


def test_a_sustained_relapse_restarts_the_wait() -> None:
    rec = _long((0.9, 0.9, 0.9), (0.1, 0.1, 0.1, 0.9, 0.9, 0.9, 0.1, 0.1, 0.1, 0.1))
    assert rec["recovery_s"] == pytest.approx(7.0, abs=0.01), rec  # the return at 11-12 s


def test_sustain_one_judges_single_slices() -> None:
    rec = _long(
        (0.9,),
        (0.1, 0.9, 0.1),
        "recovery:normal=1,overload=9,for=1s,before=2s,after=3s,within=50%,sustain=1",
    )
    assert rec["sustain_slices"] == 1 and rec["recovery_s"] == pytest.approx(3.0, abs=0.01)


def test_too_few_slices_after_the_overload_is_not_measured() -> None:
    rec = _long(
        (0.9, 0.9, 0.9),
        (0.1, 0.1),
        "recovery:normal=1,overload=9,for=3s,before=2s,after=2s,within=50%",
    )
    assert rec["recovered"] is None and "fewer than the 3 consecutive slices" in rec["note"]
    verdicts, unmeasured = judge([parse_slo("recovery_s<=30s")], {"recovery": rec})
    assert verdicts == [] and "fewer than the 3" in unmeasured[0]


def test_never_recovering_fails_the_slo() -> None:
    pts = [(0.5, 0.1), (1.5, 0.1), (4.5, 0.9), (5.5, 0.9), (6.5, 0.8), (7.5, 0.7)]
    rec = _recovery(pts, TEXT)
    assert rec["recovered"] is False and rec["recovery_s"] is None
    assert "did not recover: p95 TTFT was not back within 150.0 ms for 3" in rec["note"]
    (v,), unmeasured = judge([parse_slo("recovery_s<=30s")], {"recovery": rec})
    assert not v.passed and v.observed is None and unmeasured == []


def test_nothing_before_the_overload_is_inconclusive_not_a_pass() -> None:
    p = parse_profile(TEXT)
    rec = recovery_of(p, [], 8.0)
    assert rec["recovered"] is None
    verdicts, unmeasured = judge([parse_slo("recovery_s<=30s")], {"recovery": rec})
    assert verdicts == [] and "nothing to recover to" in unmeasured[0]


# ------------------------------------------------------------------ spec, SLO, plan


def _spec(**options: Any) -> Any:
    target = Target(name="t", base_url="http://127.0.0.1:9/v1")
    return spec_from_options(target, options)


def test_recovery_slo_needs_a_recovery_profile_before_any_traffic() -> None:
    with pytest.raises(SpecError, match="recovery_s is measured by a recovery profile"):
        validate(_spec(rate="5", duration="5s", slo=["recovery_s<=10s"]))
    with pytest.raises(SpecError, match="recovery_s is measured by a recovery profile"):
        validate(_spec(profile="step:2,4@2s", slo=["recovery_s<=10s"]))
    spec = _spec(profile="recovery:normal=2,overload=9,for=2s", slo=["recovery_s<=10s"])
    assert [s.name for s in validate(spec)][:1] == ["recovery_s"]
    assert spec.slice_s == 1.0  # a profile's default slice


@pytest.mark.parametrize(
    ("options", "pinned"),
    [
        pytest.param({"profile": "step:2@2s", "users": 2}, "exactly one of", id="with-users"),
        pytest.param({"profile": "burst:n=2,every=1s"}, "unbounded", id="unbounded"),
        pytest.param({"profile": "churn", "duration": "2s"}, "churn: give", id="churn-loop"),
        pytest.param(
            {"profile": "step:2@2s", "warmup": "2s"}, "a warm-up would shift them", id="warmup"
        ),
    ],
)
def test_profile_spec_errors(options: dict[str, Any], pinned: str) -> None:
    with pytest.raises(UsageError, match=pinned):
        validate(_spec(**options))


def test_plan_profile_is_checked_and_used(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("profile: stpe:1@2s\n")
    with pytest.raises(UsageError, match=r"bad.yaml: profile: .*did you mean \"step\""):
        load_plan(bad)
    good = tmp_path / "good.yaml"
    good.write_text("profile: step:2,4@2s\n")
    target = Target(name="t", base_url="http://127.0.0.1:9/v1")
    spec = spec_from_options(target, {}, load_plan(good).values)
    assert spec.profile is not None and spec.profile.duration == 4.0
    validate(spec)


def test_the_shipped_recovery_plan() -> None:
    from servecheck.load.workload.shipped import plan_path

    target = Target(name="t", base_url="http://127.0.0.1:9/v1")
    spec = spec_from_options(target, {}, load_plan(plan_path("recovery")).values)
    slos = validate(spec)
    assert spec.profile is not None and spec.profile.duration == 80.0
    assert "recovery_s" in [s.name for s in slos]


# ------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def slots2(make_reference: Callable[..., RunningServer]) -> RunningServer:
    """Two running slots of 100 ms to first token: an overload queues, then drains."""
    return make_reference(ttft_ms=100, itl_ms=2, max_num_seqs=2, prefix_cache_blocks=0)


def _load(server: RunningServer, tmp_path: Path, *args: str) -> tuple[int, dict[str, Any], list]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    targets = _targets(tmp_path, server)
    out = tmp_path / "reports"
    proc = _run(_cmd(targets, out, "--output-tokens", "4", *args), timeout=120)
    s = _summary(out)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return proc.returncode, s, list(read_run_records(run_dir))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "phases"),
    [
        pytest.param("burst:n=4,every=2s,for=4s", ["burst 1", "burst 2"], id="burst"),
        pytest.param("zigzag:min=1,max=6,period=4s,for=4s", ["rising 1", "falling 1"], id="zigzag"),
        pytest.param(
            "microburst:rate=2,n=4,every=2s,for=4s", ["base", "microburst 1"], id="microburst"
        ),
        pytest.param("step:2,6@2s", ["step 1 (2/s)", "step 2 (6/s)"], id="step"),
    ],
)
def test_each_profile_sends_its_schedule(
    slots2: RunningServer, tmp_path: Path, text: str, phases: list[str]
) -> None:
    code, s, records = _load(slots2, tmp_path, "--profile", text)
    assert code == 0, s["reasons"]
    want = list(parse_profile(text).arrivals())
    assert s["mode"] == "profile" and s["requests"]["total"] == len(want)
    t0 = min(r["t_intended"] for r in records)
    # Each record's intended time is its slot in the schedule (the latency's start).
    got = sorted(round(r["t_intended"] - t0, 3) for r in records)
    assert got == pytest.approx([round(t, 3) for t in want], abs=2e-3)
    sec = s["profile"]
    assert [ph["name"] for ph in sec["phases"]] == phases
    assert sum(ph["count"] for ph in sec["phases"]) <= s["requests"]["total"]
    assert all(ph["ttft_ms"]["p95"] is not None for ph in sec["phases"] if ph["count"])


@pytest.mark.slow
def test_churn_opens_a_connection_per_request(slots2: RunningServer, tmp_path: Path) -> None:
    code, s, _ = _load(
        slots2, tmp_path, "--profile", "churn", "--users", "2", "--max-requests", "8"
    )
    assert code == 0, s["reasons"]
    churn = s["profile"]["churn"]
    assert churn["connections"] == {"new": 8, "reused": 0}
    assert churn["setup_ms"]["connect"]["count"] == 8 and churn["setup_mean_ms"] > 0
    # Without churn the same loop reuses its keep-alive connections.
    code, s, _ = _load(slots2, tmp_path / "keep", "--users", "2", "--max-requests", "8")
    assert s["timings"]["connections"]["reused"] > 0


RECOVERY = "recovery:normal=1,overload=20,for=3s,before=4s,after=8s,within=100%"


@pytest.mark.slow
def test_the_clean_server_recovers_after_overload(slots2: RunningServer, tmp_path: Path) -> None:
    code, s, _ = _load(slots2, tmp_path, "--profile", RECOVERY, "--slo", "recovery_s<=7s")
    rec = s["profile"]["recovery"]
    assert rec["recovered"] is True, rec
    overload = next(ph for ph in s["profile"]["phases"] if ph["name"] == "overload")
    assert overload["ttft_ms"]["p95"] > rec["bound_ms"], overload  # the overload did hurt
    assert code == 0 and s["verdict"] == "pass", (s["reasons"], s["slo"])
    (v,) = [v for v in s["slo"] if v["metric"] == "recovery_s"]
    assert v["passed"] and v["observed"] == rec["recovery_s"] and v["unit"] == "s"


@pytest.mark.slow
def test_a_server_that_never_recovers_fails_recovery_s(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    broken = make_reference(
        "overload-never-recovers", ttft_ms=100, itl_ms=2, max_num_seqs=2, prefix_cache_blocks=0
    )
    code, s, _ = _load(broken, tmp_path, "--profile", RECOVERY, "--slo", "recovery_s<=7s")
    rec = s["profile"]["recovery"]
    assert rec["recovered"] is False and "did not recover" in rec["note"], rec
    (v,) = [v for v in s["slo"] if v["metric"] == "recovery_s"]
    assert not v["passed"] and "did not recover" in v["note"]
    assert code == 1 and s["verdict"] == "fail"


def test_the_page_shows_phases_and_recovery() -> None:
    from servecheck.report.profile_html import profile_html

    assert profile_html(None) == ""
    rec = _recovery(
        [(0.5, 0.1), (1.5, 0.1), (2.5, 0.9), (3.5, 0.9), (4.5, 0.9)]
        + [(5.5, 0.1), (6.5, 0.1), (7.5, 0.1)],
        TEXT,
    )
    page = profile_html(
        {"text": TEXT, "phases": [{"name": "overload", "count": 3}], "recovery": rec}
    )
    assert "Load profile: recovery:normal=1" in page and "<td>overload</td>" in page
    assert "Recovered 2.0 s after the overload ended" in page
    assert "for 3 consecutive slices" in page
    rec = _recovery([(0.5, 0.1), (4.5, 0.9), (5.5, 0.9), (6.5, 0.9), (7.5, 0.9)], TEXT)
    assert "did not recover" in profile_html({"text": TEXT, "recovery": rec})


def test_every_documented_profile_parses(tmp_path: Path) -> None:
    """docs/load.md's and docs/workflows.md's examples (docs that cannot rot)."""
    import re

    root = Path(__file__).resolve().parents[2]
    text = "".join((root / "docs" / f).read_text() for f in ("load.md", "workflows.md"))
    found = re.findall(r"--profile ([^\s`]+)", text) + re.findall(r"^profile: (\S+)$", text, re.M)
    kinds = {parse_profile(t).kind for t in found if t != "NAME:PARAMS"}
    assert kinds == {"burst", "zigzag", "microburst", "step", "recovery", "churn"}, found
    plan = re.search(r"# loadtests/rollout-recovery.yaml\n(.*?)```", text, re.S)
    assert plan is not None
    (tmp_path / "p.yaml").write_text(plan.group(1))
    assert load_plan(tmp_path / "p.yaml").values["profile"].startswith("recovery:")


@pytest.mark.parametrize(
    ("overload", "after", "want"),
    [
        pytest.param(
            (0.9, 0.9), (0.9, 0.12, 0.11, 0.1, 0.9, 0.1, 0.1, 0.1, 0.1), 2.0, id="recovers"
        ),
        pytest.param(
            (0.9, 0.9), (0.9, 0.12, 0.11, 0.9, 0.9, 0.9, 0.1, 0.1, 0.1), 7.0, id="relapse"
        ),
        pytest.param(
            (0.12, 0.11), (0.1, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1), 0.0, id="never-left"
        ),
    ],
)
def test_the_metrics_doc_worked_example(
    overload: tuple[float, ...], after: tuple[float, ...], want: float
) -> None:
    """docs/metrics.md, "Time to recover": overload 2-4 s, within 50 %, p95 100 ms before."""
    text = "recovery:normal=1,overload=9,for=2s,before=2s,after=9s,within=50%"
    pts = [(0.5, 0.1), (1.5, 0.1)] + [(2.5 + i, v) for i, v in enumerate(overload + after)]
    rec = _recovery(pts, text)
    assert rec["bound_ms"] == pytest.approx(150.0, rel=0.01)
    assert rec["recovery_s"] == pytest.approx(want, abs=0.01)
    assert rec["never_left"] is (want == 0.0)


def test_the_fault_shows_with_the_servers_defaults(
    make_reference: Callable[..., RunningServer],
) -> None:
    """overload-never-recovers alone (max_num_seqs at its default) brings 4 running slots: an
    overload of 8 at once makes every later answer 500 ms late; the clean server's are not."""
    import asyncio
    import time

    from aiohttp import ClientSession

    async def ttfts(server: RunningServer) -> list[float]:
        body = {"model": "ref-tiny", "messages": [{"role": "user", "content": "hi"}]}
        body |= {"max_tokens": 2, "stream": True}
        url = server.base_url + "/chat/completions"
        async with ClientSession() as http:

            async def one() -> float:
                t0 = time.monotonic()
                async with http.post(url, json=body) as r:
                    await r.read()  # the whole answer: 100 ms to the first token, two tokens
                return time.monotonic() - t0

            await asyncio.gather(*(one() for _ in range(8)))  # the overload
            return [await one() for _ in range(3)]  # then one at a time

    for fault, slow in (("overload-never-recovers", True), (None, False)):
        server = make_reference(*([fault] if fault else []), ttft_ms=100, prefix_cache_blocks=0)
        later = asyncio.run(ttfts(server))
        # A lower bound (the fault's sleep) is certain; for the clean server one answer of three
        # under it suffices (a busy machine may stall one, not every one, by 400 ms).
        assert (min(later) >= 0.5) == slow, (fault, later)
