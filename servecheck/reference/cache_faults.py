"""Prompt-cache defects for the CACHE checks, laid over the prefix cache (prefix_cache.py).

:func:`apply` runs right after a request's cache lookup and returns the cached-token count the
answer will report: ``cache-details-missing`` reports none (no ``prompt_tokens_details``
although the cache hit, as vLLM without ``--enable-prompt-tokens-details`` or vllm#16162),
``cache-over-prompt`` reports more than the prompt, and ``cache-metrics-frozen`` takes the
request back out of the ``/metrics`` counters so that they never move.
"""

from __future__ import annotations

from typing import Any


def apply(state: Any, cached: int | None, prompt_tokens: int) -> int | None:
    faults = state.faults
    if cached is None:
        return None
    if "cache-metrics-frozen" in faults and state.pcache is not None:
        state.pcache.queries -= prompt_tokens
        state.pcache.hits -= cached
    if "cache-details-missing" in faults and cached:
        return None
    if "cache-over-prompt" in faults and cached:
        return prompt_tokens + cached  # counted twice: the prefix blocks and the whole prompt
    return cached
