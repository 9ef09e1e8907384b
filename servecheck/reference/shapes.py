"""The reference server's defects over legal request shapes (the REQ-* checks).

Each fault is one way a real engine mishandles a request that OpenAI-compatible clients
legitimately send: refusing content parts or the ``developer`` role, crashing on a field it does
not know or a non-zero penalty, a parameterless tool, reading an explicit ``null`` as a wrong type, ignoring ``max_completion_tokens`` or
``tool_choice: none``, flattening a rich tool schema. :func:`screen` runs before validation and
returns the body as the faulty engine would read it; :func:`rendered` gives the messages as its
chat template would see them (what the prompt tokens count); :func:`tool_arguments` bends a
forced call's arguments.
"""

from __future__ import annotations

import json
from typing import Any

from servecheck.reference.http import ApiError

# Top-level fields OpenAI documents as optional (nullable) that a strict engine rejects as null.
NULLABLE = (
    "n",
    "stop",
    "seed",
    "tools",
    "tool_choice",
    "response_format",
    "stream_options",
    "logprobs",
    "top_logprobs",
    "user",
    "logit_bias",
    "parallel_tool_calls",
    "max_completion_tokens",
)


def _has_any_of(schema: Any) -> bool:
    if isinstance(schema, dict):
        return "anyOf" in schema or any(_has_any_of(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_any_of(v) for v in schema)
    return False


def _no_args_tool(body: dict[str, Any]) -> bool:
    """A tool whose parameters have no properties, or a replayed call with arguments "{}"
    (what ``tool-no-args-500``'s template, reading the first argument, cannot render)."""
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        params = fn.get("parameters") if isinstance(fn, dict) else None
        if isinstance(params, dict) and params.get("properties") == {}:
            return True
    for m in _messages(body):
        calls = m.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and fn.get("arguments") == "{}":
                return True
    return False


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def _refuse(faults: frozenset[str], body: dict[str, Any]) -> None:
    if "null-optionals-refused" in faults:
        for key in NULLABLE:
            if key in body and body[key] is None:
                raise ApiError(400, f"{key}: None is not of type 'integer' or 'string'", param=key)
    if "client-fields-500" in faults and "metadata" in body:
        raise ApiError(
            500,
            "internal error: TypeError: generate() got an unexpected keyword argument 'metadata'",
            "server_error",
        )
    for key in ("frequency_penalty", "presence_penalty"):
        if "penalties-500" in faults and body.get(key):
            raise ApiError(
                500, f"internal error: RuntimeError: {key} kernel: shape mismatch", "server_error"
            )
    if "tool-no-args-500" in faults and _no_args_tool(body):
        raise ApiError(500, "internal error: IndexError: list index out of range", "server_error")
    rf = body.get("response_format")
    if (
        "response-format-text-refused" in faults
        and isinstance(rf, dict)
        and rf.get("type") == "text"
    ):
        raise ApiError(
            400,
            "response_format.type must be 'json_object' or 'json_schema'",
            param="response_format",
        )
    for i, m in enumerate(_messages(body)):
        role, content = m.get("role"), m.get("content")
        if "developer-role-500" in faults and role == "developer":
            raise ApiError(500, "internal error: KeyError: 'developer'", "server_error")
        if isinstance(content, list):
            if "content-parts-refused" in faults and role != "tool":
                raise ApiError(
                    400, f"messages[{i}].content must be a string", param=f"messages[{i}].content"
                )
            if "tool-history-refused" in faults and role == "tool":
                raise ApiError(
                    400,
                    f"messages[{i}]: a tool message's content must be a string",
                    param=f"messages[{i}].content",
                )
    if "rich-tool-schema-500" in faults and _has_any_of(body.get("tools")):
        raise ApiError(
            500, "internal error: grammar compilation failed: anyOf is unsupported", "server_error"
        )


def screen(faults: frozenset[str], body: dict[str, Any]) -> dict[str, Any]:
    """The chat body as the faulty engine reads it; raises what a refusing engine answers."""
    _refuse(faults, body)
    out = dict(body)
    if "max-completion-tokens-ignored" in faults:
        out.pop("max_completion_tokens", None)
    if "tool-choice-none-ignored" in faults and out.get("tool_choice") == "none":
        out["tool_choice"] = "auto"  # 'none' read as the default: the model may call a tool
    return out


def rendered(faults: frozenset[str], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as the chat template renders them (what usage.prompt_tokens counts)."""
    out = messages
    if "developer-role-dropped" in faults:
        out = [m for m in out if m.get("role") != "developer"]  # a template with no branch for it
    if "content-parts-repr" in faults:
        # A template that prints message.content whole: the parts list becomes its own text.
        out = [
            {**m, "content": json.dumps(m["content"])} if isinstance(m.get("content"), list) else m
            for m in out
        ]
    return out


def tool_arguments(faults: frozenset[str], args: Any) -> Any:
    """A forced call's arguments; ``rich-tool-schema-nested-ignored`` constrains the top level only."""
    if "rich-tool-schema-nested-ignored" in faults and isinstance(args, dict):
        return {k: {} if isinstance(v, dict) else v for k, v in args.items()}
    return args
