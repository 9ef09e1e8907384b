"""docs/preflight.md cannot rot: its id table and JSON keys come from the code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from servecheck.preflight import run_preflight
from servecheck.preflight.docs import update_doc

from .builders import write_model

DOC = Path(__file__).resolve().parents[2] / "docs" / "preflight.md"


def test_catalogue_section_is_up_to_date() -> None:
    text = DOC.read_text(encoding="utf-8")
    if update_doc(text) != text:
        pytest.fail(f"{DOC} is stale: run `python -m servecheck.preflight.docs docs/preflight.md`")


def test_documented_json_keys_match_the_report(tmp_path: Path) -> None:
    block = re.search(r"## JSON report.*?```json\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    if block is None:
        pytest.fail("docs/preflight.md lost its JSON example")
    documented = json.loads(block.group(1))
    actual = run_preflight(write_model(tmp_path / "m")).to_dict()
    if set(documented) != set(actual):
        pytest.fail(f"Received keys: {sorted(actual)}\nDocumented: {sorted(documented)}")
    if set(documented["findings"][0]) != set(actual["findings"][0]):
        pytest.fail(
            f"finding keys: {sorted(actual['findings'][0])} vs documented {sorted(documented['findings'][0])}"
        )
