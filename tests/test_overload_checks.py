"""OVERLOAD-* beyond the fault matrix: a server that sheds cleanly passes and was seen shedding;
Retry-After is demanded only where the engine profile says the engine sends it; no declared
capacity is a skip with the reason, never a pass."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from servecheck.checks import CheckSkipped, load_all, run_with_allowances
from servecheck.checks.surfaces.overload import run_burst
from servecheck.reference.inprocess import RunningServer
from tests.support import context_for

CHECKS = load_all()


def test_clean_shedding_passes_and_sheds(make_reference: Callable[..., RunningServer]) -> None:
    server = make_reference(max_inflight=4, ttft_ms=300)
    ctx = context_for(server, "OVERLOAD-BURST")
    try:
        burst = run_burst(ctx)
        assert len(burst.results) == 12
        assert burst.shed, f"the burst was never shed: {burst.tally()}"
        assert all(ex.response_headers.get("retry-after") == "1" for ex in burst.shed)
        for check_id in ("OVERLOAD-BURST", "OVERLOAD-RECOVERS"):
            run_with_allowances(CHECKS[check_id], context_for(server, check_id))
    finally:
        ctx.client.close()


def test_retry_after_only_where_the_profile_says(
    make_reference: Callable[..., RunningServer],
) -> None:
    server = make_reference("overload-no-retry-after", ttft_ms=300)
    # vLLM's profile does not promise Retry-After: 429s with an error object are enough there.
    ctx = context_for(server, "OVERLOAD-BURST", engine="vllm")
    try:
        run_with_allowances(CHECKS["OVERLOAD-BURST"], ctx)
    finally:
        ctx.client.close()


def test_no_capacity_is_a_skip_with_the_reason(reference: RunningServer) -> None:
    ctx = context_for(reference, "OVERLOAD-BURST", capacity=None)
    try:
        with pytest.raises(CheckSkipped, match="declares no capacity"):
            run_with_allowances(CHECKS["OVERLOAD-BURST"], ctx)
    finally:
        ctx.client.close()
