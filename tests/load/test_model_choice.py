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
