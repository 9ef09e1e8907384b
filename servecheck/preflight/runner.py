"""``run_preflight``: run every check over a model folder and collect a report."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.errors import SpecError
from servecheck.preflight import (
    config_check,
    gguf_check,
    host_check,
    index_check,
    integrity,
    layout,
)
from servecheck.preflight.context import Context, PreflightOptions
from servecheck.preflight.findings import Finding, Severity
from servecheck.preflight.safetensors_check import ShardInfo, check_safetensors_file
from servecheck.preflight.tokenizer_check import check_chat_template, check_tokenizer

JSON_SCHEMA = "servecheck.preflight/1"
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


@dataclass(slots=True)
class PreflightReport:
    """The outcome of one preflight: where, what was checked, and the findings."""

    path: str
    layout: str
    model_dir: str | None
    revision: str | None
    findings: list[Finding] = field(default_factory=list)
    files_checked: int = 0
    weight_bytes: int = 0
    hashed_bytes: int = 0
    seconds: float = 0.0

    def count(self, severity: Severity) -> int:
        """How many findings have ``severity``."""
        return sum(1 for f in self.findings if f.severity is severity)

    @property
    def ok(self) -> bool:
        """True when no finding is an error (warnings and info do not fail a preflight)."""
        return self.count(Severity.ERROR) == 0

    @property
    def exit_code(self) -> int:
        """0 when ok, 1 on any error-level finding."""
        return 0 if self.ok else 1

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document; its keys are documented in docs/preflight.md."""
        return {
            "schema": JSON_SCHEMA,
            "path": self.path,
            "layout": self.layout,
            "model_dir": self.model_dir,
            "revision": self.revision,
            "ok": self.ok,
            "counts": {s.value: self.count(s) for s in Severity},
            "files_checked": self.files_checked,
            "weight_bytes": self.weight_bytes,
            "hashed_bytes": self.hashed_bytes,
            "seconds": round(self.seconds, 3),
            "findings": [f.to_dict() for f in self.findings],
        }


def run_preflight(
    path: str | os.PathLike[str],
    options: PreflightOptions | None = None,
    progress: integrity.HashProgress | None = None,
) -> PreflightReport:
    """Check the model at ``path`` (folder, HF cache repo or snapshot, or one weight file).

    Reads headers and metadata only, unless sha256 verification is asked for. Raises
    :class:`~servecheck.errors.UsageError` when ``path`` does not exist or is not a model
    location, or when ``options.manifest`` is unreadable or malformed.
    """
    started = time.perf_counter()
    options = options or PreflightOptions()
    root = Path(path)
    lay = layout.detect_layout(root)
    if options.revision is not None and lay.kind != "hf-cache":
        raise SpecError(
            "{revision} {rev}: {root} is not an HF cache repo (models--org--name)",
            rev=options.revision,
            root=root,
        )
    if options.manifest is not None and not options.manifest.is_file():
        raise SpecError("{manifest} {path}: no such file", path=options.manifest)
    # A single file's findings are shown relative to its folder ("model.gguf", not ".").
    shown_root = root.parent if lay.single_file is not None else root
    ctx = Context(root=shown_root, model_dir=lay.model_dir or root, options=options)
    report = PreflightReport(path=str(root), layout=lay.kind, model_dir=None, revision=None)
    if lay.kind == "hf-cache":
        layout.resolve_hf_snapshot(lay, ctx)
        layout.check_hf_files(lay, ctx)
    if lay.model_dir is None:
        return _finish(report, ctx, started)
    model_dir = lay.model_dir
    ctx.model_dir = model_dir
    report.model_dir, report.revision = str(model_dir), lay.revision

    if lay.single_file is not None:
        entries = [lay.single_file]
    else:
        try:
            entries = sorted(model_dir.iterdir())
        except OSError as exc:
            # Only reachable when the folder cannot be listed by us; say so instead of a traceback.
            ctx.add(
                "PF-ACCESS-DIR",
                model_dir,
                f"cannot list the model folder: {exc.strerror or exc}",
                f"chmod o+rx {model_dir} (or run as its owner/group)",
            )
            return _finish(report, ctx, started)
    files = [p for p in entries if p not in ctx.broken and p.is_file()]
    host_check.check_access(ctx, model_dir, files)
    usable = [f for f in files if f not in ctx.broken]
    report.files_checked = len(usable)
    # Suffixes of every entry, broken ones included: a folder whose only shard is an empty
    # blob has safetensors weights (already reported), not "no weights".
    suffixes = {p.suffix for p in entries}

    shards, ggufs = _check_weights(ctx, lay, usable, entries)
    _check_layout(ctx, model_dir, usable, suffixes)
    if ".safetensors" in suffixes and lay.single_file is None:
        config = config_check.load_config(ctx, model_dir, required=True)
        tok_config = check_tokenizer(ctx, model_dir, config)
        check_chat_template(ctx, model_dir, tok_config)
    elif ggufs and ".safetensors" not in suffixes:
        check_chat_template(ctx, model_dir, None, gguf_template=any(g.chat_template for g in ggufs))

    report.weight_bytes = sum(sum(info.tensors.values()) for info in shards.values())
    if ggufs:
        report.weight_bytes += _gguf_weight_bytes(ggufs)
    model_bytes = sum(
        f.stat().st_size for f in usable if f.suffix in (".safetensors", ".gguf", *_PICKLE_SUFFIXES)
    )
    host_check.check_disk_space(ctx, model_dir, model_bytes)
    host_check.check_memory(ctx, model_dir, report.weight_bytes)

    if options.verify_sha256 or options.manifest is not None:
        weights = [f for f in usable if f.suffix in (".safetensors", ".gguf")]
        jobs = integrity.hash_jobs(ctx, model_dir, lay.blobs, weights)
        report.hashed_bytes = integrity.verify(ctx, jobs, progress)
    return _finish(report, ctx, started)


