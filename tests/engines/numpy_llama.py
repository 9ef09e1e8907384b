"""A numpy forward pass over the tiny hand-wired models (no engine needed), for the tests that
check their weights: load a generated model, render a chat template, decode greedily.

The forward is the textbook Llama (RMSNorm, rotate-half RoPE, causal attention, SiLU MLP) on the
HF weights; engines add their own grammars on top, which the live tests cover.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from servecheck.engines.models import TinyModel

# The tool both hand-wired models are offered in their tests.
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}

# (weights by tensor name, config.json, tokenizer): what forward() and greedy() read.
Loaded = tuple[dict[str, np.ndarray], dict[str, Any], Any]


def load(m: TinyModel) -> Loaded:
    """The HF weights, config and tokenizer of a generated tiny model."""
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    return (
        load_file(str(m.hf_dir / "model.safetensors")),
        json.loads((m.hf_dir / "config.json").read_text()),
        Tokenizer.from_file(str(m.hf_dir / "tokenizer.json")),
    )


def forward(weights: dict[str, np.ndarray], cfg: dict, ids: list[int]) -> np.ndarray:
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


def greedy(model: Loaded, text: str, n: int) -> list[str]:
    """The ``n`` tokens the model writes after ``text`` at temperature 0."""
    weights, cfg, tok = model
    ids = tok.encode(text).ids
    out = []
    for _ in range(n):
        nxt = int(np.argmax(forward(weights, cfg, ids)))
        ids.append(nxt)
        out.append(tok.id_to_token(nxt))
    return out


def render(
    template: str, messages: list[dict], tools: list[dict] | None = None, **kwargs: object
) -> str:
    """``template`` rendered with a generation prompt, as an engine's jinja does."""
    import jinja2

    env = jinja2.Environment()
    env.filters["tojson"] = json.dumps
    return env.from_string(template).render(
        messages=messages, tools=tools, add_generation_prompt=True, **kwargs
    )
