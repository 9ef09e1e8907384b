"""docs/telemetry.md cannot drift from the code: the mapping table and pinned messages."""

from __future__ import annotations

import re
from pathlib import Path

from servecheck.telemetry import ENGINE_METRICS, analyse_leak

DOC = Path(__file__).resolve().parents[2] / "docs" / "telemetry.md"


def test_engine_mapping_table_matches_the_code():
    rows = re.findall(r"^\| (\w+) \| (\w+) \| (`.+`) \|$", DOC.read_text(), flags=re.M)
    documented = {
        (engine, canonical): tuple(re.findall(r"`([^`]+)`", names))
        for engine, canonical, names in rows
    }
    in_code = {
        (engine, canonical): names
        for engine, mapping in ENGINE_METRICS.items()
        if engine != "reference"
        for canonical, names in mapping.items()
    }
    assert documented == in_code


def test_documented_messages_are_what_analyse_leak_says(make_soak):
    text = DOC.read_text()
    leaking, phases = make_soak(lambda i: 0.05 * i)
    assert f"`{analyse_leak(leaking, phases).message}`" in text
    short, phases = make_soak(lambda i: 0.0, cycles=3)
    assert f"`{analyse_leak(short, phases).message}`" in text
