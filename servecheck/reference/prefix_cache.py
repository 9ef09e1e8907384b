"""A prefix cache for the reference server, so the load scenarios can be self-tested.

Off unless ``ServerConfig.prefix_cache_blocks`` > 0. Modelled on vLLM's automatic prefix caching
at the level a load test sees it:

* the prompt is a token sequence (a marker per message role, then its content's tokens); it is
  cut into full blocks of ``block_size`` tokens, each keyed by the hash of every token up to its
  end (a block matches only when everything before it matches too);
* a request's cached tokens are its leading blocks already in the cache (never the whole prompt:
  the last token is always computed, as in vLLM), then its blocks are inserted; the cache keeps
  at most ``prefix_cache_blocks`` blocks, least recently used evicted first. Idle cached blocks
  are not counted as KV usage (vLLM counts them as free: evictable), unless
  ``prefix_cache_counted``: then they are, as in an engine whose usage metric includes a cache
  it evicts only under pressure; a soak then sees a plateau at the cache's size (retention)
  that must not read as a leak;
* the reply reports them in ``usage.prompt_tokens_details.cached_tokens``; ``/metrics`` has
  ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` (tokens);
* TTFT shrinks with the cached share: ``ttft_ms * (0.25 + 0.75 * uncached / prompt)`` (prefill
  of the cached part is skipped; a fixed quarter stays for scheduling and the first decode).

Imports only core modules and the reference model (never client/ or checks/).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

from servecheck.reference import model

FIXED_TTFT_SHARE = 0.25


class PrefixCache:
    """Block-hash LRU cache; counts queried and hit tokens like vLLM's counters."""

    def __init__(self, capacity_blocks: int, block_size: int) -> None:
        self.capacity = capacity_blocks
        self.block_size = block_size
        self.blocks: OrderedDict[bytes, None] = OrderedDict()
        self.queries = 0
        self.hits = 0

    def lookup_insert(self, ids: list[int], prompt_tokens: int) -> int:
        """Cached tokens for this prompt (then its blocks are cached)."""
        bs = self.block_size
        h = hashlib.blake2s(digest_size=12)
        keys: list[bytes] = []
        for end in range(bs, len(ids) + 1, bs):
            h.update(b"".join(i.to_bytes(4, "little") for i in ids[end - bs : end]))
            keys.append(h.copy().digest())
        hit_blocks = 0
        for key in keys:
            if key not in self.blocks:
                break
            hit_blocks += 1
        for key in keys:
            self.blocks[key] = None
            self.blocks.move_to_end(key)
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)
        cached = min(hit_blocks * bs, max(0, prompt_tokens - 1))
        self.queries += prompt_tokens
        self.hits += cached
        return cached


def _ids(messages: list[dict[str, Any]]) -> list[int]:
    ids: list[int] = []
    for m in messages:
        role = str(m.get("role")).encode()
        ids.append(
            1 << 24 | int.from_bytes(hashlib.blake2s(role, digest_size=3).digest(), "little")
        )
        ids += model.token_ids(model.content_text(m.get("content")))
    return ids


def lookup(state: Any, messages: list[dict[str, Any]] | None, prompt_tokens: int) -> int | None:
    """Cached tokens of a chat request, or None when the server has no prefix cache."""
    cfg = state.config
    if cfg.prefix_cache_blocks <= 0 or messages is None:
        return None
    if state.pcache is None:
        state.pcache = PrefixCache(cfg.prefix_cache_blocks, cfg.block_size)
    return int(state.pcache.lookup_insert(_ids(messages), prompt_tokens))


def ttft_s(cfg: Any, cached: int | None, prompt_tokens: int) -> float:
    """Time to first token in seconds for a request with ``cached`` prompt tokens cached."""
    if cached is None or prompt_tokens <= 0:
        return cfg.ttft_ms / 1000
    uncached = (prompt_tokens - cached) / prompt_tokens
    return cfg.ttft_ms * (FIXED_TTFT_SHARE + (1 - FIXED_TTFT_SHARE) * uncached) / 1000


def annotate(usage: dict[str, Any], cached: int | None) -> dict[str, Any]:
    """Add ``prompt_tokens_details.cached_tokens`` to a usage object (when the cache is on)."""
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def metric_lines(state: Any) -> list[str]:
    """vLLM's prefix-cache counters for /metrics (nothing when the cache is off)."""
    if state.config.prefix_cache_blocks <= 0:
        return []
    pc = state.pcache
    q, h = (pc.queries, pc.hits) if pc is not None else (0, 0)
    name = state.config.models[0]
    return [
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of tokens.",
        "# TYPE vllm:prefix_cache_queries_total counter",
        f'vllm:prefix_cache_queries_total{{engine="0",model_name="{name}"}} {q}',
        "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of tokens.",
        "# TYPE vllm:prefix_cache_hits_total counter",
        f'vllm:prefix_cache_hits_total{{engine="0",model_name="{name}"}} {h}',
    ]


def resident_blocks(state: Any) -> int:
    """Cached blocks that count as KV usage (``prefix_cache_counted``), else 0."""
    pc = state.pcache
    if pc is None or not state.config.prefix_cache_counted:
        return 0
    return len(pc.blocks)


async def reset(request: Any) -> Any:
    """``POST /reset_prefix_cache`` (vLLM's, served there only with ``VLLM_SERVER_DEV_MODE=1``):
    drop every cached block; the counters keep counting. A soak flushes before each drain
    measurement (load/cache_flush.py), so retained cache and a leak read apart."""
    from aiohttp import web

    from servecheck.reference.http import STATE

    state = request.app[STATE]
    if state.pcache is not None:
        state.pcache.blocks.clear()
    state.prefix_cache_resets += 1
    return web.Response(status=200)


def register(app: Any) -> None:
    """The flush endpoint, where the server has a prefix cache (none to flush without one: 404)."""
    app.router.add_post("/reset_prefix_cache", reset)
