"""RERANK-*: ``/v1/rerank`` (or ``/rerank``) on a target's rerank models (see embed.py)."""

from __future__ import annotations

import math
from typing import Any

from servecheck.checks.context import CheckContext, body_snippet
from servecheck.checks.registry import check
from servecheck.checks.surfaces.embed import _model
from servecheck.client.http import Exchange

QUERY = "which garden has a stone path"
DOCUMENTS = (
    "the garden has a stone path by the river",
    "数据模型",
    "kernel batch queue",
    "a stone garden path",
)


def _rerank(ctx: CheckContext, **params: Any) -> Exchange:
    body = {"model": _model(ctx, "RERANK"), "query": QUERY, "documents": list(DOCUMENTS), **params}
    ex = ctx.post("/rerank", body)
    if ex.status in (404, 405):
        # vLLM and llama.cpp also serve it at the root (/rerank), Cohere-style
        ex = ctx.post(ctx.server_root + "/rerank", body)
    return ex


def _results(ctx: CheckContext, ex: Exchange, what: str) -> list[tuple[int, float]]:
    data = ctx.ok_json(ex, what)
    results = data.get("results")
    ctx.expect(
        isinstance(results, list) and bool(results),
        f"{what}: no 'results' list",
        expected='{"results": [{"index": 0, "relevance_score": 0.9}, ...]}',
        received=body_snippet(data),
        exchange=ex,
    )
    assert isinstance(results, list)
    out: list[tuple[int, float]] = []
    for r in results:
        index = r.get("index") if isinstance(r, dict) else None
        score = r.get("relevance_score") if isinstance(r, dict) else None
        ctx.expect(
            isinstance(index, int)
            and 0 <= index < len(DOCUMENTS)
            and index not in {i for i, _ in out}
            and isinstance(score, int | float)
            and not isinstance(score, bool)
            and math.isfinite(score),
            f"{what}: a result has a bad index or score",
            expected=f"distinct indexes in 0..{len(DOCUMENTS) - 1}, finite relevance_score",
            received=body_snippet(results),
            exchange=ex,
        )
        assert isinstance(index, int) and isinstance(score, int | float)
        out.append((index, float(score)))
    return out


@check(
    "RERANK-SHAPE",
    "rerank returns every document once, best first",
    "POST /v1/rerank (or /rerank) with a query and 4 documents gives 4 results, each a distinct "
    "document index with a finite relevance_score, sorted by score, highest first",
)
def rerank_shape(ctx: CheckContext) -> None:
    ex = _rerank(ctx)
    results = _results(ctx, ex, "POST /v1/rerank")
    ctx.expect(
        len(results) == len(DOCUMENTS),
        "rerank did not return every document",
        expected=f"{len(DOCUMENTS)} results (no top_n)",
        received=f"{len(results)} results",
        exchange=ex,
    )
    scores = [s for _, s in results]
    ctx.expect(
        scores == sorted(scores, reverse=True),
        "rerank results are not sorted by relevance",
        expected="relevance_score descending",
        received=", ".join(f"#{i}: {s:.4f}" for i, s in results),
        exchange=ex,
        hint="clients take results[0] as the best match",
    )


@check(
    "RERANK-TOP-N",
    "top_n keeps the best n, and a large top_n is harmless",
    "top_n 2 gives exactly the 2 best results of the full ranking; top_n above the number of "
    "documents gives at most all of them (or a 4xx), never a 5xx",
)
def rerank_top_n(ctx: CheckContext) -> None:
    full = _results(ctx, _rerank(ctx), "rerank without top_n")
    ex = _rerank(ctx, top_n=2)
    top = _results(ctx, ex, "top_n 2")
    ctx.expect(
        len(top) == 2 and {i for i, _ in top} == {i for i, _ in full[:2]},
        "top_n 2 did not give the two best documents",
        expected=f"2 results, documents {sorted(i for i, _ in full[:2])}",
        received=f"{len(top)} results, documents {[i for i, _ in top]}",
        exchange=ex,
    )
    ex = _rerank(ctx, top_n=len(DOCUMENTS) + 6)
    ctx.expect(
        not ex.error and ex.status is not None and ex.status < 500,
        "top_n above the number of documents crashed the request",
        expected=f"200 with at most {len(DOCUMENTS)} results, or a 4xx error object",
        received=ex.describe(300),
        exchange=ex,
    )
    if ex.ok:
        many = _results(ctx, ex, f"top_n {len(DOCUMENTS) + 6}")
        ctx.expect(
            len(many) <= len(DOCUMENTS),
            "more results than documents",
            expected=f"at most {len(DOCUMENTS)} results",
            received=f"{len(many)} results",
            exchange=ex,
        )
