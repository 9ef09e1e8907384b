"""Curl reproductions name the ``${VAR}`` each secret header came from, never the value, and a
secret that came from no variable is a named placeholder (issue 24 item 13)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.cli import main
from servecheck.client.curl import curl_command
from servecheck.config import load_targets
from servecheck.reference.inprocess import RunningServer

KEY = "sk-curl-src-key-5e4d3c2b1a"
HEADER = "hdr-curl-src-9f8e7d6c5b"
LITERAL = "lit-curl-src-0a1b2c3d4e"


def _file(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "targets.yaml"
    path.write_text(
        "targets:\n"
        "  - name: src\n"
        f"    base_url: {base_url}\n"
        "    engine: reference\n"
        "    models: [ref-tiny]\n"
        "    api_key: ${CURL_SRC_KEY}\n"
        "    headers:\n"
        "      X-Gateway-Token: ${HDR_SECRET}\n"
        "      X-Route: shard-${HDR_SECRET}-a\n"
        f"      X-Literal-Token: {LITERAL}\n"
    )
    return path


def test_each_header_names_its_variable(tmp_path: Path) -> None:
    env = {"CURL_SRC_KEY": KEY, "HDR_SECRET": HEADER}
    target = load_targets(_file(tmp_path, "http://127.0.0.1:9/v1"), env=env).get("src")
    headers = {**target.headers, **target.auth_headers()}
    curl = curl_command("POST", target.base_url + "/chat/completions", headers, {"x": 1})
    assert KEY not in curl and HEADER not in curl and LITERAL not in curl, curl
    words = shlex.split(curl)  # one shell word per header: quoting holds
    assert "Authorization: Bearer ${CURL_SRC_KEY}" in words, words
    assert "X-Gateway-Token: ${HDR_SECRET}" in words
    assert "X-Route: shard-${HDR_SECRET}-a" in words
    assert "X-Literal-Token: <secret:X-Literal-Token>" in words
    assert "$API_KEY" not in curl


def test_a_check_failure_and_its_report_name_the_variables(
    tmp_path: Path,
    make_reference: Callable[..., RunningServer],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = make_reference("err-plain-text", api_key=KEY)
    monkeypatch.setenv("CURL_SRC_KEY", KEY)
    monkeypatch.setenv("HDR_SECRET", HEADER)
    out = tmp_path / "r"
    code = main(
        ["check", "--target", "src", "--targets-file", str(_file(tmp_path, server.base_url))]
        + ["-k", "ERR-SHAPE", "-n", "0", "--no-embedded", "--out", str(out), "--run-id", "c"]
    )
    printed = capsys.readouterr().out
    assert code == 1, printed
    failures = [
        json.loads(line)
        for line in (out / "c" / "results.jsonl").read_text().splitlines()
        if '"failed"' in line
    ]
    assert failures, printed
    text = json.dumps(failures)
    assert '-H \\"Authorization: Bearer ${CURL_SRC_KEY}\\"' in text, text
    assert '-H \\"X-Gateway-Token: ${HDR_SECRET}\\"' in text
    assert "X-Literal-Token: <secret:X-Literal-Token>" in text
    report = (out / "c" / "report.html").read_text()
    assert "Authorization: Bearer ${CURL_SRC_KEY}" in report.replace("&quot;", '"')
    assert "X-Gateway-Token: ${HDR_SECRET}" in report.replace("&quot;", '"')
    for blob in (text, report, printed):
        assert KEY not in blob and HEADER not in blob and LITERAL not in blob
