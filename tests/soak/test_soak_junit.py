"""``junit.xml`` of a soak: a case per leak metric, the drain, the target staying up, the probe
and the run's verdict, each failing when one of the verdict's reasons is its own.

The files are read back with ``xml.etree`` as a CI's JUnit reader would; the soaks that make
them from a reference-server fault (``kv-leak``) and a clean server are in test_soak.py.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from servecheck.workflows.support import write_soak_junit


def _soak(failures: list[str], verdict: str, **more: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "kind": "soak",
        "plan": {"cycles": 5},
        "cycles": [{"index": i, "down": None} for i in range(1, 6)],
        "primary": "kv_usage",
        "leak": {
            "kv_usage": {"status": "ok", "message": "OK: kv_usage returned to baseline 0.000"},
            "requests_running": {"status": "ok", "message": "OK: requests_running at 0"},
        },
        "drain": None,
        "failures": failures,
        "verdict": verdict,
    }
    data.update(more)
    return data


def read_cases(run_dir: Path) -> tuple[ET.Element, dict[str, ET.Element]]:
    """The suite and its cases, by name, of ``run_dir/junit.xml``."""
    root = ET.parse(run_dir / "junit.xml").getroot()
    (suite,) = root.iter("testsuite")
    return suite, {str(c.get("name")): c for c in suite.iter("testcase")}


def test_a_clean_soak_is_all_passing_cases(tmp_path: Path) -> None:
    write_soak_junit(tmp_path, _soak([], "pass"))
    suite, cases = read_cases(tmp_path)
    assert list(cases) == [
        "target stayed up",
        "leak kv_usage",
        "leak requests_running",
        "soak run verdict",
    ]
    assert (suite.get("tests"), suite.get("failures")) == ("4", "0")
    assert all(c.find("failure") is None for c in cases.values())


def test_a_leak_and_an_undrained_probe_fail_their_own_cases(tmp_path: Path) -> None:
    leak = {"status": "leak", "message": "LEAK: kv_usage rose 0.41 over 5 cycles"}
    drain = {"status": "not_drained", "message": "NOT DRAINED within 1.5 s"}
    data = _soak(["kv_usage: leak", "drain: not_drained"], "fail", drain=drain)
    data["leak"]["kv_usage"] = leak
    write_soak_junit(tmp_path, data)
    suite, cases = read_cases(tmp_path)
    assert suite.get("failures") == "3", ET.tostring(suite)
    kv = cases["leak kv_usage"].find("failure")
    assert kv is not None and kv.get("message") == "kv_usage: leak"
    assert "LEAK: kv_usage rose 0.41" in (kv.text or "")
    assert cases["drain"].find("failure") is not None
    assert cases["leak requests_running"].find("failure") is None
    verdict = cases["soak run verdict"].find("failure")
    assert verdict is not None and verdict.get("message") == "kv_usage: leak; drain: not_drained"


@pytest.mark.parametrize(
    ("failures", "leak", "case"),
    [
        pytest.param(
            ["kv_usage: inconclusive (the load never moved it, so a leak could not show)"],
            {"requests_running": {"status": "ok", "message": "OK"}},
            "leak kv_usage",
            id="primary-not-judged",
        ),
        pytest.param(
            ["kv_usage: not sampled (check the metrics URL and the engine's metric names)"],
            {},
            "leak kv_usage",
            id="primary-not-sampled",
        ),
    ],
)
def test_an_inconclusive_soak_is_never_a_green_case(
    tmp_path: Path, failures: list[str], leak: dict[str, Any], case: str
) -> None:
    write_soak_junit(tmp_path, _soak(failures, "inconclusive", leak=leak))
    _, cases = read_cases(tmp_path)
    failure = cases[case].find("failure")
    assert failure is not None and failure.get("message") == failures[0]
    assert cases["soak run verdict"].find("failure") is not None


def test_a_target_that_went_down_fails_its_case(tmp_path: Path) -> None:
    why = "target went down at t=3.1s (12 consecutive connection errors: refused)"
    data = _soak([why], "fail")
    data["cycles"] = [{"index": 1, "down": None}, {"index": 2, "down": why}]
    write_soak_junit(tmp_path, data)
    _, cases = read_cases(tmp_path)
    failure = cases["target stayed up"].find("failure")
    assert failure is not None and failure.get("message") == why


def test_a_probe_only_run_has_drain_and_probe_cases(tmp_path: Path) -> None:
    data = {
        "kind": "abandon-probe",
        "probe": {"abandoned": 0},
        "drain": {"status": "ok", "message": "OK: drained"},
        "failures": ["probe: no stream was dropped mid-generation (0 of 4)"],
        "verdict": "inconclusive",
    }
    write_soak_junit(tmp_path, data)
    _, cases = read_cases(tmp_path)
    assert list(cases) == ["drain", "probe", "soak run verdict"]
    assert cases["drain"].find("failure") is None
    assert cases["probe"].find("failure") is not None
    assert cases["soak run verdict"].find("failure") is not None
