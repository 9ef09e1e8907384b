"""The catalogue of broken model folders: each case names the finding id it must produce.

A breaker takes a valid folder (see :mod:`builders`) and damages it; it may return another
path to check (a snapshot instead of the repo folder). ``options`` are PreflightOptions
fields for the run.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from .builders import model_config, shard_tensors, write_gguf

Breaker = Callable[[Path], Path | None]
SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"


@dataclass(slots=True)
class Case:
    """A breaker, the options to run with, and the finding it must cause."""

    breaker: Breaker
    expected_id: str
    severity: str = "error"
    options: dict[str, Any] = field(default_factory=dict)
    message_part: str = ""
    # pytest's basetemp is 0700, so only its owner can traverse it; permission cases run
    # under a world-searchable temporary folder instead (see the open_tmp fixture).
    open_parents: bool = False


def _raw_safetensors(
    path: Path, header: dict[str, Any], data: bytes, header_len: int | None = None
) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if header_len is None else header_len) + raw + data)


def _edit_json(path: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def _truncate(path: Path, n: int) -> None:
    size = path.stat().st_size
    with path.open("r+b") as fh:
        fh.truncate(size - n)


def _config(**overrides: object) -> Breaker:
    def breaker(folder: Path) -> None:
        (folder / "config.json").write_text(json.dumps(model_config(**overrides)))

    return breaker


def _f(fn: Callable[[Path], object]) -> Breaker:
    """Adapt a breaker that returns something irrelevant (write_bytes returns an int)."""

    def breaker(folder: Path) -> None:
        fn(folder)

    return breaker


def _duplicate(folder: Path) -> None:
    tensors = shard_tensors(2)
    tensors.update(shard_tensors(1))
    save_file(tensors, str(folder / SHARD2))


def _chmod_dir(folder: Path) -> None:
    os.chmod(folder, 0o700)


def _chmod_file(folder: Path) -> None:
    os.chmod(folder / SHARD2, 0o600)


def _remove_weights(folder: Path) -> None:
    for shard in folder.glob("*.safetensors"):
        shard.unlink()


PLAIN_CASES = {
    # safetensors
    "zero-byte-shard": Case(
        _f(lambda d: (d / SHARD2).write_bytes(b"")), "PF-ST-ZERO-BYTE", message_part="0 bytes"
    ),
    "too-small-shard": Case(_f(lambda d: (d / SHARD2).write_bytes(b"\x01\x02")), "PF-ST-TOO-SMALL"),
    "truncated-shard": Case(
        _f(lambda d: _truncate(d / SHARD2, 4)), "PF-ST-TRUNCATED", message_part="4 bytes missing"
    ),
    "trailing-bytes": Case(
        _f(lambda d: (d / SHARD2).open("ab").write(b"junk")), "PF-ST-TRAILING-BYTES"
    ),
    "bad-header-length": Case(
        _f(lambda d: _raw_safetensors(d / SHARD2, {}, b"", header_len=2**40)), "PF-ST-HEADER-LENGTH"
    ),
    "lfs-pointer-as-shard": Case(
        _f(
            lambda d: (d / SHARD2).write_text(
                "version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n"
            )
        ),
        "PF-ST-HEADER-LENGTH",
    ),
    "header-not-json": Case(
        _f(lambda d: (d / SHARD2).write_bytes(struct.pack("<Q", 4) + b"{{{{")), "PF-ST-HEADER-JSON"
    ),
    "header-not-object": Case(
        _f(lambda d: (d / SHARD2).write_bytes(struct.pack("<Q", 2) + b"[]")), "PF-ST-HEADER-JSON"
    ),
    "entry-without-offsets": Case(
        _f(lambda d: _raw_safetensors(d / SHARD2, {"t": {"dtype": "F16", "shape": [2]}}, b"")),
        "PF-ST-BAD-ENTRY",
    ),
    "unknown-dtype": Case(
        _f(
            lambda d: _raw_safetensors(
                d / SHARD2, {"t": {"dtype": "F12", "shape": [2], "data_offsets": [0, 4]}}, b"1234"
            )
        ),
        "PF-ST-UNKNOWN-DTYPE",
    ),
    "size-mismatch": Case(
        _f(
            lambda d: _raw_safetensors(
                d / SHARD2, {"t": {"dtype": "F16", "shape": [4], "data_offsets": [0, 4]}}, b"1234"
            )
        ),
        "PF-ST-SIZE-MISMATCH",
        message_part="needs 8 bytes",
    ),
    "offsets-gap": Case(
        _f(
            lambda d: _raw_safetensors(
                d / SHARD2,
                {
                    "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                    "b": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]},
                },
                b"123456",
            )
        ),
        "PF-ST-OFFSETS",
        message_part="gap",
    ),
    "no-tensors": Case(
        _f(lambda d: save_file({}, str(d / "extra.safetensors"))), "PF-ST-NO-TENSORS", "warning"
    ),
    "duplicate-tensor": Case(_duplicate, "PF-ST-DUPLICATE-TENSOR"),
    # index
    "missing-shard": Case(_f(lambda d: (d / SHARD2).unlink()), "PF-INDEX-MISSING-SHARD"),
    "index-not-json": Case(
        _f(lambda d: (d / "model.safetensors.index.json").write_text("{")), "PF-INDEX-JSON"
    ),
    "index-without-weight-map": Case(
        _f(lambda d: (d / "model.safetensors.index.json").write_text('{"metadata": {}}')),
        "PF-INDEX-JSON",
    ),
    "index-names-absent-tensor": Case(
        _f(
            lambda d: _edit_json(
                d / "model.safetensors.index.json",
                lambda j: j["weight_map"].update({"lm_head.weight": SHARD1}),
            )
        ),
        "PF-INDEX-MISSING-TENSOR",
    ),
    "tensor-moved-between-shards": Case(
        _f(
            lambda d: _edit_json(
                d / "model.safetensors.index.json",
                lambda j: j["weight_map"].update({"model.layers.2.w0.weight": SHARD1}),
            )
        ),
        "PF-INDEX-MISSING-TENSOR",
        message_part="different revisions",
    ),
    "unindexed-tensor": Case(
        _f(
            lambda d: _edit_json(
                d / "model.safetensors.index.json",
                lambda j: j["weight_map"].pop("model.layers.1.w0.weight"),
            )
        ),
        "PF-INDEX-UNINDEXED-TENSOR",
        "warning",
    ),
    "stray-shard": Case(
        _f(lambda d: save_file(shard_tensors(7), str(d / "model-old.safetensors"))),
        "PF-INDEX-STRAY-SHARD",
        "warning",
    ),
    "mixed-revisions-sharding": Case(
        _f(lambda d: save_file(shard_tensors(9), str(d / "model-00001-of-00003.safetensors"))),
        "PF-MIXED-REVISION",
        message_part="-of-00003",
    ),
    "mixed-revisions-total-size": Case(
        _f(
            lambda d: _edit_json(
                d / "model.safetensors.index.json", lambda j: j["metadata"].update(total_size=1)
            )
        ),
        "PF-MIXED-REVISION",
        "warning",
    ),
    # layout
    "no-weights": Case(_remove_weights, "PF-NO-WEIGHTS"),
    "pickle-weights": Case(
        _f(lambda d: (d / "pytorch_model.bin").write_bytes(b"PK")),
        "PF-WEIGHTS-NOT-CHECKED",
        "warning",
    ),
    # config.json
    "config-missing": Case(_f(lambda d: (d / "config.json").unlink()), "PF-CONFIG-MISSING"),
    "config-not-json": Case(
        _f(lambda d: (d / "config.json").write_text("{'model_type': 'llama'}")), "PF-CONFIG-JSON"
    ),
    "config-no-model-type": Case(_config(model_type=None), "PF-CONFIG-NO-MODEL-TYPE"),
    "config-no-architectures": Case(_config(architectures=[]), "PF-CONFIG-NO-ARCHITECTURES"),
    "config-no-dtype": Case(_config(torch_dtype=None), "PF-CONFIG-NO-DTYPE", "warning"),
    "remote-code": Case(
        _config(auto_map={"AutoConfig": "configuration_x.XConfig"}),
        "PF-CONFIG-REMOTE-CODE",
        "warning",
        message_part="configuration_x.py (MISSING)",
    ),
    "remote-code-file-missing": Case(
        _config(auto_map={"AutoModel": "modeling_x.XModel"}), "PF-CONFIG-REMOTE-CODE-MISSING"
    ),
    "quant-declared-none-config-awq": Case(
        _config(quantization_config={"quant_method": "awq", "bits": 4}),
        "PF-CONFIG-QUANT-MISMATCH",
        options={"quantization": "none"},
    ),
    "quant-declared-gptq-config-awq": Case(
        _config(quantization_config={"quant_method": "awq"}),
        "PF-CONFIG-QUANT-MISMATCH",
        options={"quantization": "gptq"},
    ),
    "quant-declared-awq-unquantized": Case(
        _f(lambda d: None), "PF-CONFIG-QUANT-MISMATCH", options={"quantization": "awq"}
    ),
    "context-too-long": Case(
        _f(lambda d: None),
        "PF-CONFIG-CONTEXT-TOO-LONG",
        options={"context_length": 4096},
        message_part="2048",
    ),
    "context-unknown": Case(
        _config(max_position_embeddings=None),
        "PF-CONFIG-NO-CONTEXT",
        "warning",
        options={"context_length": 4096},
    ),
    # tokenizer
    "no-tokenizer": Case(_f(lambda d: (d / "tokenizer.json").unlink()), "PF-TOK-MISSING"),
    "tokenizer-unreadable": Case(
        _f(lambda d: (d / "tokenizer.json").write_text('{"model": 3}')), "PF-TOK-UNREADABLE"
    ),
    "eos-id-mismatch": Case(
        _config(eos_token_id=4), "PF-TOK-SPECIAL-MISMATCH", "warning", message_part="'</s>' is id 2"
    ),
    "eos-token-unknown": Case(
        _f(
            lambda d: _edit_json(
                d / "tokenizer_config.json", lambda j: j.update(eos_token="<|eot|>")
            )
        ),
        "PF-TOK-SPECIAL-UNKNOWN",
        "warning",
    ),
    "vocab-larger-than-embedding": Case(_config(vocab_size=3), "PF-TOK-VOCAB-SIZE", "warning"),
    "missing-chat-template": Case(
        _f(lambda d: _edit_json(d / "tokenizer_config.json", lambda j: j.pop("chat_template"))),
        "PF-TOK-NO-CHAT-TEMPLATE",
    ),
    "missing-chat-template-no-chat": Case(
        _f(lambda d: _edit_json(d / "tokenizer_config.json", lambda j: j.pop("chat_template"))),
        "PF-TOK-NO-CHAT-TEMPLATE",
        "warning",
        options={"chat": False},
    ),
    # host (tests run as root, which the kernel lets read anything: check as another uid)
    "unreadable-directory": Case(
        _chmod_dir,
        "PF-ACCESS-DIR",
        options={"uid": 54321, "gids": ()},
        message_part="uid 54321",
        open_parents=True,
    ),
    "unreadable-file": Case(
        _chmod_file, "PF-ACCESS-FILE", options={"uid": 54321, "gids": ()}, open_parents=True
    ),
    "over-gpu-budget": Case(_f(lambda d: None), "PF-GPU-MEMORY", options={"gpu_memory_gib": 1e-9}),
    "weight-memory-estimate": Case(
        _f(lambda d: None), "PF-WEIGHT-MEMORY", "info", message_part="128 bytes"
    ),
}


def _hf_blob(repo: Path, name: str) -> Path:
    snap = next((repo / "snapshots").iterdir())
    return Path(os.path.realpath(snap / name))


def _second_snapshot(repo: Path, without: str, point_main: bool = True) -> Path:
    """Copy the snapshot's links into revision b*40, omitting ``without``."""
    old = next((repo / "snapshots").iterdir())
    new = repo / "snapshots" / ("b" * 40)
    new.mkdir()
    for link in old.iterdir():
        if link.name != without:
            (new / link.name).symlink_to(os.readlink(link))
    if point_main:
        (repo / "refs" / "main").write_text("b" * 40)
    return new


