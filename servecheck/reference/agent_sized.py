"""The reference server's agent-sized faults (issue 44 item 3): what engines do wrong with the
requests coding agents send. ``server.py`` (chat completions) and ``messages.py`` ask these
functions; the catalogue entries are in ``faults.py`` (AGENT-SIZED-*).
"""

from __future__ import annotations

from typing import Any

from servecheck.reference import model
from servecheck.reference.http import ApiError
from servecheck.reference.model import Choice

# Sizes at which the faults start: far above any other check's request, far below an agent's.
LARGE_TOOLSET = 16
LARGE_SYSTEM_TOKENS = 8000


def _system_tokens(messages: list[dict[str, Any]]) -> int:
    return sum(
        len(model.tokenize(model.content_text(m.get("content"))))
        for m in messages
        if isinstance(m, dict) and m.get("role") in ("system", "developer")
    )


def screen(faults: frozenset[str], messages: list[dict[str, Any]]) -> None:
    """agent-system-500: a system prompt over :data:`LARGE_SYSTEM_TOKENS` fails with a 500."""
    if "agent-system-500" in faults and _system_tokens(messages) > LARGE_SYSTEM_TOKENS:
        raise ApiError(500, "Internal Server Error: prompt buffer overflow", "server_error")


def empty_answer(faults: frozenset[str], tools: list[Any]) -> bool:
    """agent-tools-stop-empty: a request with a large tool list is answered with nothing."""
    return "agent-tools-stop-empty" in faults and len(tools) >= LARGE_TOOLSET


def blank(faults: frozenset[str], tools: list[Any], choices: list[Choice]) -> None:
    """The answer to a large toolset dropped: finish 'stop', no content, no call (the
    reasoning, where there was some, kept: llama.cpp's failure looks so)."""
    if empty_answer(faults, tools):
        for c in choices:
            c.pieces, c.tool_call, c.extra_calls, c.finish_reason = [], None, [], "stop"
            c.logprobs = []
