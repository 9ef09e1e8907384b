"""The reference server's scripted agent mode (``--agent``): it plays the model's side of an
agent client's tool round trip deterministically.

A random-weight model never asks for a tool by itself, and the reference's usual rule (call the
tool the last user turn names) needs a prompt that knows the client's tool names. An agent client
offers its own tools under its own names, so under ``--agent`` a request with ``tool_choice``
auto calls the first tool it offers, once: a conversation that already holds a tool result is
answered in text. Chat completions, Responses and Messages all ask :func:`wants_call`.
"""

from __future__ import annotations

from typing import Any


def wants_call(agent: bool, messages: list[dict[str, Any]]) -> bool:
    """Whether the scripted agent calls the first offered tool now: agent mode is on and no tool
    result is in the conversation yet (chat-style messages: a tool result has role ``tool``)."""
    return agent and not any(m.get("role") == "tool" for m in messages)
