"""AUTH-*: API keys.

Wrong-key requests are rationed: Xinference blocks a client IP for an hour after 10 wrong keys
in 300 s (even for the right key afterwards), so a whole run sends at most two of them, one per
check below.
"""

from __future__ import annotations

import secrets

from servecheck.checks.context import CheckContext, CheckSkipped
from servecheck.checks.registry import check
from servecheck.checks.surfaces.err import ERROR_SHAPE, error_shape_problem
from servecheck.client.http import Exchange
from servecheck.redact import Secret

AUTH_STATUSES = (401, 403)


def _wrong_key() -> str:
    # Shaped like a real key so that servers that parse the prefix still reach the comparison.
    return "sk-servecheck-wrong-" + secrets.token_hex(8)


def _real_key(ctx: CheckContext) -> str:
    key = ctx.target.api_key
    if key is None:
        raise CheckSkipped(f"{ctx.check_id}: no api_key configured for {ctx.target.name}")
    return key.reveal() if isinstance(key, Secret) else str(key)


def _key_headers(ctx: CheckContext, key: str) -> dict[str, str]:
    """The target's key header carrying ``key`` instead of the configured one."""
    if ctx.target.api_key_header == "authorization":
        return {"Authorization": "Bearer " + key}
    return {ctx.target.api_key_header: key}


def _chat_without_key(ctx: CheckContext, headers: dict[str, str] | None = None) -> Exchange:
    return ctx.post(
        "/chat/completions",
        ctx.chat_body("Say OK.", max_tokens=1, temperature=0),
        auth=False,
        headers=headers,
    )


@check(
    "AUTH-REQUIRED",
    "the API key is enforced",
    "with a key configured, a chat request without a key and one with a wrong key each get 401 or 403 with an "
    "OpenAI error object, and the same request with the right key gets 200",
    needs_api_key=True,
)
def auth_required(ctx: CheckContext) -> None:
    _real_key(ctx)
    cases = [
        ("no key", _chat_without_key(ctx)),
        ("a wrong key", _chat_without_key(ctx, _key_headers(ctx, _wrong_key()))),
    ]
    for what, ex in cases:
        redo = (
            " (to reproduce, put any wrong key in the curl below)" if what == "a wrong key" else ""
        )
        ctx.expect(
            not ex.error,
            f"a request with {what} did not complete",
            expected="401 or 403",
            received=ex.describe(),
            exchange=ex,
        )
        ctx.expect(
            not ex.ok,
            f"a request with {what} was served",
            expected="401 or 403 with an error object",
            received=ex.describe(300),
            exchange=ex,
            hint="the key is not enforced on /v1/chat/completions: start the engine with its API-key option "
            "(vLLM --api-key, llama.cpp --api-key) or fix the gateway's auth" + redo,
        )
        ctx.expect(
            ex.status in AUTH_STATUSES,
            f"a request with {what} got the wrong status",
            expected="401 or 403",
            received=ex.describe(300),
            exchange=ex,
            hint="clients only recognise an auth failure as 401/403 (a 500 or 400 here usually means the gateway's "
            "key store is broken, e.g. LiteLLM without its database)" + redo,
        )
        problem, deviation = error_shape_problem(ex)
        ctx.expect(
            problem is None,
            f"the {ex.status} for {what} has no OpenAI error object",
            expected=ERROR_SHAPE,
            received=problem or "",
            exchange=ex,
            deviation=deviation,
        )
    ok = ctx.chat("Say OK.", max_tokens=1, temperature=0)
    ctx.expect(
        ok.ok,
        "the configured key is refused",
        expected="HTTP 200 with the configured key",
        received=ok.describe(300),
        exchange=ok,
        hint="the api_key in targets.yaml is not the server's key (or its header is wrong: api_key_header)",
    )


def _leaks(ex: Exchange, secrets_: dict[str, str]) -> list[str]:
    found = []
    headers = "\n".join(f"{k}: {v}" for k, v in ex.response_headers.items())
    for label, value in secrets_.items():
        if value in ex.text:
            found.append(f"the response body contains {label}")
        if value in headers:
            found.append(f"a response header contains {label}")
    return found


@check(
    "AUTH-NO-ECHO",
    "keys are never echoed back",
    "neither a presented wrong key nor the real key appears in any response body or header (401s, other errors "
    "and successful answers)",
    needs_api_key=True,
    requires=("route-accepts:/chat/completions",),
)
def auth_no_echo(ctx: CheckContext) -> None:
    real = _real_key(ctx)
    wrong = _wrong_key()
    exchanges = [
        ("the 401 for a wrong key", _chat_without_key(ctx, _key_headers(ctx, wrong))),
        (
            "a 4xx with the real key",
            ctx.post(
                "/chat/completions",
                {**ctx.chat_body("hi", max_tokens=1), "model": "servecheck-no-such-model"},
            ),
        ),
        ("a 200 with the real key", ctx.chat("Say OK.", max_tokens=1, temperature=0)),
    ]
    for what, ex in exchanges:
        leaks = _leaks(ex, {"the presented wrong key": wrong, "the real API key": real})
        # The received text is redacted (the real key becomes ***); the wrong key is shown on purpose.
        ctx.expect(
            not leaks,
            f"{what}: {'; '.join(leaks)}",
            expected="no key material in responses",
            received=ex.describe(300)
            + (f" (presented key {wrong!r})" if "wrong" in " ".join(leaks) else ""),
            exchange=ex,
            hint="error messages and debug headers must not repeat credentials: they end up in client logs and "
            "browser consoles; log a key id or hash instead"
            + (" (to reproduce, put any wrong key in the curl below)" if "wrong" in what else ""),
        )
