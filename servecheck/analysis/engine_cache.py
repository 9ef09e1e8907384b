"""The engine's own prefix-cache counters over a load run: hits / queries from /metrics.

vLLM counts prompt tokens looked up in its prefix cache (``vllm:prefix_cache_queries``) and those
found (``vllm:prefix_cache_hits``), both counters; older releases named them
``vllm:gpu_prefix_cache_queries`` / ``..._hits``. The reference server exposes vLLM's names. A
scrape before and after the run gives the run's hit rate as the engine saw it, independent of
whether the server reports ``usage.prompt_tokens_details.cached_tokens`` (vLLM only does with
``--enable-prompt-tokens-details``).

A counter that went down between the scrapes means the engine restarted: the delta is not used
(``note`` says why). Scrape failures are data (``note``), never an exception: the load run must
not fail because /metrics is absent. (Load layer: reads the Prometheus text itself with
``prometheus_client``'s parser rather than through ``servecheck/telemetry``.)
"""

from __future__ import annotations

import math
from typing import Any

from servecheck.config.model import Target
from servecheck.redact import redact

# (queries, hits) sample names, first pair present wins.
COUNTERS: tuple[tuple[str, str], ...] = (
    ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"),
    ("vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total"),
    ("sglang:cache_queries_total", "sglang:cache_hits_total"),
)


def read_counters(text: str) -> dict[str, Any] | None:
    """``{"source", "queries", "hits"}`` summed over label sets, or None when absent."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(float(sample.value))
    for q_name, h_name in COUNTERS:
        q = [v for v in samples.get(q_name, []) if not math.isnan(v)]
        h = [v for v in samples.get(h_name, []) if not math.isnan(v)]
        if q and h:
            return {
                "source": q_name.removesuffix("_queries_total"),
                "queries": math.fsum(q),
                "hits": math.fsum(h),
            }
    return None


def snapshot(target: Target, timeout_s: float = 5.0) -> dict[str, Any]:
    """One scrape of the target's /metrics: the counters, or ``{"note": why not}``."""
    import httpx

    from servecheck.client.factory import ClientSettings, sync_client

    url = target.metrics_url or target.server_root + "/metrics"
    settings = ClientSettings.for_target(target, timeout_s=timeout_s, connect_timeout_s=timeout_s)
    try:
        with sync_client(settings, bound_body=True) as client:  # /metrics that never ends
            r = client.get(url)
    except httpx.HTTPError as exc:
        return {"note": f"cannot read {redact(url)}: {type(exc).__name__}"}
    if r.status_code != 200:
        return {"note": f"{redact(url)} answered HTTP {r.status_code}"}
    try:
        found = read_counters(r.text)
    except ValueError as exc:
        return {"note": f"{redact(url)}: not Prometheus text ({str(exc)[:80]})"}
    return found or {"note": "the engine exposes no prefix-cache counters"}


def run_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The run's hits and queries (after - before) and their ratio, or a ``note``."""
    if "queries" not in before or "queries" not in after:
        return {"note": after.get("note") or before.get("note") or "no counters"}
    q = after["queries"] - before["queries"]
    h = after["hits"] - before["hits"]
    if q < 0 or h < 0:
        return {"source": after["source"], "note": "counters went down: the engine restarted"}
    return {
        "source": after["source"],
        "queries": q,
        "hits": h,
        "hit_rate": round(h / q, 4) if q > 0 else None,
    }
