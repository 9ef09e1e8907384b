"""Where usage puts its counts: the cached share (CACHE-*) and the details arithmetic
(CHAT-USAGE-DETAILS), on bodies shaped as real engines and gateways send them."""

from __future__ import annotations

from servecheck.checks.surfaces.cache import _cached
from servecheck.checks.surfaces.chat import usage_detail_problems


def test_cached_share_is_read_from_either_place() -> None:
    assert _cached({"prompt_tokens_details": {"cached_tokens": 7}}) == 7
    # LiteLLM's Anthropic-style field, with the OpenAI details null or absent
    assert _cached({"prompt_tokens_details": None, "cache_read_input_tokens": 4}) == 4
    assert _cached({"cache_read_input_tokens": 4}) == 4
    # the OpenAI field wins where both are there
    assert (
        _cached({"prompt_tokens_details": {"cached_tokens": 3}, "cache_read_input_tokens": 9}) == 3
    )
    assert _cached({"prompt_tokens": 5}) is None


def test_usage_details_accept_nulls_and_gateway_fields() -> None:
    litellm = {
        "prompt_tokens": 12,
        "completion_tokens": 8,
        "total_tokens": 20,
        "completion_tokens_details": {
            "accepted_prediction_tokens": None,
            "audio_tokens": None,
            "reasoning_tokens": 0,
            "rejected_prediction_tokens": None,
        },
        "prompt_tokens_details": {"audio_tokens": None, "cached_tokens": 10},
        "cache_read_input_tokens": 10,
        "cache_creation_input_tokens": 0,
    }
    assert usage_detail_problems(litellm) == []
    assert (
        usage_detail_problems(
            {
                "prompt_tokens": 3,
                "completion_tokens": 2,
                "total_tokens": 5,
                "prompt_tokens_details": None,
            }
        )
        == []
    )


def test_usage_details_name_what_is_off() -> None:
    base = {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    assert usage_detail_problems({**base, "cache_read_input_tokens": 5}) == [
        "cache_read_input_tokens 5 > prompt_tokens 4"
    ]
    assert usage_detail_problems(
        {**base, "completion_tokens_details": {"reasoning_tokens": 3}}
    ) == ["completion_tokens_details.reasoning_tokens 3 > completion_tokens 2"]
    assert usage_detail_problems({**base, "prompt_tokens_details": {"cached_tokens": -1}}) == [
        "prompt_tokens_details.cached_tokens = -1, not an integer >= 0 or null"
    ]
    assert usage_detail_problems({**base, "total_tokens": 7}) == [
        "total_tokens 7 != prompt_tokens 4 + completion_tokens 2"
    ]
