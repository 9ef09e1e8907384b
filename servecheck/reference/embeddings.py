"""The reference server's pooling models: ``/v1/embeddings`` and ``/v1/rerank`` (also ``/rerank``).

Vectors are deterministic functions of the input's tokens (a seeded pseudo-random vector per
token, summed with a position weight and normalised), so identical inputs give identical
vectors, different inputs give different ones, and a batch gives exactly what single requests
give. Rerank scores are the cosine of the query's and the document's vectors.

Registered on the app by :func:`register` (called from ``server.build_app``); the faults it
honours are the ``embed-*`` and ``rerank-*`` entries of :mod:`servecheck.reference.faults`.
Like the rest of ``reference/`` it imports nothing from ``client/`` or ``checks/``.
"""

from __future__ import annotations

import base64
import hashlib
import math
import random
import struct
from typing import Any

from aiohttp import web

from servecheck.reference import model
from servecheck.reference.completions import BOS_ID
from servecheck.reference.http import (
    STATE,
    ApiError,
    State,
    check_ready,
    error_response,
    expect,
    read_json,
)
from servecheck.reference.text import VOCAB

EMBED_MODELS: tuple[str, ...] = ("ref-embed",)
RERANK_MODELS: tuple[str, ...] = ("ref-rerank",)
DIMENSIONS = 64
# The reference embeds Matryoshka-style: any prefix of the vector, renormalised, is a valid
# smaller embedding, so ``dimensions`` between 1 and DIMENSIONS is honoured.


def model_entries(state: State) -> list[dict[str, Any]]:
    """Extra ``/v1/models`` entries, typed the way Xinference types its models."""
    entries = []
    for name, kind in [(n, "embedding") for n in EMBED_MODELS] + [
        (n, "rerank") for n in RERANK_MODELS
    ]:
        entries.append(
            {
                "id": name,
                "object": "model",
                "created": state.created_at,
                "owned_by": "servecheck",
                "model_type": kind,
                "max_model_len": state.config.max_model_len,
            }
        )
    return entries


def _token_vector(token: str) -> list[float]:
    rng = random.Random(hashlib.blake2s(token.encode(), digest_size=8).digest())
    return [rng.gauss(0.0, 1.0) for _ in range(DIMENSIONS)]


def embed(text: str) -> list[float]:
    """The unit vector of ``text`` (a zero-token text embeds as the first basis vector)."""
    return embed_tokens(model.tokenize(text))


def embed_tokens(tokens: list[str]) -> list[float]:
    """The unit vector of a token sequence (what :func:`embed` computes for a text's tokens)."""
    acc = [0.0] * DIMENSIONS
    for pos, token in enumerate(tokens):
        weight = 1.0 / (1.0 + 0.05 * pos)
        for i, v in enumerate(_token_vector(token)):
            acc[i] += weight * v
    return _normalise(acc) if any(acc) else [1.0] + [0.0] * (DIMENSIONS - 1)


def _normalise(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def _is_ids(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(x, int) and not isinstance(x, bool) for x in value)
    )


def _inputs(faults: frozenset[str], body: dict[str, Any], vocab: dict[int, str]) -> list[list[str]]:
    """The inputs' tokens: a string, a list of strings, token ids (as /tokenize hands them out,
    BOS first where special tokens were asked for) or a list of token-id lists."""
    raw = body.get("input")
    items: Any = [raw] if isinstance(raw, str) or _is_ids(raw) else raw
    expect(
        isinstance(items, list)
        and bool(items)
        and all(isinstance(x, str) or _is_ids(x) for x in items),
        "'input' must be a string, a list of strings, a list of token ids or a list of such lists",
        "input",
    )
    if any(x == "" for x in items):
        if "embed-empty-500" in faults:
            raise ApiError(500, "internal error: RMSNorm got an empty batch", "server_error")
        raise ApiError(400, "'input' cannot be an empty string", param="input")
    if "embed-token-ids-as-text" in faults:  # the ids' digits embedded as if they were text
        items = [x if isinstance(x, str) else " ".join(map(str, x)) for x in items]
    return [
        model.tokenize(x)
        if isinstance(x, str)
        # Ids /tokenize did not hand out are still tokens of the vocabulary, with their own vectors.
        else [vocab.get(i, f"t{i}") for i in x if i != BOS_ID]
        for x in items
    ]


def _check_model(state: State, body: dict[str, Any], served: tuple[str, ...], what: str) -> str:
    name = body.get("model")
    expect(
        isinstance(name, str) and name != "", "'model' is required and must be a string", "model"
    )
    assert isinstance(name, str)
    if name not in served:
        raise ApiError(
            404 if name not in state.config.models else 400,
            f"The model `{name}` does not serve {what}. {what.capitalize()} models: {', '.join(served)}",
            "NotFoundError" if name not in state.config.models else "invalid_request_error",
            "model",
            "model_not_found",
        )
    return name


