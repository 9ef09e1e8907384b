"""Nightly history: recording, series and steps, rolling:N, first failures, concurrent writers,
versioned migrations, on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from servecheck import api
from servecheck.cli import main
from servecheck.errors import UsageError
from servecheck.history.analysis import change_points, steps
from servecheck.history.store import MIGRATIONS, SCHEMA_VERSION, open_store
from tests.history.conftest import write_check_run, write_load_summary

ROOT = Path(__file__).resolve().parents[2]


def _nights(n: int, start: int = 1) -> list[str]:
    return [f"2026-11-{d:02d}" for d in range(start, start + n)]


def _record_series(
    tmp: Path, url: str, values: list[float], versions: list[str], target: str = "nightly"
) -> None:
    runs = [
        write_load_summary(
            tmp / f"{target}-{night}", night=night, ttft_p95=v, version=ver, target=target
        )
        for night, v, ver in zip(_nights(len(values)), values, versions, strict=True)
    ]
    added = api.history_add(api.HistoryAddSpec(runs=runs, history=url, tag="img:abc"))
    assert len(added.added) == len(values)


def _step_series(seed: int = 1) -> tuple[list[float], list[str]]:
    rng = np.random.default_rng(seed)
    before = list(50 + rng.normal(0, 1.0, 10))
    after = list(65 + rng.normal(0, 1.0, 6))
    return [*before, *after], ["0.7.0"] * 10 + ["0.8.0"] * 6


def test_a_step_is_named_with_its_first_night_and_engine_version(history_url, tmp_path, capsys):
    values, versions = _step_series()
    _record_series(tmp_path, history_url, values, versions)
    shown = api.history_show(
        api.HistoryShowSpec(
            target="nightly", metric="ttft_p95", history=history_url, out=tmp_path / "o"
        )
    )
    assert [(s.night, s.engine_version, s.previous_engine_version) for s in shown.steps] == [
        ("2026-11-11", "0.8.0", "0.7.0")
    ]
    assert shown.steps[0].worse and 60 < shown.steps[0].after < 70
    assert shown.figure is not None and shown.figure.read_text().lstrip().startswith("<svg")
    assert shown.page is not None and "2026-11-11" in shown.page.read_text()
    assert len(shown.table.splitlines()) == 2 + 16 + 1 and "<- step" in shown.table
    assert shown.table.splitlines()[-1] == "16 runs over 16 nights"
    rc = main(
        [
            "history",
            "show",
            "--target",
            "nightly",
            "--history",
            history_url,
            "--out",
            str(tmp_path / "p"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "ttft_p95: step on 2026-11-11" in out and "engine 0.7.0 -> 0.8.0" in out


def _rows(values: list[float]) -> list[dict[str, object]]:
    return [
        {"metrics": {"ttft_p95": v}, "started_at": f"n{i:02d}", "run_id": str(i)}
        for i, v in enumerate(values)
    ]


@pytest.mark.parametrize("seed", range(12))
def test_noise_is_no_step_and_a_real_step_is_found_on_its_night(seed):
    """30 nights of 3 % noise: no step, over many seeds; +30 % from night 15 on: one step,
    named on night 15, over the same seeds."""
    rng = np.random.default_rng(seed)
    assert steps(_rows([float(v) for v in 50 * rng.lognormal(0, 0.03, 30)]), "ttft_p95") == []
    shifted = [*(50 * rng.lognormal(0, 0.03, 15)), *(65 * rng.lognormal(0, 0.03, 15))]
    (step,) = steps(_rows([float(v) for v in shifted]), "ttft_p95")
    assert (step.index, step.worse, step.confirmed) == (15, True, True)


def test_a_step_inside_the_threshold_is_no_step():
    small = [50.0] * 10 + [52.0] * 10  # +4%: a real shift, within compare's +10%
    assert change_points(small) == [10]  # the detector sees it ...
    assert steps(_rows(small), "ttft_p95") == []  # ... the threshold does not name it


def test_nights_are_dates_with_their_runs_counted(history_url, tmp_path, capsys):
    """Issue 41: three runs from one night were "3 nights" and drawn at one date each."""
    folders = [
        write_load_summary(tmp_path / f"run-{i}", night=night, ttft_p95=50.0 + i)
        for i, night in enumerate(
            ["2026-11-01", "2026-11-02", "2026-11-02", "2026-11-02", "2026-11-03"]
        )
    ]
    api.history_add(api.HistoryAddSpec(runs=folders, history=history_url))
    shown = api.history_show(
        api.HistoryShowSpec(target="nightly", history=history_url, out=tmp_path / "o")
    )
    lines = shown.table.splitlines()
    assert lines[-1] == "5 runs over 3 nights (runs per night: 2026-11-02: 3)"
    assert [line.split()[1] for line in lines[3:6]] == ["1/3", "2/3", "3/3"]
    assert shown.page is not None
    page = shown.page.read_text()
    assert "ttft_p95, 5 runs over 3 nights" in page and "5 nights" not in page
    # the figure's x: a night's number, its runs side by side around it
    from servecheck.history.figures import _positions

    xs, nights = _positions(shown.rows)
    assert nights == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert xs[0] == 0 and xs[4] == 2 and xs[1] < xs[2] < xs[3] and xs[1] > 0.5 and xs[3] < 1.5
    # --last counts nights: the last 2 nights are 4 runs
    last = api.history_show(
        api.HistoryShowSpec(target="nightly", last=2, history=history_url, out=tmp_path / "l")
    )
    assert [r["run_id"] for r in last.rows] == ["run-1", "run-2", "run-3", "run-4"]


def test_run_ids_are_shown_whole(history_url, tmp_path):
    """Issue 41: run ids were cut at 24 characters, so they could no longer be grepped."""
    long_id = "20261202-021500-chat_completions-123456"
    folders = [
        write_load_summary(tmp_path / name, night=night, ttft_p95=50.0, version="0.7.0+cu124")
        for name, night in ((long_id, "2026-11-01"), ("short", "2026-11-02"))
    ]
    api.history_add(api.HistoryAddSpec(runs=folders, history=history_url, tag="img:abcdef0123456"))
    shown = api.history_show(
        api.HistoryShowSpec(target="nightly", history=history_url, out=tmp_path / "o")
    )
    assert long_id in shown.table and "img:abcdef0123456" in shown.table
    row = next(line for line in shown.table.splitlines() if long_id in line)
    assert row.split()[1] == long_id and row.split()[2] == "0.7.0+cu124"


def test_rolling_baseline_judges_tonight(history_url, tmp_path, capsys):
    rng = np.random.default_rng(3)
    values = list(50 + rng.normal(0, 1.0, 7))
    _record_series(tmp_path, history_url, values, ["0.7.0"] * 7)
    bad = write_load_summary(
        tmp_path / "tonight-bad", night="2026-11-08", ttft_p95=70.0, version="0.8.0"
    )
    good = write_load_summary(tmp_path / "tonight-ok", night="2026-11-08", ttft_p95=50.5)
    rc = main(["history", "compare", str(bad), "--baseline", "rolling:7", "--history", history_url])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "ttft_p95" in out and "REGRESSION" in out and "verdict: FAIL" in out
    saved = json.loads((bad / "history-compare.json").read_text())
    assert saved["verdict"] == "fail" and len(saved["nights"]) == 7
    (step,) = [s for s in saved["steps"] if s["metric"] == "ttft_p95"]
    assert (step["night"], step["engine_version"], step["confirmed"]) == (
        "2026-11-08",
        "0.8.0",
        False,
    )
    # recorded, and a second bad night: the step is confirmed, named on its first night, and
    # still fails the gate though the nights' spread now holds the first bad night
    api.history_compare(api.HistoryCompareSpec(current=bad, record=True, history=history_url))
    again = write_load_summary(
        tmp_path / "tonight-2", night="2026-11-09", ttft_p95=71.0, version="0.8.0"
    )
    judged = api.history_compare(
        api.HistoryCompareSpec(current=again, history=history_url)
    ).judgement
    assert judged.verdict.status == "fail"
    (step2,) = [s for s in judged.steps if s.metric == "ttft_p95"]
    assert (step2.night, step2.engine_version, step2.previous_engine_version, step2.confirmed) == (
        "2026-11-08",
        "0.8.0",
        "0.7.0",
        True,
    )
    rc = main(
        ["history", "compare", str(good), "--baseline", "rolling:7", "--history", history_url]
    )
    assert rc == 0, capsys.readouterr().out
    # rolling:2 sees two nights: too few to judge, which is never a pass
    judged = api.history_compare(
        api.HistoryCompareSpec(current=good, baseline="rolling:2", history=history_url)
    )
    assert judged.judgement.verdict.status == "inconclusive" and judged.exit_code == 1


def test_the_night_a_check_started_failing(history_url, tmp_path, capsys):
    runs = []
    for i, night in enumerate(_nights(6)):
        outcome = "failed" if i >= 3 else "passed"
        runs.append(
            write_check_run(
                tmp_path / f"check-{night}",
                night=night,
                outcomes={"STREAM-FRAMING": outcome, "MODELS-LIST": "passed"},
                version="0.8.0" if i >= 3 else "0.7.0",
            )
        )
    api.history_add(api.HistoryAddSpec(runs=runs[:-1], history=history_url))
    shown = api.history_show(
        api.HistoryShowSpec(target="nightly", kind="conformance", history=history_url)
    )
    assert [(c.check, c.night, c.engine_version, c.last_good_night) for c in shown.failures] == [
        ("STREAM-FRAMING", "2026-11-04", "0.8.0", "2026-11-03")
    ]
    # tonight: the same failure is not new; MODELS-LIST failing for the first time is
    tonight = write_check_run(
        tmp_path / "check-tonight",
        night="2026-11-07",
        outcomes={"STREAM-FRAMING": "failed", "MODELS-LIST": "failed"},
    )
    rc = main(["history", "compare", str(tonight), "--checks", "--history", history_url])
    out = capsys.readouterr().out
    assert rc == 1 and "MODELS-LIST [m]: newly failed on 2026-11-07" in out
    assert "STREAM-FRAMING" not in out.split("verdict")[0].split("nights")[-1]


_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from servecheck.history.store import RunEntry, open_store
    url, name, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    deadline = time.monotonic() + 60
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    store = open_store(url)  # both processes migrate a new database at once
    for i in range(n):
        store.add(RunEntry(kind="load", run_id=f"{name}-{i}", target="t",
                           started_at=f"2026-11-01T00:00:{i:02d}Z", verdict="pass",
                           metrics={"ttft_p95": float(i), "error_rate": 0.0}))
    print("done", name)
    """
)


