"""A request as a scenario plans it, before the controller sends it.

Its own module so that the request planners (``conversation``, ``dataset``, ``trace``) and the
Locust user that sends what they plan share it without a circle: ``conversation`` uses the
dataset's opening turns, and ``dataset`` no longer needs ``conversation`` for this type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servecheck.load.workload.prompts import Prompt

CHAT_TEMPLATE_TOKENS = 16  # room kept for the chat template, as the controller does


@dataclass(slots=True)
class PlannedRequest:
    """One request as a scenario wants it sent: messages, limits and what its record carries.

    ``capture``: keep the reply's text (the controller then reads every byte through the parser
    instead of the reader thread's token shortcut); ``fields``: record fields (``turn`` ...);
    ``state``: the scenario's own handle (a :class:`~servecheck.load.workload.conversation.Conversation`), given back after the reply.
    """

    messages: list[dict[str, Any]]
    max_tokens: int
    kind: str = "chat"
    prompt_tokens: int | None = None
    capture: bool = False
    fields: dict[str, Any] = field(default_factory=dict)
    state: Any = None


def single_turn(prompt: Prompt) -> PlannedRequest:
    """The plain request every scenario sent before: one user message."""
    return PlannedRequest(
        [{"role": "user", "content": prompt.text}],
        prompt.max_tokens,
        prompt.kind,
        prompt.prompt_tokens,
    )
