"""Layering and docs: only the adapter imports locust; the SLO examples in docs/load.md parse."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from servecheck.analysis.slo import parse_slo

ROOT = Path(__file__).resolve().parents[2]


def test_library_does_not_import_locust_or_gevent() -> None:
    code = (
        "import sys\n"
        "import servecheck.records.record, servecheck.analysis.stats, servecheck.analysis.slo, servecheck.load.workload.schedule\n"
        "import servecheck.load.workload.prompts, servecheck.load.plan, servecheck.load.generator.stream, servecheck.load.generator.wire\n"
        "import servecheck.load.run, servecheck.commands.load\n"
        "bad = sorted(m for m in ('locust', 'gevent') if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", (
        f"imported by the library outside the adapter: {out.stdout.strip()}"
    )


def _doc_slos() -> list[str]:
    text = (ROOT / "docs" / "load.md").read_text()
    section = text.split("## SLO syntax", 1)[1].split("## From Python", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    found: list[str] = []
    for row in rows:
        example = row.rstrip(" |").rsplit("|", 1)[1]
        found += re.findall(r"`([^`]+)`", example)
    return found


@pytest.mark.parametrize("expr", _doc_slos())
def test_documented_slo_examples_parse(expr: str) -> None:
    parse_slo(expr)
