"""Host checks: can the serving user read the files, is there disk space, do weights fit.

Permissions are computed from ``stat`` mode bits and the serving user's uid/gids rather than
with ``os.access``: the engine often runs as another user than the one running preflight (a
container user, a systemd ``User=``), and ``os.access`` only answers for the current process.
Root is treated as the kernel treats it (read and search always allowed), so under root the
check passes unless another ``uid`` is given. POSIX ACLs and capabilities are not evaluated.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from servecheck.preflight.context import Context

R, X = 4, 1
GIB = 1024**3


def _identity(ctx: Context) -> tuple[int, set[int]]:
    uid = ctx.options.uid if ctx.options.uid is not None else os.geteuid()
    if ctx.options.gids is not None:
        return uid, set(ctx.options.gids)
    if ctx.options.uid is not None and ctx.options.uid != os.geteuid():
        return uid, set()
    return uid, {os.getegid(), *os.getgroups()}


def allowed(st: os.stat_result, uid: int, gids: set[int], want: int) -> bool:
    """Whether ``uid``/``gids`` get the ``want`` bits (R, X or R|X) on a file with ``st``."""
    if uid == 0:
        return True
    if st.st_uid == uid:
        bits = (st.st_mode >> 6) & 7
    elif st.st_gid in gids:
        bits = (st.st_mode >> 3) & 7
    else:
        bits = st.st_mode & 7
    return bits & want == want


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'; used in messages so sizes read at a glance."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _who(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def check_access(ctx: Context, model_dir: Path, files: list[Path]) -> None:
    """Every directory on the way to the files is searchable, and every file readable."""
    uid, gids = _identity(ctx)
    mark_broken = ctx.options.uid is None or ctx.options.uid == os.geteuid()
    who = _who(uid)
    chains: list[Path] = [model_dir.resolve()]
    targets: list[tuple[Path, Path]] = []
    for f in files:
        target = f.resolve()
        targets.append((f, target))
        if target.parent not in chains:
            chains.append(target.parent)
    reported: set[Path] = set()
    blocked: set[Path] = set()
    for leaf in chains:
        for directory in [*reversed(leaf.parents), leaf]:
            if directory in blocked:
                break
            try:
                st = directory.stat()
            except OSError:
                break
            want = R | X if directory == leaf else X
            if not allowed(st, uid, gids, want):
                blocked.add(directory)
                if directory not in reported:
                    reported.add(directory)
                    missing = "r and x" if want == R | X else "x (search)"
                    ctx.add(
                        "PF-ACCESS-DIR",
                        directory,
                        f"{who} lacks the {missing} permission on {directory} (mode "
                        f"{stat.filemode(st.st_mode)}, owner uid {st.st_uid} gid {st.st_gid}); "
                        "nothing below it can be opened",
                        f"chmod o+{'rx' if want == R | X else 'x'} {directory} (or run the engine as its owner/group)",
                    )
                break
    for link, target in targets:
        if any(p in blocked for p in target.parents):
            if mark_broken:
                ctx.broken.add(link)
            continue
        try:
            st = target.stat()
        except OSError:
            continue
        if not allowed(st, uid, gids, R):
            if mark_broken:
                ctx.broken.add(link)
            ctx.add(
                "PF-ACCESS-FILE",
                link,
                f"{who} cannot read it (mode {stat.filemode(st.st_mode)}, owner uid {st.st_uid} "
                f"gid {st.st_gid})",
                f"chmod o+r {target} (or run the engine as its owner/group)",
            )


def check_disk_space(ctx: Context, model_dir: Path, model_bytes: int) -> None:
    """Warn when the volume has less free space than the model's size.

    Engines write next to the cache (compile caches, converted weights, a second revision
    downloading), and a volume that is nearly full fails those writes midway.
    """
    try:
        free = shutil.disk_usage(model_dir).free
    except OSError:
        return
    if model_bytes and free < model_bytes:
        ctx.add(
            "PF-DISK-SPACE",
            model_dir,
            f"{human_bytes(free)} free on the volume, less than the model's {human_bytes(model_bytes)}",
            "free space (e.g. `hf cache delete`) or move caches (HF_HOME, VLLM_CACHE_ROOT) to a larger volume",
        )


def check_memory(ctx: Context, model_dir: Path, weight_bytes: int) -> None:
    """Report the weight memory estimate and compare it with the declared GPU budget."""
    if not weight_bytes:
        return
    ctx.add(
        "PF-WEIGHT-MEMORY",
        model_dir,
        f"weights need about {human_bytes(weight_bytes)} ({weight_bytes} bytes of tensors), "
        "before KV cache and activations",
        "size --gpu-memory-utilization / tensor parallelism with this in mind",
    )
    budget = ctx.options.gpu_memory_gib
    if budget is not None and weight_bytes > budget * GIB:
        ctx.add(
            "PF-GPU-MEMORY",
            model_dir,
            f"weights need {human_bytes(weight_bytes)}, more than the declared {budget:g} GiB budget "
            "(and the KV cache needs room too)",
            "use more GPUs (tensor parallelism), a quantized checkpoint, or a larger budget",
        )
