"""``servecheck cutover``: agreement, Levenshtein, and the swap probe against a switching proxy."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.analysis.cutover import analyse_swap
from servecheck.cli import main
from servecheck.probes.agreement import levenshtein, normalised_distance
from servecheck.records.record import RequestRecord, http_error
from servecheck.reference.inprocess import RunningServer
from tests.report.conftest import write_targets


@pytest.mark.parametrize(
    ("a", "b", "d"),
    [
        pytest.param("", "", 0, id="empty"),
        pytest.param("the cat sat", "the cat sat", 0, id="same"),
        pytest.param("the cat sat", "the dog sat", 1, id="substitution"),
        pytest.param("the cat sat", "the cat sat down", 1, id="insertion"),
        pytest.param("a b c d", "b c d", 1, id="deletion"),
        pytest.param("one two three", "four five", 3, id="disjoint"),
    ],
)
def test_word_levenshtein(a: str, b: str, d: int) -> None:
    assert levenshtein(a.split(), b.split()) == d
    assert levenshtein(b.split(), a.split()) == d


def test_normalised_distance_is_between_0_and_1() -> None:
    assert normalised_distance("a b c d", "a b x d") == 0.25
    assert normalised_distance("x", "y z") == 1.0


def _answer(t: float, took: float, status: int, served: str | None) -> RequestRecord:
    """A swap probe's request at ``t`` (s from its start): a 2xx names ``served``, else fails."""
    return RequestRecord(
        target="alias",
        scenario="swap-probe",
        worker="probe",
        seq=int(t * 10),
        t_intended=t,
        t_sent=t,
        t_done=t + took,
        status=status,
        error=None if 200 <= status < 300 else http_error(status),
        served_model=served,
    )


def test_analyse_swap_finds_gap_failures_and_model_change() -> None:
    recs = [_answer(t, 0.05, 200, "old") for t in (0.0, 0.5, 1.0)]
    recs += [_answer(t, 0.01, 502, None) for t in (1.5, 2.0, 2.5)]
    recs += [_answer(t, 0.05, 200, "new") for t in (3.0, 3.5)]
    rep = analyse_swap(recs, 4.0)
    assert (rep.failed, rep.errors) == (3, {"http-502": 3})
    assert (rep.gap_start_s, rep.gap_end_s, rep.longest_gap_s) == (1.05, 3.05, 2.0)
    assert [(c.old, c.new) for c in rep.model_changes] == [("old", "new")]


@pytest.mark.parametrize("seed", [pytest.param(1, id="seed-1")])
def test_swap_under_load_names_the_gap_and_the_model_change(
    tmp_path: Path,
    make_reference: Callable[..., RunningServer],
    make_proxy: Callable[..., object],
    seed: int,
) -> None:
    old = make_reference(models=["old-model"])
    new = make_reference(models=["new-model"])
    proxy = make_proxy(old, new, seed=seed, gap_s=1.5)
    targets = write_targets(
        tmp_path / "targets.yaml",
        alias=(proxy.base_url, ["served-alias"]),  # type: ignore[attr-defined]
        old=(old.base_url, ["old-model"]),
        new=(new.base_url, ["new-model"]),
    )
    code = main(
        [
            "cutover",
            "--swap-under-load",
            "--via",
            "alias",
            "--from",
            "old",
            "--to",
            "new",
            "--duration",
            "5s",
            "--rate",
            "20/s",
            "--targets-file",
            str(targets),
            "--out",
            str(tmp_path),
            "--run-id",
            "swap",
        ]
    )
    data = json.loads((tmp_path / "swap" / "cutover.json").read_text())
    rep = data["report"]
    assert code == 1, "failures during the swap must fail the cutover"
    # Every 502 the proxy served is a failed request in the report, and nothing else failed.
    assert rep["failed"] == proxy.served_502 >= 10 and set(rep["errors"]) == {"http-502"}, rep  # type: ignore[attr-defined]
    # The proxy refused for 1.5 s; the probe sends every 50 ms, so the gap seen is 1.5 s give or take a
    # send interval and a request's latency on either side. The upper bound is loose because a
    # starved CI machine delays the probe's own sends and completions.
    assert 1.2 <= rep["longest_gap_s"] <= 3.5, rep
    assert [(c["old"], c["new"]) for c in rep["model_changes"]] == [("old-model", "new-model")], rep
    # NEW's first answer can only come after the proxy began refusing (it switches after the gap).
    assert rep["first_failure_s"] <= rep["model_changes"][0]["t"], rep
    assert data["expected_models"] == {"from": "old-model", "to": "new-model"}
    html = (tmp_path / "swap" / "report.html").read_text()
    assert "old-model -&gt; new-model" in html and "<svg" in html


def test_pre_cutover_agreement_only(
    tmp_path: Path, make_reference: Callable[..., RunningServer], capsys: pytest.CaptureFixture[str]
) -> None:
    old = make_reference(models=["old-model"])
    new = make_reference(models=["new-model"])
    targets = write_targets(
        tmp_path / "targets.yaml",
        old=(old.base_url, ["old-model"]),
        new=(new.base_url, ["new-model"]),
    )
    code = main(
        [
            "cutover",
            "--from",
            "old",
            "--to",
            "new",
            "--skip-conformance",
            "--no-load",
            "--targets-file",
            str(targets),
            "--out",
            str(tmp_path),
            "--run-id",
            "pre",
        ]
    )
    assert code == 0
    agr = json.loads((tmp_path / "pre" / "agreement.json").read_text())
    assert agr["identical_share"] == 1.0 and agr["compared"] == 12
    assert (tmp_path / "pre" / "junit.xml").exists()


def test_cutover_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cutover", "--from", "a"]) == 2
    assert "give --from OLD and --to NEW" in capsys.readouterr().err
    assert main(["cutover", "--swap-under-load"]) == 2
    assert "--swap-under-load needs --via ALIAS" in capsys.readouterr().err
