"""GGUF checks: magic, version, metadata and tensor table, and that tensor data fits the file."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servecheck.preflight.context import Context

GGUF_MAGIC = b"GGUF"
_SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$")
_FIX = "re-download or re-convert this file (llama.cpp `convert_hf_to_gguf.py`)"


@dataclass(slots=True)
class GGUFInfo:
    """What one GGUF file declares."""

    path: Path
    version: int
    tensor_count: int
    weight_bytes: int
    data_end: int
    chat_template: bool


def _metadata_reader() -> type[Any]:
    """A GGUFReader that builds the tensor table without numpy views of tensor data.

    The stock reader slices the memory map for every tensor and reshapes it; on a truncated
    file that raises a bare ValueError, and it is more work than a preflight needs. We keep
    (name, type, dims, offset) and compute byte sizes from GGML_QUANT_SIZES ourselves, so no
    page of tensor data is ever touched.
    """
    import gguf
    import numpy as np

    class MetadataOnlyReader(gguf.GGUFReader):
        tensor_table: list[tuple[str, int, int]]  # name, data offset (absolute), n_bytes

        def _build_tensors(self, start_offs: int, fields: list[Any]) -> None:
            table = []
            for field in fields:
                _len, name_data, _n_dims, dims, raw_dtype, offset_tensor = field.parts
                qtype = gguf.GGMLQuantizationType(int(raw_dtype[0]))
                block, type_size = gguf.GGML_QUANT_SIZES[qtype]
                n_elems = int(np.prod(dims.astype(np.uint64))) if len(dims) else 1
                table.append(
                    (
                        bytes(name_data).decode("utf-8", "replace"),
                        int(start_offs + int(offset_tensor[0])),
                        n_elems * type_size // block,
                    )
                )
            self.tensor_table = table
            self.tensors = []

    return MetadataOnlyReader


def check_gguf_file(ctx: Context, path: Path) -> GGUFInfo | None:
    """Check one .gguf file; every failure becomes a finding, never a traceback."""
    size = path.stat().st_size
    if size == 0:
        ctx.add("PF-GGUF-ZERO-BYTE", path, "file is 0 bytes", _FIX)
        return None
    with path.open("rb") as fh:
        head = fh.read(8)
    if head[:4] != GGUF_MAGIC:
        ctx.add(
            "PF-GGUF-BAD-MAGIC",
            path,
            f"starts with {head[:4]!r}, not b'GGUF' (a Git LFS pointer, an HTML page, or another format)",
            _FIX,
        )
        return None
    if len(head) < 8:
        ctx.add(
            "PF-GGUF-UNREADABLE", path, f"file is {size} bytes, too short for a GGUF header", _FIX
        )
        return None
    version = struct.unpack("<I", head[4:8])[0]
    try:
        from gguf.gguf_reader import READER_SUPPORTED_VERSIONS as supported
    except ImportError:
        supported = [2, 3]
    if version not in supported:
        ctx.add(
            "PF-GGUF-BAD-VERSION",
            path,
            f"GGUF version {version}; the gguf reader supports {list(supported)}",
            "re-convert with a current llama.cpp, or upgrade the gguf package and the engine",
        )
        return None
    try:
        reader = _metadata_reader()(path)
        table: list[tuple[str, int, int]] = reader.tensor_table
        fields = reader.fields
        template = "tokenizer.chat_template" in fields
    except Exception as exc:  # noqa: BLE001 - a corrupt header is the finding itself
        ctx.add(
            "PF-GGUF-UNREADABLE",
            path,
            f"metadata or tensor table does not parse ({type(exc).__name__}: {str(exc)[:200]}); "
            "the file is truncated inside its header or corrupt",
            _FIX,
        )
        return None
    data_end = max((off + n for _name, off, n in table), default=0)
    if data_end > size:
        last = max(table, key=lambda t: t[1] + t[2])
        ctx.add(
            "PF-GGUF-TRUNCATED",
            path,
            f"tensor data ends at byte {data_end} (last: {last[0]!r}) but the file is {size} bytes: "
            f"{data_end - size} bytes missing, the download was cut short",
            _FIX,
        )
    return GGUFInfo(
        path=path,
        version=version,
        tensor_count=len(table),
        weight_bytes=sum(n for _name, _off, n in table),
        data_end=data_end,
        chat_template=template,
    )


def check_gguf_splits(ctx: Context, model_dir: Path, names: list[str]) -> None:
    """``name-0000k-of-0000n.gguf`` parts are all present."""
    series: dict[tuple[str, int], set[int]] = {}
    for name in names:
        match = _SPLIT.match(name)
        if match:
            series.setdefault((match["prefix"], int(match["total"])), set()).add(int(match["part"]))
    for (prefix, total), parts in sorted(series.items()):
        for part in sorted(set(range(1, total + 1)) - parts):
            ctx.add(
                "PF-GGUF-MISSING-SPLIT",
                model_dir / f"{prefix}-{part:05d}-of-{total:05d}.gguf",
                f"split GGUF part {part} of {total} is missing; llama.cpp fails to load the model",
                "download every part of the split",
            )