def test_two_writers_at_once_lose_no_row(history_url, tmp_path):
    go = tmp_path / "go"
    n = 40
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, history_url, name, str(n), str(go)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("job-a", "job-b")
    ]
    go.touch()
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    store = open_store(history_url)
    rows = store.runs("t", "load")
    assert len(rows) == 2 * n
    assert {r["run_id"] for r in rows} == {f"job-{j}-{i}" for j in "ab" for i in range(n)}
    assert all(len(r["metrics"]) == 2 for r in rows)
    assert store.version() == SCHEMA_VERSION


def test_migrations_are_versioned_and_resume_from_an_old_database(history_url):
    import sqlalchemy as sa

    from servecheck.history import store as st

    engine = st._make_engine(st.engine_url(history_url))
    with engine.begin() as conn:  # a database made by a servecheck that had only step 1
        st.META.create_all(conn, tables=[st.VERSION])
        MIGRATIONS[0](conn)
        conn.execute(st.VERSION.insert().values(version=1, applied_at=0.0))
    engine.dispose()
    store = open_store(history_url)
    assert store.version() == SCHEMA_VERSION == 3
    with store.engine.connect() as conn:
        versions = [
            v
            for (v,) in conn.execute(sa.select(st.VERSION.c.version).order_by(st.VERSION.c.version))
        ]
        assert versions == [1, 2, 3]
        assert sa.inspect(conn).has_table("checks")
    with store.engine.begin() as conn:  # from a newer servecheck: refused, not corrupted
        conn.execute(st.VERSION.insert().values(version=99, applied_at=0.0))
    with pytest.raises(UsageError, match="schema version 99 is newer"):
        open_store(history_url)


