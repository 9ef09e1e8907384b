"""The hand-wired tool-caller model, checked with a numpy forward pass (no engine needed).

The forward (tests/engines/numpy_llama.py) is the textbook Llama on the HF weights; engines add
their own grammars on top, which the live tests cover.
"""

from __future__ import annotations

import pytest

from servecheck.engines.models import CHAT_TEMPLATE, TinyModelSpec, ensure_tiny_model
from tests.engines.numpy_llama import TOOL, greedy, load, render

pytest.importorskip("tokenizers", reason="tokenizers (dev extra) trains the tiny BPE")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory):
    return load(
        ensure_tiny_model(
            TinyModelSpec(name="unit-tools", tool_caller=True), tmp_path_factory.mktemp("tc")
        )
    )


def test_first_token_is_tool_call_when_tools_are_offered(model) -> None:
    prompt = render(CHAT_TEMPLATE, [{"role": "user", "content": "Weather in Paris?"}], [TOOL])
    assert greedy(model, prompt, 1) == ["<tool_call>"]


def test_newline_follows_tool_call_and_turn_ends_after_the_call(model) -> None:
    prompt = render(CHAT_TEMPLATE, [{"role": "user", "content": "Weather in Paris?"}], [TOOL])
    assert greedy(model, prompt + "<tool_call>", 1) == ["\u010a"], "Hermes wants '<tool_call>\\n'"
    call = prompt + '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>'
    assert greedy(model, call, 1) == ["<|im_end|>"]


@pytest.mark.parametrize(
    "content", ["hello", "Weather in Paris?", "1 2 3"], ids=["hello", "question", "digits"]
)
def test_without_tools_the_model_does_not_call(model, content: str) -> None:
    prompt = render(CHAT_TEMPLATE, [{"role": "user", "content": content}], None)
    assert greedy(model, prompt, 1) != ["<tool_call>"]