def _corrupt_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def _foreign_link(repo: Path) -> None:
    snap = next((repo / "snapshots").iterdir())
    outside = repo.parent / "elsewhere.json"
    shutil.copyfile(snap / "config.json", outside)
    (snap / "config.json").unlink()
    (snap / "config.json").symlink_to(outside)


def _stale(repo: Path) -> Path:
    old = next((repo / "snapshots").iterdir())
    _second_snapshot(repo, without="")
    return old


def _ref_to_missing(repo: Path) -> None:
    (repo / "refs" / "pr").mkdir()
    (repo / "refs" / "pr" / "1").write_text("d" * 40)


def _no_snapshot(repo: Path) -> None:
    shutil.rmtree(repo / "snapshots")
    (repo / "refs" / "main").unlink()


HF_CASES = {
    "dangling-symlink": Case(_f(lambda r: _hf_blob(r, SHARD2).unlink()), "PF-HF-DANGLING-SYMLINK"),
    "empty-blob": Case(_f(lambda r: _hf_blob(r, SHARD2).write_bytes(b"")), "PF-HF-EMPTY-BLOB"),
    "incomplete-download": Case(
        _f(lambda r: (r / "blobs" / ("c" * 64 + ".incomplete")).write_bytes(b"x")),
        "PF-HF-INCOMPLETE",
    ),
    "ref-to-missing-snapshot": Case(_ref_to_missing, "PF-HF-REF-DANGLING"),
    "no-refs-main": Case(_f(lambda r: (r / "refs" / "main").unlink()), "PF-HF-NO-REF", "warning"),
    "no-snapshot": Case(_no_snapshot, "PF-HF-NO-SNAPSHOT"),
    "stale-snapshot": Case(_stale, "PF-HF-STALE-SNAPSHOT", "warning"),
    "other-snapshots": Case(
        _f(lambda r: _second_snapshot(r, without="", point_main=False)),
        "PF-HF-OTHER-SNAPSHOTS",
        "info",
    ),
    "mixed-revisions-snapshots": Case(
        _f(lambda r: _second_snapshot(r, without=SHARD2)),
        "PF-INDEX-MISSING-SHARD",
        message_part="mixes revisions",
    ),
    "foreign-link": Case(_f(_foreign_link), "PF-HF-FOREIGN-LINK", "warning"),
    "sha256-mismatch": Case(
        _f(lambda r: _corrupt_byte(_hf_blob(r, SHARD2))),
        "PF-SHA256-MISMATCH",
        options={"verify_sha256": True},
    ),
}


