"""Cross-shard checks: the safetensors index, shard series names, duplicates, mixed revisions."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

from servecheck.preflight.context import Context
from servecheck.preflight.findings import Severity
from servecheck.preflight.safetensors_check import ShardInfo

_SERIES = re.compile(r"^(?P<prefix>.+)-(?P<part>\d+)-of-(?P<total>\d+)\.safetensors$")


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _names(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_index(
    ctx: Context,
    model_dir: Path,
    shards: dict[str, ShardInfo],
    other_snapshots: list[Path] | None = None,
) -> set[str]:
    """Check every ``*.safetensors.index.json`` in ``model_dir`` against the shard headers.

    ``shards`` maps file name -> header info for every .safetensors file in the folder.
    Returns the shard names the indexes reference (empty when there is no index), which is the
    set an engine loads.
    """
    indexed: set[str] = set()
    for index_path in sorted(model_dir.glob("*.safetensors.index.json")):
        if index_path in ctx.broken:
            continue
        weight_map = _load_weight_map(index_path, ctx)
        if weight_map is None:
            continue
        by_shard: dict[str, list[str]] = defaultdict(list)
        for tensor, shard in weight_map.items():
            by_shard[shard].append(tensor)
        indexed.update(by_shard)
        owner = {t: name for name, info in shards.items() for t in info.tensors}
        for shard, tensors in sorted(by_shard.items()):
            info = shards.get(shard)
            shard_path = model_dir / shard
            if info is None:
                if shard_path in ctx.broken:
                    continue
                elsewhere = [s.name for s in other_snapshots or [] if (s / shard).exists()]
                hint = (
                    f"; it exists in snapshot {elsewhere[0]}, so this snapshot mixes revisions"
                    if elsewhere
                    else ""
                )
                ctx.add(
                    "PF-INDEX-MISSING-SHARD",
                    shard_path,
                    f"{index_path.name} maps {_count(len(tensors), 'tensor')} to {shard}, which does not exist{hint}",
                    "download the missing shard (re-run the download for the same revision as the index)",
                )
                continue
            if not info.header_ok and not info.tensors:
                continue  # header already reported as broken
            missing = sorted(t for t in tensors if t not in info.tensors)
            if missing:
                moved = sorted({owner[t] for t in missing if t in owner})
                hint = (
                    f"; found in {_names(moved)} instead: index and shards come from different revisions"
                    if moved
                    else ""
                )
                ctx.add(
                    "PF-INDEX-MISSING-TENSOR",
                    shard_path,
                    f"{index_path.name} maps {_count(len(missing), 'tensor')} here that the header lacks: "
                    f"{_names(missing)}{hint}",
                    "download index and shards from one revision",
                )
            extra = sorted(t for t in info.tensors if t not in weight_map)
            if extra:
                ctx.add(
                    "PF-INDEX-UNINDEXED-TENSOR",
                    shard_path,
                    f"{_count(len(extra), 'tensor')} in the shard but not in {index_path.name}: {_names(extra)}; "
                    "loaders that follow the index ignore them",
                    "download index and shards from one revision",
                )
        _check_total_size(ctx, index_path, by_shard, shards)
    if indexed:
        # consolidated*.safetensors is Mistral's native format, shipped next to the HF shards
        # in official repos; engines choose one format, so it is not a leftover.
        for name in sorted(n for n in set(shards) - indexed if not n.startswith("consolidated")):
            ctx.add(
                "PF-INDEX-STRAY-SHARD",
                model_dir / name,
                f"{name} is not named by the index; engines skip it (or, without the index, load it "
                "twice): likely left over from another revision",
                f"delete {name} if it is not part of this revision",
            )
    return indexed


def _load_weight_map(index_path: Path, ctx: Context) -> dict[str, str] | None:
    try:
        data = json.loads(index_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        ctx.add("PF-INDEX-JSON", index_path, f"does not parse: {exc}", "re-download the index file")
        return None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        ctx.add(
            "PF-INDEX-JSON",
            index_path,
            "has no weight_map object mapping tensor names to shard file names",
            "re-download the index file",
        )
        return None
    return weight_map


def _check_total_size(
    ctx: Context, index_path: Path, by_shard: dict[str, list[str]], shards: dict[str, ShardInfo]
) -> None:
    """Compare the index's metadata.total_size with the indexed shards' tensor bytes.

    Only a warning: engines ignore total_size and some export tools compute it loosely, but a
    difference is the usual trace of shards from another revision with the same names.
    """
    try:
        total = json.loads(index_path.read_text(encoding="utf-8"))["metadata"]["total_size"]
    except (KeyError, TypeError, json.JSONDecodeError):
        return
    if not isinstance(total, int) or not all(
        name in shards and shards[name].header_ok for name in by_shard
    ):
        return
    actual = sum(sum(shards[name].tensors.values()) for name in by_shard)
    if actual != total:
        ctx.add(
            "PF-MIXED-REVISION",
            index_path,
            f"metadata.total_size is {total} bytes but the indexed shards hold {actual} bytes of tensors",
            "download index and shards from one revision",
            severity=Severity.WARNING,
        )


def check_series(ctx: Context, model_dir: Path, names: list[str], has_index: bool) -> None:
    """``<prefix>-0000k-of-0000n.safetensors`` names agree on n, and no part is missing."""
    totals: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for name in names:
        match = _SERIES.match(name)
        if match:
            totals[match["prefix"]][int(match["total"])].append(int(match["part"]))
    for prefix, by_total in sorted(totals.items()):
        if len(by_total) > 1:
            series = ", ".join(
                f"-of-{n:05d} ({_count(len(parts), 'file')})"
                for n, parts in sorted(by_total.items())
            )
            ctx.add(
                "PF-MIXED-REVISION",
                model_dir,
                f"{prefix}-*.safetensors shards come from differently sharded revisions: {series}",
                "delete the folder's shards and download one revision again",
            )
            continue
        if has_index:
            continue  # the index check names missing shards precisely
        ((total, parts),) = by_total.items()
        for part in sorted(set(range(1, total + 1)) - set(parts)):
            name = f"{prefix}-{part:05d}-of-{total:05d}.safetensors"
            ctx.add(
                "PF-INDEX-MISSING-SHARD",
                model_dir / name,
                f"shard {part} of {total} is missing (there is no index to say more)",
                "download the missing shard",
            )


def check_duplicates(
    ctx: Context, model_dir: Path, shards: dict[str, ShardInfo], loaded: set[str]
) -> None:
    """No tensor name is stored in two of the shards an engine will load."""
    seen: dict[str, str] = {}
    dupes: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name in sorted(loaded):
        info = shards.get(name)
        if info is None:
            continue
        for tensor in info.tensors:
            first = seen.setdefault(tensor, name)
            if first != name:
                dupes[(first, name)].append(tensor)
    for (first, second), tensors in sorted(dupes.items()):
        ctx.add(
            "PF-ST-DUPLICATE-TENSOR",
            model_dir / second,
            f"{_count(len(tensors), 'tensor')} also in {first}: {_names(sorted(tensors))}",
            "keep shards of one revision only (compare with the index, re-download)",
        )
