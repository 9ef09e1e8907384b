"""Find the folder to check: a plain model folder, an HF cache repo, or a single file.

An HF cache repo (``models--org--name/``) holds ``refs/<branch>`` files naming a commit,
``snapshots/<commit>/`` folders of symlinks, and ``blobs/`` named by content hash (sha256 for
LFS files, git sha1 for small ones). Engines given a repo id resolve ``refs/main`` (or the
requested revision) to a snapshot, so that is the snapshot checked.

"Mixed revisions" in an HF cache means one of: a ref naming a snapshot that is not there
(``PF-HF-REF-DANGLING``), checking a snapshot that ``refs/main`` no longer points to
(``PF-HF-STALE-SNAPSHOT``), or, inside any folder, shard files and index from different
revisions (``PF-MIXED-REVISION``, see :mod:`servecheck.preflight.index_check`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from servecheck.errors import UsageError, did_you_mean
from servecheck.preflight.context import Context

# Blob names of legitimately empty files: git's sha1 of an empty blob and sha256(b"").
_EMPTY_BLOB_NAMES = {"e69de29bb2d1d6434b8b29ae775ad8c2e48c5391", hashlib.sha256(b"").hexdigest()}


@dataclass(slots=True)
class Layout:
    """Where the model files are and how they got there."""

    kind: str  # "plain", "hf-cache" or "file"
    model_dir: Path | None  # None when an HF repo has no usable snapshot
    repo_dir: Path | None = None
    revision: str | None = None
    single_file: Path | None = None
    # file in the snapshot -> the blob it links to (HF cache only), for --verify-sha256.
    blobs: dict[Path, Path] = field(default_factory=dict)


def _is_repo_dir(path: Path) -> bool:
    return (path / "snapshots").is_dir() or ((path / "blobs").is_dir() and (path / "refs").is_dir())


def detect_layout(path: Path) -> Layout:
    """Classify ``path``; raise :class:`UsageError` for something preflight cannot check."""
    try:
        path.stat()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file or directory") from None
    except PermissionError:
        raise UsageError(
            f"{path}: permission denied (a directory above it lacks x for you)"
        ) from None
    if path.is_file():
        if path.suffix not in (".safetensors", ".gguf"):
            raise UsageError(f"{path}: expected a model folder, a .safetensors or a .gguf file")
        return Layout("file", path.parent, single_file=path)
    if not path.is_dir():
        raise UsageError(f"{path}: not a folder or a regular file")
    if _is_repo_dir(path):
        return Layout("hf-cache", None, repo_dir=path)
    if path.parent.name == "snapshots" and _is_repo_dir(path.parent.parent):
        return Layout("hf-cache", path, repo_dir=path.parent.parent, revision=path.name)
    try:
        repos = sorted(p.name for p in path.iterdir() if p.name.startswith("models--"))
    except PermissionError:
        repos = []
    if repos:
        raise UsageError(
            f"{path} looks like an HF cache root; pass one repo folder, e.g. {path / repos[0]}"
        )
    return Layout("plain", path)


def _read_refs(repo: Path) -> dict[str, str]:
    refs: dict[str, str] = {}
    ref_root = repo / "refs"
    if ref_root.is_dir():
        for ref in sorted(ref_root.rglob("*")):
            if ref.is_file():
                refs[ref.relative_to(ref_root).as_posix()] = ref.read_text(encoding="utf-8").strip()
    return refs


def resolve_hf_snapshot(layout: Layout, ctx: Context) -> None:
    """Pick the snapshot to check and report ref/snapshot problems; fills ``layout``."""
    repo = layout.repo_dir
    if repo is None:
        return
    snap_root = repo / "snapshots"
    snapshots = sorted(p for p in snap_root.iterdir() if p.is_dir()) if snap_root.is_dir() else []
    refs = _read_refs(repo)
    for ref, rev in refs.items():
        if not (snap_root / rev).is_dir():
            ctx.add(
                "PF-HF-REF-DANGLING",
                repo / "refs" / ref,
                f"refs/{ref} names revision {rev} but snapshots/{rev} does not exist "
                "(a download was interrupted, or the cache was partly deleted)",
                f"re-download the revision: `hf download {_repo_id(repo)} --revision {ref}`",
            )
    main = refs.get("main")
    if layout.model_dir is None:
        wanted = ctx.options.revision
        if wanted is not None:
            rev = refs.get(wanted, wanted)
            if not (snap_root / rev).is_dir():
                choices = list(refs) + [p.name for p in snapshots]
                raise UsageError(
                    f"{repo}: revision {wanted!r} has no snapshot{did_you_mean(wanted, choices)}"
                )
            layout.model_dir, layout.revision = snap_root / rev, rev
        elif main is not None and (snap_root / main).is_dir():
            layout.model_dir, layout.revision = snap_root / main, main
        elif snapshots:
            newest = max(snapshots, key=lambda p: p.stat().st_mtime)
            layout.model_dir, layout.revision = newest, newest.name
            if main is None:
                ctx.add(
                    "PF-HF-NO-REF",
                    repo / "refs",
                    f"no refs/main; checked the newest snapshot {newest.name}, but an engine given "
                    "the repo id resolves refs/main and will not find it",
                    "pass the snapshot folder itself to the engine, or re-download to recreate refs/main",
                )
        else:
            ctx.add(
                "PF-HF-NO-SNAPSHOT",
                repo,
                "no snapshots/<revision> folder: nothing was downloaded, or the download failed early",
                f"download the model: `hf download {_repo_id(repo)}`",
            )
            return
    elif main is not None and main != layout.revision and ctx.options.revision is None:
        ctx.add(
            "PF-HF-STALE-SNAPSHOT",
            layout.model_dir,
            f"checked snapshot {layout.revision}, but refs/main points to {main}; an engine given the "
            "repo id loads that one instead",
            f"check {repo} (refs/main) or pin the engine to revision {layout.revision}",
        )
    others = [p.name for p in snapshots if p.name != layout.revision]
    if others:
        ctx.add(
            "PF-HF-OTHER-SNAPSHOTS",
            repo / "snapshots",
            f"checked {layout.revision}; other snapshots: {', '.join(others[:5])}"
            + (f" and {len(others) - 5} more" if len(others) > 5 else ""),
            "`hf cache delete` stale revisions to free disk space",
        )


def check_hf_files(layout: Layout, ctx: Context) -> None:
    """Every snapshot link resolves into blobs/ to a non-empty file; no *.incomplete blobs."""
    repo, snap = layout.repo_dir, layout.model_dir
    if repo is None or snap is None:
        return
    blobs_dir = (repo / "blobs").resolve()
    if blobs_dir.is_dir():
        for partial in sorted(blobs_dir.glob("*.incomplete")):
            ctx.add(
                "PF-HF-INCOMPLETE",
                repo / "blobs" / partial.name,
                f"partial download ({partial.stat().st_size} bytes so far): a download was interrupted "
                "or is still running",
                "wait for the running download, or re-run it (`hf download` resumes); then delete "
                "leftover *.incomplete files",
            )
    for dirpath, _dirnames, filenames in os.walk(snap):
        for name in sorted(filenames):
            link = Path(dirpath) / name
            if not link.is_symlink():
                continue
            target = Path(os.path.realpath(link))
            if not target.is_file():
                ctx.broken.add(link)
                ctx.add(
                    "PF-HF-DANGLING-SYMLINK",
                    link,
                    f"symlink to {os.readlink(link)} does not resolve to a file (blob deleted or "
                    "download cut short)",
                    f"re-download it: `hf download {_repo_id(repo)} {link.relative_to(snap).as_posix()} --force-download`",
                )
                continue
            if target.parent != blobs_dir:
                ctx.add(
                    "PF-HF-FOREIGN-LINK",
                    link,
                    f"links to {target}, outside {blobs_dir}; cache cleanup tools will not track it",
                    "re-download the file into the cache instead of linking it by hand",
                )
            else:
                layout.blobs[link] = target
            if target.stat().st_size == 0 and target.name not in _EMPTY_BLOB_NAMES:
                ctx.broken.add(link)
                ctx.add(
                    "PF-HF-EMPTY-BLOB",
                    link,
                    f"resolves to blob {target.name}, which is 0 bytes although its name is the hash "
                    "of non-empty content: the download was cut short",
                    f"delete blobs/{target.name} and re-download: `hf download {_repo_id(repo)} "
                    f"{link.relative_to(snap).as_posix()} --force-download`",
                )


def _repo_id(repo: Path) -> str:
    """``models--org--name`` -> ``org/name`` (the folder name when it is not in that form)."""
    parts = repo.name.split("--")
    if len(parts) >= 3 and parts[0] in ("models", "datasets", "spaces"):
        return "/".join(parts[1:])
    return repo.name
