"""Will every judged series get enough samples? The soak plan check, at each sampler's real rate.

A leak verdict needs ``min_samples`` samples of its series in the baseline and in each measured
drain window (:func:`~servecheck.telemetry.analyse_leak`). The samplers do not all run at
``--interval``: the slow ones (RSS, NVML, DCGM) never run faster than
:data:`~servecheck.telemetry.recorder.SLOW_FLOOR_S`. Counting samples at ``--interval`` let a
plan through whose RSS series could only end as INSUFFICIENT DATA, so the plan is checked
against the samplers that will run (``TelemetryRecorder.intervals_for``), each at its own rate.
Only the samplers whose series get a verdict are checked: NVML and DCGM are plotted, not judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from servecheck.errors import SpecError
from servecheck.telemetry.recorder import SLOW_FLOOR_S, SLOW_SOURCES, TelemetryRecorder

if TYPE_CHECKING:
    from servecheck.config.model import Target

# source -> what its judged series are, and how to leave it out
JUDGED: dict[str, tuple[str, str]] = {
    "prometheus": ("the engine's /metrics (kv_usage, requests_running)", "or shorten {interval_s}"),
    "rss": ("engine RSS (rss_tree_bytes)", "or leave RSS out with {no_rss}"),
}


def short_window(
    windows: Mapping[str, tuple[float, str]],
    intervals: Mapping[str, float],
    min_samples: int = 3,
) -> str | None:
    """The first window too short for a judged sampler, as one :class:`SpecError` template
    (fields in braces); None when all fit.

    ``windows``: label -> (seconds, the option that lengthens it); ``intervals``: source -> real
    sampling interval (as :meth:`TelemetryRecorder.intervals_for` gives).
    """
    for label, (seconds, option) in windows.items():
        for source, every in intervals.items():
            if source not in JUDGED or seconds >= min_samples * every:
                continue
            what, other = JUDGED[source]
            floor = (
                f" (never faster than {SLOW_FLOOR_S:g}s, whatever {{interval_s}})"
                if source in SLOW_SOURCES
                else ""
            )
            return (
                f"{label}: fewer than {min_samples} samples of {what}, sampled every {every:g}s"
                f"{floor}; lengthen {option}, {other}"
            )
    return None


def idle_problem(
    plan: Any, intervals: Mapping[str, float], settle_given: bool, min_samples: int = 3
) -> str | None:
    """Every constraint on ``--idle`` at once, with the shortest value that meets them all, as
    one :class:`SpecError` template; None when the plan's idle fits. A drain is measured in
    idle minus settle, which must hold ``min_samples`` samples of every judged series at its own
    real rate (``--interval``'s, or a slow sampler's floor) and settle must be shorter than idle.
    One constraint an error made finding a valid ``--idle`` a guessing game (issue 41)."""
    rates = {"interval": float(plan.interval_s)} | {
        src: every for src, every in intervals.items() if src in JUDGED
    }
    need = min_samples * max(rates.values())
    window = plan.idle_s - plan.settle_s
    if window >= need and plan.settle_s < plan.idle_s:
        return None
    shortest = plan.settle_s + need if settle_given else 2.0 * need
    fast = JUDGED["prometheus"][0] if "prometheus" in intervals else "the telemetry"
    parts = [f"{fast} every {plan.interval_s:g}s ({{interval_s}})"]
    for src, every in intervals.items():
        if src in JUDGED and src in SLOW_SOURCES:
            what, other = JUDGED[src]
            parts.append(
                f"{what} every {every:g}s, never faster than {SLOW_FLOOR_S:g}s whatever "
                f"{{interval_s}} ({other})"
            )
    return (
        f"{{idle_s}} {plan.idle_s:g}s with {{settle_s}} {plan.settle_s:g}s leaves {window:g}s "
        f"to measure each drain, which needs {min_samples} samples of "
        f"{' and of '.join(parts)}: at least {need:g}s after {{settle_s}}, with {{settle_s}} "
        f"shorter than {{idle_s}}; the shortest valid {{idle_s}} here is {shortest:g}s"
        + ("" if settle_given else " ({settle_s} is half of {idle_s} unless given)")
    )


def check_soak_windows(plan: Any, target: Target, overrides: Mapping[str, Any]) -> None:
    """Raise :class:`UsageError` when a soak ``plan``'s baseline or drain window is too short
    for a judged sampler that the run with ``overrides`` will start (see the module docstring)."""
    intervals = TelemetryRecorder.intervals_for(target, target.telemetry.as_settings(), **overrides)
    window = plan.idle_s - plan.settle_s
    problem = short_window(
        {
            f"{{baseline_s}} {plan.baseline_s:g}s": (plan.baseline_s, "{baseline_s}"),
            f"{{idle_s}} {plan.idle_s:g}s with {{settle_s}} {plan.settle_s:g}s leaves {window:g}s "
            "to measure each drain": (window, "{idle_s}"),
        },
        intervals,
    )
    if problem:
        raise SpecError(problem)
