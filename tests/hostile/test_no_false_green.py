"""Nothing succeeded is never PASS: checks and wait-ready against the hostile catalogue."""

from __future__ import annotations

from pathlib import Path

import pytest

from servecheck.checks import CheckFailed, load_all, run_with_allowances
from servecheck.cli import main
from servecheck.reference.hostile import hostile
from tests.hostile.support import hostile_context, write_targets

CHECKS = load_all()


@pytest.mark.parametrize(
    "check_id", [pytest.param(c, id=c) for c in ("HEALTH-SERVES", "CONC-SEEDED")]
)
def test_an_html_login_page_fails_the_serving_checks(check_id: str) -> None:
    with hostile("html-login-page") as srv:
        ctx = hostile_context(srv, check_id)
        try:
            with pytest.raises(CheckFailed) as excinfo:
                run_with_allowances(CHECKS[check_id], ctx)
        finally:
            ctx.client.close()
    text = str(excinfo.value)
    assert text.startswith(f"{check_id}: ")
    assert "HTML page" in text or "text/html" in text, text


def test_wait_ready_does_not_accept_an_html_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with hostile("html-login-page") as srv:
        targets = write_targets(tmp_path / "targets.yaml", srv)
        rc = main(
            ["wait-ready", "--target", "hostile", "--targets-file", str(targets), "--timeout", "1"]
        )
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "NOT READY" in out and "HTML page" in out, out


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        pytest.param("ok", "pass", id="ok"),
        pytest.param("leak", "fail", id="leak"),
        pytest.param("insufficient_data", "warn", id="insufficient-data"),
        pytest.param("inconclusive", "warn", id="inconclusive"),
    ],
)
def test_what_could_not_be_judged_is_not_red(status: str, kind: str) -> None:
    from servecheck.report.html import status_badge

    html = status_badge(status)
    assert f"badge verdict {kind}" in html, html
    assert status.replace("_", " ").upper() in html


def test_conc_seeded_says_what_it_saw_on_an_html_page_not_a_crash() -> None:
    """Issue 24 item 15: CONC-SEEDED said "server died" with a vLLM-only hint for a server that
    answers every request with an HTML page; nothing died, the API is not there."""
    with hostile("html-login-page") as srv:
        ctx = hostile_context(srv, "CONC-SEEDED")
        try:
            with pytest.raises(CheckFailed) as excinfo:
                run_with_allowances(CHECKS["CONC-SEEDED"], ctx)
        finally:
            ctx.client.close()
    failure = excinfo.value
    assert "does not serve chat completions" in failure.summary, failure.summary
    assert "died" not in failure.summary and "chunked prefill" not in str(failure), str(failure)
    assert failure.hint == "base_url reaches a sign-in proxy or a web UI, not the API", failure.hint
