"""Issue 25: a check that sends malformed requests never hangs and never reads an unbounded
body, even when the server takes the good request and then stalls or floods its refusals.

The hostile servers answer the check's precondition probe (one good request), then send 400
headers and never the body (``refusals-stall``), or a 400 error body of 200 MB
(``refusals-huge``). Each check must end as a failure that names servecheck's bound, having read
a bounded part of what was sent. No timed assertions: the servers stop on their own only after
``max_s``, so a missing bound shows as the wrong message, not as a slow test.
"""

from __future__ import annotations

import pytest

from servecheck.checks import CheckFailed, load_all, run_with_allowances
from servecheck.checks.preconditions import CheckError
from servecheck.reference.hostile import hostile
from tests.hostile.support import hostile_context

CHECKS = load_all()
# The checks whose point is to send requests a server must refuse.
MALFORMED = (
    "ERR-MALFORMED-JSON",
    "ERR-TYPES",
    "ERR-VALUES",
    "ERR-VALUES-RANGE",
    "ERR-NON-OBJECT-BODY",
    "ERR-RESPONSE-FORMAT",
    "ERR-TOOLS-MALFORMED",
    "ERR-TOOL-CHOICE-MALFORMED",
    "ERR-MESSAGES-MALFORMED",
    "COMPL-PROMPT-INVALID",
    "RESPONSES-ERROR",
)
SERVER_S = 60.0
BOUNDED = 48 * 1024 * 1024  # far below the 200 MB refusals-huge sends per request


@pytest.mark.slow
@pytest.mark.parametrize("name", ["refusals-stall", "refusals-huge"])
@pytest.mark.parametrize("check_id", MALFORMED)
def test_malformed_request_checks_end_bounded(name: str, check_id: str) -> None:
    with hostile(name, max_s=SERVER_S) as srv:
        ctx = hostile_context(srv, check_id, timeout_s=1)
        try:
            with pytest.raises((CheckFailed, CheckError)) as excinfo:
                run_with_allowances(CHECKS[check_id], ctx)
        finally:
            ctx.client.close()
        sent, asked = srv.sent_bytes, srv.api_requests
    text = str(excinfo.value)
    assert asked >= 2, f"{check_id} sent no request past the probe: {text}"
    assert text.startswith(f"{check_id}: "), text
    bound = "did not complete within 1 s" if name == "refusals-stall" else "exceeded"
    assert bound in text, text
    requests = max(asked - 1, 1)
    assert sent < requests * BOUNDED, (sent, requests)
