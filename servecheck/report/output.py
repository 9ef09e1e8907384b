"""The files a report writes besides its page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servecheck.redact import redact


def write_json(path: Path, data: Any) -> Path:
    """Redacted, indented JSON."""
    path.write_text(
        redact(json.dumps(data, indent=2, ensure_ascii=False, default=str)) + "\n", encoding="utf-8"
    )
    return path


__all__ = ["write_json"]
