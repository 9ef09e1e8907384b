"""ERR-*: errors for bad requests.

A bad request is the client's fault, so it gets a 4xx with an OpenAI error object
(``{"error": {"message": str, "type": str, ...}}``) that SDKs turn into a readable exception.
A 5xx tells clients to retry the same bad request; a 200 hides the mistake.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.registry import check
from servecheck.checks.surfaces.chat import shape_problems
from servecheck.client.http import Exchange

ERROR_SHAPE = '{"error": {"message": "...", "type": "...", ...}}'
NO_SUCH_ROUTE = "/no-such-route"


def error_shape_problem(ex: Exchange) -> tuple[str | None, str | None]:
    """Why ``ex``'s body is not an OpenAI error object (None when it is), and the deviation key.

    The deviation is ``error-shape-detail`` for FastAPI's ``{"detail": ...}`` shape, which some
    engines use for routes outside their OpenAI layer.
    """
    data = ex.json()
    if not isinstance(data, dict):
        ctype = ex.content_type.split(";")[0] or "no content-type"
        return f"the body is not a JSON object ({ctype}: {body_snippet(ex.text, 160)})", None
    return error_object_problem(data)


def error_object_problem(data: dict[str, Any]) -> tuple[str | None, str | None]:
    """Why the JSON object ``data`` is not an OpenAI error object (None when it is), and the
    deviation key: :func:`error_shape_problem` for an object that arrived whole, or in an SSE
    ``data:`` event (STREAM-ERROR-EVENT)."""
    err = data.get("error")
    if not isinstance(err, dict):
        if "detail" in data and "error" not in data:
            return (
                f"FastAPI's {{'detail': ...}} shape: {body_snippet(data, 160)}",
                "error-shape-detail",
            )
        return f"no 'error' object: {body_snippet(data, 160)}", None
    missing = [k for k in ("message", "type") if not isinstance(err.get(k), str)]
    if missing:
        return (
            f"error.{' and error.'.join(missing)} missing or not a string: {body_snippet(err, 160)}",
            None,
        )
    return None, None


def detail_deviation(data: Any) -> str | None:
    """``error-shape-detail`` where ``data`` is FastAPI's ``{"detail": ...}`` body, else None.

    The deviation key a check names when an error answer lacks the OpenAI error object: profiles
    allow it for engines whose routes outside the OpenAI layer answer that way.
    """
    return "error-shape-detail" if isinstance(data, dict) and "detail" in data else None


def _transport_failed(ctx: CheckContext, ex: Exchange, what: str) -> None:
    if ex.error:
        ctx.fail(
            f"{what}: the request did not complete",
            expected="an HTTP answer within the timeout",
            received=ex.describe(),
            exchange=ex,
            hint="the server hangs or drops the connection on bad input",
        )


def _expect_error_object(ctx: CheckContext, ex: Exchange, what: str) -> None:
    problem, deviation = error_shape_problem(ex)
    ctx.expect(
        problem is None,
        f"{what}: the {ex.status} has no OpenAI error object",
        expected=ERROR_SHAPE,
        received=problem or "",
        exchange=ex,
        deviation=deviation,
        hint='return errors as {"error": {"message", "type", "param", "code"}} so SDKs can report them',
    )


@dataclass(frozen=True, slots=True)
class BadCase:
    """A named bad request: what it breaks, and the body (or raw text) that breaks it."""

    name: str
    what: str
    body: Any


def _send(ctx: CheckContext, case: BadCase, timeout_s: float | None = None) -> Exchange:
    timeout = timeout_s or min(ctx.target.timeout_s, 30.0)
    ex = ctx.post("/chat/completions", case.body, timeout_s=timeout)
    if ex.error in ("read", "protocol") and ex.status is None:
        # A server that closed the kept-alive connection after its previous error answer (Xinference does
        # after a 500): the request never reached it. Once more, on a fresh connection.
        ex = ctx.post("/chat/completions", case.body, timeout_s=timeout)
    return ex


def _judge(
    cases: list[BadCase], results: list[Exchange]
) -> tuple[list[str], list[str], list[str], Exchange | None]:
    """Split the answers into 5xx/transport failures, 2xx acceptances and 422s (each 'name (what): status')."""
    broken, accepted, status_422 = [], [], []
    first: Exchange | None = None
    for case, ex in zip(cases, results, strict=True):
        line = f"{case.name} ({case.what}): {ex.describe(200)}"
        if ex.error or ex.status is None or ex.status >= 500:
            broken.append(line)
        elif ex.status < 400:
            accepted.append(line)
        elif ex.status == 422:
            status_422.append(line)
        else:
            continue
        first = first or ex
    return broken, accepted, status_422, first


def _expect_each_rejected(
    ctx: CheckContext,
    cases: list[BadCase],
    *,
    noun: str,
    expected: str,
    crash_hint: str,
    accepted_hint: str,
    status_422_summary: Callable[[int], str],
    accepted_deviation: str | None = None,
    status_422_hint: str = "",
) -> None:
    """Send each bad request: none may crash (5xx / no answer) or be accepted, 422 is a
    deviation from 400, and every answer carries an OpenAI error object."""
    results = [_send(ctx, c) for c in cases]
    broken, accepted, status_422, first = _judge(cases, results)
    ctx.expect(
        not broken,
        f"{len(broken)} {noun} crashed the request (5xx or no answer)",
        expected=expected,
        received="; ".join(broken),
        exchange=first,
        hint=crash_hint,
    )
    ctx.expect(
        not accepted,
        f"{len(accepted)} {noun} were accepted with a 2xx",
        expected=expected,
        received="; ".join(accepted),
        exchange=first,
        deviation=accepted_deviation,
        hint=accepted_hint,
    )
    ctx.expect(
        not status_422,
        status_422_summary(len(status_422)),
        expected="400",
        received="; ".join(status_422),
        exchange=first,
        deviation="error-status-422",
        hint=status_422_hint,
    )
    shapeless: list[str] = []
    deviations: set[str | None] = set()
    first = None
    for case, ex in zip(cases, results, strict=True):
        problem, deviation = error_shape_problem(ex)
        if problem is not None:
            shapeless.append(f"{case.name} ({case.what}) -> HTTP {ex.status}: {problem}")
            deviations.add(deviation)
            first = first or ex
    ctx.expect(
        not shapeless,
        f"{len(shapeless)} of {len(cases)} refusals have no OpenAI error object",
        expected=ERROR_SHAPE,
        received="; ".join(shapeless),
        exchange=first,
        deviation=deviations.pop() if len(deviations) == 1 else None,
        hint='return errors as {"error": {"message", "type", "param", "code"}} so SDKs can report them',
    )


@check(
    "ERR-MALFORMED-JSON",
    "malformed JSON is a client error",
    "a body that is not valid JSON gets 400 with an OpenAI error object (not 500, not a dropped connection)",
    requires=("route-accepts:/chat/completions",),
)
def err_malformed_json(ctx: CheckContext) -> None:
    raw = json.dumps(ctx.chat_body("Say hello."))[:-2]  # cut before the closing ]}
    ex = ctx.post("/chat/completions", raw)
    _transport_failed(ctx, ex, "malformed JSON")
    ctx.expect(
        ex.status is not None and ex.status < 500,
        "malformed JSON is answered as a server error",
        expected="400 with an error object",
        received=ex.describe(300),
        exchange=ex,
        deviation="malformed-json-500",
        hint="catch the JSON parse error and answer 400 invalid_request_error; a 5xx makes clients retry a request that can never work",
    )
    ctx.expect(
        ex.status != 422 and ex.status is not None and 400 <= ex.status < 500,
        "wrong status for malformed JSON",
        expected="400",
        received=ex.describe(300),
        exchange=ex,
        deviation="error-status-422" if ex.status == 422 else None,
        hint="a body that cannot be parsed is a 400 Bad Request",
    )
    _expect_error_object(ctx, ex, "malformed JSON")


@check(
    "ERR-SHAPE",
    "every 4xx carries an OpenAI error object",
    "4xx answers to bad requests (missing messages, a bad role, an unknown parameter value, a wrong type) are JSON "
    '{"error": {"message": str, "type": str, ...}}',
    requires=("route-accepts:/chat/completions",),
)
def err_shape(ctx: CheckContext) -> None:
    cases = [
        BadCase("missing-messages", "no messages field", {"model": ctx.model, "max_tokens": 1}),
        BadCase(
            "bad-role",
            "role 'wizard'",
            ctx.chat_body([{"role": "wizard", "content": "hi"}], max_tokens=1),
        ),
        BadCase(
            "unknown-model",
            "a model that is not served",
            {**ctx.chat_body("hi", max_tokens=1), "model": "servecheck-no-such-model"},
        ),
        BadCase("max-tokens-string", "max_tokens 'ten'", ctx.chat_body("hi", max_tokens="ten")),
    ]
    problems: list[str] = []
    deviations: set[str | None] = set()
    first: Exchange | None = None
    judged = 0
    for case in cases:
        ex = _send(ctx, case)
        _transport_failed(ctx, ex, f"{case.name} ({case.what})")
        if ex.status is None or not 400 <= ex.status < 500:
            continue  # 5xx and 200 are judged by ERR-VALUES / ERR-TYPES / MODELS-UNKNOWN-404
        judged += 1
        problem, deviation = error_shape_problem(ex)
        if problem is not None:
            problems.append(f"{case.name} ({case.what}) -> HTTP {ex.status}: {problem}")
            deviations.add(deviation)
            first = first or ex
    if judged == 0:
        raise CheckSkipped(
            "ERR-SHAPE: none of the bad requests got a 4xx, so there is no error body to judge"
        )
    ctx.expect(
        not problems,
        f"{len(problems)} of {judged} 4xx answers have no OpenAI error object",
        expected=ERROR_SHAPE,
        received="; ".join(problems),
        exchange=first,
        deviation=deviations.pop() if len(deviations) == 1 else None,
        hint='answer every client error as JSON {"error": {"message", "type", "param", "code"}}; '
        "the openai SDK shows error.message to the user",
    )


@check(
    "ERR-EMPTY-MESSAGES",
    "an empty conversation is rejected",
    "messages: [] gets a 4xx with an OpenAI error object (there is nothing to answer)",
    requires=("route-accepts:/chat/completions",),
)
def err_empty_messages(ctx: CheckContext) -> None:
    ex = ctx.post("/chat/completions", ctx.chat_body([], max_tokens=4))
    _transport_failed(ctx, ex, "empty messages")
    ctx.expect(
        ex.status is not None and ex.status < 500,
        "an empty messages list is answered as a server error",
        expected="400 with an error object",
        received=ex.describe(300),
        exchange=ex,
        hint="validate that messages has at least one entry before rendering the chat template",
    )
    ctx.expect(
        not ex.ok,
        "an empty messages list was served",
        expected="4xx: 'messages' must contain at least one message",
        received=ex.describe(300),
        exchange=ex,
        deviation="empty-messages-accepted",
        hint="the model answers an empty prompt; reject messages: [] with 400",
    )
    _expect_error_object(ctx, ex, "empty messages")


@check(
    "ERR-VALUES",
    "out-of-range values are client errors",
    "negative max_tokens and a negative or above-2 temperature each get a 4xx with an error object; never a 5xx or a 200",
    requires=("route-accepts:/chat/completions",),
)
def err_values(ctx: CheckContext) -> None:
    cases = [
        BadCase("negative-max-tokens", "max_tokens=-5", ctx.chat_body("Say hello.", max_tokens=-5)),
        BadCase(
            "negative-temperature",
            "temperature=-1",
            ctx.chat_body("Say hello.", max_tokens=1, temperature=-1.0),
        ),
        BadCase(
            "temperature-above-2",
            "temperature=3.5",
            ctx.chat_body("Say hello.", max_tokens=1, temperature=3.5),
        ),
    ]
    _expect_each_rejected(
        ctx,
        cases,
        noun="out-of-range value(s)",
        expected="4xx with an error object for each",
        crash_hint="validate sampling parameters before they reach the sampler; a 5xx makes clients retry a request that can never work",
        accepted_deviation="out-of-range-accepted",
        accepted_hint="reject max_tokens < 1 and temperature outside [0, 2] with 400 (the OpenAI API does); "
        "silently clamping hides client bugs",
        status_422_summary=lambda _n: "out-of-range values answered 422",
    )


# ---- values past OpenAI's bounds that engines may legally serve --------------------------
# OpenAI bounds top_logprobs to 0..20, legacy logprobs to 0..5, logit_bias values to -100..100
# with integer token-id keys, and seed to int64, and answers 400 past them. Engines are lenient
# where it costs nothing (measured 2026-12-03): vLLM serves legacy logprobs up to its
# max_logprobs (20) and clamps logit_bias values; llama.cpp serves 25 alternatives, reads a
# non-integer logit_bias key as token text, ignores a key beyond its vocabulary and a bias
# that is no number, and takes any seed. Serving such a request well is
# not wrong; crashing on it, dropping it or answering garbage is.

INT64_END = 2**63
OOV_TOKEN = 100_000_000  # beyond any vocabulary (the largest have about 260,000 ids)
CHAT_ROUTE = "/chat/completions"
RESPONSES_ROUTE = "/responses"


def _range_cases(ctx: CheckContext) -> list[tuple[BadCase, str]]:
    """(case, route) pairs; a case whose body says stream is judged as a stream."""

    def chat(**params: Any) -> dict[str, Any]:
        return ctx.chat_body("Say hello.", max_tokens=2, temperature=0, **params)

    cases = [
        (
            BadCase("top-logprobs-25", "top_logprobs=25", chat(logprobs=True, top_logprobs=25)),
            CHAT_ROUTE,
        ),
        (
            BadCase(
                "top-logprobs-25-stream",
                "top_logprobs=25, streamed",
                chat(logprobs=True, top_logprobs=25, stream=True),
            ),
            CHAT_ROUTE,
        ),
        (
            BadCase("logit-bias-200", "logit_bias value 200", chat(logit_bias={"0": 200})),
            CHAT_ROUTE,
        ),
        (
            BadCase(
                "logit-bias-word-key",
                "logit_bias key 'servecheck'",
                chat(logit_bias={"servecheck": 5}),
            ),
            CHAT_ROUTE,
        ),
        (
            BadCase(
                "logit-bias-word-value",
                "logit_bias value 'high'",
                chat(logit_bias={"0": "high"}),
            ),
            CHAT_ROUTE,
        ),
        (
            BadCase(
                "logit-bias-oov-key",
                f"logit_bias key {OOV_TOKEN} (beyond any vocabulary)",
                chat(logit_bias={str(OOV_TOKEN): 5}),
            ),
            CHAT_ROUTE,
        ),
        (
            BadCase("seed-2-63", "seed=2**63 (int64 ends at 2**63-1)", chat(seed=INT64_END)),
            CHAT_ROUTE,
        ),
    ]
    if ctx.capabilities.get("responses"):
        # The Responses API has no seed (engines add one): refusing it is as right as serving it.
        cases.append(
            (
                BadCase(
                    "responses-seed-2-63",
                    "seed=2**63 on /v1/responses",
                    {
                        "model": ctx.model,
                        "input": "Say hello.",
                        "max_output_tokens": 16,
                        "seed": INT64_END,
                    },
                ),
                RESPONSES_ROUTE,
            )
        )
    if ctx.capabilities.get("completions"):
        legacy = {"model": ctx.model, "prompt": "Once upon a time", "max_tokens": 2}
        cases.append(
            (
                BadCase(
                    "legacy-logprobs-6",
                    "logprobs=6 on /v1/completions",
                    {**legacy, "temperature": 0, "logprobs": 6},
                ),
                "/completions",
            )
        )
    return cases


def _stream_problem(ex: Exchange) -> str | None:
    stream = ex.stream
    if stream is None:
        return f"a 200 without an event stream: {ex.describe(160)}"
    err = stream.error_obj
    inner = err.get("error") if isinstance(err, dict) else None
    if isinstance(inner, dict) and isinstance(inner.get("message"), str):
        return None  # refused inside the stream (vLLM's way), with an error object
    if not stream.chunks or not stream.done:
        return f"the 200 stream is broken ({len(stream.chunks)} chunks, [DONE] {stream.done}): {ex.describe(160)}"
    return None


def _range_problem(case: BadCase, route: str, ex: Exchange) -> tuple[str | None, str | None]:
    """What is wrong with the answer to an out-of-range value (None: a clean 4xx or a good 200)."""
    if ex.error or ex.status is None:
        return f"no answer: {ex.describe(160)}", None
    if ex.status >= 500:
        return ex.describe(200), None
    if ex.status >= 400:
        problem, deviation = error_shape_problem(ex)
        if ex.status == 422:
            return "422 instead of 400", "error-status-422"
        return (f"HTTP {ex.status}: {problem}", deviation) if problem else (None, None)
    if case.body.get("stream"):
        return _stream_problem(ex), None
    data = ex.json()
    if route == RESPONSES_ROUTE:
        good = (
            isinstance(data, dict)
            and data.get("object") == "response"
            and isinstance(data.get("output"), list)
        )
        return (None if good else f"a 200 that is no response object: {ex.describe(160)}"), None
    if not isinstance(data, dict) or not data.get("choices"):
        return f"a 200 that is no completion: {ex.describe(160)}", None
    problems = shape_problems(
        data, obj="chat.completion" if route == CHAT_ROUTE else "text_completion"
    )
    return ("a malformed 200: " + "; ".join(problems[:3]), None) if problems else (None, None)


@check(
    "ERR-VALUES-RANGE",
    "values past OpenAI's bounds are refused cleanly or served well",
    f"top_logprobs 25 (streamed and not), logit_bias value 200, a logit_bias value 'high', a logit_bias key that "
    f"is no token id, a logit_bias key {OOV_TOKEN} (beyond any vocabulary), seed 2**63, "
    "(where responses are declared) seed 2**63 on /v1/responses and (where completions are declared) legacy "
    "logprobs 6 each get a 4xx with an OpenAI error object, an error "
    "event in the stream, or a well-formed 200 (serving more alternatives, clamping a bias or reading a key as "
    "token text is lenient, not wrong); never a 5xx, a dropped request or a malformed 200; and the server answers "
    "a plain request afterwards",
    requires=("route-accepts:/chat/completions",),
)
def err_values_range(ctx: CheckContext) -> None:
    timeout = min(ctx.target.timeout_s, 30.0)
    found: list[str] = []
    deviations: set[str | None] = set()
    first: Exchange | None = None
    for case, route in _range_cases(ctx):
        stream = bool(case.body.get("stream"))
        ex = ctx.post(route, case.body, stream=stream, timeout_s=timeout)
        problem, deviation = _range_problem(case, route, ex)
        if problem is not None:
            found.append(f"{case.name} ({case.what}): {problem}")
            deviations.add(deviation)
            first = first or ex
    ctx.expect(
        not found,
        f"{len(found)} out-of-range value(s) got a server error, no answer or a malformed answer",
        expected="for each: a 4xx with an OpenAI error object (OpenAI's own answer), or a well-formed 200",
        received="; ".join(found),
        exchange=first,
        deviation=deviations.pop() if len(deviations) == 1 else None,
        hint="validate top_logprobs, logprobs, logit_bias and seed before they reach the sampler "
        "(unchecked casts overflow); a 5xx makes clients retry a request that can never work",
    )
    after = ctx.chat("Say hello.", max_tokens=2, temperature=0)
    ctx.ok_json(after, "a plain request after the out-of-range values")


@check(
    "ERR-TYPES",
    "wrong field types are client errors",
    "messages as a string, max_tokens and temperature as words and the body as an array each get "
    "400 with an error object; never a 5xx",
    requires=("route-accepts:/chat/completions",),
)
def err_types(ctx: CheckContext) -> None:
    cases = [
        BadCase(
            "messages-string",
            "messages as a string",
            {"model": ctx.model, "messages": "Say hello.", "max_tokens": 1},
        ),
        # Not "4": pydantic-based servers (vLLM) coerce numeric strings, which is lenient rather than wrong.
        BadCase(
            "max-tokens-string",
            "max_tokens as a word",
            ctx.chat_body("Say hello.", max_tokens="four"),
        ),
        BadCase(
            "temperature-string",
            "temperature as a string",
            ctx.chat_body("Say hello.", max_tokens=1, temperature="hot"),
        ),
        BadCase(
            "body-array", "the body is a JSON array", [ctx.chat_body("Say hello.", max_tokens=1)]
        ),
    ]
    _expect_each_rejected(
        ctx,
        cases,
        noun="wrong type(s)",
        expected="400 with an error object for each",
        crash_hint="validate the request body against the schema (types first) before using it",
        accepted_hint="coercing '4' to 4 hides client bugs; reject wrong types with 400",
        status_422_summary=lambda n: f"{n} wrong type(s) answered 422",
        status_422_hint="the OpenAI API answers invalid types with 400 invalid_request_error",
    )


@check(
    "ERR-UNKNOWN-ROUTE",
    "an unknown route is a JSON 404",
    "GET /v1/no-such-route gets 404 with an OpenAI error object (not a web page, not 200)",
    requires=("route-accepts:/models",),
)
def err_unknown_route(ctx: CheckContext) -> None:
    ex = ctx.get(NO_SUCH_ROUTE)
    _transport_failed(ctx, ex, "unknown route")
    ctx.expect(
        ex.status == 404,
        "an unknown route is not answered 404",
        expected="HTTP 404 with an error object",
        received=ex.describe(300),
        exchange=ex,
        hint="a 200 (or a web UI page) for unknown API paths makes typos in base_url look like a working server",
    )
    _expect_error_object(ctx, ex, "unknown route")


# ---------------------------------------------------------------------------------------------
# Malformed parts of a chat request. Each variant is malformed per the OpenAI API (the openai SDK's
# request types): a request OpenAI itself serves (tool_choice "none" or "auto" without tools, a
# json_schema without its optional schema, a custom tool) is not sent.

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
NAMED_CHOICE: dict[str, Any] = {"type": "function", "function": {"name": "get_weather"}}


def _malformed(
    ctx: CheckContext,
    cases: list[BadCase],
    noun: str,
    fix: str,
    accepted_deviation: str | None = None,
) -> None:
    """The ERR-* verdict for malformed parts of a request: every variant a 4xx with an error object."""
    _expect_each_rejected(
        ctx,
        cases,
        noun=noun,
        expected="4xx with an OpenAI error object for each",
        crash_hint=f"{fix}; a 5xx (or a dropped connection) makes clients retry a request that can never work",
        accepted_hint=f"{fix}; serving a malformed request hides the client's bug behind an answer it did not ask for",
        status_422_summary=lambda n: f"{n} malformed request(s) answered 422",
        status_422_hint="the OpenAI API answers malformed requests with 400 invalid_request_error",
        accepted_deviation=accepted_deviation,
    )


def _valid_variant_served(ctx: CheckContext, what: str, **params: Any) -> None:
    """A server that refuses every request carrying the field also refuses the malformed ones:
    that is not validation, so the well-formed variant must be served first."""
    ex = ctx.chat("What is the weather in Paris?", max_tokens=8, **params)
    ctx.ok_json(ex, f"{what} (well-formed, sent before the malformed ones)")


@check(
    "ERR-NON-OBJECT-BODY",
    "a JSON body that is not an object is a client error",
    "a body that is valid JSON but an array, a string, a number or null gets a 4xx with an OpenAI error "
    "object; never a 5xx, a dropped connection or a 200",
    requires=("route-accepts:/chat/completions",),
)
def err_non_object_body(ctx: CheckContext) -> None:
    good = ctx.chat_body("Say hello.", max_tokens=1)
    cases = [
        BadCase("array", "the body is a JSON array", [good]),
        BadCase("string", "the body is a JSON string", json.dumps(json.dumps(good))),
        BadCase("number", "the body is the JSON number 42", "42"),
        BadCase("null", "the body is JSON null", "null"),
    ]
    _malformed(
        ctx,
        cases,
        "non-object bodies",
        "check that the parsed body is a JSON object before reading fields from it",
    )


@check(
    "ERR-RESPONSE-FORMAT",
    "a malformed response_format is a client error",
    "response_format that is not an object, has no or an unknown type, or (with json_schema) lacks the "
    "json_schema object or gives a schema that is not an object, gets a 4xx with an OpenAI error object; "
    "never a 5xx or a 200 that ignores it. A well-formed json_object request is served first (a server "
    "that refuses any response_format fails)",
    requires=("json_object", "route-accepts:/chat/completions"),
)
def err_response_format(ctx: CheckContext) -> None:
    _valid_variant_served(
        ctx, "a json_object response_format", response_format={"type": "json_object"}
    )
    formats: list[tuple[str, str, Any]] = [
        ("not-an-object", "response_format 'json_object' (a string)", "json_object"),
        ("unknown-type", "response_format type 'yaml'", {"type": "yaml"}),
        ("no-type", "response_format without a type", {"schema": {"type": "object"}}),
    ]
    if ctx.capabilities.get("json_schema", False):
        formats += [
            (
                "no-json-schema",
                "type json_schema without the json_schema object",
                {"type": "json_schema"},
            ),
            (
                "schema-not-object",
                "json_schema.schema is a string",
                {"type": "json_schema", "json_schema": {"name": "answer", "schema": "object"}},
            ),
        ]
    cases = [
        BadCase(name, what, ctx.chat_body("Give a name as JSON.", max_tokens=8, response_format=rf))
        for name, what, rf in formats
    ]
    _malformed(
        ctx,
        cases,
        "malformed response_format(s)",
        "validate response_format (an object with type text, json_object or json_schema, and for "
        "json_schema a json_schema object whose schema is an object) and answer 400",
    )


@check(
    "ERR-TOOLS-MALFORMED",
    "malformed tools are a client error",
    "tools that is not a list, a tool that is not an object, without function, of an unknown type, a "
    "function without a name, or parameters that are not an object (a JSON-encoded string) each get a 4xx "
    "with an OpenAI error object; never a 5xx or a 200. A request with one well-formed tool is served "
    "first (a server that refuses any tools fails)",
    requires=("tools", "route-accepts:/chat/completions"),
)
def err_tools_malformed(ctx: CheckContext) -> None:
    _valid_variant_served(ctx, "one well-formed tool", tools=[WEATHER_TOOL])
    fn = WEATHER_TOOL["function"]
    variants: list[tuple[str, str, Any]] = [
        ("not-a-list", "tools is one tool object, not a list", WEATHER_TOOL),
        ("tool-a-string", "a tool is the string 'get_weather'", ["get_weather"]),
        ("no-function", "a tool of type function without function", [{"type": "function"}]),
        ("unknown-type", "a tool of type 'database'", [{"type": "database", "function": fn}]),
        (
            "no-name",
            "a function without a name",
            [{"type": "function", "function": {"parameters": fn["parameters"]}}],
        ),
        (
            "parameters-string",
            "parameters as a JSON-encoded string",
            [{"type": "function", "function": {**fn, "parameters": json.dumps(fn["parameters"])}}],
        ),
    ]
    cases = [
        BadCase(
            name, what, ctx.chat_body("What is the weather in Paris?", max_tokens=8, tools=tools)
        )
        for name, what, tools in variants
    ]
    _malformed(
        ctx,
        cases,
        "malformed tools",
        "validate tools (a list of {type: function, function: {name, parameters: object}}) before "
        "rendering the chat template",
    )


@check(
    "ERR-TOOL-CHOICE-MALFORMED",
    "a malformed tool_choice is a client error",
    "tool_choice 'always' (not none / auto / required), 'required' with no tools and (where named choice "
    "is declared) an object without function or a named function with no tools each get a 4xx with an "
    "OpenAI error object; never a 5xx or a 200. A tool_choice 'auto' request with a tool is served first "
    "(a server that refuses any tools fails)",
    requires=("tools", "route-accepts:/chat/completions"),
)
def err_tool_choice_malformed(ctx: CheckContext) -> None:
    _valid_variant_served(
        ctx, "tool_choice 'auto' with a tool", tools=[WEATHER_TOOL], tool_choice="auto"
    )
    prompt = "What is the weather in Paris?"
    with_tools = {"tools": [WEATHER_TOOL], "max_tokens": 8}
    cases = [
        BadCase(
            "unknown-string",
            "tool_choice 'always'",
            ctx.chat_body(prompt, tool_choice="always", **with_tools),
        ),
        BadCase(
            "required-no-tools",
            "tool_choice 'required' and no tools",
            ctx.chat_body(prompt, tool_choice="required", max_tokens=8),
        ),
    ]
    if ctx.capabilities.get("tool_choice_named", False):
        cases += [
            BadCase(
                "object-no-function",
                "tool_choice {type: function} without function",
                ctx.chat_body(prompt, tool_choice={"type": "function"}, **with_tools),
            ),
            BadCase(
                "named-no-tools",
                "tool_choice naming get_weather and no tools",
                ctx.chat_body(prompt, tool_choice=NAMED_CHOICE, max_tokens=8),
            ),
        ]
    _malformed(
        ctx,
        cases,
        "malformed tool_choice(s)",
        "accept tool_choice none, auto, required or {type: function, function: {name}}, and refuse "
        "required or a named function when there are no tools to call (the OpenAI API does)",
    )


@check(
    "ERR-MESSAGES-MALFORMED",
    "malformed messages are a client error",
    "messages that is an object, a message that is a string, a message without a role, with role "
    "'narrator' or with content 42 each get a 4xx with an OpenAI error object; never a 5xx or a 200",
    requires=("route-accepts:/chat/completions",),
)
def err_messages_malformed(ctx: CheckContext) -> None:
    hello = {"role": "user", "content": "Say hello."}
    variants: list[tuple[str, str, Any]] = [
        ("not-a-list", "messages is one message object, not a list", hello),
        ("message-a-string", "a message is the string 'Say hello.'", ["Say hello."]),
        ("no-role", "a message without a role", [{"content": "Say hello."}]),
        ("content-number", "content is the number 42", [{"role": "user", "content": 42}]),
    ]
    cases = [
        BadCase(name, what, {"model": ctx.model, "messages": messages, "max_tokens": 1})
        for name, what, messages in variants
    ]
    fix = (
        "validate each message (an object with a known role and string or content-part content) "
        "before rendering the chat template"
    )
    _malformed(ctx, cases, "malformed messages", fix)
    # Judged on its own: an engine may render custom roles on purpose (deviation custom-roles).
    role = [{"role": "narrator", "content": "Say hello."}]
    unknown = BadCase(
        "unknown-role", "role 'narrator'", {"model": ctx.model, "messages": role, "max_tokens": 1}
    )
    _malformed(
        ctx, [unknown], "messages with an unknown role", fix, accepted_deviation="custom-roles"
    )
