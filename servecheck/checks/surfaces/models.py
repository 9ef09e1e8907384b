"""MODELS-*: /v1/models, served names and context length."""

from __future__ import annotations

from typing import Any

from servecheck.checks.context import CheckContext, body_snippet
from servecheck.checks.registry import check
from servecheck.checks.surfaces.err import detail_deviation
from servecheck.client.http import Exchange

NO_SUCH_MODEL = "servecheck-no-such-model"


def _list(ctx: CheckContext) -> tuple[list[dict[str, Any]], Exchange]:
    """The model entries of GET /v1/models (checked to be a model list) and the exchange."""
    ex = ctx.get("/models")
    data = ctx.ok_json(ex, "GET /v1/models")
    entries = data.get("data")
    ctx.expect(
        isinstance(entries, list)
        and all(isinstance(e, dict) and isinstance(e.get("id"), str) for e in entries),
        "/v1/models is not an OpenAI model list",
        expected='{"object": "list", "data": [{"id": "...", "object": "model"}]}',
        received=body_snippet(data),
        exchange=ex,
    )
    listed: list[dict[str, Any]] = entries if isinstance(entries, list) else []
    return listed, ex


@check(
    "MODELS-EXPECTED",
    "every expected model name is served",
    "GET /v1/models lists each name in the target's `models` (the names clients will send)",
)
def models_expected(ctx: CheckContext) -> None:
    entries, ex = _list(ctx)
    served = [e["id"] for e in entries]
    expected = ctx.target.models or [ctx.model]
    missing = [m for m in expected if m not in served]
    ctx.expect(
        not missing,
        f"expected model name(s) not served: {', '.join(missing)}",
        expected=f"/v1/models lists {', '.join(expected)}",
        received=f"it lists {', '.join(served) or 'nothing'}",
        exchange=ex,
        hint="clients will get 404s: fix --served-model-name on the engine or `models` in targets.yaml",
    )


@check(
    "MODELS-CONTEXT",
    "the served context length is known and matches the declaration",
    "the engine reports its context length (max_model_len or equivalent) and it equals `context_length` in targets.yaml",
)
def models_context(ctx: CheckContext) -> None:
    info = ctx.info
    _, ex = _list(ctx)
    if info.discovered_context is None:
        ctx.fail(
            "the server does not report its context length",
            expected="max_model_len (or meta.n_ctx) in /v1/models",
            received="no context length field",
            exchange=ex,
            deviation="models-no-context-field",
        )
    declared = ctx.target.context_length
    if declared is not None:
        ctx.expect(
            info.discovered_context == declared,
            "the served context length differs from targets.yaml",
            expected=f"context_length {declared} (targets.yaml)",
            received=f"{info.discovered_context} from {info.context_source}",
            exchange=ex,
            hint="the engine was launched with another --max-model-len / -c than planned, or targets.yaml is stale",
        )


@check(
    "MODELS-UNKNOWN-404",
    "an unknown model name is refused",
    "a chat request naming a model that is not served gets 404 (or 400) with an OpenAI error object",
    requires=("route-accepts:/chat/completions",),
)
def models_unknown(ctx: CheckContext) -> None:
    body = ctx.chat_body("Say hello.", max_tokens=1)
    body["model"] = NO_SUCH_MODEL
    ex = ctx.post("/chat/completions", body)
    ctx.expect(
        not ex.error,
        "the request did not complete",
        expected="a 404 answer",
        received=ex.describe(),
        exchange=ex,
    )
    ctx.expect(
        not ex.ok,
        "a request for a model that is not served was answered 200",
        expected=f"404 (or 400) for model {NO_SUCH_MODEL!r}",
        received=ex.describe(300),
        exchange=ex,
        deviation="model-name-ignored",
        hint="a wrong model name in a client silently gets another model; route or reject unknown names",
    )
    ctx.expect(
        ex.status in (400, 404),
        "wrong status for an unknown model",
        expected="404 (or 400)",
        received=ex.describe(300),
        exchange=ex,
        deviation="error-status-422" if ex.status == 422 else None,
    )
    data = ex.json()
    ctx.expect(
        isinstance(data, dict)
        and isinstance(data.get("error"), dict)
        and isinstance(data["error"].get("message"), str),
        "the 404 has no OpenAI error object",
        expected='{"error": {"message": ..., "type": ...}}',
        received=ex.describe(300),
        exchange=ex,
        deviation=detail_deviation(data),
    )
