"""The reference server's runtime LoRA adapters (``--lora``), as vLLM serves them (the LORA checks).

vLLM started with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` answers:

* ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path"}``: 200 and a plain-text
  ``Success: LoRA adapter 'NAME' added successfully.``; 400 for a name already loaded; 404
  (``NotFoundError``) when nothing is at the path;
* ``POST /v1/unload_lora_adapter`` ``{"lora_name"}``: 200 and ``... removed successfully.``,
  404 for a name it does not have;
* ``/v1/models`` lists each adapter with ``parent`` the base model and ``root`` its path, and a
  request naming it is answered by the base model with the adapter applied; once unloaded, a
  request naming it is a 404 like any unknown model.

Here an adapter's answers are the base model's answers with every piece replaced by a word drawn
from the adapter's name (same number of pieces, so usage stays what the base would count): a
different answer, as a real adapter's non-zero weights give. Only the path's existence is read
(no weights). Without ``--lora`` the routes are absent (404), as on a vLLM without the flag.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from typing import Any

from aiohttp import web

from servecheck.reference.http import STATE, ApiError, State, error_response, read_json

WORDS = ("adapted", "tuned", "lora", "delta", "shifted", "ranked", "low", "matrix")


def register(app: web.Application) -> None:
    app.router.add_post("/v1/load_lora_adapter", load_adapter)
    app.router.add_post("/v1/unload_lora_adapter", unload_adapter)


def _name(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise ApiError(400, f"'{key}' is required and must be a non-empty string", param=key)
    return value


async def load_adapter(request: web.Request) -> web.Response:
    state = request.app[STATE]
    try:
        body = await read_json(request, state)
        name, path = _name(body, "lora_name"), _name(body, "lora_path")
        if name in state.adapters or name in state.config.models:
            raise ApiError(
                400, f"The lora adapter '{name}' has already been loaded.", "InvalidUserInput"
            )
        if not os.path.exists(path) and "lora-bad-path-accepted" not in state.faults:
            raise ApiError(
                404, f"Loading lora {name} failed: No adapter found for {path}", "NotFoundError"
            )
    except ApiError as err:
        return error_response(state, err)
    state.lingering.discard(name)
    state.adapters[name] = path
    _disrupt(state)
    return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")


async def unload_adapter(request: web.Request) -> web.Response:
    state = request.app[STATE]
    try:
        body = await read_json(request, state)
        name = _name(body, "lora_name")
        if name not in state.adapters:
            raise ApiError(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
    except ApiError as err:
        return error_response(state, err)
    del state.adapters[name]
    if "lora-unload-still-served" in state.faults:
        state.lingering.add(name)
    _disrupt(state)
    return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")


SWAP_DISRUPTION_S = 1.0


def _disrupt(state: State) -> None:
    """The swap faults: a second of failures or of stalled requests after a load or unload."""
    until = time.monotonic() + SWAP_DISRUPTION_S
    if "lora-swap-fails" in state.faults:
        state.lora_fail_until = until
    if "lora-swap-stalls" in state.faults:
        state.lora_stall_until = until


async def swap_effects(state: State) -> None:
    """Before a generation request: the swap faults' 503 or wait, while one is in effect."""
    now = time.monotonic()
    if now < state.lora_fail_until:
        raise ApiError(503, "the engine is swapping LoRA weights", "server_error")
    if now < state.lora_stall_until:
        await asyncio.sleep(state.lora_stall_until - now)


def model_entries(state: State, created: int) -> list[dict[str, Any]]:
    """The adapters' /v1/models entries (vLLM's shape: ``parent`` the base, ``root`` the path)."""
    if "lora-not-listed" in state.faults or not state.config.models:
        return []
    base = state.config.models[0]
    return [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "servecheck",
            "root": path,
            "parent": base,
        }
        for name, path in state.adapters.items()
    ]


def is_adapter(state: State, model: str) -> bool:
    return model in state.adapters or model in state.lingering


def apply(state: State, model: str, choices: list[Any]) -> None:
    """An adapter's answer: each text piece replaced by a word drawn from the adapter's name and
    the piece's place (tool calls and reasoning are left as the base made them)."""
    if not is_adapter(state, model) or "lora-same-as-base" in state.faults:
        return
    for c in choices:
        if c.tool_call is not None:
            continue
        out = []
        for i, piece in enumerate(c.pieces):
            digest = hashlib.sha256(f"{model}\0{i}\0{piece}".encode()).digest()
            word = WORDS[digest[0] % len(WORDS)]
            out.append((" " if i else "") + word)
        c.pieces = out


__all__ = ["apply", "is_adapter", "model_entries", "register", "swap_effects"]
