"""Build small model folders for the preflight self-tests (and the benchmark).

Valid files are written with the ``safetensors``, ``tokenizers`` and ``gguf`` packages, so the
checks are tested against what real tools produce, not against our own writer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

CHAT_TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}</s>{% endfor %}"
VOCAB = {"<unk>": 0, "<s>": 1, "</s>": 2, "hello": 3, "world": 4}


def shard_tensors(shard: int, per_shard: int = 2, dim: int = 4) -> dict[str, np.ndarray]:
    """A shard's tensors: distinct names per shard so the index is unambiguous."""
    return {
        f"model.layers.{shard}.w{i}.weight": np.full((dim, dim), shard + i, dtype=np.float16)
        for i in range(per_shard)
    }


def write_tokenizer(folder: Path, chat_template: bool = True) -> None:
    """tokenizer.json (a real ``tokenizers`` WordLevel model) and tokenizer_config.json."""
    from tokenizers import AddedToken, Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tok = Tokenizer(WordLevel(vocab=VOCAB, unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    tok.add_special_tokens([AddedToken("<s>", special=True), AddedToken("</s>", special=True)])
    tok.save(str(folder / "tokenizer.json"))
    config: dict[str, object] = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    if chat_template:
        config["chat_template"] = CHAT_TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


def model_config(**overrides: object) -> dict[str, object]:
    """A minimal Llama-style config.json consistent with :func:`write_tokenizer`."""
    config: dict[str, object] = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "torch_dtype": "float16",
        "max_position_embeddings": 2048,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "vocab_size": 32,
    }
    config.update(overrides)
    return {k: v for k, v in config.items() if v is not None}


def write_model(
    folder: Path,
    shards: int = 2,
    per_shard: int = 2,
    dim: int = 4,
    config: dict[str, object] | None = None,
    chat_template: bool = True,
) -> Path:
    """A valid plain model folder: config, tokenizer, shards and (when sharded) an index."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config or model_config()), encoding="utf-8")
    write_tokenizer(folder, chat_template=chat_template)
    weight_map: dict[str, str] = {}
    total = 0
    for s in range(1, shards + 1):
        name = f"model-{s:05d}-of-{shards:05d}.safetensors" if shards > 1 else "model.safetensors"
        tensors = shard_tensors(s, per_shard, dim)
        save_file(tensors, str(folder / name), metadata={"format": "pt"})
        # safetensors writes 0600 files; a download gets 0644 (umask 022), like the rest here.
        os.chmod(folder / name, 0o644)
        weight_map.update(dict.fromkeys(tensors, name))
        total += sum(t.nbytes for t in tensors.values())
    if shards > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    return folder


def to_hf_cache(
    plain: Path, cache_root: Path, repo: str = "org/tiny", revision: str = "a" * 40
) -> Path:
    """Lay a plain folder out as an HF hub cache repo; returns ``models--org--name``."""
    repo_dir = cache_root / ("models--" + repo.replace("/", "--"))
    blobs, snap = repo_dir / "blobs", repo_dir / "snapshots" / revision
    blobs.mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    for f in sorted(plain.iterdir()):
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, blobs / digest)
        (snap / f.name).symlink_to(os.path.join("..", "..", "blobs", digest))
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(revision, encoding="utf-8")
    return repo_dir


def write_gguf(path: Path, chat_template: bool = True, n_tensors: int = 2) -> Path:
    """A small valid GGUF file written with the ``gguf`` package."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(2048)
    if chat_template:
        writer.add_chat_template(CHAT_TEMPLATE)
    for i in range(n_tensors):
        writer.add_tensor(f"blk.{i}.weight", np.full((8, 8), i, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
