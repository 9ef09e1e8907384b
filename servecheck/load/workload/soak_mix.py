"""What a soak cycle sends: the members of a soak mix, one registry entry each (issue 45 item 3).

A soak's cycles take turns over the members of its mix (``chat,errors,cancel``): cycle ``i``
runs member ``mix[(i - 1) % len(mix)]`` alone, so each member has cycles of its own and a leak
can be put down to the member whose cycles add to it (``telemetry/attribution.py``; why
per-member cycles and not a mixed cycle: docs/telemetry.md, "Soak mixes"). Members:

- ``chat``: the well-formed streamed chat completion every soak sent before mixes (the default);
- ``errors``: the error path: prompts longer than the context and malformed requests, each of
  which must be refused with a 4xx; anything else is a failure of the cycle;
- ``cancel``: every stream dropped after a few token chunks (the abandoned streams);
- ``tools``: a forced tool call (``tool_choice`` naming the one tool);
- ``json``: a JSON-schema ``response_format`` (grammar-constrained decoding);
- ``images``: one small generated PNG in each request (a target that declares ``vision``);
- ``reasoning``: the chat on a reasoning model (a target with a ``reasoning`` block), with its
  ``thinking_on`` body.

Pure: bodies and rules, no I/O. The run is :mod:`servecheck.load.soak`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servecheck.errors import SpecError
from servecheck.load.workload.prompts import words_text

if TYPE_CHECKING:
    from servecheck.config.model import Target

DEFAULT_MIX = ("chat",)
# The longest context an over-long prompt is made for: past it, each refused request would carry
# megabytes of prompt (a word is at least one token, so the prompt is context + 64 words).
MAX_ERROR_CONTEXT = 262_144
OVERLONG_EXTRA_WORDS = 64
# A refusal comes back in milliseconds: unpaced, an errors cycle would be thousands of requests a
# second, a flood and not an error path beside traffic; each worker waits this long between them.
ERROR_PAUSE_S = 0.1

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
            "required": ["answer", "confidence"],
            "additionalProperties": False,
        },
    },
}


@dataclass(slots=True, frozen=True)
class MixContext:
    """What the members' bodies are made from: the plan's request shape and what the target
    says about itself."""

    model: str
    max_tokens: int
    prompt_words: int
    extra: Mapping[str, Any]
    context_length: int | None = None
    thinking_on: Mapping[str, Any] | None = None


def _chat(ctx: MixContext, k: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": ctx.model,
        "stream": True,
        "max_tokens": ctx.max_tokens,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": words_text(ctx.prompt_words, k % 64)}],
    }
    body.update(ctx.extra)
    return body


def _errors(ctx: MixContext, k: int) -> dict[str, Any]:
    """Every other request is longer than the context, the others malformed (``messages`` not
    a list of messages): both must be refused with a 4xx."""
    body = _chat(ctx, k)
    if k % 2 == 0 and ctx.context_length is not None:
        words = ctx.context_length + OVERLONG_EXTRA_WORDS
        body["messages"] = [{"role": "user", "content": words_text(words, 9_000_001 + k % 4)}]
    else:
        body["messages"] = "not a list of messages"
    return body


def _tools(ctx: MixContext, k: int) -> dict[str, Any]:
    body = _chat(ctx, k)
    body["messages"] = [{"role": "user", "content": "What is the weather in Paris? Use the tool."}]
    body["tools"] = [TOOL]
    body["tool_choice"] = {"type": "function", "function": {"name": "get_weather"}}
    return body


def _json(ctx: MixContext, k: int) -> dict[str, Any]:
    body = _chat(ctx, k)
    body["response_format"] = SCHEMA
    return body


def _images(ctx: MixContext, k: int) -> dict[str, Any]:
    from servecheck.client.images import chat_message, make_image

    body = _chat(ctx, k)
    text = words_text(min(ctx.prompt_words, 40), k % 64)
    body["messages"] = [chat_message(text, make_image(64, 64, "png", seed=k % 8))]
    return body


def _reasoning(ctx: MixContext, k: int) -> dict[str, Any]:
    body = _chat(ctx, k)
    body.update(ctx.thinking_on or {})
    return body


def _no_need(target: Target, ctx: MixContext) -> str:
    return ""


def _needs_context(target: Target, ctx: MixContext) -> str:
    if ctx.context_length is None:
        return (
            "its context length is unknown (neither /v1/models nor the target's context_length "
            "says it), so no prompt can be made longer than the context"
        )
    if ctx.context_length > MAX_ERROR_CONTEXT:
        return (
            f"its context of {ctx.context_length} tokens is above {MAX_ERROR_CONTEXT}: each "
            "over-long prompt would be megabytes"
        )
    return ""


def _needs(capability: str, what: str) -> Callable[[Target, MixContext], str]:
    def need(target: Target, ctx: MixContext) -> str:
        declared = getattr(target.capabilities, capability)
        return (
            f"the target declares capabilities.{capability}: false ({what})"
            if declared is False
            else ""
        )

    return need


def _needs_vision(target: Target, ctx: MixContext) -> str:
    if target.capabilities.vision is True:
        return ""
    return "the target does not declare capabilities.vision: true (it reads no images)"


def _needs_reasoning(target: Target, ctx: MixContext) -> str:
    return "" if target.reasoning is not None else "the target has no reasoning block"


@dataclass(slots=True, frozen=True)
class Member:
    """One member of a mix: what it sends and what the target must serve for it."""

    name: str
    description: str
    body: Callable[[MixContext, int], dict[str, Any]]
    need: Callable[[Target, MixContext], str] = _no_need
    refused: bool = False  # its requests must be refused with a 4xx (the error path)
    drops: bool = False  # its streams are dropped after a few token chunks


MEMBERS: dict[str, Member] = {
    m.name: m
    for m in (
        Member("chat", "well-formed streamed chat", _chat),
        Member(
            "errors",
            "over-long prompts and malformed requests, each refused with a 4xx",
            _errors,
            _needs_context,
            refused=True,
        ),
        Member("cancel", "streams dropped mid-generation", _chat, drops=True),
        Member("tools", "a forced tool call", _tools, _needs("tools", "no tool calls")),
        Member(
            "json",
            "a JSON-schema response_format",
            _json,
            _needs("json_schema", "no JSON-schema output"),
        ),
        Member("images", "a generated PNG in each request", _images, _needs_vision),
        Member("reasoning", "the chat on a reasoning model", _reasoning, _needs_reasoning),
    )
}


def parse_mix(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """``chat,errors,cancel`` (or a list of names) -> the members in order; a name not in
    :data:`MEMBERS` or given twice is a :class:`SpecError` on ``{mix}``."""
    if text is None:
        return DEFAULT_MIX
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text)]
    if not names or any(not n for n in names):
        raise SpecError("{mix} {given!r}: name members separated by commas", given=str(text))
    for name in names:
        if name not in MEMBERS:
            raise SpecError(
                "{mix}: unknown member {name!r} (members: {known})",
                name=name,
                known=", ".join(MEMBERS),
            )
    if len(set(names)) != len(names):
        raise SpecError("{mix} {given!r}: a member named twice", given=",".join(names))
    return tuple(names)


def refusal(mix: Sequence[str], target: Target, ctx: MixContext) -> str:
    """Why the target cannot serve the first member of ``mix`` it cannot, or "" (checked before
    any request)."""
    for name in mix:
        why = MEMBERS[name].need(target, ctx)
        if why:
            return f"member `{name}` ({MEMBERS[name].description}) cannot run: {why}"
    return ""


__all__ = [
    "DEFAULT_MIX",
    "ERROR_PAUSE_S",
    "MEMBERS",
    "Member",
    "MixContext",
    "parse_mix",
    "refusal",
]
