"""Workflows: the runs that combine the layers below (a conformance run, the acceptance gate, a
capacity sweep, a cutover check, a comparison, ``init``'s probe). Each takes a typed spec and
returns a typed result; the commands and :mod:`servecheck.api` call them. Nothing here parses
options or imports a command.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(slots=True)
class RunResult:
    """What a workflow run leaves: its folder, the verdict file's data, the page, the exit code."""

    run_dir: Path
    data: dict[str, Any]
    page: Path
    exit_code: int

    @property
    def passed(self) -> bool:
        return self.exit_code == 0
