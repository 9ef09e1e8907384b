"""Which API a load run speaks: one entry per API, as vLLM's benchmark keeps one request function
per backend (a new API is one function and one table line).

* ``chat``: ``POST /chat/completions``, OpenAI's body and stream (the default);
* ``messages``: ``POST /messages``, Anthropic's Messages API: ``x-api-key`` and
  ``anthropic-version`` headers, ``system`` lifted out of the messages, image parts as
  ``{"type": "image", "source": {"type": "base64", ...}}`` blocks, read by
  :class:`~servecheck.load.generator.anthropic_events.MessagesStreamState`.

Every scenario plans its requests in chat's shape (:class:`~servecheck.load.workload.planned.PlannedRequest`);
this module turns one into the API's path and body, and gives the stream state that reads the
answer. Both APIs share the record builder, SLO keys, summary and report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servecheck.errors import SpecError
from servecheck.load.generator.anthropic_events import MessagesStreamState
from servecheck.load.generator.stream import StreamState
from servecheck.load.workload.conversation import reply_text
from servecheck.load.workload.planned import PlannedRequest

API_NAMES = ("chat", "messages")
# Each API's path, relative to the target's base URL (the endpoint servecheck_stats.csv names).
API_PATHS = {"chat": "/chat/completions", "messages": "/messages"}
ANTHROPIC_VERSION = "2023-06-01"
MESSAGES_SCENARIO = "messages"  # the chat mix over the messages API
# Scenarios whose request kinds add OpenAI-only body keys (response_format, tools in OpenAI's shape).
CHAT_ONLY_SCENARIOS = ("json_schema", "tools", "mixed", "agent")


def resolve_api(api: str | None, scenario: str) -> str:
    """The run's API: ``api`` as given, else ``messages`` for the ``messages`` scenario, else
    ``chat``. A SpecError names the option when the two disagree or the API is unknown."""
    stem = Path(scenario).stem
    if api is not None and api not in API_NAMES:
        raise SpecError(f"{{api}} {{value}}: one of {', '.join(API_NAMES)}", value=api)
    if stem == MESSAGES_SCENARIO:
        if api not in (None, "messages"):
            raise SpecError(
                "the messages scenario speaks the messages API, not {api} {value}", value=api
            )
        return "messages"
    resolved = api or "chat"
    if resolved == "messages" and stem in CHAT_ONLY_SCENARIOS:
        raise SpecError(
            "{scenario} {name} sends OpenAI-only request keys (response_format, tools): "
            "it runs with {api} chat",
            name=stem,
        )
    return resolved


def api_headers(api: str, key: str | None) -> dict[str, str]:
    """Headers the API adds to the target's own (whose auth header stays: a server may check
    either): the messages API's ``x-api-key`` and ``anthropic-version``."""
    if api != "messages":
        return {}
    return {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": key} if key else {})}


def request_for(
    api: str,
    model: str,
    prompt: PlannedRequest,
    kind_body: dict[str, Any],
    extra_body: dict[str, Any],
) -> tuple[str, dict[str, Any]]:
    """``(path, body)`` of one streamed request (the path relative to the target's base URL)."""
    if api == "messages":
        system, messages = anthropic_messages(prompt.messages)
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": prompt.max_tokens,
            "messages": messages,
            "stream": True,
            **({"system": system} if system else {}),
            # Anthropic's API refuses a set temperature beside extended thinking
            **({} if "thinking" in extra_body else {"temperature": 0}),
            **kind_body,
            **extra_body,
        }
        return API_PATHS["messages"], body
    return API_PATHS["chat"], {
        "model": model,
        "messages": prompt.messages,
        "max_tokens": prompt.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
        **kind_body,
        **extra_body,
    }


def new_state(api: str, capture: bool = False) -> StreamState:
    """The stream reader of one request of this API."""
    return MessagesStreamState(capture) if api == "messages" else StreamState()


def reply_of(st: StreamState, raw: bytes) -> str:
    """The assistant's reply text of a finished stream (multi-turn scenarios continue from it)."""
    return st.reply if isinstance(st, MessagesStreamState) else reply_text(raw)


def _block(part: Any) -> Any:
    """One chat content part as an Anthropic content block (text and data-URL images)."""
    if not isinstance(part, dict):
        return part
    if part.get("type") == "image_url":
        url = str((part.get("image_url") or {}).get("url") or "")
        head, _, data = url.partition(",")
        media = head.removeprefix("data:").removesuffix(";base64")
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return part


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        str(p.get("text", "")) for p in content or () if isinstance(p, dict) and "text" in p
    )


def anthropic_messages(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Chat messages -> (Anthropic's top-level ``system``, its ``messages``): system and developer
    turns are lifted out (joined by a blank line), content parts become content blocks."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role in ("system", "developer"):
            system.append(_text(m.get("content")))
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = [_block(p) for p in content]
        out.append({"role": role, "content": content})
    return "\n\n".join(system), out
