"""A request as a scenario plans it, before the controller sends it.

Its own module so that the request planners (``conversation``, ``dataset``, ``trace``) and the
Locust user that sends what they plan share it without a circle: ``conversation`` uses the
dataset's opening turns, and ``dataset`` no longer needs ``conversation`` for this type.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from servecheck.load.workload.prompts import Prompt

if TYPE_CHECKING:
    from servecheck.load.generator.wire import WireResult
    from servecheck.records.record import RequestRecord

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


def reported_tokens(usage: dict[str, Any] | None) -> int | None:
    """The prompt plus completion tokens a reply's usage reports: what the next turn of a
    conversation or session resends as its history (None where the server sent no counts; the
    planner then estimates it)."""
    if usage is None:
        return None
    pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return pt + ct if isinstance(pt, int) and isinstance(ct, int) else None


@dataclass(slots=True)
class Send:
    """One request on its way, as the run's per-request steps see it (one per request).

    A step belongs to its feature's module (images, the model mix, cancel and hang-up ...) and
    is put in the run's :class:`Steps` only when the feature is on: the controller's send is a
    loop over them, so a new feature adds a step, not a branch.
    """

    prompt: PlannedRequest
    rng: random.Random
    model: str
    named: bool = False  # the record names the model (a model mix)
    t0: float = 0.0  # the send time, perf_counter
    stream: Any = None  # the stream's state (its token_times), once the request is armed
    until: Callable[[], bool] | None = None  # the reader's hang-up test
    drawn: Any = None  # a cancel draw (load/workload/cancel.py)


@dataclass(slots=True)
class Steps:
    """The run's per-request steps, the enabled ones only, built once per run.

    ``shape``: before the body is built (images, the model); ``arm``: with the stream's state,
    before the send (hang-up, cancel); ``settle``: the record, once the reader is done.
    """

    shape: list[Callable[[Send], None]] = field(default_factory=list)
    arm: list[Callable[[Send], None]] = field(default_factory=list)
    settle: list[Callable[[Send, RequestRecord, WireResult], None]] = field(default_factory=list)
