"""JSON-*: response_format json_object and json_schema.

Schemas are bounded on purpose (maxLength, enum, minimum/maximum, maxItems, required,
additionalProperties false): a structured-output backend driving a tiny random-weight model only
finishes when every string, number and list has an end (docs/engines.md, vLLM guided JSON).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.registry import check
from servecheck.client.http import Exchange

JSON_MAX_TOKENS = 160
HINT_OBJECT = (
    "JSON mode is ignored: enable guided decoding / a structured outputs backend "
    "(vLLM --structured-outputs-config, llama.cpp grammars) or route response_format to the engine"
)
HINT_SCHEMA = (
    "the schema is not enforced: enable a structured outputs backend that supports json_schema "
    "(vLLM xgrammar/guidance, llama.cpp json_schema_to_grammar) or stop advertising json_schema"
)


@dataclass(frozen=True, slots=True)
class SchemaCase:
    """One named schema a json_schema response must validate against."""

    id: str
    prompt: str
    schema: dict[str, Any]


SCHEMA_CASES: tuple[SchemaCase, ...] = (
    SchemaCase(
        "json-schema-flat",
        "Describe a colour as JSON with a short name, the colour family, a brightness from 0 to 9 and whether it is warm.",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 12},
                "family": {"type": "string", "enum": ["red", "green", "blue"]},
                "brightness": {"type": "integer", "minimum": 0, "maximum": 9},
                "warm": {"type": "boolean"},
            },
            "required": ["name", "family", "brightness", "warm"],
            "additionalProperties": False,
        },
    ),
    SchemaCase(
        "json-schema-nested",
        "List one to three parcels as JSON: each with an id from 0 to 99, a size and a label.",
        {
            "type": "object",
            "properties": {
                "parcels": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 3,
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "integer", "minimum": 0, "maximum": 99},
                            "size": {"type": "string", "enum": ["small", "large"]},
                            "label": {"type": "string", "maxLength": 8},
                        },
                        "required": ["id", "size", "label"],
                        "additionalProperties": False,
                    },
                },
                "sender": {"type": "string", "enum": ["north", "south"]},
            },
            "required": ["parcels", "sender"],
            "additionalProperties": False,
        },
    ),
)

# Invalid by the metaschema twice over: an unknown type name and `required` that is not a list.
INVALID_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "strng"}},
    "required": "name",
}


OBJECT_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You answer in JSON."},
    {"role": "user", "content": "Give a JSON object with a colour name and a number from 1 to 9."},
]


def json_schema_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def first_choice(ctx: CheckContext, data: dict[str, Any], ex: Exchange) -> dict[str, Any]:
    choices = data.get("choices")
    if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
        ctx.fail(
            "the response has no choices",
            expected="a non-empty choices list",
            received=body_snippet(data),
            exchange=ex,
        )
    return choices[0]


def _content_of(choice: dict[str, Any]) -> str:
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    content = message.get("content")  # type: ignore[union-attr]
    return content if isinstance(content, str) else ""


def _parse(
    ctx: CheckContext,
    choice: dict[str, Any],
    ex: Exchange,
    *,
    what: str,
    hint: str,
    cut_is_inconclusive: bool,
) -> Any:
    """The JSON value of the answer's content, or a failure saying what came back instead."""
    text = _content_of(choice)
    finish = choice.get("finish_reason")
    try:
        return json.loads(text)
    except ValueError as exc:
        if finish == "length" and text.lstrip().startswith("{"):
            if cut_is_inconclusive:
                # An unconstrained object can legitimately run past max_tokens with random weights;
                # the output looked like JSON, so this says nothing about the server.
                raise CheckSkipped(
                    f"{ctx.check_id}: inconclusive: the JSON object was still open after {JSON_MAX_TOKENS} tokens "
                    f"(finish_reason 'length'); a real model (or JSON-SCHEMA's bounded schemas) gives a verdict"
                ) from None
            ctx.fail(
                f"{what} did not finish within {JSON_MAX_TOKENS} tokens although the schema is bounded",
                expected=f"a complete JSON document with finish_reason 'stop' within {JSON_MAX_TOKENS} tokens",
                received=f"finish_reason 'length', content {text[:300]!r}",
                exchange=ex,
                hint="the backend lets the model emit unbounded whitespace or ignores maxLength/maxItems: "
                "vLLM needs --structured-outputs-config '{\"disable_any_whitespace\": true}'",
            )
        ctx.fail(
            f"{what} is not valid JSON",
            expected="content that parses as JSON",
            received=f"{exc}; finish_reason {finish!r}; content {text[:300]!r}",
            exchange=ex,
            hint=hint,
        )


@check(
    "JSON-OBJECT",
    "response_format json_object returns a JSON object",
    "with response_format {type: json_object}, choices[0].message.content parses as a JSON object (no prose, no code fence)",
    requires=("json_object",),
    model_dependent=True,
)
def json_object(ctx: CheckContext) -> None:
    ex = ctx.chat(OBJECT_MESSAGES, **_object_params())
    data = ctx.ok_json(ex, "chat completion with json_object")
    choice = first_choice(ctx, data, ex)
    _expect_object(ctx, choice, ex, "the json_object answer")


def _object_params() -> dict[str, Any]:
    return {
        "response_format": {"type": "json_object"},
        "max_tokens": JSON_MAX_TOKENS,
        "temperature": 0,
    }


def _expect_object(
    ctx: CheckContext, choice: dict[str, Any], ex: Exchange, what: str, hint: str = HINT_OBJECT
) -> None:
    value = _parse(ctx, choice, ex, what=what, hint=hint, cut_is_inconclusive=True)
    ctx.expect(
        isinstance(value, dict),
        f"{what} is JSON but not an object",
        expected="a JSON object {...}",
        received=f"{type(value).__name__}: {body_snippet(value, 300)}",
        exchange=ex,
        hint=hint,
    )


