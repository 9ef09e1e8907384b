"""A server that refuses what a check needs is never judged by that check: the refusals the check
would accept as correct come from a server that serves nothing of the kind."""

from __future__ import annotations

import pytest

from servecheck.checks import load_all, run_with_allowances
from servecheck.checks.preconditions import CheckError
from servecheck.reference.hostile import hostile
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
