"""Prometheus exposition text -> canonical metrics, per engine."""

from __future__ import annotations

import pytest

from servecheck.telemetry import CANONICAL, MetricMap, extract


def _values(
    text: str, engine: str, user: dict[str, str] | None = None
) -> dict[str, tuple[float, str]]:
    return {
        k: (v.value, v.source_metric)
        for k, v in extract(text, MetricMap.for_engine(engine, user)).items()
    }


@pytest.mark.parametrize(
    ("fixture", "engine", "expected"),
    [
        pytest.param(
            "vllm",
            "vllm",
            {
                "kv_usage": (0.5703125, "vllm:kv_cache_usage_perc"),
                "requests_running": (12.0, "vllm:num_requests_running"),
                "requests_waiting": (3.0, "vllm:num_requests_waiting"),
                "preemptions_total": (7.0, "vllm:num_preemptions_total"),
                # vLLM's prefix-cache counter: the soak's evidence of a prefix cache
                "prefix_cache_queries_total": (8192.0, "vllm:prefix_cache_queries_total"),
                # the engine-truth counters and histograms (analysis/server_truth.py)
                "requests_success_total": (252.0, "vllm:request_success_total"),
                "ttft_seconds_sum": (18.25, "vllm:time_to_first_token_seconds"),
                "ttft_seconds_count": (252.0, "vllm:time_to_first_token_seconds"),
            },
            id="vllm-v1",
        ),
        pytest.param(
            "vllm_v0",
            "vllm",
            {
                "kv_usage": (0.0421875, "vllm:gpu_cache_usage_perc"),
                "requests_running": (2.0, "vllm:num_requests_running"),
                "requests_waiting": (0.0, "vllm:num_requests_waiting"),
                "preemptions_total": (0.0, "vllm:num_preemptions_total"),
            },
            id="vllm-v0-old-kv-name",
        ),
        pytest.param(
            "vllm",
            "reference",
            {
                "kv_usage": (0.5703125, "vllm:kv_cache_usage_perc"),
                "requests_running": (12.0, "vllm:num_requests_running"),
                "requests_waiting": (3.0, "vllm:num_requests_waiting"),
                "preemptions_total": (7.0, "vllm:num_preemptions_total"),
                # vLLM's prefix-cache counter: the soak's evidence of a prefix cache
                "prefix_cache_queries_total": (8192.0, "vllm:prefix_cache_queries_total"),
                # the engine-truth counters and histograms (analysis/server_truth.py)
                "requests_success_total": (252.0, "vllm:request_success_total"),
                "ttft_seconds_sum": (18.25, "vllm:time_to_first_token_seconds"),
                "ttft_seconds_count": (252.0, "vllm:time_to_first_token_seconds"),
            },
            id="reference-uses-vllm-names",
        ),
        pytest.param(
            "sglang",
            "sglang",
            {
                "kv_usage": (0.28, "sglang:token_usage"),
                "requests_running": (4.0, "sglang:num_running_reqs"),
                "requests_waiting": (9.0, "sglang:num_queue_reqs"),
                "prompt_tokens_total": (8128902.0, "sglang:prompt_tokens_total"),
                "ttft_seconds_sum": (2351897.9474117756, "sglang:time_to_first_token_seconds"),
                "ttft_seconds_count": (11008.0, "sglang:time_to_first_token_seconds"),
            },
            id="sglang",
        ),
        pytest.param(
            "tgi",
            "tgi",
            {
                "requests_running": (16.0, "tgi_batch_current_size"),
                "requests_waiting": (6.0, "tgi_queue_size"),
                "requests_success_total": (310.0, "tgi_request_success"),
                "e2e_seconds_sum": (702.4, "tgi_request_duration"),
                "e2e_seconds_count": (310.0, "tgi_request_duration"),
            },
            id="tgi",
        ),
        pytest.param(
            "llamacpp",
            "llamacpp",
            {
                "requests_running": (3.0, "llamacpp:requests_processing"),
                "requests_waiting": (1.0, "llamacpp:requests_deferred"),
                "busy_slots": (2.5, "llamacpp:n_busy_slots_per_decode"),
                "prompt_tokens_total": (5120.0, "llamacpp:prompt_tokens_total"),
                "generation_tokens_total": (2048.0, "llamacpp:tokens_predicted_total"),
            },
            id="llamacpp-without-kv",
        ),
        pytest.param(
            "llamacpp_kv",
            "llamacpp",
            {
                "kv_usage": (0.125, "llamacpp:kv_cache_usage_ratio"),
                "requests_running": (3.0, "llamacpp:requests_processing"),
                "requests_waiting": (1.0, "llamacpp:requests_deferred"),
                "busy_slots": (2.5, "llamacpp:n_busy_slots_per_decode"),
                "prompt_tokens_total": (5120.0, "llamacpp:prompt_tokens_total"),
                "generation_tokens_total": (2048.0, "llamacpp:tokens_predicted_total"),
            },
            id="llamacpp-with-kv",
        ),
    ],
)
def test_engine_mapping(exposition, fixture, engine, expected):
    assert _values(exposition(fixture), engine) == expected


