"""Where the engines keep their installs, models, logs and run state.

Everything lives under one cache root, ``$SERVECHECK_CACHE`` or ``~/.cache/servecheck``, so CI
can keep it between runs and a developer can delete it to start over.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_CACHE = "SERVECHECK_CACHE"


def cache_root() -> Path:
    """The cache root (created on first use by whoever writes into it)."""
    value = os.environ.get(ENV_CACHE)
    return Path(value).expanduser() if value else Path.home() / ".cache" / "servecheck"


def venvs_dir() -> Path:
    """One virtual environment per engine and version: ``<cache>/venvs/<engine>-<version>``."""
    return cache_root() / "venvs"


def state_dir() -> Path:
    """Run state of started engines: one JSON file per running server."""
    return cache_root() / "state"


def logs_dir() -> Path:
    """Server and install logs."""
    return cache_root() / "logs"
