"""--input-tokens / --output-tokens: parsing, the drawn mix, how each engine holds the output."""

from __future__ import annotations

import statistics

import pytest

from servecheck.errors import UsageError
from servecheck.load.workload.lengths import (
    DRAWS,
    Lengths,
    apply_lengths,
    exact_output,
    parse_lengths,
    section,
)
from servecheck.load.workload.prompts import PromptSpec

MIX = [PromptSpec(64, 64, weight=4), PromptSpec(256, 128, weight=1)]


def test_parse_lengths() -> None:
    assert parse_lengths("512", "--input-tokens") == Lengths(512, 0.0)
    assert parse_lengths(" 512:128 ", "--input-tokens") == Lengths(512, 128.0)


@pytest.mark.parametrize("text", ["", "x", "0", "-3", "10:-1", "10:nan", "10:x", "1.5"])
def test_bad_lengths_name_the_option(text: str) -> None:
    with pytest.raises(UsageError, match="--output-tokens"):
        parse_lengths(text, "--output-tokens")


def test_no_lengths_keeps_the_scenario_mix() -> None:
    assert apply_lengths(MIX, None, None, seed=0) == MIX


def test_fixed_lengths_replace_both_lengths_with_equal_weights() -> None:
    mix = apply_lengths(MIX, Lengths(100), Lengths(20), seed=0)
    assert len(mix) == DRAWS
    assert {(m.prompt_tokens, m.output_tokens, m.weight) for m in mix} == {(100, 20, 1.0)}


def test_one_length_keeps_the_other_from_the_scenario() -> None:
    mix = apply_lengths(MIX, None, Lengths(20), seed=0)
    assert {m.prompt_tokens for m in mix} == {64, 256}
    assert {m.output_tokens for m in mix} == {20}


def test_spread_lengths_are_seeded_and_at_least_one_token() -> None:
    a = apply_lengths(MIX, Lengths(50, 30), None, seed=1)
    assert a == apply_lengths(MIX, Lengths(50, 30), None, seed=1)
    assert a != apply_lengths(MIX, Lengths(50, 30), None, seed=2)
    values = [m.prompt_tokens for m in a]
    assert min(values) >= 1 and len(set(values)) > 4
    assert 30 <= statistics.mean(values) <= 70


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp", "reference"])
def test_engines_with_ignore_eos_get_an_exact_length(engine: str) -> None:
    assert exact_output(engine, {}) == ({"ignore_eos": True}, "exact (ignore_eos)")


@pytest.mark.parametrize("engine", ["openai", "tgi", "litellm", "generic"])
def test_other_engines_are_told_it_is_a_ceiling(engine: str) -> None:
    extra, held = exact_output(engine, {})
    assert extra == {} and held.startswith("a ceiling") and engine in held


def test_a_users_own_ignore_eos_wins() -> None:
    assert exact_output("vllm", {"ignore_eos": False}) == (
        {},
        "a ceiling: extra_body sets ignore_eos",
    )
    assert section(None, None, None) is None
    assert section(Lengths(10, 2), None, None) == {
        "input_tokens": "10:2",
        "output_tokens": None,
        "output_length": None,
        "draws": DRAWS,
    }