def test_label_sets_are_summed_and_kv_takes_the_fullest_pool(exposition):
    # Two data-parallel engines: counts add up, KV usage is the fuller pool (0.75, not 1.0).
    assert _values(exposition("vllm_dp2"), "vllm") == {
        "kv_usage": (0.75, "vllm:kv_cache_usage_perc"),
        "requests_running": (12.0, "vllm:num_requests_running"),
        "requests_waiting": (2.0, "vllm:num_requests_waiting"),
        "preemptions_total": (3.0, "vllm:num_preemptions_total"),
    }


def test_user_mapping_overrides_and_extends(exposition):
    user = {"kv_usage": "sglang:num_used_tokens", "cache_hit_rate": "sglang:cache_hit_rate"}
    values = _values(exposition("sglang"), "sglang", user)
    assert values["kv_usage"] == (123765.0, "sglang:num_used_tokens")
    assert values["cache_hit_rate"] == (0.007507552643049313, "sglang:cache_hit_rate")
    assert values["requests_running"] == (4.0, "sglang:num_running_reqs")


def test_generic_engine_needs_a_user_mapping(exposition):
    assert MetricMap.for_engine("generic").candidates == {}
    assert _values(exposition("tgi"), "generic", {"requests_waiting": "tgi_queue_size"}) == {
        "requests_waiting": (6.0, "tgi_queue_size"),
    }


def test_counter_exposed_without_total_is_found_by_either_name(exposition):
    values = _values(
        exposition("llamacpp"),
        "generic",
        {
            "a": "llamacpp:n_busy_slots_per_decode",
            "b": "llamacpp:n_busy_slots_per_decode_total",
        },
    )
    assert values == {
        "a": (2.5, "llamacpp:n_busy_slots_per_decode"),
        "b": (2.5, "llamacpp:n_busy_slots_per_decode_total"),
    }


def test_invalid_text_raises_value_error():
    with pytest.raises(ValueError):
        extract("vllm:kv_cache_usage_perc{engine=0 oops\n", MetricMap.for_engine("vllm"))


def test_every_engine_mapping_uses_canonical_names():
    from servecheck.telemetry import ENGINE_METRICS

    for engine, mapping in ENGINE_METRICS.items():
        unknown = set(mapping) - set(CANONICAL)
        assert not unknown, f"{engine} maps non-canonical names {unknown}"


def test_package_exports_resolve_lazily():
    import servecheck.telemetry as telemetry

    assert sorted(telemetry.__all__) == sorted(telemetry._MODULE_OF)
    for name in telemetry.__all__:
        assert getattr(telemetry, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        telemetry.nope  # noqa: B018