def _gguf(name: str = "tiny.gguf", **kwargs: Any) -> Breaker:
    def breaker(folder: Path) -> None:
        write_gguf(folder / name, **kwargs)

    return breaker


def _then(first: Breaker, then: Callable[[Path], object]) -> Breaker:
    """Write the GGUF with ``first``, then damage the (only) .gguf file with ``then``."""

    def breaker(folder: Path) -> None:
        first(folder)
        then(next(folder.glob("*.gguf")))

    return breaker


def _set_version(path: Path) -> None:
    with path.open("r+b") as fh:
        fh.seek(4)
        fh.write(struct.pack("<I", 99))


GGUF_CASES = {
    "gguf-truncated": Case(
        _then(_gguf(), lambda p: _truncate(p, 16)),
        "PF-GGUF-TRUNCATED",
        message_part="16 bytes missing",
    ),
    "gguf-truncated-in-header": Case(
        _then(_gguf(), lambda p: _truncate(p, p.stat().st_size - 40)), "PF-GGUF-UNREADABLE"
    ),
    "gguf-garbage": Case(
        _then(_gguf(), lambda p: p.write_bytes(np.arange(256, dtype=np.uint8).tobytes())),
        "PF-GGUF-BAD-MAGIC",
    ),
    "gguf-bad-version": Case(_then(_gguf(), _set_version), "PF-GGUF-BAD-VERSION"),
    "gguf-zero-byte": Case(_then(_gguf(), lambda p: p.write_bytes(b"")), "PF-GGUF-ZERO-BYTE"),
    "gguf-missing-split": Case(_gguf("tiny-00001-of-00002.gguf"), "PF-GGUF-MISSING-SPLIT"),
    "gguf-no-chat-template": Case(_gguf(chat_template=False), "PF-TOK-NO-CHAT-TEMPLATE"),
}
