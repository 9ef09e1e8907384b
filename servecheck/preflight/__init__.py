"""Preflight: check model artifacts on disk before an engine launch or a hot swap.

Reads only headers and metadata (safetensors headers, the index, config.json, tokenizer files,
GGUF metadata), so a 100-shard model is checked in well under a second. Imports only the
standard library, numpy/gguf/tokenizers where needed, and :mod:`servecheck.errors`.
"""

from __future__ import annotations

from servecheck.preflight.context import PreflightOptions
from servecheck.preflight.findings import CATALOGUE, CheckInfo, Finding, Severity
from servecheck.preflight.runner import (
    PreflightReport,
    preflight_findings_for_target,
    run_preflight,
)

__all__ = [
    "CATALOGUE",
    "CheckInfo",
    "Finding",
    "PreflightOptions",
    "PreflightReport",
    "Severity",
    "preflight_findings_for_target",
    "run_preflight",
]
