"""A server that refuses what a check needs is never judged by that check: the refusals the check
would accept as correct come from a server that serves nothing of the kind."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from servecheck.checks import load_all, run_with_allowances
from servecheck.checks.preconditions import CheckError
from servecheck.reference.hostile import hostile
from servecheck.reference.inprocess import RunningServer
from tests.hostile.support import hostile_context

CHECKS = load_all()


@pytest.mark.parametrize(
    ("server", "check_id"),
    [
        # every request 429 with an error object and Retry-After: each "shed" answer looks right
        pytest.param("always-429", "OVERLOAD-STREAM", id="always-429-overload-stream"),
        # every stream refused with a clean 400: each oversized request's "refusal" looks right
        pytest.param("refuses-streams", "STREAM-ERROR-EVENT", id="refuses-streams-error-event"),
    ],
)
def test_a_server_refusing_everything_is_not_judged(server: str, check_id: str) -> None:
    with hostile(server) as srv:
        ctx = hostile_context(srv, check_id, capacity=2)
        try:
            with pytest.raises(CheckError) as excinfo:
                run_with_allowances(CHECKS[check_id], ctx)
        finally:
            ctx.client.close()
    assert excinfo.value.check_id == check_id


def test_a_probe_retries_once_on_a_connection_reset_before_any_answer() -> None:
    """A kept-alive connection the server closed as the probe went out is retried once (as
    clients do), so one reset does not turn every check behind it into 'not judged'; a server
    that resets every connection is still judged on it (close-mid-chunk, tests above)."""
    from servecheck.checks.preconditions import _probe

    with hostile("drops-first") as srv:
        ctx = hostile_context(srv, "MODELS-RETRIEVE")
        try:
            assert _probe(ctx, "/models") is None
            assert _probe(ctx, "/chat/completions") is None
        finally:
            ctx.client.close()
        # each route was reset once and answered on the retry
        assert {("dropped", "/v1/models"), ("dropped", "/v1/chat/completions")} <= srv.dropped


@pytest.mark.parametrize(
    ("key", "headers", "hint"),
    [
        pytest.param(
            None,
            {},
            "the target requires credentials; none are configured for this target "
            "(api_key / headers in targets.yaml)",
            id="none-configured",
        ),
        pytest.param(
            "sk-wrong-key-000",
            {},
            "the target refuses the configured credentials: check api_key",
            id="wrong-key",
        ),
        pytest.param(
            None,
            {"X-Api-Key": "sk-wrong-key-000"},
            "the target refuses the configured credentials",
            id="wrong-header",
        ),
    ],
)
def test_the_401_hint_says_whether_credentials_were_configured(
    make_reference: Callable[..., RunningServer],
    key: str | None,
    headers: dict[str, str],
    hint: str,
) -> None:
    """Issue 41: "refuses the configured credentials" was said when none were configured."""
    from servecheck.checks.context import CheckContext
    from servecheck.checks.preconditions import _probe
    from servecheck.client.http import ServeClient
    from servecheck.config.model import Target
    from servecheck.engines.registry import profile_for, resolve_capabilities

    server = make_reference(api_key="sk-the-right-key-1")
    values: dict[str, object] = {"name": "keyed", "base_url": server.base_url, "models": ["m"]}
    target = Target.model_validate(
        {**values, "headers": headers, **({"api_key": key} if key else {})}
    )
    ctx = CheckContext(
        check_id="CHAT-BASIC",
        target=target,
        model="m",
        profile=profile_for(target),
        capabilities=resolve_capabilities(target),
        info=None,  # type: ignore[arg-type]  # the probe does not read it
        client=ServeClient.for_target(target),
    )
    try:
        unmet = _probe(ctx, "/chat/completions")
    finally:
        ctx.client.close()
    assert unmet is not None and unmet.cause == "auth", unmet
    assert unmet.hint.startswith(hint), unmet.hint
    assert ("none are configured" in unmet.hint) is (key is None and not headers)
