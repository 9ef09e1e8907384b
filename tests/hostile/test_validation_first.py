"""All validation before any network traffic: a usage error exits 2 with a clear message, sends
no request (the hostile server counts them), writes no run folder and shows no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servecheck.cli import main
from servecheck.reference.hostile import closed_port, hostile
from tests.hostile.support import write_targets

DID_YOU_MEAN = "unknown metric 'tfft' (did you mean \"ttft_p95\"?)"


def _usage(argv: list[str], capsys: pytest.CaptureFixture[str], out: Path) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and not captured.err.startswith("ERROR"), captured.err
    assert not out.exists() or not any(out.iterdir()), f"left behind: {list(out.iterdir())}"
    return captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["accept", "--slo", "tfft_p95<=1s"], DID_YOU_MEAN, id="accept-slo-typo"),
        pytest.param(
            ["cutover", "--from", "hostile", "--to", "hostile2", "--threshold", "tfft_p95=+10%"],
            "--threshold 'tfft_p95=+10%': unknown metric 'tfft_p95' (did you mean \"ttft_p95\"?)",
            id="cutover-threshold-typo",
        ),
        pytest.param(
            ["accept", "--reference-arg=--fault=no-such-fault"],
            "--fault: unknown fault 'no-such-fault'",
            id="accept-bad-fault",
        ),
        pytest.param(
            ["capacity", "--reference-arg=--ttft-ms=abc"],
            "--reference-arg: argument --ttft-ms: invalid float value: 'abc'",
            id="capacity-bad-reference-arg",
        ),
        pytest.param(
            ["check", "--reference-arg=--bogus"],
            "--reference-arg: unrecognized arguments: --bogus",
            id="check-unknown-reference-arg",
        ),
    ],
)
def test_bad_options_stop_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with hostile("always-429") as srv:
        targets = write_targets(tmp_path / "targets.yaml", srv)
        (tmp_path / "targets.yaml").write_text(
            targets.read_text()
            + targets.read_text()
            .split("targets:\n", 1)[1]
            .replace("name: hostile", "name: hostile2")
        )
        out = tmp_path / "out"
        name = [] if "--target" in argv or "--from" in argv else ["--target", "hostile"]
        err = _usage([*argv, *name, "--targets-file", str(targets), "--out", str(out)], capsys, out)
        assert srv.requests == 0, "a request left before the options were valid"
    assert message in err, err


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["targets"], id="targets"),
        pytest.param(["check", "--target", "hostile"], id="check"),
        pytest.param(["accept", "--target", "hostile", "--no-load"], id="accept-no-load"),
        pytest.param(
            ["load", "--target", "hostile", "--users", "1", "--max-requests", "1"], id="load"
        ),
    ],
)
def test_an_slo_typo_in_targets_yaml_stops_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    with hostile("always-429") as srv:
        targets = write_targets(
            tmp_path / "targets.yaml", srv, '    slo: ["error_rate<=1%", "tfft_p95<=1s"]'
        )
        out = tmp_path / "out"
        err = _usage(
            [*argv, "--targets-file", str(targets), "--out", str(out)][
                : None if argv[0] != "targets" else 3
            ],
            capsys,
            out,
        )
        assert srv.requests == 0
    assert "targets.yaml:8: targets[0].slo[1]: SLO 'tfft_p95<=1s': " + DID_YOU_MEAN in err, err


def test_a_missing_variable_under_check_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SC_NOT_SET_KEY", raising=False)
    with hostile("always-429") as srv:
        targets = write_targets(tmp_path / "targets.yaml", srv, "    api_key: ${SC_NOT_SET_KEY}")
        out = tmp_path / "out"
        err = _usage(
            ["check", "--target", "hostile", "--targets-file", str(targets), "--out", str(out)],
            capsys,
            out,
        )
    assert err.startswith("servecheck check: error: ") and "SC_NOT_SET_KEY is not set" in err, err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(
            "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
            + "".join(
                f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9)
            ),
            "YAML aliases expand to more than 100000 values (an alias bomb?)",
            id="alias-bomb",
        ),
        pytest.param(
            ("#" * 80 + "\n") * 14_000, "a targets file is at most 1048576 bytes", id="huge-file"
        ),
    ],
)
def test_hostile_targets_files_are_refused_before_parsing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(content + "targets:\n  - name: a\n    base_url: http://127.0.0.1:9/v1\n")
    out = tmp_path / "out"
    err = _usage(["targets", "--targets-file", str(path)], capsys, out)
    assert message in err, err


def test_load_against_a_target_that_is_down_stops_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(
        f"targets:\n  - name: down\n    base_url: http://127.0.0.1:{closed_port()}/v1\n"
    )
    out = tmp_path / "out"
    argv = ["load", "--target", "down", "--targets-file", str(path), "--out", str(out), "--quiet"]
    assert main([*argv, "--users", "4", "--duration", "10m"]) == 1
    captured = capsys.readouterr()
    assert "verdict: FAIL (target down: cannot connect to 127.0.0.1:" in captured.out, captured.out
    (run_dir,) = out.iterdir()
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["verdict"] == "fail" and s["requests"]["total"] == 0 and s["exit_code"] == 1
    assert not list(run_dir.glob("records-*.jsonl")), "no Locust process ran"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["load", "--trace", "loadtests/traces/nope.jsonl"],
            "trace file 'loadtests/traces/nope.jsonl' not found; shipped traces: synthetic",
            id="load-trace",
        ),
        pytest.param(
            ["load", "--trace", "synthetc"],
            "unknown trace 'synthetc' (did you mean \"synthetic\"?)",
            id="load-trace-name",
        ),
        pytest.param(
            ["load", "--plan", "smok", "--duration", "5s"],
            "unknown load plan 'smok' (did you mean \"smoke\"?)",
            id="load-plan",
        ),
        pytest.param(
            ["capacity", "--trace", "nope.jsonl", "--speeds", "1,2"],
            "unknown trace 'nope.jsonl'",
            id="capacity-trace",
        ),
    ],
)
def test_a_missing_file_is_reported_before_probing_a_down_target(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)  # outside the checkout: only the package's files are shipped
    path = tmp_path / "targets.yaml"
    path.write_text(
        f"targets:\n  - name: down\n    base_url: http://127.0.0.1:{closed_port()}/v1\n"
    )
    out = tmp_path / "out"
    common = ["--target", "down", "--targets-file", str(path), "--out", str(out)]
    err = _usage([args[0], *common, *args[1:]], capsys, out)
    assert message in err and "target down" not in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_a_shipped_trace_by_name_reaches_the_down_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "targets.yaml"
    path.write_text(
        f"targets:\n  - name: down\n    base_url: http://127.0.0.1:{closed_port()}/v1\n"
    )
    out = tmp_path / "out"
    argv = ["load", "--target", "down", "--targets-file", str(path), "--out", str(out), "--quiet"]
    assert main([*argv, "--trace", "synthetic"]) == 1
    assert "verdict: FAIL (target down: cannot connect to 127.0.0.1:" in capsys.readouterr().out
