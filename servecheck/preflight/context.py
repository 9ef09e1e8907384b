"""Options and the per-run context that check modules report into."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from servecheck.preflight.findings import Finding, Severity, make_finding


@dataclass(slots=True)
class PreflightOptions:
    """What the launch will look like; each field narrows what preflight can check.

    ``quantization`` is the engine's declared method (``awq``, ``gptq``, ``fp8``, ``none``...),
    ``None`` meaning "not declared, do not compare". ``uid``/``gids`` are the serving user's
    identity for the permission checks; ``None`` means the current process's.
    """

    quantization: str | None = None
    context_length: int | None = None
    chat: bool = True
    verify_sha256: bool = False
    manifest: Path | None = None
    gpu_memory_gib: float | None = None
    revision: str | None = None
    uid: int | None = None
    gids: tuple[int, ...] | None = None


@dataclass(slots=True)
class Context:
    """Shared state of one preflight run: where the model is and the findings so far."""

    root: Path
    model_dir: Path
    options: PreflightOptions
    findings: list[Finding] = field(default_factory=list)
    # Files already reported as unusable (empty blob, dangling link...). Later checks skip
    # them so one broken file gives one finding, not five.
    broken: set[Path] = field(default_factory=set)

    def rel(self, path: Path) -> str:
        """Show ``path`` relative to what the user passed, absolute when outside it."""
        try:
            rel = os.path.relpath(path, self.root)
        except ValueError:
            return str(path)
        return str(path) if rel.startswith("..") else rel

    def add(
        self,
        check_id: str,
        path: Path | str,
        message: str,
        fix: str,
        severity: Severity | None = None,
    ) -> Finding:
        """Record a finding; ``path`` may be a Path (shown relative) or a ready string."""
        shown = self.rel(path) if isinstance(path, Path) else path
        finding = make_finding(check_id, shown, message, fix, severity)
        self.findings.append(finding)
        return finding
