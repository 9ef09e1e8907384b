"""EMBED-*: ``/v1/embeddings`` (RERANK-* for ``/v1/rerank`` is in rerank.py; both pool).

These checks run on a target's embedding and rerank models (``embedding_models`` /
``rerank_models`` in targets.yaml, else the entries ``/v1/models`` types as such), not on its
chat models. Vectors are compared by cosine similarity with tolerances that real engines' float
noise stays far inside (batching changes the last bits, never the direction), so a random-weight
tiny model passes as long as it is served correctly.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.discovery import TargetInfo
from servecheck.checks.registry import check
from servecheck.checks.surfaces.err import detail_deviation
from servecheck.client.http import Exchange
from servecheck.config.model import Target

POOLING_SURFACES: dict[str, tuple[str, str]] = {
    "EMBED": ("embedding", "embedding_models"),
    "RERANK": ("rerank", "rerank_models"),
}

# Distinct texts with distinct last words (last-token pooling must still tell them apart),
# in three scripts so that tokenizers meet multi-byte input.
TEXTS = (
    "The quick brown fox jumps over the river",
    "数据模型的服务器",
    "Un café crème à Zürich, s'il vous plaît",
    "queue batch kernel latency signal",
)
SAME = 0.99  # cosine above which two vectors are "the same embedding" (batching noise ~1e-6)
IDENTICAL = 0.9999  # identical inputs: only float noise allowed


def pooling_models(info: TargetInfo, surface: str) -> list[str]:
    """The models EMBED (embedding) or RERANK (rerank) checks run on."""
    return list(info.embedding_models if surface == "EMBED" else info.rerank_models)


def no_pooling_reason(target: Target, surface: str) -> str:
    kind, key = POOLING_SURFACES[surface]
    return (
        f"{surface}: {target.name} serves no {kind} model (declare `{key}` in targets.yaml; "
        f"/v1/models typed none as {kind})"
    )


def _model(ctx: CheckContext, surface: str) -> str:
    models = pooling_models(ctx.info, surface)
    if ctx.model in models:
        return ctx.model
    if not models:
        raise CheckSkipped(no_pooling_reason(ctx.target, surface))
    return models[0]


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def _post_embeddings(ctx: CheckContext, inputs: str | list[str], **params: Any) -> Exchange:
    body: dict[str, Any] = {"model": _model(ctx, "EMBED"), "input": inputs, **params}
    return ctx.post("/embeddings", body)


def _vectors(ctx: CheckContext, ex: Exchange, n: int, what: str) -> list[list[float]]:
    """The float vectors of a 2xx embeddings answer, ordered by ``index``; fails on a bad shape."""
    data = ctx.ok_json(ex, what)
    items = data.get("data")
    ctx.expect(
        isinstance(items, list) and len(items) == n,
        f"{what}: 'data' does not hold one item per input",
        expected=f'{{"object": "list", "data": [{n} x {{"object": "embedding", "index", "embedding"}}]}}',
        received=body_snippet(data),
        exchange=ex,
    )
    assert isinstance(items, list)
    by_index: dict[int, list[float]] = {}
    for item in items:
        index = item.get("index") if isinstance(item, dict) else None
        vec = item.get("embedding") if isinstance(item, dict) else None
        ctx.expect(
            isinstance(index, int) and 0 <= index < n and index not in by_index,
            f"{what}: item indexes are not 0..{n - 1}, each once",
            expected=f"indexes 0..{n - 1}",
            received=body_snippet([i.get("index") if isinstance(i, dict) else i for i in items]),
            exchange=ex,
        )
        ctx.expect(
            isinstance(vec, list)
            and bool(vec)
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in vec),
            f"{what}: an embedding is not a list of numbers",
            expected="embedding: [float, ...] (encoding_format float)",
            received=body_snippet(item),
            exchange=ex,
        )
        assert isinstance(index, int) and isinstance(vec, list)
        by_index[index] = [float(v) for v in vec]
    return [by_index[i] for i in range(n)]


@check(
    "EMBED-SHAPE",
    "an embeddings answer has the OpenAI shape",
    "object 'list', one data item per input with object 'embedding', its index and a non-empty "
    "vector of finite numbers, the model name and usage",
)
def embed_shape(ctx: CheckContext) -> None:
    for inputs in (TEXTS[0], list(TEXTS[:2])):
        n = 1 if isinstance(inputs, str) else len(inputs)
        ex = _post_embeddings(ctx, inputs)
        vectors = _vectors(ctx, ex, n, "POST /v1/embeddings")
        data = ex.json()
        ctx.expect(
            data.get("object") == "list"
            and all(isinstance(i, dict) and i.get("object") == "embedding" for i in data["data"])
            and isinstance(data.get("model"), str)
            and isinstance(data.get("usage"), dict),
            "the embeddings answer misses OpenAI fields",
            expected="object 'list', data[].object 'embedding', model, usage",
            received=body_snippet({k: v for k, v in data.items() if k != "data"}),
            exchange=ex,
        )
        for i, vec in enumerate(vectors):
            bad = [j for j, v in enumerate(vec) if not math.isfinite(v)]
            ctx.expect(
                not bad,
                f"embedding {i} holds non-finite values (NaN or infinity)",
                expected="finite floats only",
                received=f"{len(bad)} of {len(vec)} values non-finite, first at position {bad[:1]}",
                exchange=ex,
                hint="NaN in a vector poisons every similarity computed with it; often a "
                "half-precision overflow in pooling",
            )
            ctx.expect(
                any(vec),
                f"embedding {i} is all zeros",
                expected="a non-zero vector",
                received=f"{len(vec)} zeros",
                exchange=ex,
            )


def _decode_base64(text: Any) -> list[float] | None:
    if not isinstance(text, str):
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) % 4:
        return None
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


@check(
    "EMBED-BASE64",
    "encoding_format base64 and float give the same vector",
    "with encoding_format 'base64' each embedding is base64 of little-endian float32 values "
    "equal to the 'float' answer's (what the openai SDK decodes)",
)
def embed_base64(ctx: CheckContext) -> None:
    floats = _vectors(ctx, _post_embeddings(ctx, TEXTS[2]), 1, "encoding_format float")[0]
    ex = _post_embeddings(ctx, TEXTS[2], encoding_format="base64")
    data = ctx.ok_json(ex, "encoding_format base64")
    items = data.get("data")
    item = items[0] if isinstance(items, list) and items and isinstance(items[0], dict) else {}
    decoded = _decode_base64(item.get("embedding"))
    ctx.expect(
        decoded is not None,
        "the base64 embedding is not base64 of float32 values",
        expected="a base64 string whose length decodes to a multiple of 4 bytes",
        received=body_snippet(item),
        exchange=ex,
    )
    assert decoded is not None
    ctx.expect(
        len(decoded) == len(floats),
        "the base64 vector has another length than the float one",
        expected=f"{len(floats)} float32 values (as encoding_format float gives)",
        received=f"{len(decoded)} float32 values"
        + (" (float64 packed as float32?)" if len(decoded) == 2 * len(floats) else ""),
        exchange=ex,
        hint="clients (the openai SDK, LangChain) decode base64 as float32: float64 bytes read "
        "that way are garbage",
    )
    cos = _cosine(decoded, floats)
    ctx.expect(
        cos >= IDENTICAL,
        "the base64 vector differs from the float one",
        expected=f"cosine >= {IDENTICAL} between the two encodings",
        received=f"cosine {cos:.6f}",
        exchange=ex,
    )


@check(
    "EMBED-BATCH-ORDER",
    "a batch's vectors keep the inputs' order",
    "the item with index i of a batched request is input i's vector: it matches a single "
    f"request for input i (cosine >= {SAME}) better than any other input's",
)
def embed_batch_order(ctx: CheckContext) -> None:
    singles = [
        _vectors(ctx, _post_embeddings(ctx, t), 1, f"single input {i}")[0]
        for i, t in enumerate(TEXTS)
    ]
    ex = _post_embeddings(ctx, list(TEXTS))
    batch = _vectors(ctx, ex, len(TEXTS), "batched input")
    for i, vec in enumerate(batch):
        sims = [_cosine(vec, s) for s in singles]
        best = max(range(len(sims)), key=sims.__getitem__)
        ctx.expect(
            best == i and sims[i] >= SAME,
            f"batch item {i} is not input {i}'s vector",
            expected=f"item {i} closest to the single-request vector of input {i} "
            f"(cosine >= {SAME})",
            received=f"closest to input {best}; cosines to inputs 0..{len(sims) - 1}: "
            + ", ".join(f"{s:.4f}" for s in sims),
            exchange=ex,
            hint="results reordered (by completion or by length) without their original index "
            "attach each vector to the wrong text",
        )


def _refusal_problem(ex: Exchange) -> str | None:
    """What keeps ``ex`` from being a clean refusal (a 4xx with an error object), or None."""
    if ex.error or ex.status is None or not 400 <= ex.status < 500:
        return ex.describe(160)
    data = ex.json()
    if not (isinstance(data, dict) and isinstance(data.get("error"), dict | str)):
        return f"HTTP {ex.status} without an error object: {ex.describe(160)}"
    return None


@check(
    "EMBED-DIMS",
    "vector length is stable and 'dimensions' is honoured or refused",
    "every vector of a model has the same length across inputs and requests; a request with "
    "dimensions: 8 gets 8-value vectors, or a 4xx error object if the model cannot shorten; "
    "dimensions 0, -1 and one more than the model's length each get a 4xx error object",
)
def embed_dims(ctx: CheckContext) -> None:
    short, long = "kernel", " ".join(TEXTS)
    ex = _post_embeddings(ctx, [short, long])
    first = _vectors(ctx, ex, 2, "inputs of two lengths")
    again = _vectors(ctx, _post_embeddings(ctx, TEXTS[1]), 1, "another request")[0]
    lengths = [len(first[0]), len(first[1]), len(again)]
    ctx.expect(
        len(set(lengths)) == 1,
        "vectors of one model have different lengths",
        expected="one length for every vector",
        received=f"short input {lengths[0]}, long input {lengths[1]}, another request {lengths[2]}",
        exchange=ex,
    )
    want = 8 if lengths[0] > 8 else max(1, lengths[0] // 2)
    ex = _post_embeddings(ctx, short, dimensions=want)
    if ex.ok:
        got = _vectors(ctx, ex, 1, f"dimensions {want}")[0]
        ctx.expect(
            len(got) == want,
            "'dimensions' was accepted but not applied",
            expected=f"{want} values (or a 400 if the model cannot shorten its vectors)",
            received=f"{len(got)} values with HTTP {ex.status}",
            exchange=ex,
            hint="a client that stores short vectors gets full ones; refuse what you cannot do",
        )
    else:
        data = ex.json()
        ctx.expect(
            _refusal_problem(ex) is None,
            "'dimensions' was neither honoured nor refused cleanly",
            expected="200 with shortened vectors, or a 4xx error object",
            received=ex.describe(300),
            exchange=ex,
            deviation=detail_deviation(data),
        )
    bad: list[tuple[int, Exchange, str]] = []
    for value in (0, -1, lengths[0] + 1):
        out = _post_embeddings(ctx, short, dimensions=value)
        problem = _refusal_problem(out)
        if problem is not None:
            bad.append((value, out, problem))
    ctx.expect(
        not bad,
        f"{len(bad)} impossible 'dimensions' value(s) were not refused",
        expected=f"a 4xx error object for dimensions 0, -1 and {lengths[0] + 1} (the model gives "
        f"{lengths[0]} values)",
        received="; ".join(f"dimensions {v}: {p}" for v, _, p in bad),
        exchange=bad[0][1] if bad else None,
        deviation=detail_deviation(bad[0][1].json()) if bad else None,
        hint="check 1 <= dimensions <= the model's size before pooling: a full or empty vector "
        "served for an impossible size is stored by the client as if it were what it asked for",
    )


def _ids_for(ctx: CheckContext, name: str, text: str) -> list[int] | None:
    """The ids the server embeds ``text`` as (its /tokenize, special tokens included), or None."""
    body = {
        "model": name,
        "prompt": text,
        "content": text,  # llama.cpp's name
        "add_special_tokens": True,
        "add_special": True,  # llama.cpp's name
    }
    ex = ctx.post(ctx.server_root + "/tokenize", body)
    data = ex.json() if ex.ok else None
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if isinstance(tokens, list) and tokens and all(isinstance(t, int) for t in tokens):
        return tokens
    return None


# Small ids exist in every vocabulary: token-id input can be judged without /tokenize.
FALLBACK_IDS = [11, 12, 13, 14, 15]


@check(
    "EMBED-INPUT-FORMS",
    "a one-item list and token ids are embedded; an empty string is refused",
    f"a one-item list gets the string's vector (cosine >= {IDENTICAL}); token ids, flat and as a "
    "list of two id lists, get one vector per input, alike (cosine >= "
    f"{IDENTICAL}) and, with the ids /tokenize gives for the string, the string's (cosine >= "
    f"{SAME}); an empty string gets a 4xx error object, never a 5xx",
)
def embed_input_forms(ctx: CheckContext) -> None:
    name = _model(ctx, "EMBED")
    text = TEXTS[0]
    plain = _vectors(ctx, _post_embeddings(ctx, text), 1, "a string")[0]
    ex = _post_embeddings(ctx, [text])
    listed = _vectors(ctx, ex, 1, "a one-item list")[0]
    cos = _cosine(listed, plain)
    ctx.expect(
        cos >= IDENTICAL,
        "a one-item list is not embedded as its string",
        expected=f"cosine >= {IDENTICAL} with the string's vector",
        received=f"cosine {cos:.6f}",
        exchange=ex,
    )
    served = _ids_for(ctx, name, text)
    ids = served or FALLBACK_IDS
    flat_ex = ctx.post("/embeddings", {"model": name, "input": ids})
    flat = _vectors(ctx, flat_ex, 1, "token ids")[0]
    nested_ex = ctx.post("/embeddings", {"model": name, "input": [ids, ids]})
    nested = _vectors(ctx, nested_ex, 2, "a list of two token-id lists")
    worst = min(_cosine(flat, v) for v in nested)
    ctx.expect(
        worst >= IDENTICAL,
        "the same token ids give different vectors flat and nested",
        expected=f"cosine >= {IDENTICAL} between input {ids[:8]}... and [[...], [...]] of it",
        received=f"lowest cosine {worst:.6f}",
        exchange=nested_ex,
    )
    if served is not None:
        cos = _cosine(flat, plain)
        ctx.expect(
            cos >= SAME,
            "token ids are not embedded as the text they stand for",
            expected=f"cosine >= {SAME} between the string's vector and its /tokenize ids'",
            received=f"cosine {cos:.6f} for ids {ids[:12]}",
            exchange=flat_ex,
            hint="token-id input must reach the model as those tokens (OpenAI accepts int arrays; "
            "LangChain sends them for long texts); read them as ids, not as text",
        )
    empty = _post_embeddings(ctx, "")
    ctx.expect(
        not empty.error and empty.status is not None and empty.status < 500,
        "an empty string crashed the request",
        expected="a 4xx error object (OpenAI refuses an empty input)",
        received=empty.describe(300),
        exchange=empty,
        hint="refuse an empty input before it reaches the model (sglang#4988: an empty batch "
        "crashed the norm kernel)",
    )
    problem = None if not empty.ok else f"HTTP {empty.status}: it was embedded"
    problem = problem or _refusal_problem(empty)
    ctx.expect(
        problem is None,
        "an empty string was not refused cleanly",
        expected="a 4xx error object (OpenAI refuses an empty input)",
        received=problem or "",
        exchange=empty,
        deviation="embed-empty-accepted" if empty.ok else detail_deviation(empty.json()),
        hint="an empty text has no meaning to embed; a vector for it (the special tokens' alone) "
        "lands next to unrelated texts in an index",
    )


@check(
    "EMBED-DETERMINISTIC",
    "identical inputs give identical vectors",
    f"the same text twice in one batch and once more in another request: cosine >= {IDENTICAL} "
    "between all three",
)
def embed_deterministic(ctx: CheckContext) -> None:
    ex = _post_embeddings(ctx, [TEXTS[3], TEXTS[0], TEXTS[3]])
    batch = _vectors(ctx, ex, 3, "a batch with a repeated input")
    alone = _vectors(ctx, _post_embeddings(ctx, TEXTS[3]), 1, "the input alone")[0]
    for label, a, b in (
        ("items 0 and 2 of one batch", batch[0], batch[2]),
        ("the batch and a separate request", batch[0], alone),
    ):
        cos = _cosine(a, b)
        diff = max((abs(x - y) for x, y in zip(a, b, strict=False)), default=0.0)
        ctx.expect(
            cos >= IDENTICAL and len(a) == len(b),
            f"identical inputs got different vectors ({label})",
            expected=f"cosine >= {IDENTICAL}",
            received=f"cosine {cos:.6f}, largest difference {diff:.4g}",
            exchange=ex,
            hint="a cache or an index built on these vectors will not find the same text twice",
        )


def _context(ctx: CheckContext, model: str) -> int:
    if ctx.info.context_length:
        return ctx.info.context_length
    ex = ctx.get("/models")
    data = ex.json() if ex.ok else None
    for entry in data.get("data", []) if isinstance(data, dict) else []:
        if isinstance(entry, dict) and entry.get("id") == model:
            for key in ("max_model_len", "context_length"):
                if isinstance(entry.get(key), int):
                    return int(entry[key])
    raise CheckSkipped(
        f"EMBED-OVERLONG: the context length of {model} is unknown (set context_length)"
    )


@check(
    "EMBED-OVERLONG",
    "an input over the context is refused or truncated visibly",
    "an input about twice the context length gets a 4xx error object, or a 200 whose "
    "usage.prompt_tokens shows the cut (at most the context length); never a 5xx or a "
    "silent full-length claim",
    requires=("route-accepts:/embeddings",),
)
def embed_overlong(ctx: CheckContext) -> None:
    name = _model(ctx, "EMBED")
    limit = _context(ctx, name)
    words = ("river", "stone", "light", "garden", "signal", "orbit", "cloud", "kernel")
    text = " ".join(words[i % len(words)] for i in range(2 * limit + 16))
    ex = _post_embeddings(ctx, text)
    ctx.expect(
        not ex.error and ex.status is not None and ex.status < 500,
        "an over-long input crashed the request",
        expected="a 4xx error object naming the limit, or a 200 that shows the truncation",
        received=ex.describe(300),
        exchange=ex,
    )
    data = ex.json()
    if not ex.ok:
        ctx.expect(
            isinstance(data, dict) and isinstance(data.get("error"), dict | str),
            "the refusal of an over-long input has no error object",
            expected='{"error": {"message": ...}}',
            received=ex.describe(300),
            exchange=ex,
            deviation=detail_deviation(data),
        )
        return
    usage = data.get("usage") if isinstance(data, dict) else None
    used = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    ctx.expect(
        isinstance(used, int) and 0 < used <= limit,
        "an over-long input was embedded without showing a cut",
        expected=f"400, or 200 with usage.prompt_tokens <= {limit} (the context)",
        received=f"HTTP 200, usage {body_snippet(usage)} for about {2 * limit + 16} words",
        exchange=ex,
        hint="the vector covers only part of the text, or the engine read past its context; "
        "the client cannot tell which",
    )


@check(
    "EMBED-USAGE",
    "embeddings usage counts the input tokens",
    "usage.prompt_tokens > 0, total_tokens equals it (no completion), and a batch's count is "
    "the sum of its inputs' single counts",
)
def embed_usage(ctx: CheckContext) -> None:
    counts = []
    for text in TEXTS[:2]:
        ex = _post_embeddings(ctx, text)
        data = ctx.ok_json(ex, "POST /v1/embeddings")
        usage = data.get("usage")
        prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        total = usage.get("total_tokens") if isinstance(usage, dict) else None
        ctx.expect(
            isinstance(prompt, int) and prompt > 0 and total == prompt,
            "embeddings usage is missing or wrong",
            expected="usage: {prompt_tokens: > 0, total_tokens: = prompt_tokens}",
            received=body_snippet(usage),
            exchange=ex,
        )
        assert isinstance(prompt, int)
        counts.append(prompt)
    ex = _post_embeddings(ctx, list(TEXTS[:2]))
    data = ctx.ok_json(ex, "a batch of two")
    usage = data.get("usage")
    got = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    ctx.expect(
        got == sum(counts),
        "a batch's usage is not the sum of its inputs'",
        expected=f"prompt_tokens {sum(counts)} ({' + '.join(map(str, counts))})",
        received=body_snippet(usage),
        exchange=ex,
    )
