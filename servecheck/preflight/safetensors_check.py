"""Header-only checks of ``*.safetensors`` files.

The header is parsed here with ``struct`` + ``json`` instead of the ``safetensors`` package:
we read 8 + header-length bytes and never touch tensor data, which is what keeps a 100-shard
check well under a second, and it lets us say *which* rule a broken file breaks instead of
relaying one opaque loader error (vLLM's ``ValueError: 0 bytes read``).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from servecheck.preflight.context import Context

# Same limit as the safetensors reference implementation (MAX_HEADER_SIZE).
MAX_HEADER_BYTES = 100_000_000

# Bits per element for every dtype the safetensors format defines.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}

_REDOWNLOAD = "re-download this file (e.g. `hf download <repo> {name} --force-download`)"


@dataclass(slots=True)
class ShardInfo:
    """What a shard's header says: tensor name -> byte size, and the __metadata__ map."""

    path: Path
    size: int
    tensors: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    header_ok: bool = False


def read_header(path: Path, size: int, ctx: Context) -> tuple[int, dict[str, object]] | None:
    """Read and decode one file's JSON header: (header length, header), or None on failure."""
    name = path.name
    fix = _REDOWNLOAD.format(name=name)
    if size == 0:
        ctx.add(
            "PF-ST-ZERO-BYTE",
            path,
            "file is 0 bytes; engines fail on it with `ValueError: 0 bytes read` or similar",
            fix,
        )
        return None
    if size < 8:
        ctx.add(
            "PF-ST-TOO-SMALL",
            path,
            f"file is {size} bytes, shorter than the 8-byte header length",
            fix,
        )
        return None
    with path.open("rb") as fh:
        (header_len,) = struct.unpack("<Q", fh.read(8))
        if header_len > MAX_HEADER_BYTES or 8 + header_len > size:
            ctx.add(
                "PF-ST-HEADER-LENGTH",
                path,
                f"header length {header_len} bytes (first 8 bytes, little-endian u64) but the file is "
                f"{size} bytes and the limit is {MAX_HEADER_BYTES}; this is not a safetensors file "
                "or its start is corrupt (a Git LFS pointer or HTML error page saved as weights?)",
                fix,
            )
            return None
        raw = fh.read(header_len)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        ctx.add(
            "PF-ST-HEADER-JSON", path, f"header ({header_len} bytes) is not UTF-8 JSON: {exc}", fix
        )
        return None
    if not isinstance(header, dict):
        ctx.add(
            "PF-ST-HEADER-JSON",
            path,
            f"header is JSON {type(header).__name__}, expected an object",
            fix,
        )
        return None
    return header_len, header


def _tensor_bytes(dtype: str, shape: list[int]) -> int | None:
    """Byte size of a tensor, or None when sub-byte dtypes leave a partial byte."""
    bits = DTYPE_BITS[dtype] * math.prod(shape)
    return bits // 8 if bits % 8 == 0 else None


def check_safetensors_file(path: Path, ctx: Context) -> ShardInfo:
    """Check one file's header against its size and return what it declares."""
    size = path.stat().st_size
    info = ShardInfo(path=path, size=size)
    read = read_header(path, size, ctx)
    if read is None:
        return info
    header_len, header = read
    fix = _REDOWNLOAD.format(name=path.name)
    spans: list[tuple[int, int, str]] = []
    ok = True
    layout_ok = True  # False once an entry's offsets are unusable: packing cannot be judged
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        ctx.add("PF-ST-BAD-ENTRY", path, "__metadata__ must map strings to strings", fix)
        ok = False
    else:
        info.metadata = meta
    for name, entry in header.items():
        if not _entry_shape_ok(entry):
            ctx.add(
                "PF-ST-BAD-ENTRY",
                path,
                f"tensor {name!r}: entry {json.dumps(entry)[:200]} needs dtype (string), shape "
                "(list of non-negative ints) and data_offsets ([begin, end] ints)",
                fix,
            )
            ok = layout_ok = False
            continue
        fields = cast(dict[str, Any], entry)
        dtype, shape, (begin, end) = fields["dtype"], fields["shape"], fields["data_offsets"]
        known = dtype in DTYPE_BITS
        if not known:
            ctx.add(
                "PF-ST-UNKNOWN-DTYPE",
                path,
                f"tensor {name!r} has dtype {dtype!r}; known: {', '.join(DTYPE_BITS)}",
                "upgrade the engine's safetensors, or re-export the checkpoint with a standard dtype",
            )
            ok = False
        if end < begin:
            ctx.add(
                "PF-ST-OFFSETS",
                path,
                f"tensor {name!r}: data_offsets [{begin}, {end}] end before begin",
                fix,
            )
            ok = layout_ok = False
            continue
        want = _tensor_bytes(dtype, shape) if known else end - begin
        if want != end - begin:
            ctx.add(
                "PF-ST-SIZE-MISMATCH",
                path,
                f"tensor {name!r}: {dtype} x {shape} needs "
                + ("a partial byte" if want is None else f"{want} bytes")
                + f", data_offsets [{begin}, {end}] span {end - begin}",
                fix,
            )
            ok = False
        spans.append((begin, end, name))
        info.tensors[name] = end - begin
    if not header:
        ctx.add(
            "PF-ST-NO-TENSORS",
            path,
            "the header declares no tensors",
            "remove the file if it is not part of the model",
        )
    if layout_ok and not _check_packing(ctx, path, spans, header_len, size, fix):
        ok = False
    info.header_ok = ok
    return info


def _check_packing(
    ctx: Context,
    path: Path,
    spans: list[tuple[int, int, str]],
    header_len: int,
    size: int,
    fix: str,
) -> bool:
    """Tensors tile the data section from 0 without gaps, and the file ends where they do."""
    data_end = 0
    for begin, end, name in sorted(spans):
        if begin != data_end:
            what = "gap" if begin > data_end else "overlap"
            ctx.add(
                "PF-ST-OFFSETS",
                path,
                f"tensor {name!r} starts at {begin} but the previous tensor ends at {data_end} ({what}); "
                "safetensors requires tensors packed back to back from 0",
                fix,
            )
            return False
        data_end = end
    expected = 8 + header_len + data_end
    if size < expected:
        ctx.add(
            "PF-ST-TRUNCATED",
            path,
            f"file is {size} bytes but its header needs {expected} (8 + {header_len} header + "
            f"{data_end} data): {expected - size} bytes missing, the download was cut short",
            fix,
        )
        return False
    if size > expected:
        ctx.add(
            "PF-ST-TRAILING-BYTES",
            path,
            f"file is {size} bytes but its header accounts for {expected}: {size - expected} "
            "trailing bytes (two downloads appended, or a wrong header)",
            fix,
        )
        return False
    return True


def _entry_shape_ok(entry: object) -> bool:
    # Hot path (one call per tensor, ~100k for a large model): exact type checks, which also
    # reject bools, and plain loops are several times faster than isinstance + all(genexpr).
    if type(entry) is not dict:
        return False
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if type(entry.get("dtype")) is not str or type(shape) is not list or type(offsets) is not list:
        return False
    if len(offsets) != 2:
        return False
    for value in (*shape, *offsets):  # noqa: SIM110 - a loop is faster than all(genexpr) here
        if type(value) is not int or value < 0:
            return False
    return True
