"""The hand-wired tool-caller model, checked with a numpy forward pass (no engine needed).

The reference forward is the textbook Llama (RMSNorm, rotate-half RoPE, causal attention,
SiLU MLP) on the HF weights; engines add their own grammars on top, which the live tests cover.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from servecheck.engines.models import TinyModelSpec, ensure_tiny_model

pytest.importorskip("tokenizers", reason="tokenizers (dev extra) trains the tiny BPE")


def _forward(weights: dict[str, np.ndarray], cfg: dict, ids: list[int]) -> np.ndarray:
    """Logits at the last position."""
    h = weights["model.embed_tokens.weight"][ids].astype(np.float64)
    n, d = h.shape
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = d // heads
    eps = cfg["rms_norm_eps"]
    inv = cfg["rope_theta"] ** (-np.arange(0, hd, 2) / hd)
    ang = np.outer(np.arange(n), inv)
    cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))

    def norm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(x: np.ndarray) -> np.ndarray:
        rot = np.concatenate([-x[..., hd // 2 :], x[..., : hd // 2]], -1)
        return x * cos + rot * sin

    mask = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = norm(h, weights[p + "input_layernorm.weight"])
        q = (x @ weights[p + "self_attn.q_proj.weight"].T).reshape(n, heads, hd).transpose(1, 0, 2)
        k = (
            (x @ weights[p + "self_attn.k_proj.weight"].T)
            .reshape(n, kv_heads, hd)
            .transpose(1, 0, 2)
        )
        v = (
            (x @ weights[p + "self_attn.v_proj.weight"].T)
            .reshape(n, kv_heads, hd)
            .transpose(1, 0, 2)
        )
        scores = rope(q) @ rope(k).transpose(0, 2, 1) / np.sqrt(hd) + mask
        att = np.exp(scores - scores.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        out = (att @ v).transpose(1, 0, 2).reshape(n, d)
        h = h + out @ weights[p + "self_attn.o_proj.weight"].T
        x = norm(h, weights[p + "post_attention_layernorm.weight"])
        g = x @ weights[p + "mlp.gate_proj.weight"].T
        u = x @ weights[p + "mlp.up_proj.weight"].T
        h = h + (g / (1 + np.exp(-g)) * u) @ weights[p + "mlp.down_proj.weight"].T
    h = norm(h, weights["model.norm.weight"])
    return h[-1] @ weights["lm_head.weight"].T


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory):
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    m = ensure_tiny_model(
        TinyModelSpec(name="unit-tools", tool_caller=True), tmp_path_factory.mktemp("tc")
    )
    return (
        load_file(str(m.hf_dir / "model.safetensors")),
        json.loads((m.hf_dir / "config.json").read_text()),
        Tokenizer.from_file(str(m.hf_dir / "tokenizer.json")),
    )


def _render(messages: list[dict], tools: list[dict] | None) -> str:
    import jinja2

    from servecheck.engines.models import CHAT_TEMPLATE

    env = jinja2.Environment()
    env.filters["tojson"] = json.dumps
    return env.from_string(CHAT_TEMPLATE).render(
        messages=messages, tools=tools, add_generation_prompt=True
    )


TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def _next_token(model, text: str) -> str:
    weights, cfg, tok = model
    ids = tok.encode(text).ids
    return tok.id_to_token(int(np.argmax(_forward(weights, cfg, ids))))


def test_first_token_is_tool_call_when_tools_are_offered(model) -> None:
    prompt = _render([{"role": "user", "content": "Weather in Paris?"}], [TOOL])
    assert _next_token(model, prompt) == "<tool_call>"


def test_newline_follows_tool_call_and_turn_ends_after_the_call(model) -> None:
    prompt = _render([{"role": "user", "content": "Weather in Paris?"}], [TOOL])
    assert _next_token(model, prompt + "<tool_call>") == "\u010a", "Hermes wants '<tool_call>\\n'"
    call = prompt + '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>'
    assert _next_token(model, call) == "<|im_end|>"


@pytest.mark.parametrize(
    "content", ["hello", "Weather in Paris?", "1 2 3"], ids=["hello", "question", "digits"]
)
def test_without_tools_the_model_does_not_call(model, content: str) -> None:
    prompt = _render([{"role": "user", "content": content}], None)
    assert _next_token(model, prompt) != "<tool_call>"
