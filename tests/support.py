"""Helpers for self-tests: targets and check contexts pointed at a reference server."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path
from typing import Any

from servecheck.checks.context import CheckContext
from servecheck.checks.discovery import discover
from servecheck.client.http import ServeClient
from servecheck.config.model import Target
from servecheck.engines.registry import profile_for, resolve_capabilities
from servecheck.reference.inprocess import RunningServer

TEST_KEY = "sk-servecheck-selftest-9f8e7d6c"


@functools.cache
def reference_model_dir() -> Path:
    """A model folder holding the reference server's tokenizer.json, written once per session."""
    from servecheck.reference.text import write_tokenizer

    directory = Path(tempfile.mkdtemp(prefix="servecheck-ref-model-"))
    # One per test process (each xdist worker): gone when it exits, not left in the temp dir.
    atexit.register(shutil.rmtree, directory, True)
    write_tokenizer(directory)
    return directory


def target_for(server: RunningServer, **overrides: Any) -> Target:
    values: dict[str, Any] = {
        "name": "ref",
        "base_url": server.base_url,
        "engine": "reference",
        "models": ["ref-tiny"],
        "context_length": server.config.max_model_len,
        "metrics_url": server.root + "/metrics",
        "timeout_s": 10,
        "api_key": server.config.api_key,
        "model_dir": str(reference_model_dir()),  # the reference tokenizer (TEXT-LOCAL-TOKENIZER)
        "capacity": 4,  # OVERLOAD bursts 12 requests; the overload-* faults shed above 4
    }
    values.update(overrides)
    return Target.model_validate(values)


def context_for(server: RunningServer, check_id: str, **overrides: Any) -> CheckContext:
    target = target_for(server, **overrides)
    return CheckContext(
        check_id=check_id,
        target=target,
        model=(target.models or ["ref-tiny"])[0],
        profile=profile_for(target),
        capabilities=resolve_capabilities(target),
        info=discover(target),
        client=ServeClient.for_target(target),
    )
