"""servecheck: acceptance, conformance and load tests for OpenAI-compatible LLM servers.

The public entry points are :mod:`servecheck.api`'s: one function per command, each taking a
typed spec and returning a typed result. They are re-exported here, the run functions as
``run_<command>`` (``servecheck.load`` and ``servecheck.preflight`` are packages, so the plain
command names cannot all be attributes of this one)::

    import servecheck

    run = servecheck.run_load(servecheck.LoadSpec(target=servecheck.target("mine"), users=8))

Everything else is internal (``ARCHITECTURE.md`` lists the modules). The names load on first
use, so ``import servecheck`` (and ``servecheck --help``) stays light.
"""

# ruff: noqa: F401  (the TYPE_CHECKING imports are the re-exports __all__ names)
from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # what a type checker sees; at run time __getattr__ loads each name
    from servecheck.api import (
        AcceptResult,
        AcceptSpec,
        CapacityResult,
        CapacitySpec,
        CheckResult,
        CheckSpec,
        CompareResult,
        CompareSpec,
        CutoverResult,
        CutoverSpec,
        DrainResult,
        DrainSpec,
        HistoryAddResult,
        HistoryAddSpec,
        HistoryCompareResult,
        HistoryCompareSpec,
        HistoryShowResult,
        HistoryShowSpec,
        LoadResult,
        LoadSpec,
        PreflightOptions,
        PreflightReport,
        RepeatResult,
        RepeatSpec,
        SoakPlan,
        SoakResult,
        Target,
        records_frame,
        target,
    )
    from servecheck.api import accept as run_accept
    from servecheck.api import capacity as run_capacity
    from servecheck.api import check as run_check
    from servecheck.api import compare as run_compare
    from servecheck.api import cutover as run_cutover
    from servecheck.api import drain as run_drain
    from servecheck.api import history_add as run_history_add
    from servecheck.api import history_compare as run_history_compare
    from servecheck.api import history_show as run_history_show
    from servecheck.api import load as run_load
    from servecheck.api import load_repeat as run_load_repeat
    from servecheck.api import preflight as run_preflight
    from servecheck.api import soak as run_soak

_COMMANDS = (
    "accept",
    "capacity",
    "check",
    "compare",
    "cutover",
    "drain",
    "load",
    "preflight",
    "soak",
    "load_repeat",  # `servecheck load --repeat N`
    "history_add",  # `servecheck history add | show | compare`
    "history_show",
    "history_compare",
)
_TYPES = (
    *(f"History{a}{kind}" for a in ("Add", "Show", "Compare") for kind in ("Spec", "Result")),
    "PreflightOptions",
    "PreflightReport",
    "RepeatResult",
    "RepeatSpec",
    "SoakPlan",
    "SoakResult",
    "Target",
    "target",
    "records_frame",  # a run's records as a DataFrame, for notebooks
)
__all__ = sorted(
    [
        "__version__",
        *(f"{c.title()}{kind}" for c in _COMMANDS[:7] for kind in ("Spec", "Result")),
        *_TYPES,
        *(f"run_{c}" for c in _COMMANDS),
    ]
)


def _api_name(name: str) -> str | None:
    """The name in :mod:`servecheck.api` behind a public name here, else None."""
    if name not in __all__ or name == "__version__":
        return None
    return name.removeprefix("run_")


def __getattr__(name: str) -> Any:
    source = _api_name(name)
    if source is None:
        raise AttributeError(f"module 'servecheck' has no attribute {name!r}")
    from servecheck import api

    value = getattr(api, source)
    globals()[name] = value
    return value
