"""The reference server's scripted agent mode (``--agent``): it plays the model's side of an
agent client's tool round trip deterministically.

A random-weight model never asks for a tool by itself, and the reference's usual rule (call the
tool the last user turn names) needs a prompt that knows the client's tool names. An agent client
offers its own tools under its own names, so under ``--agent`` a request with ``tool_choice``
auto calls the first tool it offers, once: a conversation that already holds a tool result is
answered in text. Chat completions, Responses and Messages all ask :func:`wants_call`; the tool
it calls is :func:`first_loaded` (Claude Code offers a deferred placeholder first), with only its
required arguments, and where the user's turn quotes a command in backticks (the clients' tasks
say "Run `cat README.md` in the shell") the first required string is that command: a random
string there is, about one time in a hundred, a real program that waits on its terminal (``sh``,
``dd``, ``bc``), and the client's tool never finishes.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
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


_QUOTED = re.compile(r"`([^`\n]+)`")


def asked(messages: Sequence[dict[str, Any]]) -> str | None:
    """The first backticked span of the latest user turn that quotes one, or None."""
    for message in reversed(messages):
        if message.get("role") == "user":
            found = _QUOTED.search(model.content_text(message.get("content")))
            if found:
                return found.group(1)
    return None


def arguments(
    agent: bool, schema: Any, rng: random.Random, messages: Sequence[dict[str, Any]] = ()
) -> Any:
    """A call's arguments for ``schema``; under ``--agent`` only its required properties at the
    top, as a model that follows a client's prompt fills them: the random optional knobs of a
    coding agent's tool (Codex's ``exec_command`` declares ``yield_time_ms`` a number and parses
    it as an unsigned integer) would fail the call before the client runs the tool. The first
    required string is the command the user's turn quotes, when it quotes one (:func:`asked`)."""
    if not (agent and isinstance(schema, dict) and isinstance(schema.get("properties"), dict)):
        return model.instance(schema, rng)
    need = schema.get("required") or []
    props = {k: v for k, v in schema["properties"].items() if k in need}
    args = model.instance({**schema, "properties": props, "required": list(props)}, rng)
    command = asked(messages)
    first = next(
        (k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"), None
    )
    if command is not None and first is not None and isinstance(args, dict):
        args[first] = command
    return args
