"""``servecheck soak`` end to end against in-process reference servers, and its usage errors.

Tiny plans: 5 cycles of 1.5 s load and 1 s idle, sampled every 0.1 s. The clean server gives
no leak (exit 0); ``kv-leak`` never frees the blocks of the streams ``--abandon`` drops, so KV
usage stays full after every drain (exit 1). No timing is asserted.
"""

from __future__ import annotations

import argparse
import json
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.commands.soak import add_arguments, plan_from_args, verdict_line
from servecheck.config.model import Target
from servecheck.reference.inprocess import RunningServer
from tests.soak.support import PROBE, TINY, run_soak, soak, write_targets
from tests.soak.test_soak_junit import read_cases

SOAK_KEYS = {
    "kind",
    "version",
    "target",
    "engine",
    "engine_version",
    "run_id",
    "started_at",
    "ended_at",
    "plan",
    "phases",
    "requests",
    "cycles",
    "primary",
    "leak",
    "drain",
    "probe",
    "telemetry",
    "failures",
    "ok",
    "exit_code",
}


@pytest.mark.slow
def test_soak_clean_server_no_leak(
    make_reference: Callable[..., RunningServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_reference(kv_blocks=64, ttft_ms=5, itl_ms=5)
    code, run_dir = run_soak(server, tmp_path, "clean", *TINY, "--no-rss")
    out = capsys.readouterr().out
    assert code == 0, out
    for name in (
        "records.jsonl",
        "soak.json",
        "soak.png",
        "report.html",
        "summary.md",
        "telemetry/prometheus.jsonl",
        "telemetry/markers.jsonl",
    ):
        assert (run_dir / name).exists(), (
            f"{name} missing from {sorted(p.name for p in run_dir.iterdir())}"
        )
    data = json.loads((run_dir / "soak.json").read_text())
    assert set(data) >= SOAK_KEYS, sorted(SOAK_KEYS - set(data))
    assert str(data["engine_version"]).startswith("servecheck-reference ")  # as check records it
    assert data["ok"] and data["exit_code"] == 0 and data["failures"] == []
    # summary.md's Telemetry and Cycles sections carry their figures (issue 42 item 5).
    md = (run_dir / "summary.md").read_text()
    telemetry = md.split("### Telemetry", 1)[1].split("###", 1)[0]
    assert "- kv_usage: baseline " in telemetry and "noise floor" in telemetry, md
    cycles = md.split("### Cycles", 1)[1]
    assert cycles.count("\n| ") == 2 + 5, md  # header, rule, one row a cycle
    assert data["leak"]["kv_usage"]["status"] == "ok", data["leak"]["kv_usage"]["message"]
    assert data["leak"]["kv_usage"]["cycles_used"] == 5
    assert max(data["leak"]["kv_usage"]["peaks"]) > 0.02, (
        "the load never moved KV usage: the test proves nothing"
    )
    assert data["leak"]["requests_running"]["status"] == "ok"
    assert data["drain"] is None and data["probe"] is None
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    assert len(lines) == data["requests"]["total"] > 0
    assert data["requests"]["failed"] == 0, data["cycles"][0]["first_error"]
    assert "<svg" in (run_dir / "report.html").read_text()
    assert "kv_usage: OK: kv_usage returned to baseline 0.000" in out
    suite, cases = read_cases(run_dir)  # junit.xml: every case the soak judged passed
    assert {"target stayed up", "leak kv_usage", "soak run verdict"} <= set(cases), set(cases)
    assert suite.get("failures") == "0", [
        c.find("failure").get("message") for c in cases.values() if c.find("failure") is not None
    ]  # type: ignore[union-attr]


@pytest.mark.slow
def test_soak_kv_leak_with_abandoned_streams(
    make_reference: Callable[..., RunningServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_reference("kv-leak", kv_blocks=64, ttft_ms=5, itl_ms=5)
    code, run_dir = run_soak(server, tmp_path, "leak", *TINY, "--abandon", "--no-rss", *PROBE)
    out = capsys.readouterr().out
    assert code == 1, out
    data = json.loads((run_dir / "soak.json").read_text())
    assert data["leak"]["kv_usage"]["status"] == "leak", data["leak"]["kv_usage"]["message"]
    assert "kv_usage: leak" in data["failures"]
    assert data["requests"]["abandoned"] > 0 and data["probe"]["abandoned"] == 4
    assert data["drain"]["status"] != "ok", data["drain"]["message"]
    assert "kv_usage: LEAK: kv_usage " in out
    assert "FAIL kv_usage: leak" in out
    _, cases = read_cases(run_dir)  # junit.xml: the leak and the drain fail their own cases
    kv = cases["leak kv_usage"].find("failure")
    assert kv is not None and kv.get("message") == "kv_usage: leak", ET.tostring(
        cases["leak kv_usage"]
    )
    assert (
        cases["drain"].find("failure") is not None
        and cases["target stayed up"].find("failure") is None
    )
    assert cases["soak run verdict"].find("failure") is not None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["--cycles", "5", "--cycle", "2s", "--idle", "4s", "--interval", "0.1s"],
            "--idle 4s with --settle 2s leaves 2s to measure each drain, which needs 3 samples "
            "of the engine's /metrics (kv_usage, requests_running) every 0.1s (--interval) and "
            "of engine RSS (rss_tree_bytes) every 1s, never faster than 1s whatever --interval "
            "(or leave RSS out with --no-rss): at least 3s after --settle, with --settle shorter "
            "than --idle; the shortest valid --idle here is 6s (--settle is half of --idle "
            "unless given)",
            id="drain-window-too-short-for-rss",
        ),
        pytest.param([], "a soak is bounded: give --cycles, --cycle, --idle", id="unbounded"),
        pytest.param(
            ["--cycles", "3", "--cycle", "10m", "--idle", "2m"],
            "--cycles 3: between 5 and 1000",
            id="too-few-cycles",
        ),
        pytest.param(
            ["--cycles", "100", "--cycle", "1h", "--idle", "10m"],
            "the plan takes 116.8 h, more than --max-total 24.0 h",
            id="too-long",
        ),
        pytest.param(
            ["--cycles", "5", "--cycle", "10s", "--idle", "1s", "--interval", "0.5s"],
            "--idle 1s with --settle 0.5s leaves 0.5s to measure each drain",
            id="drain-window-too-short",
        ),
        pytest.param(
            ["--cycles", "5", "--cycle", "10", "--idle", "5x"], "duration '5x'", id="bad-duration"
        ),
        pytest.param(
            ["--cycles", "5", "--cycle", "10s", "--idle", "4s", "--rss-tolerance", "lots"],
            "size 'lots'",
            id="bad-size",
        ),
    ],
)
def test_soak_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    # Nothing listens on port 9: a usage error must stop the run before any request.
    targets = write_targets(tmp_path, "http://127.0.0.1:9/v1", "http://127.0.0.1:9")
    code = soak(targets, *argv, "--out", str(tmp_path))
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err, err
    assert not any(tmp_path.glob("*soak*")), "a refused plan must not create a run folder"


@pytest.mark.parametrize(
    ("argv", "shortest"),
    [
        pytest.param(["--idle", "1s"], "6s (--settle is half of --idle unless given)", id="rss"),
        pytest.param(["--idle", "1s", "--no-rss"], "3s (--settle is half", id="no-rss"),
        pytest.param(["--idle", "2s", "--settle", "2s"], "5s", id="settle-given"),
    ],
)
def test_a_short_idle_names_every_constraint_and_the_shortest_valid_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], shortest: str
) -> None:
    """Issue 41: finding a valid --idle took four tries, each error naming one constraint."""
    targets = write_targets(tmp_path, "http://127.0.0.1:9/v1", "http://127.0.0.1:9")
    assert soak(targets, "--cycles", "5", "--cycle", "2s", *argv, "--out", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert f"the shortest valid --idle here is {shortest}" in err, err
    assert "3 samples of the engine's /metrics" in err and "(--interval)" in err
    assert "with --settle shorter than --idle" in err
    assert ("engine RSS" in err) is ("--no-rss" not in argv)
    # ... and that value is one the plan takes (with everything else as given)
    value = err.split("the shortest valid --idle here is ", 1)[1].split()[0]
    idle = argv.index("--idle") + 1
    given = [*argv[:idle], value, *argv[idle + 1 :]]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--cycles", "5", "--cycle", "2s", *given])
    target = Target(
        name="t", base_url="http://127.0.0.1:9/v1", metrics_url="http://127.0.0.1:9/metrics"
    )
    assert plan_from_args(args, target, "m").idle_s == float(value.rstrip("s"))


def test_soak_unknown_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    targets = write_targets(tmp_path, "http://127.0.0.1:9/v1", "http://127.0.0.1:9")
    assert soak(targets, "--cycles", "5", "--cycle", "1s", "--idle", "1s", target="rf") == 2
    assert "no target named 'rf' (did you mean \"ref\"?)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("status", "message", "line"),
    [
        pytest.param(
            "ok",
            "kv_usage returned to baseline",
            "kv_usage: OK: kv_usage returned to baseline",
            id="ok",
        ),
        pytest.param(
            "leak", "LEAK: kv_usage rose", "kv_usage: LEAK: kv_usage rose", id="leak-once"
        ),
        pytest.param(
            "insufficient_data",
            "INSUFFICIENT DATA: x",
            "kv_usage: INSUFFICIENT DATA: x",
            id="insufficient",
        ),
    ],
)
def test_verdict_line_says_the_status_once(status: str, message: str, line: str) -> None:
    assert verdict_line("kv_usage", status, message) == line


