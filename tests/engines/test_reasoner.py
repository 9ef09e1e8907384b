"""The hand-wired tiny reasoning model, checked with the numpy forward pass (no engine needed):
the R1-style template opens <think>, the model thinks THOUGHT_TOKENS and closes the thought,
then answers; with thinking off it answers at once; it never reopens or recloses a thought."""

from __future__ import annotations

import json

import pytest

from servecheck.engines.models import (
    REASONING_CHAT_TEMPLATE,
    THINK_END,
    THINK_START,
    THOUGHT_TOKENS,
    TinyModelSpec,
    ensure_tiny_model,
    reasoning_spec,
)
from tests.engines.numpy_llama import TOOL, greedy, load, render

pytest.importorskip("tokenizers", reason="tokenizers (dev extra) trains the tiny BPE")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory):
    return load(ensure_tiny_model(reasoning_spec(), tmp_path_factory.mktemp("reasoner")))


USER = [{"role": "user", "content": "What is 7 times 6?"}]


def test_the_generation_prompt_opens_a_thought_and_the_model_closes_it(model) -> None:
    prompt = render(REASONING_CHAT_TEMPLATE, USER)
    assert prompt.endswith("<|im_start|>assistant\n" + THINK_START)
    out = greedy(model, prompt, 12)
    assert out[:5] == [*THOUGHT_TOKENS, THINK_END, "\u010a"], out
    assert THINK_START not in out[5:] and THINK_END not in out[5:], out


def test_thinking_off_answers_at_once(model) -> None:
    prompt = render(REASONING_CHAT_TEMPLATE, USER, enable_thinking=False)
    assert prompt.endswith(THINK_START + THINK_END)
    out = greedy(model, prompt, 8)
    assert not {THINK_START, THINK_END, *THOUGHT_TOKENS} & set(out), out


def test_with_tools_the_call_comes_after_the_thought(model) -> None:
    out = greedy(model, render(REASONING_CHAT_TEMPLATE, USER, [TOOL]), 6)
    assert out[:6] == [*THOUGHT_TOKENS, THINK_END, "\u010a", "<tool_call>"], out


def test_earlier_reasoning_is_rendered_inside_think_tags() -> None:
    turn = {"role": "assistant", "content": "42", "reasoning_content": "six sevens"}
    text = render(
        REASONING_CHAT_TEMPLATE, [*USER, turn, {"role": "user", "content": "and 8 times 6?"}]
    )
    assert "<think>six sevens</think>42<|im_end|>" in text


def test_a_reasoner_needs_the_tool_caller_channels(tmp_path) -> None:
    with pytest.raises(ValueError, match="needs tool_caller"):
        ensure_tiny_model(TinyModelSpec(name="bad", reasoner=True), tmp_path)


def test_the_default_model_keeps_its_directory() -> None:
    """Adding the reasoner field must not move the cached default model (engines use it): a
    spec that does not reason hashes as it did before the field existed."""
    import dataclasses
    import hashlib

    from servecheck.engines.models import GENERATOR_VERSION

    spec = TinyModelSpec(tool_caller=True)
    before = {k: v for k, v in dataclasses.asdict(spec).items() if k != "reasoner"}
    blob = json.dumps({"spec": before, "gen": GENERATOR_VERSION}, sort_keys=True)
    assert spec.key() == hashlib.sha256(blob.encode()).hexdigest()[:12]
    assert reasoning_spec().key() != spec.key()
