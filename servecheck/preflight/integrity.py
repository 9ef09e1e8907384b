"""sha256 verification against HF blob names or a ``sha256sum``-format manifest."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from servecheck.errors import SpecError
from servecheck.preflight.context import Context

CHUNK = 8 * 1024 * 1024
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MANIFEST_LINE = re.compile(r"^(?P<digest>[0-9a-fA-F]{64}) [ *](?P<name>.+)$")


class HashProgress(Protocol):
    """Receives hashing progress; the CLI draws a rich progress bar from it."""

    def start(self, total_bytes: int) -> None: ...

    def file(self, name: str) -> None: ...

    def advance(self, n_bytes: int) -> None: ...

    def finish(self) -> None: ...


@dataclass(slots=True)
class HashJob:
    """A file to hash, where its expected digest came from, and how to show it."""

    path: Path  # the file read (an HF blob, or the file itself)
    shown: Path  # the path reported
    expected: str
    source: str  # "blob name" or "manifest line N"


def sha256_file(path: Path, progress: HashProgress | None = None) -> str:
    """Stream ``path`` through sha256 in 8 MiB chunks (one reused buffer, no per-chunk copies)."""
    digest = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with path.open("rb", buffering=0) as fh:
        while n := fh.readinto(view):
            digest.update(view[:n])
            if progress is not None:
                progress.advance(n)
    return digest.hexdigest()


def read_manifest(manifest: Path) -> list[tuple[int, str, str]]:
    """Parse ``sha256sum`` output: ``<hex digest> <space or *><path>`` per line.

    A malformed manifest is a usage error naming the file and line, so the run stops before
    hashing gigabytes against a list it cannot trust.
    """
    try:
        text = manifest.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError("{manifest} {path}: {why}", path=manifest, why=exc.strerror or exc) from exc
    entries: list[tuple[int, str, str]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _MANIFEST_LINE.match(line.rstrip("\r"))
        if match is None:
            raise SpecError(
                "{manifest} {path}:{lineno}: expected `<64 hex sha256>  <path>` (sha256sum format), "
                "got {line!r}",
                path=manifest,
                lineno=lineno,
                line=line[:80],
            )
        entries.append((lineno, match["digest"].lower(), match["name"]))
    return entries


def hash_jobs(
    ctx: Context, model_dir: Path, blobs: dict[Path, Path], weight_files: list[Path]
) -> list[HashJob]:
    """Decide what to hash: manifest lines, else HF blobs named by sha256 (LFS files)."""
    jobs: list[HashJob] = []
    manifest = ctx.options.manifest
    covered: set[Path] = set()
    if manifest is not None:
        for lineno, digest, name in read_manifest(manifest):
            shown = model_dir / name
            covered.add(shown)
            if shown in ctx.broken:
                continue
            if not shown.is_file():
                ctx.add(
                    "PF-MANIFEST-MISSING-FILE",
                    shown,
                    f"listed at {manifest.name}:{lineno} but not in the model folder",
                    "download the file, or regenerate the manifest for this revision",
                )
                continue
            jobs.append(HashJob(shown.resolve(), shown, digest, f"{manifest.name}:{lineno}"))
    if ctx.options.verify_sha256:
        for link, blob in sorted(blobs.items()):
            if link in covered or link in ctx.broken or not _SHA256.match(blob.name):
                continue  # 40-hex blob names are git sha1 of small non-LFS files
            covered.add(link)
            jobs.append(HashJob(blob, link, blob.name, "HF blob name"))
        unverified = [f for f in weight_files if f not in covered and f not in ctx.broken]
        if unverified:
            names = ", ".join(ctx.rel(f) for f in unverified[:5])
            ctx.add(
                "PF-SHA256-UNVERIFIED",
                model_dir,
                f"{len(unverified)} weight files have no known sha256 (not HF LFS blobs, no manifest line): {names}",
                "give a manifest: sha256sum output from the source of the files",
            )
    return jobs


def verify(ctx: Context, jobs: list[HashJob], progress: HashProgress | None = None) -> int:
    """Hash every job and report mismatches; returns the number of bytes hashed."""
    total = sum(job.path.stat().st_size for job in jobs)
    if progress is not None:
        progress.start(total)
    try:
        for job in jobs:
            if progress is not None:
                progress.file(ctx.rel(job.shown))
            actual = sha256_file(job.path, progress)
            if actual != job.expected:
                ctx.add(
                    "PF-SHA256-MISMATCH",
                    job.shown,
                    f"sha256 {actual} but {job.source} says {job.expected}: the content is corrupt "
                    "or from another revision",
                    "delete the file (and its blob) and download it again",
                )
    finally:
        if progress is not None:
            progress.finish()
    return total