def _check_weights(
    ctx: Context, lay: layout.Layout, usable: list[Path], entries: list[Path]
) -> tuple[dict[str, ShardInfo], list[gguf_check.GGUFInfo]]:
    """Headers of every weight file, then the cross-file checks; returns the loaded shards."""
    model_dir = ctx.model_dir
    shards: dict[str, ShardInfo] = {}
    for f in usable:
        if f.suffix == ".safetensors":
            try:
                shards[f.name] = check_safetensors_file(f, ctx)
            except OSError as exc:
                _unreadable(ctx, f, exc)
    loaded = set(shards)
    if lay.single_file is None:
        other: list[Path] = []
        if lay.repo_dir is not None:
            other = [
                p for p in (lay.repo_dir / "snapshots").iterdir() if p.is_dir() and p != model_dir
            ]
        indexed = index_check.check_index(ctx, model_dir, shards, other)
        loaded = indexed or loaded
        names = [p.name for p in entries]
        index_check.check_series(
            ctx, model_dir, [n for n in names if n.endswith(".safetensors")], bool(indexed)
        )
        index_check.check_duplicates(ctx, model_dir, shards, loaded)
        gguf_check.check_gguf_splits(ctx, model_dir, [n for n in names if n.endswith(".gguf")])
    ggufs: list[gguf_check.GGUFInfo] = []
    for f in usable:
        if f.suffix != ".gguf":
            continue
        try:
            info = gguf_check.check_gguf_file(ctx, f)
        except OSError as exc:
            _unreadable(ctx, f, exc)
            continue
        if info is not None:
            ggufs.append(info)
    return {n: shards[n] for n in sorted(loaded) if n in shards}, ggufs


def _check_layout(ctx: Context, model_dir: Path, usable: list[Path], suffixes: set[str]) -> None:
    """Weights of a checkable format exist; pickle weights are flagged as unchecked."""
    if not suffixes & {".safetensors", ".gguf"}:
        only_pickle = bool(suffixes & set(_PICKLE_SUFFIXES))
        ctx.add(
            "PF-NO-WEIGHTS",
            model_dir,
            "no *.safetensors or *.gguf file" + (" (only pickle weights)" if only_pickle else ""),
            "download the weights, or point preflight at the folder that holds them",
        )
    pickles = [f.name for f in usable if f.suffix in _PICKLE_SUFFIXES]
    if pickles:
        ctx.add(
            "PF-WEIGHTS-NOT-CHECKED",
            model_dir,
            f"pickle weights are not checked: {', '.join(pickles[:5])}"
            + (" ..." if len(pickles) > 5 else ""),
            "prefer the safetensors files of the repo; pickle files can also run code when loaded",
        )


def _unreadable(ctx: Context, path: Path, exc: OSError) -> None:
    # The mode-bit check passed but the read failed (ACLs, SELinux, a broken mount): report
    # it as an access problem rather than abort the whole preflight.
    ctx.broken.add(path)
    ctx.add(
        "PF-ACCESS-FILE",
        path,
        f"could not read it: {exc.strerror or exc}",
        "check ACLs, SELinux labels and the mount, then the file's permissions",
    )


def _gguf_weight_bytes(ggufs: list[gguf_check.GGUFInfo]) -> int:
    """Parts of one split add up; separate GGUF files are alternatives, so take the largest."""
    series: dict[str, int] = {}
    for info in ggufs:
        match = gguf_check._SPLIT.match(info.path.name)
        key = match["prefix"] if match else info.path.name
        series[key] = series.get(key, 0) + info.weight_bytes
    return max(series.values())


def _finish(report: PreflightReport, ctx: Context, started: float) -> PreflightReport:
    report.findings = ctx.findings
    report.seconds = time.perf_counter() - started
    return report


def preflight_findings_for_target(
    model_dir: str | os.PathLike[str], quantization: str | None, context_length: int | None
) -> list[Finding]:
    """Findings for a target's ``model_dir`` as declared in targets.yaml (for the pytest suite).

    Chat template presence is required (targets serve /v1/chat/completions). Raises
    :class:`~servecheck.errors.UsageError` when ``model_dir`` does not exist.
    """
    options = PreflightOptions(quantization=quantization, context_length=context_length, chat=True)
    return run_preflight(model_dir, options).findings
