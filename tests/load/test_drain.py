"""The drain verdict (``servecheck drain``, servecheck/probes/drain.py) against the reference
server: PASS on its clean shutdown path, FAIL with its own reason on each ``drain-*`` fault, the
hook command of targets.yaml, ``--launch``, the drain SLOs and the usage errors."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servecheck import api, cli
from servecheck.probes.drain import ActionOutcome, DrainOptions, DrainReport
from servecheck.records.record import RequestRecord, http_error
from servecheck.workflows.drain import DrainSpec

# Long enough streams (ignore_eos: 150 tokens at 20 ms) that every one is in flight at SIGTERM.
REF = ["--itl-ms=20", "--max-model-len=4096"]
FAST = DrainOptions(streams=3, max_tokens=150, deadline_s=8.0, probe_timeout_s=1.0)
# On a clean server no probe should hang, so a hang there is judged after 5 s, not 1: a probe sent
# as SIGTERM lands, on a loaded machine, was once answered after more than 1 s (a CI run).
CLEAN = DrainOptions(streams=3, max_tokens=150, deadline_s=8.0, probe_timeout_s=5.0)


def _drain(tmp_path: Path, *faults: str, **kw: object) -> dict:
    ref = REF + [f"--fault={f}" for f in faults]
    opts = FAST if faults else CLEAN
    spec = DrainSpec(target="reference", options=opts, out=tmp_path, reference_args=ref, **kw)  # type: ignore[arg-type]
    result = api.drain(spec)
    data = json.loads((result.run_dir / "drain.json").read_text())
    assert result.exit_code == (0 if data["verdict"] == "pass" else 1)
    return data


def test_drain_json_rows_are_rendered_from_the_records() -> None:
    """Streams and new requests are RequestRecords; drain.json lists them with its own keys,
    in seconds after the drain action (``t0``), the tokens split at it."""
    t0 = 1000.0
    stream = RequestRecord("ref", "drain", "stream", 2, 998.0, 998.0, t_done=1003.0, ttft=0.5,
                           itls=[0.5, 0.5, 1.0, 1.0], status=200, finish_reason="length",
                           outcome="finished")  # fmt: skip
    probe = RequestRecord("ref", "drain", "new-request", 0, 1001.0, 1001.0, e2e=0.01234,
                          status=503, error=http_error(503), error_message="draining",
                          outcome="503")  # fmt: skip
    report = DrainReport("ref", "m", ActionOutcome("SIGTERM"), FAST, [stream], [probe], t0=t0)
    data = report.as_dict()
    assert data["streams"] == [
        {"index": 2, "outcome": "finished", "first_token_s": -1.5, "end_s": 3.0,
         "tokens_before": 3, "tokens_after": 2, "finish_reason": "length", "done": True,
         "status": 200, "detail": ""}
    ], data["streams"]  # fmt: skip
    assert data["probes"] == [
        {"sent_s": 1.0, "outcome": "503", "took_s": 0.0123, "status": 503, "detail": "draining"}
    ]
    assert data["finish_reasons"] == {"length": 1} and data["probe_outcomes"] == {"503": 1}


def test_clean_reference_drains(tmp_path: Path) -> None:
    data = _drain(tmp_path)
    assert data["verdict"] == "pass", data["reasons"]
    assert data["drain_ok"] is True
    assert data["stream_outcomes"] == {"finished": 3}, data["streams"]
    assert all(s["tokens_after"] > 0 for s in data["streams"]), "streams ended at SIGTERM"
    # A probe sent before the server has acted on SIGTERM may still be served (on a busy machine
    # the first one, 0.1 ms after the signal, was); from the first refusal on, none is.
    outcomes = [p["outcome"] for p in data["probes"]]
    first = next(i for i, o in enumerate(outcomes) if o != "served")
    assert set(outcomes[first:]) <= {"refused", "reset", "503"}, data["probes"]
    assert data["refused_s"] is not None and data["drain_time_s"] is not None
    assert (tmp_path / next(p.name for p in tmp_path.iterdir()) / "junit.xml").is_file()


@pytest.mark.parametrize(
    "fault,reason",
    [
        pytest.param(
            "drain-cut-streams", "in-flight streams cut without a finish reason", id="cut"
        ),
        pytest.param("drain-hang", "new requests hung (no answer within 1 s)", id="hang"),
        pytest.param("drain-html-500", "new requests got an HTML error page", id="html-500"),
    ],
)
def test_drain_fault_fails(tmp_path: Path, fault: str, reason: str) -> None:
    data = _drain(tmp_path, fault)
    assert data["verdict"] == "fail"
    assert any(reason in r for r in data["reasons"]), data["reasons"]
    assert data["drain_ok"] is False


def test_drain_time_slo_is_judged(tmp_path: Path) -> None:
    data = _drain(tmp_path, slos=["drain_ok", "drain_time<=1ms"])
    assert data["drain_verdict"] == "pass"
    assert data["verdict"] == "fail"
    assert [s["passed"] for s in data["slos"]] == [True, False]
    assert any(r.startswith("SLO drain_time<=1ms: observed") for r in data["reasons"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _targets(tmp_path: Path, port: int, extra: str = "") -> Path:
    path = tmp_path / "targets.yaml"
    path.write_text(
        "targets:\n"
        f"  - name: mine\n    base_url: http://127.0.0.1:{port}/v1\n    engine: reference\n" + extra
    )
    return path


def _serve(port: int) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "servecheck", "reference-server", "--port", str(port), *REF]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("the reference server did not listen within 30 s")


def test_hook_command_drains_a_server_servecheck_did_not_launch(tmp_path: Path) -> None:
    port = _free_port()
    proc = _serve(port)
    try:
        hook = f"    drain: {{command: 'kill -TERM {proc.pid}', timeout_s: 10}}\n"
        spec = DrainSpec(
            target="mine", targets_file=str(_targets(tmp_path, port, hook)), options=CLEAN
        )
        result = api.drain(spec.__class__(**{**_fields(spec), "out": tmp_path}))
        assert result.data["verdict"] == "pass", result.data["reasons"]
        assert result.data["action"]["what"].startswith("drain command")
        assert proc.wait(timeout=20) is not None
    finally:
        proc.kill()


def test_hook_that_does_not_stop_the_server_fails(tmp_path: Path) -> None:
    port = _free_port()
    proc = _serve(port)
    try:
        hook = "    drain: {command: 'exit 3', timeout_s: 5}\n"
        opts = DrainOptions(streams=2, max_tokens=100, deadline_s=3.0, probe_timeout_s=1.0)
        spec = DrainSpec(
            target="mine",
            targets_file=str(_targets(tmp_path, port, hook)),
            options=opts,
            out=tmp_path,
        )
        data = api.drain(spec).data
        assert data["verdict"] == "fail"
        assert any("the drain did not take effect" in r for r in data["reasons"]), data["reasons"]
        assert data["action"]["ok"] is False and "exited with code 3" in data["action"]["detail"]
    finally:
        proc.kill()


def test_launch_is_sigtermed_mid_stream(tmp_path: Path) -> None:
    port = _free_port()
    launch = f"{sys.executable} -m servecheck reference-server --port {port} " + " ".join(REF)
    spec = DrainSpec(
        target="mine",
        targets_file=str(_targets(tmp_path, port)),
        launch=launch,
        options=CLEAN,
        out=tmp_path,
        ready_timeout_s=30,
    )
    data = api.drain(spec).data
    assert data["verdict"] == "pass", data["reasons"]
    assert data["action"]["what"].startswith("SIGTERM to the launched server")
    assert data["exited_s"] is not None


def _fields(spec: DrainSpec) -> dict:
    return {f: getattr(spec, f) for f in spec.__slots__}  # type: ignore[attr-defined]


def test_no_way_to_drain_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _targets(tmp_path, _free_port())
    code = cli.main(
        ["drain", "--target", "mine", "--targets-file", str(path), "--out", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "servecheck did not launch it and targets.yaml gives it no drain: {command: ...}" in err
    assert "--launch CMD" in err


@pytest.mark.parametrize(
    "slo,message",
    [
        pytest.param(
            "ttft_p95<=1s", "servecheck drain judges drain_ok and drain_time only", id="load-slo"
        ),
        pytest.param("drain_ok>=2", "drain_ok is 1 or 0", id="bad-flag"),
        pytest.param("drain_time<=3", "add a unit", id="no-unit"),
    ],
)
def test_bad_slo_is_refused_before_traffic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], slo: str, message: str
) -> None:
    code = cli.main(["drain", "--slo", slo, "--out", str(tmp_path)])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir()), "a run folder was made before the SLO was checked"


def test_load_refuses_a_drain_slo() -> None:
    from servecheck.analysis.slo import parse_slos, reject_cold
    from servecheck.errors import UsageError

    with pytest.raises(UsageError, match="a drain SLO, which servecheck load does not measure"):
        reject_cold(parse_slos(["drain_ok"]))


def test_cutover_drains_old_after_the_swap(tmp_path: Path) -> None:
    port = _free_port()
    proc = _serve(port)
    try:
        hook = f"    drain: {{command: 'kill -TERM {proc.pid}', timeout_s: 10}}\n"
        new = (
            "  - name: reference\n    base_url: ${SERVECHECK_REF_URL}\n"
            "    api_key: ${SERVECHECK_REF_API_KEY:-}\n    engine: reference\n"
        )
        path = _targets(tmp_path, port, hook + new)
        code = cli.main(
            [
                "cutover",
                "--from",
                "mine",
                "--to",
                "reference",
                "--targets-file",
                str(path),
                "--skip-conformance",
                "--no-load",
                "--drain",
                "--out",
                str(tmp_path / "runs"),
            ]
        )
        (run,) = (tmp_path / "runs").iterdir()
        data = json.loads((run / "cutover.json").read_text())
        assert data["parts"]["drain"]["verdict"] == "pass", data["parts"]["drain"]
        assert (run / "drain" / "drain.json").is_file()
        assert code == 0, data["reasons"]
    finally:
        proc.kill()


def test_cutover_drain_needs_a_way_to_stop_old(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _targets(tmp_path, _free_port())
    argv = ["cutover", "--from", "mine", "--to", "reference", "--targets-file", str(path)]
    code = cli.main([*argv, "--drain", "--skip-conformance", "--no-load", "--out", str(tmp_path)])
    assert code == 2
    assert "servecheck did not launch it" in capsys.readouterr().err
