"""What ``servecheck check`` prints on a log (no terminal): each line once, crashes included."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servecheck.workflows.conformance import XDIST_STATUS_LINE, _echo


def _check(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``servecheck check ARGS --run-id run`` in ``folder`` against the embedded reference."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVECHECK_REF_")}
    return subprocess.run(
        [sys.executable, "-m", "servecheck", "check", *args, "--run-id", "run"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_check_on_a_log_says_bringing_up_nodes_once(tmp_path: Path) -> None:
    """Issue 24.15: pytest-xdist with -q and no terminal wrote its status line twice, as the
    workers started and again once they had collected."""
    out = _check(tmp_path, "-k", "HEALTH", "-n", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines.count(XDIST_STATUS_LINE) == 1, out.stdout
    assert any(line.endswith("passed -> " + str(Path("reports") / "run")) for line in lines), (
        out.stdout
    )


def test_the_echo_passes_every_other_line_as_it_is() -> None:
    """Only the repeated status line is dropped: a worker that went down is still reported."""
    crash = "[gw1] node down: Not properly terminated\nreplacing crashed worker gw1\n"
    source = io.BytesIO(
        f"{XDIST_STATUS_LINE}\n{crash}{XDIST_STATUS_LINE}\n..  [100%]\n".encode() + b"\xff\n"
    )
    sink = io.StringIO()
    _echo(source, sink)
    assert sink.getvalue() == f"{XDIST_STATUS_LINE}\n{crash}..  [100%]\n\ufffd\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    "strict", [pytest.param(False, id="default"), pytest.param(True, id="strict")]
)
def test_check_strict_turns_schema_findings_into_failures(tmp_path: Path, strict: bool) -> None:
    """``servecheck check`` on the embedded reference with a profile-only fault: NON-STRICT and
    exit 0 by default; ``--strict``: the check fails, exit 1; both runs' results.jsonl carry
    the findings."""
    import json

    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SERVECHECK_REF_", "SERVECHECK_STRICT"))
    }
    out = subprocess.run(
        [sys.executable, "-m", "servecheck", "check", "-k", "STREAM-OBJECT", "-n", "0"]
        + ["--reference-arg=--fault=schema-chunk-created-string", "--run-id", "run"]
        + (["--strict"] if strict else []),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == (1 if strict else 0), out.stdout + out.stderr
    rows = [
        json.loads(line)
        for line in (tmp_path / "reports" / "run" / "results.jsonl").read_text().splitlines()
    ]
    (row,) = [r for r in rows if r["check"] == "STREAM-OBJECT"]
    assert row["outcome"] == ("failed" if strict else "nonstrict")
    assert [f["path"] for f in row["schema"]] == ["created"]
    if strict:
        assert "FAIL reference/" in out.stdout and "STREAM-OBJECT: schema: " in out.stdout


@pytest.mark.slow
def test_check_ends_with_its_own_summary_not_pytests_skip_list(tmp_path: Path) -> None:
    """Issue 41 item 11: every ``check`` ended with some 30 ``SKIPPED [1] .../site-packages/...``
    lines (pytest's ``-ra`` short summary) after the servecheck summary, scrolling it away. Now
    nothing of pytest's follows that summary but its one count line, and servecheck's own lines
    end the output. The lora surface is all capability skips on the reference."""
    out = _check(tmp_path, "--surface", "lora", "-n", "0")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if "servecheck summary" in line)
    run = Path("reports") / "run"
    after = lines[header + 1 :]
    assert len(after) == 5 and after[2].startswith("4 skipped in "), out.stdout  # pytest's count
    assert after[:2] + after[3:] == [
        "reference/ref-tiny: 4 skipped",
        f"results: {run / 'results.jsonl'}",
        f"servecheck check: 4 skipped -> {run}",
        f"servecheck check: HTML summary {run / 'report.html'}",
    ], out.stdout
    assert "SKIPPED" not in out.stdout and "short test summary info" not in out.stdout, out.stdout
