"""Preconditions: what must hold before a check's verdict means anything.

A check whose point is "a bad request gets a 4xx" passes against a server that answers *every*
request with 401 (a wrong API key) or 404 (a base_url without ``/v1``): it tested nothing. So
such a check declares ``requires=("route-accepts:/chat/completions",)`` and, before it runs,
the same route must accept a good request. When it does not, the check is an *error* (neither
pass nor fail) that names the cause: auth, route, target down, server error, not JSON.

A precondition is probed once per target + model + route and cached in the dict the context
carries (the pytest plugin shares one per session, so per xdist worker), so a catalogue of
checks on one route costs one extra request.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servecheck.client.http import Exchange
from servecheck.redact import SENSITIVE_HEADER, redact

if TYPE_CHECKING:
    from servecheck.checks.context import CheckContext
    from servecheck.checks.registry import Check
    from servecheck.config.model import Target

ROUTE_ACCEPTS = "route-accepts:"


def _good_chat(ctx: CheckContext) -> Exchange:
    return ctx.client.post(
        "/chat/completions", ctx.chat_body("Say OK.", max_tokens=1, temperature=0)
    )


def _good_completions(ctx: CheckContext) -> Exchange:
    body = {"model": ctx.model, "prompt": "Say OK.", "max_tokens": 1, "temperature": 0}
    return ctx.client.post("/completions", body)


def _good_models(ctx: CheckContext) -> Exchange:
    return ctx.client.get("/models")


def _good_responses(ctx: CheckContext) -> Exchange:
    body = {"model": ctx.model, "input": "Say OK.", "max_output_tokens": 16}
    return ctx.client.post("/responses", body)


# The Messages API's version header: every Anthropic client sends it, servers may require it.
ANTHROPIC_VERSION = {"anthropic-version": "2023-06-01"}


def _good_messages(ctx: CheckContext) -> Exchange:
    body = {
        "model": ctx.model,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "Say OK."}],
    }
    return ctx.client.post("/messages", body, headers=ANTHROPIC_VERSION)


def _good_embeddings(ctx: CheckContext) -> Exchange:
    models = list(
        ctx.info.embedding_models
    )  # the models EMBED-* checks send (embed.pooling_models)
    model = ctx.model if ctx.model in models or not models else models[0]
    return ctx.client.post("/embeddings", {"model": model, "input": "hello"})


# route -> (the good request, the JSON key its answer must carry, what to call the request)
ROUTES: dict[str, tuple[Callable[[CheckContext], Exchange], str, str]] = {
    "/chat/completions": (_good_chat, "choices", "a 1-token chat completion"),
    "/completions": (_good_completions, "choices", "a 1-token legacy completion"),
    "/models": (_good_models, "data", "GET /v1/models"),
    "/responses": (_good_responses, "output", "a short Responses API request"),
    "/messages": (_good_messages, "content", "a short Messages API request"),
    "/embeddings": (_good_embeddings, "data", "a one-input embeddings request"),
}


def known(requirement: str) -> bool:
    """Whether ``requirement`` names a precondition this module can probe."""
    return requirement.startswith(ROUTE_ACCEPTS) and requirement[len(ROUTE_ACCEPTS) :] in ROUTES


class CheckError(Exception):
    """The check could not judge the target: a precondition does not hold. Reported as an
    error (neither pass nor fail) with the cause, what came back and a hint."""

    def __init__(
        self, check_id: str, summary: str, *, received: str, hint: str, exchange: Exchange | None
    ) -> None:
        self.check_id = check_id
        self.summary = summary
        self.received = received
        self.hint = hint
        self.exchange = exchange
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"{self.check_id}: not judged: {self.summary}", f"  Received: {self.received}"]
        if self.hint:
            lines.append(f"  Hint: {self.hint}")
        if self.exchange is not None:
            lines.append(f"  Reproduce: {self.exchange.curl()}")
        return redact("\n".join(lines))


@dataclass(frozen=True, slots=True)
class Unmet:
    """Why a route refused a good request: the cause (auth, route, down, never-completes,
    server-error, not-json, refused, rate-limited), a sentence and a hint, and the exchange that showed it."""

    cause: str
    summary: str
    hint: str
    exchange: Exchange


def has_credentials(target: Target) -> bool:
    """Whether ``target`` sends any credentials: an api_key, or a header whose name says it
    holds a secret (Authorization, X-Api-Key, ...)."""
    return target.api_key is not None or any(SENSITIVE_HEADER.search(h) for h in target.headers)


def _auth_hint(credentials: bool) -> str:
    if not credentials:  # "refuses the configured credentials" when there were none misleads
        return (
            "the target requires credentials; none are configured for this target "
            "(api_key / headers in targets.yaml)"
        )
    return (
        "the target refuses the configured credentials: check api_key (and api_key_header) "
        "in targets.yaml, or the ${VAR} it comes from"
    )


def classify(
    ex: Exchange, what: str, key: str, base_url: str, *, credentials: bool = True
) -> Unmet | None:
    """None when ``ex`` is a 2xx JSON object carrying ``key``; else why not (``credentials``:
    whether the target sent any, for the hint of a 401/403)."""
    if ex.error == "timeout" and ex.status is not None:
        # The headers came, the rest never did (an endless stream, a stall): the server is up.
        return Unmet(
            "never-completes",
            f"responses never complete: {what} answered HTTP {ex.status} but {ex.error_message}",
            "the server starts responses it never finishes (no data: [DONE], or a stall after "
            "the headers): read its log; a server that is only slow needs a larger timeout_s",
            ex,
        )
    if ex.error in ("connect", "timeout", "pool"):
        return Unmet(
            "down",
            f"target down: {what} got no answer ({ex.error})",
            "start the server or fix base_url; a slow server needs a larger timeout_s",
            ex,
        )
    if ex.error:
        return Unmet(
            "down",
            f"target down: {what} did not complete ({ex.error})",
            "the server drops the connection; read its log",
            ex,
        )
    status = ex.status or 0
    if status in (401, 403):
        return Unmet(
            "auth",
            f"auth: {what} was refused with HTTP {status}",
            _auth_hint(credentials),
            ex,
        )
    if status == 404:
        return Unmet(
            "route",
            f"route: {what} got HTTP 404",
            f"does base_url end in /v1? (it is {redact(base_url)}); or the model name is not served",
            ex,
        )
    if status == 429:
        return Unmet(
            "rate-limited",
            f"rate limited: {what} got HTTP 429",
            "the target sheds load or limits this client; retry later or raise its limit",
            ex,
        )
    if status >= 500:
        return Unmet(
            "server-error",
            f"server error: {what} got HTTP {status}",
            "read the server log: it fails valid requests",
            ex,
        )
    if not 200 <= status < 300:
        return Unmet(
            "refused",
            f"refused: {what} got HTTP {status}",
            "the server rejects a minimal valid request; read the error message above",
            ex,
        )
    data = ex.json()
    if not isinstance(data, dict):
        page = "an HTML page" if "html" in ex.content_type else "a body that is not a JSON object"
        return Unmet(
            "not-json",
            f"not JSON: {what} was answered {status} with {page}",
            "base_url reaches a sign-in proxy or a web UI, not the API",
            ex,
        )
    if key not in data:
        return Unmet(
            "not-json",
            f"not an answer: {what} was answered {status} without '{key}'",
            "base_url reaches something that is not an OpenAI-compatible API",
            ex,
        )
    return None


def _probe(ctx: CheckContext, route: str) -> Unmet | None:
    send, key, what = ROUTES[route]
    label = what if route == "/models" else f"{what} (POST /v1{route})"
    guard = ctx.client.settings.stall_guard
    # A minimal request that never completes is enough for the run to stop sending to its
    # route (client/stalls.py): a healthy server answers it at once.
    with guard.probing() if guard is not None else contextlib.nullcontext():
        ex = send(ctx)
        if ex.error and ex.error not in ("connect", "timeout", "pool") and ex.status is None:
            # A kept-alive connection the server closed as this request went out (reset, no
            # status): clients retry that once (RFC 9112 9.3.1), and so does the probe; a
            # server that drops every connection drops the second too, and is judged on it.
            ex = send(ctx)
    return classify(ex, label, key, ctx.target.base_url, credentials=has_credentials(ctx.target))


def ensure(check: Check, ctx: CheckContext) -> None:
    """Raise :class:`CheckError` when one of ``check``'s preconditions does not hold; each is
    probed once per target, model and route (cached in ``ctx.preconditions``)."""
    for requirement in check.preconditions:
        route = requirement[len(ROUTE_ACCEPTS) :]
        key = (ctx.target.name, ctx.model, route)
        if key not in ctx.preconditions:
            ctx.preconditions[key] = _probe(ctx, route)
        unmet: Any = ctx.preconditions[key]
        if unmet is not None:
            ctx.exchanges.append(unmet.exchange)
            raise CheckError(
                check.id,
                f"{requirement} does not hold: {unmet.summary}, so the check would test nothing",
                received=unmet.exchange.describe(300),
                hint=unmet.hint,
                exchange=unmet.exchange,
            )


__all__ = [
    "ANTHROPIC_VERSION",
    "ROUTES",
    "ROUTE_ACCEPTS",
    "CheckError",
    "Unmet",
    "classify",
    "ensure",
    "known",
]
