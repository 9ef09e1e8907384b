"""The reference server's grid faults (issue 43): each breaks one invariant on one request
variant only (n=2, streamed or not, a tool call, a client's request shape), the shape of the
defects that a check written for one variant misses. ``server.py``, ``messages.py`` and
``responses.py`` ask these functions at the few points they change; the catalogue entries are in
``faults.py`` (GRID-* cells).
"""

from __future__ import annotations

import json
from typing import Any

from servecheck.reference import model
from servecheck.reference.model import Choice


def _tokens(choice: Choice) -> int:
    if choice.tool_call is None:
        return len(choice.pieces) + len(choice.reasoning)
    return max(1, sum(len(model.tokenize(t["arguments"])) for t in choice.calls()))


def counted(faults: frozenset[str], body: dict[str, Any], choices: list[Choice], total: int) -> int:
    """completion_tokens as usage reports it: only the first choice's with n > 1 (streamed, or
    not), none for a tool call."""
    stream = body.get("stream") is True
    fault = "grid-usage-n2-stream" if stream else "grid-usage-n2-plain"
    if len(choices) > 1 and fault in faults:
        return _tokens(choices[0])
    if "grid-usage-tools" in faults and any(c.tool_call is not None for c in choices):
        return 0
    return total


def finishes(faults: frozenset[str], body: dict[str, Any], choices: list[Choice]) -> None:
    """An empty finish_reason for the later choices of a plain n > 1 answer, or for a tool call."""
    plain_n2 = "grid-finish-n2-plain-empty" in faults and body.get("stream") is not True
    for c in choices:
        if (plain_n2 and c.index > 0) or ("grid-finish-tools-empty" in faults and c.tool_call):
            c.finish_reason = ""


def finish_twice(faults: frozenset[str], choice: Choice) -> bool:
    """The later choices of a streamed n > 1 answer are closed twice."""
    return "grid-finish-n2-stream-twice" in faults and choice.index > 0


def role_again(faults: frozenset[str], choice: Choice, step: int) -> bool:
    """The later choices of a streamed n > 1 answer repeat the role in their later deltas."""
    return "grid-role-repeated-n2" in faults and choice.index > 0 and step > 0


def piece(faults: frozenset[str], choice: Choice, step: int, text: str) -> str:
    """The later choices of a streamed n > 1 answer stream a different second piece."""
    if "grid-stream-differs-n2" in faults and choice.index > 0 and step == 1:
        return text.upper() + "?"
    return text


def tool_fragment(
    faults: frozenset[str], head: dict[str, Any], fragment: dict[str, Any]
) -> dict[str, Any]:
    """A later tool-call delta's entry, with the call's id and name repeated."""
    if "grid-tool-id-repeated" in faults:
        name = {"name": head["function"]["name"]}
        fragment = {"id": head["id"], **fragment, "function": {**name, **fragment["function"]}}
    return fragment


def tool_delta(faults: frozenset[str], step: int) -> dict[str, Any]:
    """What a tool-call delta carries besides its tool_calls: the role, again, after the first."""
    return {"role": "assistant"} if "grid-role-tool-deltas" in faults and step > 0 else {}


def message_role(faults: frozenset[str], choice: Choice) -> str | None:
    """A plain message's role: none for the later choices of n > 1, 'tool' for a tool call."""
    if "grid-role-plain-n2" in faults and choice.index > 0:
        return None
    if "grid-role-tools-plain" in faults and choice.tool_call is not None:
        return "tool"
    return "assistant"


def strict_tools(faults: frozenset[str], body: dict[str, Any]) -> frozenset[str]:
    """The faults a streamed tool call is made with: a request whose tools are ``strict``
    (the OpenAI Agents SDK's) gets its call's id and name repeated in the argument deltas."""
    tools = body.get("tools")
    listed: list[Any] = tools if isinstance(tools, list) else []
    strict = any(isinstance(t, dict) and (t.get("function") or {}).get("strict") for t in listed)
    if "grid-strict-tool-id-repeated" in faults and strict:
        return faults | {"grid-tool-id-repeated"}
    return faults


def _cache_marked(body: dict[str, Any]) -> bool:
    """Any cache_control marker on the system, message or tool blocks (Claude Code sends them)."""
    return '"cache_control"' in json.dumps(
        [body.get("system"), body.get("messages"), body.get("tools")]
    )


def messages_input_usage(
    faults: frozenset[str], body: dict[str, Any], usage: dict[str, Any]
) -> dict[str, Any]:
    """message_start's usage: a prompt with cache_control markers counted as no input at all."""
    if "grid-messages-cache-uncounted" in faults and _cache_marked(body):
        return {**usage, "input_tokens": 0}
    return usage


def messages_stop_twice(faults: frozenset[str]) -> bool:
    """A streamed message closed by two message_delta events, each with its stop_reason."""
    return "grid-messages-stop-twice" in faults


def responses_end_twice(faults: frozenset[str]) -> bool:
    """A streamed response that sends its terminal event twice."""
    return "grid-responses-completed-twice" in faults
