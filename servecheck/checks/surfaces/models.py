"""MODELS-*: /v1/models, served names and context length."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from servecheck.checks.context import CheckContext, body_snippet
from servecheck.checks.preconditions import CheckError
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
    "a chat request naming a model that is not served gets 404 (or 400) with an OpenAI error "
    "object, and so does a legacy /v1/completions request (where completions are declared; not "
    "judged, an error, when the same request for the served model is not answered 200)",
    requires=("route-accepts:/chat/completions",),
)
def models_unknown(ctx: CheckContext) -> None:
    body = ctx.chat_body("Say hello.", max_tokens=1)
    body["model"] = NO_SUCH_MODEL
    _expect_refused(ctx, ctx.post("/chat/completions", body), "a chat request")
    if ctx.capabilities.get("completions"):
        legacy = {"model": ctx.model, "prompt": "Say hello.", "max_tokens": 1}
        served = ctx.post("/completions", legacy)
        if served.error or not served.ok:
            # A route that refuses everything refuses the unknown model too: that proves nothing.
            raise CheckError(
                ctx.check_id,
                "the /v1/completions part is not judged: the same request for the served model "
                "was not answered 200",
                received=served.describe(300),
                hint="serve /v1/completions for the served model (or declare completions: false)",
                exchange=served,
            )
        legacy["model"] = NO_SUCH_MODEL
        _expect_refused(ctx, ctx.post("/completions", legacy), "a /v1/completions request")


def _expect_refused(ctx: CheckContext, ex: Exchange, what: str) -> None:
    """``ex``, which named a model that is not served, is a 404 (or 400) with an error object."""
    ctx.expect(
        not ex.error,
        f"{what}: the request did not complete",
        expected="a 404 answer",
        received=ex.describe(),
        exchange=ex,
    )
    ctx.expect(
        not ex.ok,
        f"{what} for a model that is not served was answered {ex.status}",
        expected=f"404 (or 400) for model {NO_SUCH_MODEL!r}",
        received=ex.describe(300),
        exchange=ex,
        deviation="model-name-ignored",
        hint="a wrong model name in a client silently gets another model; route or reject unknown "
        "names on every generation route (a router that checks chat but not the legacy route "
        "serves it there)",
    )
    ctx.expect(
        ex.status in (400, 404),
        f"{what}: wrong status for an unknown model",
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
        f"{what}: the {ex.status} has no OpenAI error object",
        expected='{"error": {"message": ..., "type": ...}}',
        received=ex.describe(300),
        exchange=ex,
        deviation=detail_deviation(data),
    )


def _transport(ctx: CheckContext, ex: Exchange, what: str) -> None:
    ctx.expect(
        not ex.error,
        f"{what}: the request did not complete",
        expected="an HTTP answer",
        received=ex.describe(),
        exchange=ex,
    )


@check(
    "MODELS-RETRIEVE",
    "GET /v1/models/{id} retrieves a served model",
    "GET /v1/models/{id} for the served model (the id percent-encoded, as the openai SDK sends it) answers 200 "
    "with a Model object carrying the same id and object 'model'; an unknown id gets 404 (or 400) with an "
    "OpenAI error object. A server without the route fails: the SDK's client.models.retrieve() raises "
    "NotFoundError there",
    requires=("route-accepts:/models",),
)
def models_retrieve(ctx: CheckContext) -> None:
    name = ctx.model
    ex = ctx.get(f"/models/{quote(name, safe='')}")
    _transport(ctx, ex, f"GET /v1/models/{name}")
    ctx.expect(
        ex.status != 404,
        f"GET /v1/models/{name} answers 404 for a model /v1/models lists",
        expected=f'200 {{"id": "{name}", "object": "model", ...}}',
        received=ex.describe(300),
        exchange=ex,
        hint="the server has no GET /v1/models/{model} route (or cannot find a listed model by it): "
        "the openai SDK's client.models.retrieve() and the clients built on it raise NotFoundError; "
        "serve the route (LiteLLM does) or exclude MODELS-RETRIEVE where no client retrieves a model",
    )
    data = ctx.ok_json(ex, f"GET /v1/models/{name}")
    ctx.expect(
        data.get("id") == name and data.get("object") == "model",
        f"GET /v1/models/{name} is not the Model object of that model",
        expected=f'{{"id": "{name}", "object": "model", "created": ..., "owned_by": ...}}',
        received=body_snippet(data, 400),
        exchange=ex,
        hint="answer with the same entry /v1/models lists for this id; typed clients read id and object",
    )
    ux = ctx.get(f"/models/{NO_SUCH_MODEL}")
    _transport(ctx, ux, f"GET /v1/models/{NO_SUCH_MODEL}")
    ctx.expect(
        not ux.ok,
        "an unknown model id is retrieved with a 200",
        expected=f"404 for {NO_SUCH_MODEL!r}",
        received=ux.describe(300),
        exchange=ux,
        hint="a client checking whether a model exists is told every name does",
    )
    ctx.expect(
        ux.status in (400, 404),
        "wrong status for an unknown model id",
        expected="404 (or 400)",
        received=ux.describe(300),
        exchange=ux,
        deviation="error-status-422" if ux.status == 422 else None,
    )
    data = ux.json()
    ctx.expect(
        isinstance(data, dict)
        and isinstance(data.get("error"), dict)
        and isinstance(data["error"].get("message"), str),
        f"the {ux.status} for an unknown model id has no OpenAI error object",
        expected='{"error": {"message": ..., "type": ...}}',
        received=ux.describe(300),
        exchange=ux,
        deviation=detail_deviation(data),
    )
