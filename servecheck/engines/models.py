"""Tiny, locally generated models for the real engines.

Nothing here downloads anything: the tokenizer is a byte-level BPE trained on text generated
from a seed, the weights are random (seeded) numpy arrays. Two artefacts come out of one
:class:`TinyModelSpec`:

* an HF Llama directory (``config.json``, ``model.safetensors``, ``tokenizer.json``,
  ``tokenizer_config.json`` with a ChatML chat template that renders tools, Hermes style),
  served by vLLM and Xinference;
* a GGUF file (same weights, same tokenizer, same template) served by llama.cpp.

Both are written once into ``<cache>/models/<name>-<hash>/``; the hash covers the spec and
:data:`GENERATOR_VERSION`, so a change to either makes a new directory instead of reusing a
stale one. Given the same spec and library versions the files are byte-identical.

The weights are random, so output is gibberish; a random model never chooses a tool call on
its own (``tool_choice: auto``), only when an engine constrains decoding (``required``/named).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from servecheck.engines.paths import cache_root
from servecheck.errors import UsageError

# tokenizers trains the tiny models' tokenizer; it is the `engines` extra, not a core dependency.
ENGINES_EXTRA = "pip install 'servecheck[engines]'"

# Bump when the output of this module changes for the same spec.
GENERATOR_VERSION = 3

SERVED_NAME = "servecheck-tiny"

# ChatML control tokens, then the Hermes tool-call markers. The markers must be single
# tokens in the vocabulary: vLLM's hermes parser and llama.cpp's Hermes-2-Pro format look them
# up by id. They are *not* special, so detokenizing with skip_special_tokens keeps them.
CONTROL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MARKER_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

# A ChatML template that renders tools the way Hermes/Qwen2.5 models expect. It uses only
# constructs both Jinja2 (transformers, vLLM, Xinference) and llama.cpp's minja understand.
CHAT_TEMPLATE = (
    "{% if tools %}"
    "<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' and loop.first %}"
    "{% elif message.role == 'assistant' %}"
    "<|im_start|>assistant\n"
    "{% if message.content %}{{ message.content }}{% endif %}"
    "{% if message.tool_calls %}{% for tc in message.tool_calls %}"
    "{% if tc.function is defined %}{% set fn = tc.function %}{% else %}{% set fn = tc %}{% endif %}"
    "{% if message.content or not loop.first %}\n{% endif %}"
    '<tool_call>\n{"name": "{{ fn.name }}", "arguments": '
    "{% if fn.arguments is string %}{{ fn.arguments }}{% else %}{{ fn.arguments | tojson }}{% endif %}"
    "}\n</tool_call>"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% elif message.role == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response><|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# The reasoning model's markers and the thought it is wired to think (one added token each, so
# the wiring can chain them: see wire_reasoner). Not special: they stay in decoded text, where
# the engines' reasoning parsers (vLLM deepseek_r1, llama.cpp --reasoning-format) look for them.
THINK_START, THINK_END = "<think>", "</think>"
THOUGHT_TOKENS = ("Hmm,", " let me", " think.")
REASONING_TOKENS = (THINK_START, THINK_END, *THOUGHT_TOKENS)

# DeepSeek-R1 / Qwen3 style: the generation prompt opens <think> (the model only closes it);
# chat_template_kwargs enable_thinking: false renders an empty, closed thought instead. Earlier
# assistant turns show their reasoning_content inside <think>...</think> (llama.cpp's template
# analysis finds the markers that way).
REASONING_CHAT_TEMPLATE = CHAT_TEMPLATE.replace(
    "{% if message.content %}{{ message.content }}{% endif %}",
    "{% if message.reasoning_content %}<think>{{ message.reasoning_content }}</think>{% endif %}"
    "{% if message.content %}{{ message.content }}{% endif %}",
).replace(
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think></think>"
    "{% else %}<think>{% endif %}{% endif %}",
)


@dataclass(slots=True, frozen=True)
class TinyModelSpec:
    """Shape of a tiny Llama. Head size (hidden / heads) must be one vLLM's CPU kernels take:
    32, 64, 80, 96, 112 or 128."""

    name: str = "tiny-llama"
    seed: int = 1234
    vocab_size: int = 2048
    hidden_size: int = 128
    num_heads: int = 4
    num_kv_heads: int = 4
    num_layers: int = 2
    intermediate_size: int = 256
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    init_std: float = 0.02
    # Hand-wire one attention head so that the first token is <tool_call> whenever the prompt
    # holds a <tool_call> token (the tools preamble does): see wire_tool_caller.
    tool_caller: bool = False
    # A reasoning model: R1-style template and weights wired to think THOUGHT_TOKENS, then
    # close with </think> (see wire_reasoner).
    reasoner: bool = False

    def key(self) -> str:
        """A short hash of the spec and the generator version (the cache directory suffix)."""
        spec = asdict(self)
        if not spec["reasoner"]:
            del spec["reasoner"]  # specs from before the field keep their directories
        blob = json.dumps({"spec": spec, "gen": GENERATOR_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


@dataclass(slots=True)
class TinyModel:
    """Where the generated artefacts of one spec live."""

    spec: TinyModelSpec
    root: Path
    hf_dir: Path = field(init=False)
    gguf_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.hf_dir = self.root / "hf"
        self.gguf_path = self.root / f"{self.spec.name}.gguf"


ENV_MODEL = "SERVECHECK_TINY_MODEL"
MODEL_KINDS = ("tool-caller", "random")


def reasoning_spec() -> TinyModelSpec:
    """The spec the reasoning engines serve: the tool caller that also thinks."""
    return TinyModelSpec(name="tiny-reasoner", tool_caller=True, reasoner=True)


def default_spec() -> TinyModelSpec:
    """The spec the engines serve: ``$SERVECHECK_TINY_MODEL`` (``tool-caller``, the default, or
    ``random``: no hand-wired head, never calls a tool on its own)."""
    kind = os.environ.get(ENV_MODEL, "tool-caller")
    if kind not in MODEL_KINDS:
        from servecheck.errors import UsageError

        raise UsageError(f"{ENV_MODEL}={kind!r}: expected one of {', '.join(MODEL_KINDS)}")
    return TinyModelSpec(tool_caller=(kind == "tool-caller"))


def default_models_dir() -> Path:
    """``<cache>/models`` (``SERVECHECK_CACHE`` or ``~/.cache/servecheck``)."""
    return cache_root() / "models"


def ensure_tiny_model(spec: TinyModelSpec | None = None, out_dir: Path | None = None) -> TinyModel:
    """Return the tiny model for ``spec``, generating it first if it is not on disk yet.

    ``out_dir`` is the parent directory (default :func:`default_models_dir`); the model goes
    into ``out_dir/<name>-<hash>/``. Generation writes to a temporary sibling and renames it,
    so a crash never leaves a half-written model that later runs would trust.
    """
    spec = spec or default_spec()
    parent = out_dir or default_models_dir()
    root = parent / f"{spec.name}-{spec.key()}"
    model = TinyModel(spec, root)
    if (root / "DONE").is_file():
        return model
    require_tokenizers()
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; engines may run as another user
    try:
        _write_all(spec, TinyModel(spec, tmp))
        (tmp / "DONE").write_text(json.dumps(asdict(spec), sort_keys=True) + "\n")
        try:
            os.rename(tmp, root)
        except OSError:
            # Another process finished first; its copy is as good as ours.
            if not (root / "DONE").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return model


# --------------------------------------------------------------------------- tokenizer

_WORDS = [
    "the",
    "a",
    "an",
    "of",
    "to",
    "in",
    "is",
    "and",
    "or",
    "not",
    "it",
    "that",
    "this",
    "for",
    "on",
    "with",
    "as",
    "be",
    "by",
    "at",
    "from",
    "you",
    "we",
    "they",
    "what",
    "where",
    "when",
    "how",
    "why",
    "which",
    "who",
    "can",
    "will",
    "would",
    "should",
    "could",
    "may",
    "might",
    "must",
    "hello",
    "world",
    "model",
    "server",
    "token",
    "stream",
    "chunk",
    "request",
    "response",
    "json",
    "schema",
    "tool",
    "call",
    "function",
    "name",
    "arguments",
    "value",
    "true",
    "false",
    "null",
    "weather",
    "city",
    "temperature",
    "unit",
    "celsius",
    "fahrenheit",
    "paris",
    "london",
    "tokyo",
    "berlin",
    "search",
    "query",
    "result",
    "number",
    "count",
    "list",
    "item",
    "error",
    "message",
    "user",
    "assistant",
    "system",
    "content",
    "role",
    "answer",
    "question",
    "test",
    "check",
    "load",
    "time",
    "second",
    "minute",
]


def _corpus(seed: int, lines: int = 3000) -> list[str]:
    """Deterministic text with words, numbers, JSON and punctuation for BPE training."""
    rng = random.Random(seed)
    out: list[str] = []
    for i in range(lines):
        kind = i % 4
        if kind == 0:
            words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 16))]
            out.append(" ".join(words).capitalize() + rng.choice([".", "?", "!", ":"]))
        elif kind == 1:
            obj = {
                rng.choice(_WORDS): rng.choice(
                    [rng.randint(-999, 9999), rng.choice(_WORDS), True, None]
                )
                for _ in range(rng.randint(1, 4))
            }
            out.append(json.dumps({"name": rng.choice(_WORDS), "arguments": obj}))
        elif kind == 2:
            out.append(" ".join(str(rng.randint(0, 10 ** rng.randint(1, 6))) for _ in range(6)))
        else:
            out.append(
                "".join(
                    rng.choice(
                        'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-{}[]":,.\n'
                    )
                    for _ in range(rng.randint(10, 60))
                )
            )
    return out


def require_tokenizers() -> None:
    """One line naming the extra when ``tokenizers`` is missing (a wheel or pipx install without
    ``[engines]``), instead of a ModuleNotFoundError traceback from deep in model generation."""
    try:
        import tokenizers  # noqa: F401
    except ModuleNotFoundError:
        raise UsageError(
            "the tiny test models need the tokenizers package, which is not installed: "
            f"{ENGINES_EXTRA} (pipx: pipx install 'servecheck[engines]', or "
            "pipx inject servecheck tokenizers)"
        ) from None


def train_tokenizer(spec: TinyModelSpec) -> Any:
    """Train a byte-level BPE (``tokenizers``) of ``spec.vocab_size`` tokens on generated text.

    Ids 0..2 are the ChatML control tokens, the Hermes markers follow; every byte is in the
    alphabet, so any UTF-8 text round-trips.
    """
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        min_frequency=2,
        special_tokens=[*CONTROL_TOKENS, *MARKER_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(spec.seed), trainer=trainer)
    # Re-register the markers as added, non-special tokens (they stay in decoded text).
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in CONTROL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKER_TOKENS])
    if spec.reasoner:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in REASONING_TOKENS])
    return tok


# --------------------------------------------------------------------------- weights


def random_weights(spec: TinyModelSpec, vocab_size: int) -> dict[str, np.ndarray]:
    """HF Llama parameter names -> float32 arrays (seeded normal init, unit RMSNorm weights)."""
    rng = np.random.default_rng(spec.seed)
    h, inter = spec.hidden_size, spec.intermediate_size
    kv = spec.num_kv_heads * spec.head_dim

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * spec.init_std).astype(np.float32)

    w: dict[str, np.ndarray] = {"model.embed_tokens.weight": normal(vocab_size, h)}
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = normal(h, h)
        w[p + "self_attn.k_proj.weight"] = normal(kv, h)
        w[p + "self_attn.v_proj.weight"] = normal(kv, h)
        w[p + "self_attn.o_proj.weight"] = normal(h, h)
        w[p + "mlp.gate_proj.weight"] = normal(inter, h)
        w[p + "mlp.up_proj.weight"] = normal(inter, h)
        w[p + "mlp.down_proj.weight"] = normal(h, inter)
        w[p + "input_layernorm.weight"] = np.ones(h, dtype=np.float32)
        w[p + "post_attention_layernorm.weight"] = np.ones(h, dtype=np.float32)
    w["model.norm.weight"] = np.ones(h, dtype=np.float32)
    w["lm_head.weight"] = normal(vocab_size, h)
    return w


# The weights that read the residual stream (their columns) and those that write it (their rows):
# a reserved channel is kept clean by zeroing its columns in the first and its rows in the second.
_READERS = (
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
)
_WRITERS = ("self_attn.o_proj.weight", "mlp.down_proj.weight")


def wire_tool_caller(spec: TinyModelSpec, w: dict[str, np.ndarray], tok: Any) -> None:
    """Make ``<tool_call>`` the top token at every position that can see a ``<tool_call>``.

    Three residual channels are reserved: C (constant in every embedding), T (set only in the
    ``<tool_call>`` embedding) and F (the flag). Layer 0, head 0 queries with C and keys with T
    on the lowest-frequency RoPE pair (dims 15/31 of the head: under 0.1 rad of rotation over
    512 tokens, so the match is content-based, not positional); its value copies T and its
    output writes F. ``lm_head`` maps F to a large ``<tool_call>`` logit. Without such a token
    in the prompt F stays 0 and the model is the random one. Engines then constrain the rest
    of the call (name, arguments) with their tool grammars.
    """
    d, hd = spec.hidden_size, spec.head_dim
    c_dim, t_dim, f_dim, e_dim = d - 1, d - 3, d - 2, d - 4
    tool_call_id = tok.token_to_id("<tool_call>")
    end_call_id = tok.token_to_id("</tool_call>")
    newline_id = tok.token_to_id("\u010a")  # byte-level "\n"
    im_end_id = tok.token_to_id("<|im_end|>")
    vocab = tok.get_vocab(with_added_tokens=True)
    blank_ids = [i for t, i in vocab.items() if t and set(t) <= {"\u0120", "\u010a", "\u0109"}]
    pair_lo, pair_hi = hd // 2 - 1, hd - 1  # rotate-half partners of the lowest frequency
    emb = w["model.embed_tokens.weight"]
    emb[:, [c_dim, t_dim, f_dim, e_dim]] = 0.0
    emb[:, c_dim] = 0.1
    emb[tool_call_id, t_dim] = 1.0
    emb[end_call_id, e_dim] = 1.0
    p = "model.layers.0.self_attn."
    for name in ("q_proj", "k_proj", "v_proj"):
        w[p + name + ".weight"][:hd, :] = 0.0  # head 0 only
    w[p + "q_proj.weight"][pair_lo, c_dim] = 2.0
    w[p + "k_proj.weight"][pair_lo, t_dim] = 2.0
    w[p + "v_proj.weight"][0, t_dim] = 2.0
    o = w[p + "o_proj.weight"]
    o[:, :hd] = 0.0
    o[f_dim, 0] = 1.0
    _ = pair_hi
    # Keep the reserved channels clean of everything else.
    for i in range(spec.num_layers):
        q = f"model.layers.{i}."
        for name in _WRITERS:
            rows = w[q + name]
            keep = rows[f_dim, 0] if (i == 0 and name.startswith("self_attn")) else 0.0
            rows[[c_dim, t_dim, f_dim, e_dim], :] = 0.0
            if i == 0 and name.startswith("self_attn"):
                rows[f_dim, 0] = keep
        for name in _READERS:
            cols = w[q + name]
            saved = (
                cols[:hd, [c_dim, t_dim]].copy()
                if (i == 0 and name.startswith("self_attn"))
                else None
            )
            cols[:, [c_dim, t_dim, f_dim, e_dim]] = 0.0
            if saved is not None:
                cols[:hd, [c_dim, t_dim]] = saved
    lm = w["lm_head.weight"]
    lm[:, [c_dim, t_dim, f_dim, e_dim]] = 0.0
    # Under the flag: <tool_call> first; where a grammar forbids it, prefer ending the call
    # over padding it with whitespace (random logits would pick blanks half the time).
    lm[tool_call_id, f_dim] = 3.0
    lm[end_call_id, f_dim] = 2.5
    lm[blank_ids, f_dim] = -3.0
    # C is constant, so this is a bias: never pick a blank token unless a grammar leaves
    # nothing else. JSON grammars allow blanks between all tokens, and a random model that
    # picks them can run out of room before a bounded object closes.
    lm[blank_ids, c_dim] = -1.0
    lm[newline_id, t_dim] = 200.0  # after <tool_call>: the "\n" the Hermes format wants
    lm[im_end_id, e_dim] = 200.0  # after </tool_call>: end the turn


def wire_reasoner(spec: TinyModelSpec, w: dict[str, np.ndarray], tok: Any) -> None:
    """Make the model think ``Hmm, let me think.`` after an open ``<think>``, then close it.

    A bigram chain on five reserved residual channels (below the tool caller's four): each chain
    token's embedding sets its own channel, and ``lm_head`` maps that channel to the next chain
    token with a logit no random logit (nor the tool caller's flag) comes near. So a prompt that
    ends in ``<think>`` (the generation prompt) is answered ``Hmm,`` ``let me`` ``think.``
    ``</think>`` ``\n``, and then the random model (or the tool caller) goes on. A constant-channel
    bias keeps the chain tokens from ever being picked otherwise, so the answer never reopens or
    recloses a thought. With thinking off the prompt ends in ``</think>``: straight to the answer.
    """
    d = spec.hidden_size
    c_dim = d - 1  # the tool caller's constant channel (0.1 in every embedding)
    chain = [tok.token_to_id(t) for t in (THINK_START, *THOUGHT_TOKENS, THINK_END)]
    successors = [*chain[1:], tok.token_to_id("\u010a")]  # </think> is followed by "\n"
    dims = [d - 5 - i for i in range(len(chain))]
    emb = w["model.embed_tokens.weight"]
    emb[:, dims] = 0.0
    emb[:, c_dim] = 0.1
    for token_id, dim in zip(chain, dims, strict=True):
        emb[token_id, dim] = 1.0
    for i in range(spec.num_layers):
        q = f"model.layers.{i}."
        for name in _WRITERS:
            w[q + name][dims, :] = 0.0  # nothing writes into the chain channels
        for name in _READERS:
            w[q + name][:, dims] = 0.0  # and they feed nothing but lm_head
    lm = w["lm_head.weight"]
    lm[:, dims] = 0.0
    for dim, nxt in zip(dims, successors, strict=True):
        lm[nxt, dim] = 200.0
    lm[chain, c_dim] = -5.0


# --------------------------------------------------------------------------- writers


def _write_all(spec: TinyModelSpec, model: TinyModel) -> None:
    tok = train_tokenizer(spec)
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    weights = random_weights(spec, vocab_size)
    if spec.tool_caller:
        wire_tool_caller(spec, weights, tok)
    if spec.reasoner:
        if not spec.tool_caller:
            raise ValueError(
                "a reasoner spec needs tool_caller: its wiring uses that constant channel"
            )
        wire_reasoner(spec, weights, tok)
    write_hf(spec, tok, weights, model.hf_dir)
    write_gguf(spec, tok, weights, model.gguf_path)


def _ids(tok: Any) -> dict[str, int]:
    extra = tuple(t for t in REASONING_TOKENS if tok.token_to_id(t) is not None)
    return {t: tok.token_to_id(t) for t in (*CONTROL_TOKENS, *MARKER_TOKENS, *extra)}


def _template(spec: TinyModelSpec) -> str:
    return REASONING_CHAT_TEMPLATE if spec.reasoner else CHAT_TEMPLATE


def write_hf(spec: TinyModelSpec, tok: Any, weights: dict[str, np.ndarray], out: Path) -> None:
    """Write an HF ``LlamaForCausalLM`` directory loadable by transformers/vLLM/Xinference."""
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    ids = _ids(tok)
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": spec.rms_norm_eps,
        "rope_theta": spec.rope_theta,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "torch_dtype": "float32",
        "initializer_range": spec.init_std,
    }
    _dump(out / "config.json", config)
    _dump(
        out / "generation_config.json",
        {
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
            "pad_token_id": ids["<|endoftext|>"],
        },
    )
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    tok.save(str(out / "tokenizer.json"))
    added = {
        str(ids[t]): {
            "content": t,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "single_word": False,
            "special": t in CONTROL_TOKENS,
        }
        for t in ids
    }
    _dump(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "added_tokens_decoder": added,
            "bos_token": None,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": spec.max_position_embeddings,
            "chat_template": _template(spec),
        },
    )
    _dump(
        out / "special_tokens_map.json", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    )


def _permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    # HF rotates halves of each head, GGML rotates adjacent pairs: reorder rows so both
    # compute the same function (what llama.cpp's converter does for Llama q/k).
    rows = w.shape[0]
    return (
        w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
        .copy()
    )


def write_gguf(spec: TinyModelSpec, tok: Any, weights: dict[str, np.ndarray], path: Path) -> None:
    """Write the same model as a GGUF (arch ``llama``, tokenizer ``gpt2`` BPE) for llama.cpp."""
    import gguf

    ids = _ids(tok)
    vocab = tok.get_vocab(with_added_tokens=True)
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise RuntimeError("tokenizer ids are not contiguous")
    tokens = [t for t, _ in by_id]
    types = []
    for t in tokens:
        if t in CONTROL_TOKENS:
            types.append(gguf.TokenType.CONTROL)
        elif t in MARKER_TOKENS or t in REASONING_TOKENS:
            types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
    merges = [
        " ".join(m) if isinstance(m, (list, tuple)) else m
        for m in json.loads(tok.to_str())["model"]["merges"]
    ]

    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(spec.name)
    w.add_context_length(spec.max_position_embeddings)
    w.add_embedding_length(spec.hidden_size)
    w.add_block_count(spec.num_layers)
    w.add_feed_forward_length(spec.intermediate_size)
    w.add_head_count(spec.num_heads)
    w.add_head_count_kv(spec.num_kv_heads)
    w.add_rope_dimension_count(spec.head_dim)
    w.add_rope_freq_base(spec.rope_theta)
    w.add_layer_norm_rms_eps(spec.rms_norm_eps)
    w.add_vocab_size(len(tokens))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(ids["<|endoftext|>"])
    w.add_eos_token_id(ids["<|im_end|>"])
    w.add_eot_token_id(ids["<|im_end|>"])
    w.add_pad_token_id(ids["<|endoftext|>"])
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_chat_template(_template(spec))

    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    per_layer = {
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
    }
    for hf_name, array in weights.items():
        if hf_name in names:
            w.add_tensor(names[hf_name], array)
            continue
        _, _, layer, rest = hf_name.split(".", 3)
        if rest == "self_attn.q_proj.weight":
            array = _permute_qk(array, spec.num_heads)
        elif rest == "self_attn.k_proj.weight":
            array = _permute_qk(array, spec.num_kv_heads)
        w.add_tensor(f"blk.{layer}.{per_layer[rest]}", array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _dump(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
