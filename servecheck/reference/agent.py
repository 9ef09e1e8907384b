"""The reference server's scripted agent mode (``--agent``): it plays the model's side of an
agent client's tool round trip deterministically.

A random-weight model never asks for a tool by itself, and the reference's usual rule (call the
tool the last user turn names) needs a prompt that knows the client's tool names. An agent client
offers its own tools under its own names, so under ``--agent`` a request with ``tool_choice``
auto calls the first tool it offers, once: a conversation that already holds a tool result is
answered in text. Chat completions, Responses and Messages all ask :func:`wants_call`; the tool
it calls is :func:`first_loaded` (Claude Code offers a deferred placeholder first).
"""

from __future__ import annotations

import random
from typing import Any

from servecheck.reference import model


def wants_call(agent: bool, messages: list[dict[str, Any]]) -> bool:
    """Whether the scripted agent calls the first offered tool now: agent mode is on and no tool
    result is in the conversation yet (chat-style messages: a tool result has role ``tool``)."""
    return agent and not any(m.get("role") == "tool" for m in messages)


def first_loaded(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The first offered tool the model can see. A tool marked ``defer_loading`` (Anthropic's
    tool search: Claude Code sends a ``DeferredToolPlaceholder`` first) is not loaded until the
    model searches for it, so a model never calls it as offered."""
    return next((t for t in tools if t.get("defer_loading") is not True), tools[0])


def arguments(agent: bool, schema: Any, rng: random.Random) -> Any:
    """A call's arguments for ``schema``; under ``--agent`` only its required properties at the
    top, as a model that follows a client's prompt fills them: the random optional knobs of a
    coding agent's tool (Codex's ``exec_command`` declares ``yield_time_ms`` a number and parses
    it as an unsigned integer) would fail the call before the client runs the tool."""
    if agent and isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        need = schema.get("required") or []
        props = {k: v for k, v in schema["properties"].items() if k in need}
        schema = {**schema, "properties": props, "required": list(props)}
    return model.instance(schema, rng)
