"""The tiny models: deterministic, well-formed, and what each engine expects to load."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from servecheck.engines.models import (
    CHAT_TEMPLATE,
    CONTROL_TOKENS,
    MARKER_TOKENS,
    TinyModelSpec,
    ensure_tiny_model,
)

pytest.importorskip("tokenizers", reason="tokenizers (dev extra) trains the tiny BPE")

# Small vocabulary keeps these tests well under a second each.
SPEC = TinyModelSpec(name="unit-tiny", vocab_size=600, seed=7)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory):
    return ensure_tiny_model(SPEC, tmp_path_factory.mktemp("models"))


def test_generation_is_deterministic(model, tmp_path: Path) -> None:
    again = ensure_tiny_model(SPEC, tmp_path)
    for rel in ("hf/model.safetensors", "hf/tokenizer.json", "hf/config.json", "unit-tiny.gguf"):
        first, second = _digest(model.root / rel), _digest(again.root / rel)
        assert first == second, f"{rel} differs between two generations with seed {SPEC.seed}"


def test_cached_directory_is_reused(model) -> None:
    before = (model.root / "DONE").stat().st_mtime_ns
    same = ensure_tiny_model(SPEC, model.root.parent)
    assert same.root == model.root
    assert (model.root / "DONE").stat().st_mtime_ns == before, "a finished model was rewritten"


def test_seed_changes_directory_and_weights(model, tmp_path: Path) -> None:
    other = ensure_tiny_model(TinyModelSpec(name="unit-tiny", vocab_size=600, seed=8), tmp_path)
    assert other.root.name != model.root.name
    assert _digest(other.hf_dir / "model.safetensors") != _digest(
        model.hf_dir / "model.safetensors"
    )


def test_hf_config_shape(model) -> None:
    config = json.loads((model.hf_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    assert head_dim in (32, 64, 80, 96, 112, 128), f"vLLM CPU cannot run head size {head_dim}"
    tok = json.loads((model.hf_dir / "tokenizer.json").read_text())
    vocab = len(tok["model"]["vocab"]) + len(
        [t for t in tok["added_tokens"] if t["content"] not in tok["model"]["vocab"]]
    )
    assert config["vocab_size"] == vocab, (
        f"config vocab {config['vocab_size']} != tokenizer vocab {vocab}"
    )


def test_safetensors_names_and_shapes(model) -> None:
    from safetensors.numpy import load_file

    weights = load_file(str(model.hf_dir / "model.safetensors"))
    config = json.loads((model.hf_dir / "config.json").read_text())
    assert weights["model.embed_tokens.weight"].shape == (config["vocab_size"], SPEC.hidden_size)
    assert weights["lm_head.weight"].shape == (config["vocab_size"], SPEC.hidden_size)
    assert len([k for k in weights if k.startswith("model.layers.")]) == 9 * SPEC.num_layers


def test_tokenizer_round_trip_and_special_tokens(model) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model.hf_dir / "tokenizer.json"))
    text = 'Héllo, wörld! {"city": "Paris"} 12345 \u2603'
    assert tok.decode(tok.encode(text).ids) == text
    for special in (*CONTROL_TOKENS, *MARKER_TOKENS):
        ids = tok.encode(special).ids
        assert len(ids) == 1, f"{special} must be one token (engines look it up by id), got {ids}"
    cfg = json.loads((model.hf_dir / "tokenizer_config.json").read_text())
    assert cfg["eos_token"] == "<|im_end|>"
    assert cfg["chat_template"] == CHAT_TEMPLATE
    marker = cfg["added_tokens_decoder"][str(tok.token_to_id("<tool_call>"))]
    assert marker["special"] is False, "tool-call markers must survive skip_special_tokens"


def _render(**kwargs: object) -> str:
    import jinja2

    env = jinja2.Environment()
    env.filters["tojson"] = lambda v: json.dumps(v)
    return env.from_string(CHAT_TEMPLATE).render(**kwargs)


def test_chat_template_plain_chat() -> None:
    text = _render(
        messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}],
        add_generation_prompt=True,
        tools=None,
    )
    assert (
        text
        == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_chat_template_tools_and_tool_round_trip() -> None:
    tool = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object"}},
    }
    messages = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    text = _render(messages=messages, tools=[tool], add_generation_prompt=True)
    assert "<tools>\n" + json.dumps(tool) + "\n</tools>" in text
    assert (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    )
    assert "<tool_response>\nsunny\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_gguf_metadata_and_tensors(model) -> None:
    import gguf

    reader = gguf.GGUFReader(str(model.gguf_path))
    fields = reader.fields

    def scalar(key: str) -> object:
        field = fields[key]
        return field.parts[field.data[0]].tolist()[0]

    def string(key: str) -> str:
        field = fields[key]
        return bytes(field.parts[field.data[0]]).decode()

    assert string("general.architecture") == "llama"
    assert string("tokenizer.ggml.model") == "gpt2"
    assert string("tokenizer.chat_template") == CHAT_TEMPLATE
    assert scalar("llama.attention.head_count") == SPEC.num_heads
    assert scalar("llama.block_count") == SPEC.num_layers
    names = {t.name for t in reader.tensors}
    assert {
        "token_embd.weight",
        "output.weight",
        "output_norm.weight",
        "blk.1.ffn_down.weight",
    } <= names
    assert len(names) == 3 + 9 * SPEC.num_layers
