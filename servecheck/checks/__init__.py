"""Conformance checks: registry, context, runner and one module per surface."""

from servecheck.checks.context import CheckContext, CheckFailed, CheckSkipped, NonStrict
from servecheck.checks.preconditions import CheckError
from servecheck.checks.registry import REGISTRY, SURFACES, Check, by_surface, check, load_all
from servecheck.checks.runner import run_with_allowances

__all__ = [
    "REGISTRY",
    "SURFACES",
    "Check",
    "CheckError",
    "CheckContext",
    "CheckFailed",
    "CheckSkipped",
    "NonStrict",
    "by_surface",
    "check",
    "load_all",
    "run_with_allowances",
]