def _doc_commands() -> list[list[str]]:
    text = (Path(__file__).resolve().parents[2] / "docs" / "telemetry.md").read_text()
    section = text.split("## Soak and abandoned streams", 1)[1].split("### Measured", 1)[0]
    block = section.split("```", 2)[1].replace("\\\n", " ")
    return [
        shlex.split(line)[2:] for line in block.splitlines() if line.startswith("servecheck soak")
    ]


@pytest.mark.parametrize("argv", _doc_commands())
def test_documented_soak_commands_make_valid_plans(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(argv)
    target = Target(name="t", base_url="http://127.0.0.1:9/v1", engine="vllm")
    plan = plan_from_args(args, target, "m")
    assert plan.cycles >= 5 and plan.abandon and plan.extra == {"ignore_eos": True}


def test_telemetry_block_typo_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    targets = write_targets(tmp_path, "http://127.0.0.1:9/v1", "http://127.0.0.1:9")
    targets.write_text(targets.read_text().replace("{nvml: false}", "{nvml: false, intervl_s: 1}"))
    code = soak(targets, "--cycles", "5", "--cycle", "1s", "--idle", "1s")
    assert code == 2
    assert (
        "telemetry.intervl_s: unknown key 'intervl_s' (did you mean \"interval_s\"?)"
        in capsys.readouterr().err
    )


@pytest.mark.slow
def test_probe_only_reports_abort_leak(
    make_reference: Callable[..., RunningServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_reference("abort-leak", kv_blocks=64, ttft_ms=5, itl_ms=5)
    code, run_dir = run_soak(
        server,
        tmp_path,
        "probe",
        "--probe-only",
        "--baseline",
        "0.5s",
        "--interval",
        "0.1s",
        *PROBE,
        "--no-rss",
    )
    out = capsys.readouterr().out
    assert code == 1, out
    data = json.loads((run_dir / "soak.json").read_text())
    assert data["kind"] == "abandon-probe" and data["probe"]["abandoned"] == 4
    assert data["drain"]["status"] == "not_drained" and data["failures"] == ["drain: not_drained"]
    assert "drain: NOT DRAINED within 1.5 s after the probe: last requests_running=4" in out
    assert (run_dir / "probe.png").exists()
    _, cases = read_cases(run_dir)
    drain = cases["drain"].find("failure")
    assert drain is not None and drain.get("message") == "drain: not_drained"


def test_probe_only_takes_no_cycles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    targets = write_targets(tmp_path, "http://127.0.0.1:9/v1", "http://127.0.0.1:9")
    assert soak(targets, "--probe-only", "--cycles", "5") == 2
    assert "--probe-only runs no load cycles" in capsys.readouterr().err


@pytest.mark.slow
def test_soak_stops_cycling_against_a_target_that_went_down(
    make_reference: Callable[..., RunningServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server is stopped once the soak has recorded five successes (an event, not a time);
    100 planned cycles would take minutes: the soak ends after the one in which it went down."""
    import threading
    import time

    server = make_reference(kv_blocks=64, ttft_ms=5, itl_ms=5)
    records = tmp_path / "reports" / "gone" / "records.jsonl"
    stopped = threading.Event()

    def stop_after_five_ok() -> None:
        deadline = time.monotonic() + 120  # a bound against a hang, not a speed expectation
        while time.monotonic() < deadline:
            text = records.read_text() if records.exists() else ""
            if sum('"error":null' in line for line in text.splitlines()) >= 5:
                server.stop()
                stopped.set()
                return
            time.sleep(0.05)

    killer = threading.Thread(target=stop_after_five_ok, daemon=True)
    killer.start()
    plan = [*TINY[:1], "100", *TINY[2:]]  # 100 cycles
    code, run_dir = run_soak(server, tmp_path, "gone", *plan, "--no-rss")
    killer.join(timeout=5)
    out = capsys.readouterr().out
    assert stopped.is_set(), "the server was never stopped: the test proves nothing"
    assert code == 1, out
    data = json.loads((run_dir / "soak.json").read_text())
    assert data["failures"][0].startswith("target went down at t="), data["failures"]
    assert "consecutive connection errors: " in data["failures"][0]
    assert len(data["cycles"]) < 100 and data["cycles"][-1]["down"], len(data["cycles"])
    _, cases = read_cases(run_dir)  # junit.xml: the soak's own case for it fails
    down = cases["target stayed up"].find("failure")
    assert down is not None and down.get("message") == data["cycles"][-1]["down"]
    assert data["requests"]["ok"] >= 5
