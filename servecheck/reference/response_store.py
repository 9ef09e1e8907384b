"""The reference server's Responses store: what ``store`` and ``previous_response_id`` need.

A response created with ``store`` true (the API's default) is kept, in memory, for
``GET /v1/responses/{id}`` and as the parent a later request names in ``previous_response_id``.
The store is bounded (``ServerConfig.responses_store`` entries, oldest dropped first; 0 keeps
nothing and refuses ``previous_response_id``), so a long load run cannot grow it.

What a chain keeps is the conversation (the parent's history, its input and its output), never its
``instructions``: the API says they are not carried over. Each child gets its own copy, so two
branches from one parent never see each other. The ``responses-store-*`` faults and their
neighbours in :mod:`servecheck.reference.faults` break one of those rules each.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from servecheck.reference.http import STATE, ApiError, State, check_ready, error_response, expect


@dataclass(slots=True)
class Stored:
    response: dict[str, Any]
    conversation: list[dict[str, Any]]  # chat-style: history, input and output, no instructions
    instructions: str | None


def _entries(state: State) -> OrderedDict[str, Stored]:
    if state.stored_responses is None:
        state.stored_responses = OrderedDict()
    entries: OrderedDict[str, Stored] = state.stored_responses
    return entries


def stores(state: State, body: dict[str, Any]) -> bool:
    """Whether this request's response is kept (the ``store`` field the response echoes)."""
    return state.config.responses_store > 0 and body.get("store", True) is not False


def chain(
    state: State, body: dict[str, Any], messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The conversation of a request: its ``previous_response_id``'s, then ``messages``."""
    prev = body.get("previous_response_id")
    if prev is None:
        return messages
    expect(
        isinstance(prev, str) and prev != "",
        "previous_response_id must be a non-empty string",
        "previous_response_id",
    )
    expect(
        state.config.responses_store > 0,
        "previous_response_id is not supported: this server stores no responses (send the "
        "whole conversation in input)",
        "previous_response_id",
    )
    parent = _entries(state).get(prev)
    if parent is None:
        raise ApiError(
            404,
            f"Previous response with id {prev!r} not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    if "responses-previous-ignored" in state.faults:
        return messages
    history = parent.conversation
    if "responses-instructions-inherited" in state.faults and parent.instructions:
        history = [{"role": "system", "content": parent.instructions}, *history]
    if "responses-branches-shared" in state.faults:
        history.extend(messages)  # one list for every child: a branch sees its siblings
        return history
    return [*history, *messages]


def _output_messages(resp: dict[str, Any]) -> list[dict[str, Any]]:
    """The response's output as the chat-style messages a chained request replays."""
    out = []
    for item in resp.get("output") or []:
        if item.get("type") == "function_call":
            out.append({"role": "assistant", "content": item["name"] + item["arguments"]})
        elif item.get("type") == "message":
            text = "".join(p.get("text", "") for p in item.get("content") or [])
            out.append({"role": "assistant", "content": text})
    return out


def keep(
    state: State, body: dict[str, Any], conversation: list[dict[str, Any]], resp: dict[str, Any]
) -> None:
    """Store a finished response where the request asked for it, dropping the oldest past the cap."""
    kept = stores(state, body) or "responses-store-false-kept" in state.faults
    if not kept or state.config.responses_store <= 0 or "responses-store-not-kept" in state.faults:
        return
    conversation.extend(_output_messages(resp))
    entries = _entries(state)
    entries[resp["id"]] = Stored(resp, conversation, body.get("instructions"))
    while len(entries) > state.config.responses_store:
        entries.popitem(last=False)


async def handle_get(request: web.Request) -> web.Response:
    """GET /v1/responses/{response_id}: a stored response, or a 404 error object."""
    state = request.app[STATE]
    try:
        check_ready(state)
        rid = request.match_info["response_id"]
        entry = _entries(state).get(rid)
        if entry is None:
            raise ApiError(
                404, f"Response with id {rid!r} not found.", param="response_id", code="not_found"
            )
    except ApiError as err:
        return error_response(state, err)
    return web.json_response(entry.response)