def test_bad_input_is_a_usage_error(tmp_path, capsys):
    db = str(tmp_path / "h.db")
    assert main(["history", "add", str(tmp_path), "--history", db]) == 2
    assert "no summary.json" in capsys.readouterr().err
    assert main(["history", "show", "--target", "x", "--history", db]) == 2
    assert "--target 'x': no load runs in the history" in capsys.readouterr().err
    assert (
        main(["history", "compare", "--target", "x", "--baseline", "last:3", "--history", db]) == 2
    )
    assert "--baseline 'last:3': expected rolling:N" in capsys.readouterr().err
    assert main(["history", "show", "--target", "x", "--history", "mysql://u:pw@h/db"]) == 2
    err = capsys.readouterr().err
    assert "expected a SQLite file path" in err and "pw" not in err
    assert (
        main(
            [
                "history",
                "show",
                "--target",
                "x",
                "--history",
                "postgresql://u:hunter2@127.0.0.1:1/x",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "history postgresql://u:***@127.0.0.1:1/x:" in err and "hunter2" not in err


def test_real_runs_are_recorded(tmp_path):
    """A real ``servecheck check`` and ``servecheck load`` run folder against the reference."""
    check = api.check(
        api.CheckSpec(surfaces=["health", "models"], workers="0", out=tmp_path, run_id="c1")
    )
    argv = [
        "load",
        "--target",
        "reference",
        "--rate",
        "4/s",
        "--duration",
        "2s",
        "--out",
        str(tmp_path),
    ]
    assert main([*argv, "--run-id", "l1", "--quiet"]) == 0
    summary = json.loads((tmp_path / "l1" / "summary.json").read_text())
    db = str(tmp_path / "h.db")
    added = api.history_add(
        api.HistoryAddSpec(runs=[check.run_dir, tmp_path / "l1"], history=db, tag="v1")
    )
    assert added.added == ["c1", "l1"]
    store = open_store(db)
    (c,) = store.runs("reference", "conformance")
    (ld,) = store.runs("reference", "load")
    assert c["checks"] and all(o == "passed" for _, _, o in c["checks"])
    assert c["engine"] == "reference" and c["tag"] == "v1"
    assert ld["metrics"]["requests"] >= 1 and ld["metrics"]["ttft_p95"] > 0
    assert ld["verdict"] == summary["verdict"] == "pass"
    assert ld["metrics"]["ttft_p95"] == summary["latency_ms"]["ttft"]["p95"]
    assert ld["engine"] == summary["server"]["engine"]
    # both asked the engine its version the same way (client/version.py)
    assert c["engine_version"] and ld["engine_version"] == c["engine_version"]
    assert summary["engine_version"] == c["engine_version"]
    # a load run alone (no check run that night to borrow from) has its own
    alone = api.history_add(
        api.HistoryAddSpec(runs=[tmp_path / "l1"], history=str(tmp_path / "alone.db"))
    )
    assert alone.added == ["l1"]
    (solo,) = open_store(str(tmp_path / "alone.db")).runs("reference", "load")
    assert str(solo["engine_version"]).startswith("servecheck-reference ")
