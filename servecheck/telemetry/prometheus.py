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
    "requests_success_total": "requests the engine finished (counter)",
    "prompt_tokens_total": "prompt tokens the engine processed (counter)",
    "generation_tokens_total": "tokens the engine generated, reasoning included (counter)",
    "cached_tokens_total": "prompt tokens served from the prefix cache, per request (counter)",
    "ttft_seconds": "the engine's time to first token (histogram, seconds)",
    "queue_seconds": "time a request waited before it was scheduled (histogram, seconds)",
    "prefill_seconds": "time spent on the prompt (histogram, seconds)",
    "decode_seconds": "time spent generating after the first token (histogram, seconds)",
    "e2e_seconds": "the engine's end-to-end request latency (histogram, seconds)",
}
MAX_COMBINED = frozenset({"kv_usage"})
# Label sets left out of a canonical sum: vLLM counts aborted and failed requests in
# request_success_total under their finished_reason; they did not complete.
EXCLUDED_LABELS: dict[str, dict[str, frozenset[str]]] = {
    "requests_success_total": {"finished_reason": frozenset({"abort", "error"})},
}
# Canonical names that name a histogram family: a candidate is the family's base name, read as
# ``<base>_sum``, ``<base>_count`` and ``<base>_bucket``; the series records ``<canonical>_sum``
# and ``<canonical>_count``.
HISTOGRAMS = frozenset(
    {"ttft_seconds", "queue_seconds", "prefill_seconds", "decode_seconds", "e2e_seconds"}
)

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
        "requests_success_total": ("vllm:request_success_total",),
        "prompt_tokens_total": ("vllm:prompt_tokens_total",),
        "generation_tokens_total": ("vllm:generation_tokens_total",),
        "cached_tokens_total": ("vllm:prompt_tokens_cached_total",),
        "ttft_seconds": ("vllm:time_to_first_token_seconds",),
        "queue_seconds": ("vllm:request_queue_time_seconds",),
        "prefill_seconds": ("vllm:request_prefill_time_seconds",),
        "decode_seconds": ("vllm:request_decode_time_seconds",),
        "e2e_seconds": ("vllm:e2e_request_latency_seconds",),
    },
    # SGLang and TGI: names read from their sources (no shared engine here to fetch a page).
    "sglang": {
        "kv_usage": ("sglang:token_usage",),
        "requests_running": ("sglang:num_running_reqs",),
        "requests_waiting": ("sglang:num_queue_reqs",),
        "prefix_cache_queries_total": ("sglang:cache_queries_total",),
        "prefix_cache_hits_total": ("sglang:cache_hits_total",),
        "cached_tokens_total": ("sglang:cached_tokens_total",),
        "requests_success_total": ("sglang:num_requests_total",),
        "prompt_tokens_total": ("sglang:prompt_tokens_total",),
        "generation_tokens_total": ("sglang:generation_tokens_total",),
        "ttft_seconds": ("sglang:time_to_first_token_seconds",),
        "queue_seconds": ("sglang:queue_time_seconds",),
        "e2e_seconds": ("sglang:e2e_request_latency_seconds",),
    },
    "tgi": {
        "requests_running": ("tgi_batch_current_size",),
        "requests_waiting": ("tgi_queue_size",),
        "requests_success_total": ("tgi_request_success",),
        # TGI counts tokens in per-request histograms: their _sum is the counter.
        "prompt_tokens_total": ("tgi_request_input_length_sum",),
        "generation_tokens_total": ("tgi_request_generated_tokens_sum",),
        "queue_seconds": ("tgi_request_queue_duration",),
        "e2e_seconds": ("tgi_request_duration",),
    },
    # llama.cpp (--metrics) has counters and gauges only: no histogram, no request counter.
    "llamacpp": {
        "kv_usage": ("llamacpp:kv_cache_usage_ratio",),
        "requests_running": ("llamacpp:requests_processing",),
        "requests_waiting": ("llamacpp:requests_deferred",),
        "busy_slots": ("llamacpp:n_busy_slots_per_decode",),
        "prompt_tokens_total": ("llamacpp:prompt_tokens_total",),
        "generation_tokens_total": ("llamacpp:tokens_predicted_total",),
        "cached_tokens_total": ("llamacpp:prompt_tokens_cached_total",),
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

    def only(self, *canonical: str) -> MetricMap:
        """This mapping cut to ``canonical`` (a reader of two values need not parse a page's
        other families: :func:`extract` drops their lines before parsing)."""
        return MetricMap({k: v for k, v in self.candidates.items() if k in canonical})


# The suffixes a sample name adds to its family's (a counter's _total, a histogram's parts).
_SUFFIXES = ("_total", "_sum", "_count", "_bucket", "_created", "_gsum", "_gcount", "_info")


def _stem(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def wanted_lines(text: str, names: set[str]) -> str:
    """``text`` with only the lines of the families ``names`` (sample names or family names)
    belong to: their ``# HELP`` / ``# TYPE`` lines and every sample of the family, so each kept
    family parses as it would in the whole page. prometheus_client's parser costs about 40 us a
    line (2.3 ms for the reference server's 55-line page, tens of ms for an engine's hundreds of
    histogram buckets, every second of a run, on the generator's core); the lines of families
    nobody reads are left out before it, as is any defect in them."""
    stems = names | {_stem(n) for n in names}
    kept = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) < 3 or parts[1] not in ("HELP", "TYPE", "UNIT") or parts[2] in stems:
                kept.append(line)
            continue
        cut = len(line)
        for sep in ("{", " ", "\t"):
            at = line.find(sep)
            if 0 <= at < cut:
                cut = at
        name = line[:cut]
        if name in stems or _stem(name) in stems or not name:
            kept.append(line)
    return "\n".join(kept) + "\n"


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


@dataclass(slots=True)
class Histogram:
    """One histogram family summed over its label sets: ``buckets`` are (upper bound, cumulative
    count) pairs sorted by bound, ``+Inf`` last (empty when the family has no buckets)."""

    name: str
    sum: float
    count: float
    buckets: list[tuple[float, float]] = field(default_factory=list)


def read_histogram(
    samples: Mapping[str, list[tuple[dict[str, str], float]]], base: str
) -> Histogram | None:
    """The histogram ``base`` from parsed samples (:func:`parse_samples`), or None."""
    sums = [v for _, v in samples.get(base + "_sum", []) if not math.isnan(v)]
    counts = [v for _, v in samples.get(base + "_count", []) if not math.isnan(v)]
    if not sums or not counts:
        return None
    by_bound: dict[float, float] = {}
    for labels, v in samples.get(base + "_bucket", []):
        try:
            bound = float(labels.get("le", "nan"))
        except ValueError:
            continue
        if not math.isnan(bound) and not math.isnan(v):
            by_bound[bound] = by_bound.get(bound, 0.0) + v
    return Histogram(base, math.fsum(sums), math.fsum(counts), sorted(by_bound.items()))


def find_histogram(
    samples: Mapping[str, list[tuple[dict[str, str], float]]],
    mapping: MetricMap,
    canonical: str,
) -> Histogram | None:
    """The first of ``canonical``'s candidate families present in ``samples``, or None."""
    for name in mapping.candidates.get(canonical, ()):
        found = read_histogram(samples, name)
        if found is not None:
            return found
    return None


def find_counter(
    samples: Mapping[str, list[tuple[dict[str, str], float]]],
    mapping: MetricMap,
    canonical: str,
) -> CanonicalValue | None:
    """``canonical`` summed over label sets from the first candidate present, or None."""
    excluded = EXCLUDED_LABELS.get(canonical, {})
    for name in mapping.candidates.get(canonical, ()):
        values = [
            v
            for labels, v in samples.get(name, [])
            if not math.isnan(v) and not any(labels.get(k) in bad for k, bad in excluded.items())
        ]
        if values:
            combined = max(values) if canonical in MAX_COMBINED else math.fsum(values)
            return CanonicalValue(canonical, combined, name, len(values))
    return None


def extract(text: str, mapping: MetricMap) -> dict[str, CanonicalValue]:
    """Canonical values found in ``text``; canonical names with no sample are left out. A
    histogram gives two values, ``<canonical>_sum`` and ``<canonical>_count``. Only the
    lines of the mapping's families are parsed (:func:`wanted_lines`)."""
    samples = parse_samples(wanted_lines(text, mapping.all_names()))
    found: dict[str, CanonicalValue] = {}
    for canonical, names in mapping.candidates.items():
        if canonical in HISTOGRAMS:
            hist = find_histogram(samples, mapping, canonical)
            if hist is not None:
                for part, value in (("sum", hist.sum), ("count", hist.count)):
                    key = f"{canonical}_{part}"
                    found[key] = CanonicalValue(key, value, hist.name, 1)
            continue
        for name in names:
            values = [v for _, v in samples.get(name, []) if not math.isnan(v)]
            if not values:
                continue
            combined = max(values) if canonical in MAX_COMBINED else math.fsum(values)
            found[canonical] = CanonicalValue(canonical, combined, name, len(values))
            break
    return found
