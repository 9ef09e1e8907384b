"""The catalogue audit: no check passes against a server that answers every request with 401
(a wrong API key), 404 (a base_url without /v1), 500 or an HTML sign-in page.

A check whose verdict is "bad input gets a 4xx" tested nothing when every input gets one; it
must be an error naming the cause (its precondition: the same route serves a good request).
Every capability is declared, and a key and pooling models too, so that the whole catalogue
runs rather than skips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servecheck.config.model import CAPABILITIES
from servecheck.reference.hostile import hostile
from servecheck.workflows.conformance import CheckSpec, run_check
from tests.hostile.support import write_targets

pytestmark = pytest.mark.slow

SERVERS = ("always-401", "always-404", "always-500", "html-login-page")
CAUSES = {
    "always-401": "auth: ",
    "always-404": "does base_url end in /v1?",
    "always-500": "server error: ",
    "html-login-page": "HTML page",
}


def _run(tmp_path: Path, name: str) -> list[dict[str, object]]:
    with hostile(name) as srv:
        targets = write_targets(
            tmp_path / "targets.yaml",
            srv,
            "    api_key: sk-servecheck-audit",
            "    embedding_models: [hostile-embed]",
            "    rerank_models: [hostile-rerank]",
            "    concurrency: 2",
            "    capabilities: {" + ", ".join(f"{c}: true" for c in CAPABILITIES) + "}",
            timeout_s=3,
        )
        spec = CheckSpec(
            targets=["hostile"],
            targets_file=str(targets),
            workers="0",
            out=tmp_path / "reports",
            run_id=name,
            embedded=False,
        )
        result = run_check(spec, say=lambda _line: None)
    lines = (result.run_dir / "results.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in SERVERS])
def test_no_check_passes_against_a_server_that_serves_nothing(tmp_path: Path, name: str) -> None:
    rows = [r for r in _run(tmp_path, name) if r["check"]]
    assert len(rows) > 90, f"the catalogue did not run: {len(rows)} results"
    passed = sorted(str(r["check"]) for r in rows if r["outcome"] in ("passed", "xpassed"))
    assert not passed, f"{len(passed)} check(s) passed against {name}: {', '.join(passed)}"
    errors = [r for r in rows if r["outcome"] == "error"]
    assert errors, "no check was reported as not judged"
    for r in errors:
        message = str(r["message"])
        if "not judged" in message:
            assert CAUSES[name] in message, message
