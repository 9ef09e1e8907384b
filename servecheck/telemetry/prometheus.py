"""Prometheus exposition text -> canonical engine metrics.

Engines name the same things differently. Each engine gets a mapping from canonical names
(:data:`CANONICAL`) to a list of candidate sample names, first present wins (so a renamed
metric can keep its old name as a fallback). A user mapping (``{canonical: sample name}``,
e.g. from ``targets.yaml``) overrides or extends the engine's.

Several label sets of one sample name (per model, per data-parallel engine) are combined:
counts are summed, fractions (``kv_usage``) take the maximum, because one full KV pool is
what preempts requests even when another is empty.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

# canonical name -> what it means (documented in docs/telemetry.md)
CANONICAL: dict[str, str] = {
    "kv_usage": "KV-cache usage as a 0-1 fraction",
    "requests_running": "requests being decoded now",
    "requests_waiting": "requests queued, not yet scheduled",
    "preemptions_total": "requests preempted since start (counter)",
    "busy_slots": "busy slots per decode step (llama.cpp)",
    "prefix_cache_queries_total": "prompt tokens looked up in the prefix cache (counter)",
    "prefix_cache_hits_total": "prompt tokens found in the prefix cache (counter)",
}
MAX_COMBINED = frozenset({"kv_usage"})

ENGINE_METRICS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "requests_running": ("vllm:num_requests_running",),
        "requests_waiting": ("vllm:num_requests_waiting",),
        "preemptions_total": ("vllm:num_preemptions_total",),
        "prefix_cache_queries_total": (
            "vllm:prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries_total",
        ),
        "prefix_cache_hits_total": (
            "vllm:prefix_cache_hits_total",
            "vllm:gpu_prefix_cache_hits_total",
        ),
    },
    "sglang": {
        "kv_usage": ("sglang:token_usage",),
        "requests_running": ("sglang:num_running_reqs",),
        "requests_waiting": ("sglang:num_queue_reqs",),
        "prefix_cache_queries_total": ("sglang:cache_queries_total",),
        "prefix_cache_hits_total": ("sglang:cache_hits_total",),
    },
    "tgi": {
        "requests_running": ("tgi_batch_current_size",),
        "requests_waiting": ("tgi_queue_size",),
    },
    "llamacpp": {
        "kv_usage": ("llamacpp:kv_cache_usage_ratio",),
        "requests_running": ("llamacpp:requests_processing",),
        "requests_waiting": ("llamacpp:requests_deferred",),
        "busy_slots": ("llamacpp:n_busy_slots_per_decode",),
    },
}
# The reference server exposes vLLM's names on purpose.
ENGINE_METRICS["reference"] = ENGINE_METRICS["vllm"]


@dataclass(slots=True)
class CanonicalValue:
    """One canonical metric read from one scrape."""

    name: str
    value: float
    source_metric: str
    series: int  # how many label sets were combined


@dataclass(slots=True)
class MetricMap:
    """Candidate sample names per canonical metric, for one engine plus user overrides."""

    candidates: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def for_engine(cls, engine: str, user: Mapping[str, str] | None = None) -> MetricMap:
        """The engine's mapping (empty for engines without one), then ``user`` on top.

        A user entry replaces the engine's candidates for that canonical name; names outside
        :data:`CANONICAL` are allowed and recorded under the user's name.
        """
        candidates = dict(ENGINE_METRICS.get(engine, {}))
        for canonical, sample_name in (user or {}).items():
            candidates[str(canonical)] = (str(sample_name),)
        return cls(candidates)

    def all_names(self) -> set[str]:
        return {name for names in self.candidates.values() for name in names}


def parse_samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample in exposition ``text``: sample name -> [(labels, value)].

    Raises ``ValueError`` on text the Prometheus parser rejects.
    """
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    aliases: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            row = (dict(sample.labels), float(sample.value))
            out.setdefault(sample.name, []).append(row)
            # The parser adds "_total" to counter samples that lack it (llama.cpp's
            # "llamacpp:n_busy_slots_per_decode" is a counter); keep the exposed name too.
            if family.type == "counter" and sample.name == family.name + "_total":
                aliases.setdefault(family.name, []).append(row)
    for name, rows in aliases.items():
        out.setdefault(name, rows)
    return out


def extract(text: str, mapping: MetricMap) -> dict[str, CanonicalValue]:
    """Canonical values found in ``text``; canonical names with no sample are left out."""
    samples = parse_samples(text)
    found: dict[str, CanonicalValue] = {}
    for canonical, names in mapping.candidates.items():
        for name in names:
            values = [v for _, v in samples.get(name, []) if not math.isnan(v)]
            if not values:
                continue
            combined = max(values) if canonical in MAX_COMBINED else math.fsum(values)
            found[canonical] = CanonicalValue(canonical, combined, name, len(values))
            break
    return found