@check(
    "JSON-SCHEMA",
    "response_format json_schema output validates against the schema",
    "for a flat schema (maxLength, enum, min/max, required, additionalProperties false) and a nested one with an array of "
    "objects, the content parses and validates with jsonschema",
    requires=("json_schema",),
    model_dependent=True,
)
def json_schema(ctx: CheckContext) -> None:
    for case in SCHEMA_CASES:
        ex = ctx.chat(case.prompt, **_schema_params(case))
        data = ctx.ok_json(ex, f"[{case.id}] chat completion with json_schema")
        choice = first_choice(ctx, data, ex)
        _expect_instance(ctx, case, choice, ex, f"[{case.id}] the json_schema answer")


def _schema_params(case: SchemaCase) -> dict[str, Any]:
    return {
        "response_format": json_schema_format(case.id.replace("-", "_"), case.schema),
        "max_tokens": JSON_MAX_TOKENS,
        "temperature": 0,
    }


def _expect_instance(
    ctx: CheckContext,
    case: SchemaCase,
    choice: dict[str, Any],
    ex: Exchange,
    what: str,
    hint: str = HINT_SCHEMA,
) -> None:
    import jsonschema

    value = _parse(ctx, choice, ex, what=what, hint=hint, cut_is_inconclusive=False)
    errors = sorted(
        jsonschema.Draft202012Validator(case.schema).iter_errors(value),
        key=lambda e: list(e.absolute_path),
    )
    ctx.expect(
        not errors,
        f"{what} does not validate against the schema",
        expected=f"an instance of {json.dumps(case.schema)[:400]}",
        received="; ".join(
            f"at /{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in errors[:4]
        )
        + f" -- content {body_snippet(value, 300)}",
        exchange=ex,
        hint=hint,
    )


HINT_STREAM = (
    "where JSON-OBJECT / JSON-SCHEMA pass, the streaming path does not apply response_format: "
    "route it to the same structured-outputs backend as non-streamed requests"
)


def _streamed_choice(
    ctx: CheckContext, messages: list[dict[str, Any]] | str, what: str, **params: Any
) -> tuple[dict[str, Any], Exchange]:
    """A streamed answer as a choice (its joined content and its finish_reason)."""
    ex = ctx.ok_stream(ctx.stream_chat(messages, **params), what)
    assert ex.stream is not None  # noqa: S101 - ok_stream guarantees it
    finish = next(
        (
            c.get("finish_reason")
            for chunk in ex.stream.chunks
            for c in chunk.get("choices") or []
            if isinstance(c, dict) and c.get("finish_reason")
        ),
        None,
    )
    return {"message": {"content": ex.stream.text(0)}, "finish_reason": finish}, ex


@check(
    "JSON-STREAM",
    "streamed JSON-mode answers are JSON too",
    "streamed, JSON-OBJECT's json_object request and JSON-SCHEMA's flat and nested json_schema requests join "
    "(concatenated delta.content) into a JSON object that parses and validates against the schema, by the same "
    "rules as the non-streamed answers; each part runs where json_object / json_schema is declared",
    requires=("streaming",),
    model_dependent=True,
)
def json_stream(ctx: CheckContext) -> None:
    # The schema parts first: a cut json_object answer is inconclusive and ends the check.
    ran = []
    if ctx.capabilities.get("json_schema"):
        for case in SCHEMA_CASES:
            what = f"[{case.id}] the streamed json_schema answer"
            choice, ex = _streamed_choice(ctx, case.prompt, what, **_schema_params(case))
            _expect_instance(ctx, case, choice, ex, what, f"{HINT_STREAM}; else {HINT_SCHEMA}")
            ran.append(case.id)
    if ctx.capabilities.get("json_object"):
        what = "the streamed json_object answer"
        choice, ex = _streamed_choice(ctx, OBJECT_MESSAGES, what, **_object_params())
        _expect_object(ctx, choice, ex, what, f"{HINT_STREAM}; else {HINT_OBJECT}")
        ran.append("json-object")
    if not ran:
        raise CheckSkipped(
            "JSON-STREAM: the target declares neither json_object nor json_schema, so there is no "
            "JSON mode to stream"
        )


@check(
    "JSON-SCHEMA-INVALID",
    "an invalid JSON schema is refused with a 4xx",
    "response_format json_schema with a schema that breaks the metaschema (unknown type, non-list required) gets a 4xx, "
    "not a 5xx and not a 200",
    requires=("json_schema", "route-accepts:/chat/completions"),
)
def json_schema_invalid(ctx: CheckContext) -> None:
    ex = ctx.chat(
        "Give a name as JSON.",
        response_format=json_schema_format("broken", INVALID_SCHEMA),
        max_tokens=16,
        temperature=0,
    )
    ctx.expect(
        not ex.error,
        "the request did not complete",
        expected="a 4xx answer",
        received=ex.describe(),
        exchange=ex,
    )
    status = ex.status or 0
    ctx.expect(
        status < 500,
        "an invalid schema crashed the request with a server error",
        expected="HTTP 400 naming the schema problem",
        received=ex.describe(400),
        exchange=ex,
        hint="validate response_format schemas before compiling a grammar and answer 400; a 5xx counts as an outage",
    )
    ctx.expect(
        400 <= status < 500,
        "an invalid schema was accepted",
        expected="HTTP 400 naming the schema problem",
        received=ex.describe(400),
        exchange=ex,
        hint="the schema is not validated (or response_format is ignored): a client's typo yields unconstrained output",
    )