async def embeddings(request: web.Request) -> web.Response:
    state = request.app[STATE]
    faults = state.faults
    try:
        check_ready(state)
        body = await read_json(request, state)
        name = _check_model(state, body, EMBED_MODELS, "embeddings")
        texts = _inputs(faults, body, request.app[VOCAB])
        fmt = body.get("encoding_format", "float")
        expect(
            fmt in ("float", "base64"),
            "encoding_format must be 'float' or 'base64'",
            "encoding_format",
        )
        dims = body.get("dimensions")
        unchecked = "embed-dimensions-unchecked" in faults  # only the type is checked
        expect(
            dims is None
            or (
                isinstance(dims, int)
                and not isinstance(dims, bool)
                and (unchecked or 1 <= dims <= DIMENSIONS)
            ),
            f"dimensions must be an integer between 1 and {DIMENSIONS}",
            "dimensions",
        )
        limit = state.config.max_model_len
        counts = [len(t) + 1 for t in texts]  # +1: the pooling token
        over = [i for i, c in enumerate(counts) if c > limit]
        if over:
            i = over[0]
            if "embed-overlong-500" in faults:
                raise ApiError(500, "internal error: input is too large to process", "server_error")
            if "embed-overlong-silent" not in faults:
                raise ApiError(
                    400,
                    f"This model's maximum context length is {limit} tokens. However, input[{i}]"
                    f" contains {counts[i]} tokens.",
                    param="input",
                    code="context_length_exceeded",
                )
    except ApiError as err:
        return error_response(state, err)
    vectors = [embed_tokens(t) for t in texts]
    if "embed-dims-vary" in faults:
        # a pooling bug that drops the last element for long inputs
        vectors = [v[:-1] if c > 8 else v for v, c in zip(vectors, counts, strict=True)]
    if dims is not None and "embed-dimensions-ignored" not in faults and 1 <= dims <= DIMENSIONS:
        vectors = [_normalise(v[:dims]) for v in vectors]
    if "embed-nondeterministic" in faults:
        rng = random.Random()
        vectors = [_normalise([x + rng.gauss(0.0, 0.2) for x in v]) for v in vectors]
    if "embed-nan" in faults:
        vectors = [[math.nan, *v[1:]] for v in vectors]
    order = list(range(len(texts)))
    if "embed-batch-reversed" in faults:
        order.reverse()  # results come back in completion order, indexes renumbered
    data = []
    for position, i in enumerate(order):
        vec = vectors[i]
        if fmt == "base64":
            pack = "<%dd" if "embed-base64-float64" in faults else "<%df"
            value: Any = base64.b64encode(struct.pack(pack % len(vec), *vec)).decode()
        else:
            value = vec
        data.append({"object": "embedding", "index": position, "embedding": value})
    prompt_tokens = sum(min(c, state.config.max_model_len) for c in counts)
    if "embed-overlong-silent" in faults:
        prompt_tokens = sum(counts)
    if "embed-usage-zero" in faults:
        prompt_tokens = 0
    return web.json_response(
        {
            "object": "list",
            "data": data,
            "model": name,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        }
    )


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def rerank(request: web.Request) -> web.Response:
    state = request.app[STATE]
    faults = state.faults
    try:
        check_ready(state)
        body = await read_json(request, state)
        name = _check_model(state, body, RERANK_MODELS, "rerank")
        query = body.get("query")
        expect(
            isinstance(query, str) and query != "", "'query' must be a non-empty string", "query"
        )
        docs = body.get("documents")
        expect(
            isinstance(docs, list) and bool(docs) and all(isinstance(d, str) for d in docs),
            "'documents' must be a non-empty list of strings",
            "documents",
        )
        assert isinstance(docs, list) and isinstance(query, str)
        top_n = body.get("top_n")
        expect(
            top_n is None
            or (isinstance(top_n, int) and not isinstance(top_n, bool) and top_n >= 1),
            "top_n must be a positive integer",
            "top_n",
        )
        if "rerank-top-n-500" in faults and top_n is not None and top_n > len(docs):
            raise ApiError(500, f"KeyError: {len(docs)}", "server_error")
    except ApiError as err:
        return error_response(state, err)
    q = embed(query)
    scored = [(i, _cosine(q, embed(d))) for i, d in enumerate(docs)]
    if "rerank-unsorted" not in faults:
        scored.sort(key=lambda p: p[1], reverse=True)
    if top_n is not None and "rerank-top-n-ignored" not in faults:
        scored = scored[:top_n]
    results = []
    for i, score in scored:
        entry: dict[str, Any] = {"index": i, "relevance_score": score}
        if body.get("return_documents", True):
            entry["document"] = {"text": docs[i]}
        results.append(entry)
    tokens = len(model.tokenize(query)) * len(docs) + sum(len(model.tokenize(d)) for d in docs)
    return web.json_response(
        {
            "id": f"rerank-{hashlib.blake2s(str(body).encode(), digest_size=6).hexdigest()}",
            "model": name,
            "results": results,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


def register(app: web.Application) -> None:
    """Add the pooling routes to the reference app."""
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/v1/rerank", rerank)
    app.router.add_post("/rerank", rerank)
