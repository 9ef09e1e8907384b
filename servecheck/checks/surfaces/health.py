"""HEALTH-*: the health endpoint and readiness."""

from __future__ import annotations

from servecheck.checks.context import CheckContext
from servecheck.checks.health import probe_health
from servecheck.checks.registry import check


@check(
    "HEALTH-READY",
    "the health endpoint says ready",
    "GET /health (or the engine's readiness path) answers 2xx; 503 is reported as 'loading', no answer as 'down'",
)
def health_ready(ctx: CheckContext) -> None:
    state = probe_health(ctx.client, ctx.target, timeout_s=min(10.0, ctx.target.timeout_s))
    if state.exchange is not None:
        ctx.exchanges.append(state.exchange)
    hints = {
        "loading": "the engine is still loading weights; run `servecheck wait-ready --target NAME` before checks",
        "down": "start the server or fix base_url/health_url in targets.yaml",
        "unhealthy": "read the server log: the engine reports itself unhealthy",
    }
    ctx.expect(
        state.state == "ready",
        f"the target is {state.state}",
        expected="a 2xx answer from the health endpoint",
        received=state.detail,
        exchange=state.exchange,
        hint=hints.get(state.state, ""),
    )


@check(
    "HEALTH-SERVES",
    "a ready server actually generates",
    "after a 2xx health answer, a 1-token chat completion succeeds (health must not report ready before the model can serve)",
)
def health_serves(ctx: CheckContext) -> None:
    state = probe_health(ctx.client, ctx.target)
    ctx.expect(
        state.state == "ready",
        "the health endpoint is not ready, so serving cannot be judged",
        expected="a 2xx health answer",
        received=state.detail,
        exchange=state.exchange,
    )
    ex = ctx.chat("Say OK.", max_tokens=1, temperature=0)
    ctx.expect(
        ex.served,
        "health says ready but a minimal completion fails",
        expected="HTTP 200 with a JSON chat completion for a 1-token request",
        received=ex.describe(),
        exchange=ex,
        hint="the health route answers before the model is loaded or after it died; make readiness depend on the engine",
    )
