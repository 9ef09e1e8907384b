"""Benchmark ``run_preflight`` on a 100-shard model and ``--verify-sha256`` throughput.

The model folder has 100 shards whose headers are the size of a real large model's (hundreds
of tensors with real Llama names per shard) but whose tensors are tiny, plus a few multi-GiB
shards made sparse with ``truncate``: if preflight read tensor data, those alone would take
seconds. The median CPU time (``time.process_time``) over several runs is written to
``docs/benchmarks.md`` between the ``preflight`` markers; the rest of that file is left alone.

    .venv/bin/python benchmarks/bench_preflight.py [--repeats 7] [--hash-mib 256] [--no-write]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from servecheck.preflight import PreflightOptions, Severity, run_preflight
from servecheck.preflight.integrity import sha256_file

START, END = "<!-- preflight:start -->", "<!-- preflight:end -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
PARTS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SPARSE_GIB = 4  # size of each sparse shard


def _layer_tensors(shard: int, layers_per_shard: int) -> dict[str, np.ndarray]:
    tensors: dict[str, np.ndarray] = {}
    for layer in range(shard * layers_per_shard, (shard + 1) * layers_per_shard):
        prefix = f"model.layers.{layer}"
        for part in PARTS:
            group = (
                "self_attn" if part.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"
            )
            for kind in ("weight", "qweight", "scales", "qzeros"):
                tensors[f"{prefix}.{group}.{part}.{kind}"] = np.zeros((2, 2), dtype=np.float16)
        tensors[f"{prefix}.input_layernorm.weight"] = np.zeros((2,), dtype=np.float16)
        tensors[f"{prefix}.post_attention_layernorm.weight"] = np.zeros((2,), dtype=np.float16)
    return tensors


def _sparse_shard(path: Path, name: str, gib: int) -> int:
    """A valid shard whose one tensor is ``gib`` GiB of holes: costs no disk, no write time."""
    n = gib * 1024**3 // 2
    header = json.dumps(
        {name: {"dtype": "BF16", "shape": [n], "data_offsets": [0, n * 2]}}
    ).encode()
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        fh.truncate(8 + len(header) + n * 2)
    return n * 2


def build_model(
    folder: Path, shards: int = 100, sparse: int = 3, layers_per_shard: int = 4
) -> dict[str, int]:
    """Write the benchmark model; returns header statistics for the report."""
    from tokenizers import AddedToken, Tokenizer
    from tokenizers.models import WordLevel

    folder.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    total = 0
    header_bytes = 0
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        path = folder / name
        if s >= shards - sparse:
            tensor = f"lm_head_part{s}.weight"
            total += _sparse_shard(path, tensor, SPARSE_GIB)
            weight_map[tensor] = name
        else:
            tensors = _layer_tensors(s, layers_per_shard)
            save_file(tensors, str(path), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(tensors, name))
            total += sum(t.nbytes for t in tensors.values())
        with path.open("rb") as fh:
            header_bytes += struct.unpack("<Q", fh.read(8))[0]
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 131072,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "vocab_size": 128256,
    }
    (folder / "config.json").write_text(json.dumps(config))
    # A 128k-token vocabulary, as large as Llama 3's, so the tokenizer load is realistic too.
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"tok{i}": i for i in range(3, 128000)}}
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.add_special_tokens([AddedToken("<s>", special=True), AddedToken("</s>", special=True)])
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "chat_template": "{{ messages }}"})
    )
    return {"tensors": len(weight_map), "header_bytes": header_bytes, "declared_bytes": total}


def time_preflight(folder: Path, repeats: int, tokenizer: bool = True) -> tuple[float, float, int]:
    """Median CPU and wall seconds of run_preflight, and its error count (must be 0)."""
    tok = folder / "tokenizer.json"
    hidden = folder / "tokenizer.json.bench"
    if not tokenizer:
        tok.rename(hidden)
    try:
        cpu, wall = [], []
        errors = 0
        for _ in range(repeats):
            c0, w0 = time.process_time(), time.perf_counter()
            report = run_preflight(
                folder, PreflightOptions(quantization="none", context_length=8192)
            )
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
            errors = report.count(Severity.ERROR)
        return statistics.median(cpu), statistics.median(wall), errors
    finally:
        if not tokenizer:
            hidden.rename(tok)


def time_sha256(folder: Path, mib: int) -> tuple[float, float]:
    """MB/s (10^6 bytes) of sha256_file on a ``mib`` MiB random file: CPU-bound and wall."""
    path = folder / "random.bin"
    rng = np.random.default_rng(0)
    with path.open("wb") as fh:
        for _ in range(mib // 8):
            fh.write(rng.bytes(8 * 1024 * 1024))
    size = path.stat().st_size
    sha256_file(path)  # warm the page cache: this measures hashing, not the disk
    c0, w0 = time.process_time(), time.perf_counter()
    digest = sha256_file(path)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    if digest != hashlib.sha256(path.read_bytes()).hexdigest():
        raise RuntimeError("sha256_file disagrees with hashlib")
    path.unlink()
    return size / cpu / 1e6, size / wall / 1e6


def render(
    stats: dict[str, int], repeats: int, results: dict[str, float], shards: int, sparse: int
) -> str:
    """The Markdown section written between the markers."""
    return "\n".join(
        [
            START,
            "## Preflight",
            "",
            f"`benchmarks/bench_preflight.py` on {platform.machine()}, Python {platform.python_version()}, "
            f"{os.cpu_count()} CPUs; median of {repeats} runs of `run_preflight` (CPU time, `time.process_time`).",
            f"Model: {shards} shards ({stats['tensors']} tensors, {stats['header_bytes'] / 1e6:.1f} MB of headers; "
            f"{sparse} of them sparse {SPARSE_GIB} GiB files, {stats['declared_bytes'] / 1024**3:.1f} GiB declared "
            "in all), index, config.json, a 128k-token tokenizer.json.",
            "",
            "| measurement | CPU s | wall s |",
            "| --- | --- | --- |",
            f"| preflight, 100 shards, with tokenizer load | {results['cpu']:.3f} | {results['wall']:.3f} |",
            f"| preflight, 100 shards, without tokenizer.json | {results['cpu_notok']:.3f} | {results['wall_notok']:.3f} |",
            "",
            f"`--verify-sha256` hashing (8 MiB chunks, page cache warm): {results['sha_cpu']:.0f} MB/s per CPU "
            f"second, {results['sha_wall']:.0f} MB/s wall; on a cold disk the disk is the limit.",
            "",
            "Goal: 100 shards well under 1 s CPU. The sparse shards show no tensor data is read.",
            END,
        ]
    )


def write_section(section: str, doc: Path = DOC) -> None:
    """Replace our section of docs/benchmarks.md, creating the file when missing."""
    if not doc.exists():
        doc.write_text("# Benchmarks\n\n" + section + "\n", encoding="utf-8")
        return
    text = doc.read_text(encoding="utf-8")
    start, end = text.find(START), text.find(END)
    if start >= 0 and end > start:
        text = text[:start] + section + text[end + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    doc.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Build, measure, print, and (unless --no-write) update docs/benchmarks.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats",
        type=int,
        default=7,
        metavar="N",
        help="runs per measurement (default: %(default)s)",
    )
    parser.add_argument(
        "--shards", type=int, default=100, metavar="N", help="shards (default: %(default)s)"
    )
    parser.add_argument(
        "--hash-mib",
        type=int,
        default=256,
        metavar="MIB",
        help="size of the file hashed (default: %(default)s)",
    )
    parser.add_argument(
        "--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone"
    )
    args = parser.parse_args(argv)
    sparse = 3
    with tempfile.TemporaryDirectory(prefix="bench-preflight-") as tmp:
        folder = Path(tmp) / "model"
        stats = build_model(folder, shards=args.shards, sparse=sparse)
        run_preflight(folder)  # warm imports and the page cache
        cpu, wall, errors = time_preflight(folder, args.repeats)
        if errors:
            print(f"benchmark model has {errors} error findings", file=sys.stderr)
            return 1
        cpu_notok, wall_notok, _ = time_preflight(folder, args.repeats, tokenizer=False)
        sha_cpu, sha_wall = time_sha256(Path(tmp), args.hash_mib)
    results = {
        "cpu": cpu,
        "wall": wall,
        "cpu_notok": cpu_notok,
        "wall_notok": wall_notok,
        "sha_cpu": sha_cpu,
        "sha_wall": sha_wall,
    }
    section = render(stats, args.repeats, results, args.shards, sparse)
    print(section)
    if not args.no_write:
        write_section(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
