"""The one verdict model: stage verdicts fold into a run's with :func:`compose`."""

from __future__ import annotations

import pytest

from servecheck.analysis.verdict import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    RunVerdict,
    Stage,
    as_status,
    compose,
    stage_facts,
    stage_verdict,
)


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        pytest.param([PASS, PASS], PASS, id="all-pass"),
        pytest.param([PASS, INCONCLUSIVE], INCONCLUSIVE, id="one-unmeasured"),
        pytest.param([INCONCLUSIVE, FAIL, PASS], FAIL, id="fail-beats-inconclusive"),
        pytest.param([], INCONCLUSIVE, id="nothing-run-is-never-a-pass"),
    ],
)
def test_compose_folds_stages(statuses: list[str], expected: str) -> None:
    stages = [
        RunVerdict(s, [] if s == PASS else [f"stage {i}: {s}"]) for i, s in enumerate(statuses)
    ]
    folded = compose(stages)
    assert folded.status == expected, folded
    assert folded.exit_code == (0 if expected == PASS else 1)
    if statuses:
        assert folded.reasons == [r for v in stages for r in v.reasons]


def test_stage_dicts_keep_their_own_verdict() -> None:
    load = stage_verdict("load", {"ok": False, "verdict": "inconclusive", "detail": "lag"})
    assert (load.status, load.reasons) == (INCONCLUSIVE, ["load: lag"])
    ready = stage_verdict("ready", {"ok": False, "detail": "timeout"})
    assert (ready.status, ready.reasons) == (FAIL, ["ready: timeout"])
    # a stage that says pass but is not ok is not a pass
    assert stage_verdict("x", {"ok": False, "verdict": "pass"}).status == FAIL
    assert stage_verdict("conformance", {"ok": True}) == RunVerdict(PASS, [])


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        pytest.param("pass", PASS, id="pass"),
        pytest.param("fail", FAIL, id="fail"),
        pytest.param("inconclusive", INCONCLUSIVE, id="inconclusive"),
        pytest.param(None, INCONCLUSIVE, id="missing-never-passes"),
        pytest.param("PASS", INCONCLUSIVE, id="another-spelling-never-passes"),
    ],
)
def test_a_status_read_from_a_file_is_one_of_three(word: object, expected: str) -> None:
    assert as_status(word) == expected
    assert RunVerdict.of_summary({"verdict": word, "reasons": ["why"]}).status == expected


def test_a_stage_is_judged_once_where_it_is_made_and_keeps_its_facts() -> None:
    facts = {"ok": False, "detail": "its own detail", "exit_code": 2}
    own = Stage.judged("conformance", facts)
    told = Stage.judged("conformance", facts, "servecheck check exit code 2")
    assert own.verdict == RunVerdict(FAIL, ["conformance: its own detail"]), own
    assert told.verdict == RunVerdict(FAIL, ["conformance: servecheck check exit code 2"]), told
    assert told.facts is facts and told.facts["detail"] == "its own detail"  # the file's facts
    assert stage_facts({"conformance": told}) == {"conformance": facts}
    assert not own.ok and Stage.judged("ready", {"ok": True}).verdict.passed
