"""LORA-*: runtime LoRA adapters, loaded and unloaded through vLLM's endpoints.

A target that declares ``capabilities: {lora: true}`` and a ``lora_adapter: {name, path}`` serves
LoRA adapters that can be loaded while it runs (vLLM with ``--enable-lora`` and
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``): ``POST /v1/load_lora_adapter`` ``{"lora_name",
"lora_path"}`` and ``POST /v1/unload_lora_adapter`` ``{"lora_name"}``. Each check loads the
adapter under a name of its own (the declared name plus the check's suffix, so checks running
side by side never unload each other's adapter) and unloads it when done, whatever happened.

The checks hold what a client relies on when a deployment swaps adapters live: a loaded adapter
is listed by ``/v1/models`` (LORA-LISTED), answers differently from the base model
(LORA-DIFFERS: an adapter whose weights were not applied serves the base model under a new
name), is gone after unloading, 404 and unlisted (LORA-UNLOAD-404), and a path with no adapter
is refused with a 4xx instead of listed (LORA-LOAD-BAD-PATH).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from servecheck.checks.context import CheckContext, body_snippet
from servecheck.checks.registry import check
from servecheck.client.http import Exchange
from servecheck.config.model import LoraAdapter

PROMPTS = ("Say hello to the world.", "Name three colours.")
MAX_TOKENS = 16
BAD_PATH = "/nonexistent/servecheck-lora-no-such-adapter"
HINT_RUNTIME = (
    "start vLLM with --enable-lora --max-lora-rank R and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; "
    "lora_adapter.path must be a folder the server can read"
)


def _adapter(ctx: CheckContext) -> LoraAdapter:
    adapter = ctx.target.lora_adapter
    if adapter is None:
        ctx.fail(
            "the target declares lora but names no adapter to load",
            expected="lora_adapter: {name: NAME, path: PATH} in targets.yaml",
            received="no lora_adapter",
            hint="add the adapter's name and its path on the server to the target",
        )
    return adapter


def _load(ctx: CheckContext, name: str, path: str) -> Exchange:
    return ctx.post("/load_lora_adapter", {"lora_name": name, "lora_path": path})


def _unload(ctx: CheckContext, name: str) -> Exchange:
    return ctx.post("/unload_lora_adapter", {"lora_name": name})


@contextlib.contextmanager
def _loaded(ctx: CheckContext, suffix: str) -> Iterator[str]:
    """Load the target's adapter as ``NAME-suffix`` (after unloading a leftover of that name);
    unload it at the end."""
    adapter = _adapter(ctx)
    name = f"{adapter.name}-{suffix}"
    ex = _load(ctx, name, adapter.path)
    if ex.status == 400 and "already" in ex.text:  # a run that died before its unload
        _unload(ctx, name)
        ex = _load(ctx, name, adapter.path)
    ctx.expect(
        ex.ok,
        f"loading the adapter {name!r} from {adapter.path} was refused",
        expected="HTTP 200 from POST /v1/load_lora_adapter",
        received=ex.describe(),
        exchange=ex,
        hint=HINT_RUNTIME,
    )
    try:
        yield name
    finally:
        _unload(ctx, name)


def _listed(ctx: CheckContext) -> tuple[dict[str, dict[str, Any]], Exchange]:
    ex = ctx.get("/models")
    data = ctx.ok_json(ex, "GET /v1/models")
    raw = data.get("data")
    entries: list[Any] = raw if isinstance(raw, list) else []
    return {e["id"]: e for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str)}, ex


def _answer(ctx: CheckContext, model: str, prompt: str) -> tuple[str, Exchange]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    }
    ex = ctx.post("/chat/completions", body)
    data = ctx.ok_json(ex, f"a request to {model!r}")
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        content = None
    ctx.expect(
        isinstance(content, str),
        f"the answer of {model!r} has no message content",
        expected="choices[0].message.content, a string",
        received=body_snippet(data),
        exchange=ex,
    )
    return str(content), ex


@check(
    "LORA-LISTED",
    "a runtime-loaded LoRA adapter is listed by /v1/models",
    "after POST /v1/load_lora_adapter answers 200, GET /v1/models lists the adapter's name",
    requires=("lora",),
)
def lora_listed(ctx: CheckContext) -> None:
    with _loaded(ctx, "listed") as name:
        listed, ex = _listed(ctx)
        ctx.expect(
            name in listed,
            f"the loaded adapter {name!r} is not in /v1/models",
            expected=f"an entry with id {name!r} (vLLM: parent the base model)",
            received=f"ids: {', '.join(listed) or 'none'}",
            exchange=ex,
            hint="clients discover adapters through /v1/models; a router that reads it never "
            "sends traffic to an unlisted one",
        )


@check(
    "LORA-DIFFERS",
    "a LoRA adapter's answers differ from the base model's",
    "at temperature 0, the adapter answers at least one of two prompts differently from the "
    "base model (its weights were applied)",
    requires=("lora",),
)
def lora_differs(ctx: CheckContext) -> None:
    with _loaded(ctx, "differs") as name:
        pairs = []
        last: Exchange | None = None
        for prompt in PROMPTS:
            base, _ = _answer(ctx, ctx.model, prompt)
            tuned, last = _answer(ctx, name, prompt)
            pairs.append((prompt, base, tuned))
        ctx.expect(
            any(base != tuned for _, base, tuned in pairs),
            f"the adapter {name!r} answers exactly as the base model {ctx.model!r}",
            expected="a different greedy answer for at least one prompt",
            received="; ".join(f"{p!r}: both {b[:60]!r}" for p, b, _ in pairs),
            exchange=last,
            hint="the adapter's weights were not applied (a zero-initialised B matrix, a "
            "target_modules mismatch, or a server that routes the name to the base model)",
        )


@check(
    "LORA-UNLOAD-404",
    "an unloaded LoRA adapter is gone: 404 and unlisted",
    "after POST /v1/unload_lora_adapter answers 200, a request naming the adapter gets a 404 and "
    "/v1/models no longer lists it",
    requires=("lora",),
)
def lora_unload_404(ctx: CheckContext) -> None:
    with _loaded(ctx, "unload") as name:
        _answer(ctx, name, PROMPTS[0])
        ex = _unload(ctx, name)
        ctx.expect(
            ex.ok,
            f"unloading the adapter {name!r} was refused",
            expected="HTTP 200 from POST /v1/unload_lora_adapter",
            received=ex.describe(),
            exchange=ex,
            hint=HINT_RUNTIME,
        )
        after = ctx.post(
            "/chat/completions",
            {"model": name, "messages": [{"role": "user", "content": PROMPTS[0]}], "max_tokens": 4},
        )
        ctx.expect(
            after.status == 404,
            f"a request to the unloaded adapter {name!r} did not get a 404",
            expected="HTTP 404 (the model does not exist)",
            received=after.describe(),
            exchange=after,
            hint="an unloaded adapter that still answers keeps serving weights the operator "
            "took away; clients must see the 404 and fall back",
        )
        listed, lex = _listed(ctx)
        ctx.expect(
            name not in listed,
            f"the unloaded adapter {name!r} is still listed by /v1/models",
            expected=f"no entry with id {name!r}",
            received=f"ids: {', '.join(listed)}",
            exchange=lex,
        )


@check(
    "LORA-LOAD-BAD-PATH",
    "loading an adapter from a path with nothing there is refused",
    "POST /v1/load_lora_adapter with a path that does not exist answers a 4xx error object (not "
    "200, not a 5xx) and the name is not listed afterwards",
    requires=("lora",),
)
def lora_load_bad_path(ctx: CheckContext) -> None:
    name = f"{_adapter(ctx).name}-bad-path"
    ex = _load(ctx, name, BAD_PATH)
    try:
        listed, _ = _listed(ctx)
    finally:
        if ex.ok:
            _unload(ctx, name)
    data = ex.json()
    ctx.expect(
        ex.status is not None
        and 400 <= ex.status < 500
        and isinstance(data, dict)
        and isinstance(data.get("error"), dict),
        f"loading {name!r} from {BAD_PATH} was not refused with a 4xx error object",
        expected="HTTP 400 or 404 with {'error': {'message': ...}}",
        received=ex.describe(),
        exchange=ex,
        hint="a load that 'succeeds' without weights lists a model that serves nothing useful",
    )
    ctx.expect(
        name not in listed,
        f"the refused adapter {name!r} is listed by /v1/models",
        expected=f"no entry with id {name!r}",
        received=f"ids: {', '.join(listed)}",
    )
