"""No configured secret in any file a run writes: header values from ${VAR}, the api key, URL
credentials and secret query parameters, across load (load-config.json, summary, report), a
conformance run with allure results (parameters, attachments), and the redaction rules."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.load.plan import CONTEXT_FILE, RunConfig
from servecheck.redact import redact, redact_headers, register_url
from servecheck.reference.inprocess import RunningServer

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-files-selftest-5d4c3b2a1f"
HEADER = "hdr-secret-77aa66bb55cc"
QUERY = "qtok-secret-11ee22ff33"


def _targets(tmp_path: Path, server: RunningServer) -> Path:
    path = tmp_path / "targets.yaml"
    path.write_text(
        "\n".join(
            [
                "targets:",
                "  - name: sec",
                f"    base_url: {server.base_url}",
                "    engine: reference",
                "    models: [ref-tiny]",
                "    timeout_s: 20",
                "    api_key: ${SEC_KEY}",
                f"    metrics_url: {server.root}/metrics?token={QUERY}",
                "    headers:",
                "      X-Gateway-Route: ${SEC_HEADER}",
            ]
        )
        + "\n"
    )
    return path


def _leaks(folder: Path) -> list[str]:
    found = []
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [
                f"{path.relative_to(folder)}: {s}"
                for s in (KEY, HEADER, QUERY)
                if s.encode() in data
            ]
    return found


@pytest.mark.slow
def test_no_secret_in_any_file_of_a_load_and_a_check_run(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference(ttft_ms=5, itl_ms=1, api_key=KEY)
    targets = _targets(tmp_path, server)
    env = {**os.environ, "SEC_KEY": KEY, "SEC_HEADER": HEADER}
    out = tmp_path / "reports"
    common = ["--target", "sec", "--targets-file", str(targets), "--out", str(out)]
    load = subprocess.run(
        [
            sys.executable,
            "-m",
            "servecheck",
            "load",
            *common,
            "--users",
            "2",
            "--max-requests",
            "6",
            "--no-tokenize",
            "--quiet",
            "--run-id",
            "load",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert load.returncode == 0, load.stdout + load.stderr
    summary = json.loads((out / "load" / "summary.json").read_text())
    assert summary["requests"]["ok"] == 6, "the masked header still reached the server"
    config = json.loads((out / "load" / "load-config.json").read_text())
    assert config["headers"] == {"X-Gateway-Route": "***"}, config["headers"]
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "servecheck",
            "check",
            *common,
            "--surface",
            "health",
            "-n",
            "0",
            "--run-id",
            "check",
            "--no-embedded",
            "--",
            "--alluredir",
            str(out / "check" / "allure"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert check.returncode in (0, 1), check.stdout + check.stderr
    assert list((out / "check" / "allure").glob("*-result.json")), "allure wrote results"
    files = sum(1 for p in out.rglob("*") if p.is_file())
    assert files > 20, files
    assert _leaks(out) == []
    for text in (load.stdout, load.stderr, check.stdout, check.stderr):
        assert KEY not in text and HEADER not in text and QUERY not in text


def test_the_load_config_file_is_masked_and_locust_gets_the_values(tmp_path: Path) -> None:
    """The report's load-config.json masks every secret; Locust's own file (0600) holds them,
    and nothing goes through the environment."""
    register_url("http://lc-user:lc-pass-9988@127.0.0.1:9/v1")
    cfg = RunConfig(
        run_id="r",
        target="t",
        scenario="chat",
        base_url="http://lc-user:lc-pass-9988@127.0.0.1:9/v1",
        model="m",
        records_dir=str(tmp_path),
        headers={"X-Auth-Token": "tok-literal-4433"},
        api_key="sk-literal-7766",
        web_auth="admin:web-pass-5511",
    )
    from servecheck.redact import register_headers

    register_headers(cfg.headers)
    path = cfg.dump(tmp_path / "load-config.json")
    text = path.read_text()
    for secret in ("lc-pass-9988", "tok-literal-4433", "sk-literal-7766", "web-pass-5511"):
        assert secret not in text, text
    private = cfg.write_private(tmp_path / CONTEXT_FILE)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600, oct(private.stat().st_mode)
    back = RunConfig.load(private)
    assert back == cfg
    assert back.auth_headers() == {"Authorization": "Bearer sk-literal-7766"}


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param(
            "GET https://u:pw-unregistered@h/v1 x", "GET https://u:***@h/v1 x", id="url-password"
        ),
        pytest.param(
            "http://h/metrics?token=abc&x=1", "http://h/metrics?token=***&x=1", id="query-token"
        ),
        pytest.param("http://h/v1?api-key=abc", "http://h/v1?api-key=***", id="query-api-key"),
        pytest.param(
            "http://h/v1?api-version=2024-02-01",
            "http://h/v1?api-version=2024-02-01",
            id="not-a-secret",
        ),
    ],
)
def test_url_secrets_are_masked_unregistered(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_secret_named_headers_are_masked() -> None:
    shown = redact_headers({"X-Auth-Token": "a", "Cookie": "b", "Content-Type": "application/json"})
    assert shown == {"X-Auth-Token": "***", "Cookie": "***", "Content-Type": "application/json"}
