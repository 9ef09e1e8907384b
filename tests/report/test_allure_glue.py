"""The allure glue: each check gets its id, description and redacted request/response attachments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servecheck.report.allure_glue import write_slo_results

pytest_plugins = ["pytester"]
SECRET = "sk-allure-test-abcdef0123456789"

CHECK_FILE = f'''
from types import SimpleNamespace

from servecheck.client.http import Exchange
from servecheck.redact import register
from servecheck.report.allure_glue import attach_exchanges

SECRET = "{SECRET}"
register(SECRET)


def test_check():
    ex = Exchange("POST", "http://127.0.0.1:1/v1/chat/completions", {{"authorization": "Bearer " + SECRET}},
                  {{"model": "m", "messages": [{{"role": "user", "content": "key " + SECRET}}]}}, status=200,
                  response_headers={{"content-type": "application/json"}}, body=b'{{"id": "x", "echo": "' + SECRET.encode() + b'"}}')
    ctx = SimpleNamespace(target=SimpleNamespace(name="ref", engine="reference"), model="m", exchanges=[ex])
    check = SimpleNamespace(id="CHAT-SHAPE", description="the body has the OpenAI shape", expectation="id, object, choices",
                            surface="CHAT")
    assert attach_exchanges(ctx, check) == 1
'''


def test_attach_exchanges_titles_labels_and_redacts(pytester: pytest.Pytester) -> None:
    pytest.importorskip("allure_pytest")
    pytester.makepyfile(test_glue=CHECK_FILE)
    result = pytester.runpytest_subprocess("--alluredir", "allure", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    out = pytester.path / "allure"
    results = [json.loads(p.read_text()) for p in out.glob("*-result.json")]
    assert len(results) == 1
    res = results[0]
    assert res["name"] == "CHAT-SHAPE: the body has the OpenAI shape"
    assert "Expectation: id, object, choices" in res["description"]
    labels = {(lab["name"], lab["value"]) for lab in res["labels"]}
    assert {("check_id", "CHAT-SHAPE"), ("target", "ref"), ("model", "m")} <= labels
    names = [a["name"] for a in res["attachments"]]
    assert names[0].startswith("1 request POST") and "1 response" in names and "1 curl" in names
    for path in out.iterdir():
        assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path.name


def test_slo_results_are_allure_results(tmp_path: Path) -> None:
    n = write_slo_results(
        tmp_path,
        [
            {
                "slo": "ttft_p95<=500ms",
                "metric": "ttft_p95",
                "passed": False,
                "observed": 612.0,
                "unit": "ms",
                "op": "<=",
                "bound": 500.0,
                "source": "cli",
            }
        ],
        attachment="summary",
    )
    assert n == 1
    (res,) = [json.loads(p.read_text()) for p in tmp_path.glob("*-result.json")]
    assert res["status"] == "failed" and res["name"] == "SLO ttft_p95<=500ms"
    assert "observed 612.0 ms" in res["statusDetails"]["message"]
