"""One model discovery (servecheck.client.models) that says what it chose and never guesses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.client.models import choose_model
from servecheck.errors import UsageError
from servecheck.reference.inprocess import RunningServer

ROOT = Path(__file__).resolve().parents[2]


def test_explicit_then_declared_then_listed(make_reference: Callable[..., RunningServer]) -> None:
    server = make_reference(models=["a-model", "b-model"])
    assert choose_model(server.base_url, {}, explicit="x").source == "given"
    declared = choose_model(server.base_url, {}, declared=["b-model"])
    assert (declared.model, declared.source) == (
        "b-model",
        "the first of the target's models in targets.yaml",
    )
    listed = choose_model(server.base_url, {})
    assert listed.model == "a-model"
    assert (
        listed.line()
        == "model a-model (the first that GET /v1/models lists of 2: a-model, b-model)"
    )


def test_a_failed_listing_is_a_usage_error_not_a_guess() -> None:
    with pytest.raises(
        UsageError, match=r"cannot list models at http://127\.0\.0\.1:9/v1/models.*pass --model"
    ):
        choose_model("http://127.0.0.1:9/v1", {}, timeout_s=2, what="target 'x'")


def test_no_runner_keeps_its_own_discovery() -> None:
    """The Locust user, the load run and the abandon probe all call servecheck.client.models."""
    for rel in (
        "servecheck/load/locust_user.py",
        "servecheck/load/run.py",
        "servecheck/load/abandon.py",
    ):
        text = (ROOT / rel).read_text()
        assert "servecheck.client.models" in text, rel
        assert '"default"' not in text, f"{rel} falls back to a model named 'default'"


def test_records_are_measured_in_one_place() -> None:
    """The Locust user and the soak cycle derive TTFT/ITL/TPOT with load.stream.record_from_stream."""
    from servecheck.load.records import RequestRecord
    from servecheck.load.stream import record_from_stream

    for rel in ("servecheck/load/locust_user.py", "servecheck/load/soak.py"):
        text = (ROOT / rel).read_text()
        assert "record_from_stream(" in text and "tpot=" not in text, rel
    rec = record_from_stream(
        RequestRecord(target="t", scenario="s", worker="w", seq=1, t_intended=0.0, t_sent=0.0),
        ttft=0.1,
        e2e=0.5,
        token_times=[1.0, 1.1, 1.3],
        usage={"completion_tokens": 5, "prompt_tokens": 7},
    )
    assert rec.itls == pytest.approx([0.1, 0.2]) and rec.output_tokens_client == 3
    assert (rec.output_tokens, rec.prompt_tokens) == (5, 7)
    assert rec.tpot == pytest.approx((0.5 - 0.1) / 4)
