"""``servecheck soak``'s options -> a typed :class:`~servecheck.load.soak.SoakPlan` or
:class:`~servecheck.load.soak.ProbeOnlyPlan` and the telemetry overrides (parsed and checked
here, at the edge: the library never sees the options)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from servecheck.config.model import Target
from servecheck.errors import SpecError, UsageError
from servecheck.load.soak import LOOPBACK, ProbeOnlyPlan, SoakPlan, parse_size, probe_settings

# Spec field -> option where the two names differ beyond an option's dest (and dest + "_s"),
# for showing the library's SpecError (servecheck/cli.py).
FIELD_OPTIONS = {"shared_prefix_words": "--shared-prefix"}


def _abandon(o: Callable[[str], Any]) -> dict[str, Any]:
    """``--abandon`` / ``--abandon-share`` / ``--abandon-chunks``, or ``--cancel SHARE@tokens:K``
    (load/workload/cancel.py's grammar), which is the cycles' abandoned streams at that share and K."""
    from servecheck.load.workload.cancel import parse_cancel

    rule = parse_cancel(o("cancel"))
    if rule is None:
        return {
            "abandon": o("abandon"),
            "abandon_share": o("abandon_share"),
            "abandon_chunks": o("abandon_chunks"),
        }
    if rule.point != "tokens":
        raise UsageError(
            f"--cancel {o('cancel')!r}: a soak's cycles cancel after K tokens (SHARE@tokens:K); "
            "cancelling at the headers or after T ms is servecheck load's and capacity's"
        )
    return {"abandon": True, "abandon_share": rule.share, "abandon_chunks": int(rule.value)}


def _hung(o: Callable[[str], Any]) -> dict[str, Any]:
    """``--hung-after`` and ``--canary`` (analysis/hung.py's grammar) as the plan's fields."""
    from servecheck.analysis.hung import parse_hung_after

    rule = parse_hung_after(o("hung_after"), o("canary") or "10s")
    return {
        "hung_after_s": rule.stall_s,
        "canary_every_s": rule.canary_every_s,
        "canary_within_s": rule.canary_within_s,
    }


def plan_from_options(
    options: Mapping[str, Any], target: Target, model: str | None = None
) -> SoakPlan:
    """Build and validate the plan from ``servecheck soak``'s options (as in ``vars(args)``;
    ``model`` resolved by the caller)."""
    from servecheck.load.workload.schedule import parse_duration

    o: Callable[[str], Any] = options.get  # Any: the options are argparse values

    missing = [
        opt
        for opt, value in (
            ("--cycles", o("cycles")),
            ("--cycle", o("cycle")),
            ("--idle", o("idle")),
        )
        if value is None
    ]
    if missing:
        raise UsageError(
            f"a soak is bounded: give {', '.join(missing)} (e.g. --cycles 6 --cycle 10m --idle 2m)"
        )
    from servecheck.load.workload.soak_mix import parse_mix

    mix = parse_mix(o("mix"))
    cycle_s, idle_s = parse_duration(o("cycle")), parse_duration(o("idle"))
    settings = target.telemetry
    interval = parse_duration(o("interval")) if o("interval") else (settings.interval_s or 0.5)
    if not 0.01 <= interval <= 60:
        raise UsageError(f"--interval {interval:g}s: between 10ms and 60s")
    plan = SoakPlan(
        model=model or "",
        cycles=o("cycles"),
        cycle_s=cycle_s,
        idle_s=idle_s,
        baseline_s=parse_duration(o("baseline")) if o("baseline") else idle_s,
        settle_s=parse_duration(o("settle")) if o("settle") else idle_s / 2,
        concurrency=o("concurrency"),
        max_tokens=o("max_tokens"),
        prompt_words=o("prompt_words"),
        shared_prefix_words=int(o("shared_prefix") or 0),
        interval_s=interval,
        tolerance=o("tolerance"),
        rss_tolerance=None if o("rss_tolerance") == "auto" else parse_size(o("rss_tolerance")),
        **_abandon(o),
        drain_bound_s=parse_duration(o("drain_bound")),
        probe_streams=o("probe_streams"),
        probe_rounds=o("probe_rounds"),
        fail_on_retention=o("fail_on_retention"),
        max_total_s=parse_duration(o("max_total")),
        **_hung(o),
        cache_flush=not o("no_cache_flush"),
        # A random tiny model may stop at once; vLLM can be told to ignore EOS so cycles stay identical.
        extra={"ignore_eos": True} if target.engine == "vllm" else {},
        mix=mix,
        context_length=_context_length(target, mix, model),
    )
    from servecheck.telemetry.recorder import TelemetryRecorder
    from servecheck.telemetry.windows import check_soak_windows, idle_problem

    overrides = telemetry_overrides(options, target, plan)
    intervals = TelemetryRecorder.intervals_for(target, settings.as_settings(), **overrides)
    problem = idle_problem(plan, intervals, settle_given=bool(o("settle")))
    if problem:  # every constraint on --idle in one error, with the shortest valid value
        raise SpecError(problem)
    plan.validate()
    # The errors member's context is asked for once the model is known (model "-": not yet).
    plan.check_target(target, skip=("errors",) if model == "-" else ())
    check_soak_windows(plan, target, overrides)
    if plan.abandon:
        probe_settings(plan).validate()
    return plan


def _context_length(target: Target, mix: tuple[str, ...], model: str | None) -> int | None:
    """The target's context length where the errors member needs it: declared, else what
    /v1/models (or llama.cpp's /props) says; not asked before the model is known."""
    if target.context_length is not None or "errors" not in mix or model in (None, "", "-"):
        return target.context_length
    from servecheck.checks.discovery import discover

    info = discover(target)
    return info.discovered_context or info.context_length


def probe_plan_from_options(options: Mapping[str, Any], target: Target) -> ProbeOnlyPlan:
    """The ``--probe-only`` plan from ``servecheck soak``'s options; raises :class:`UsageError` naming the option."""
    from servecheck.load.workload.schedule import parse_duration
    from servecheck.probes.abandon import ProbeSettings

    o: Callable[[str], Any] = options.get
    if o("cycles") is not None or o("cycle") is not None or o("abandon") or o("mix"):
        raise UsageError(
            "--probe-only runs no load cycles: leave out --cycles, --cycle, --abandon and --mix"
        )
    interval = (
        parse_duration(o("interval")) if o("interval") else (target.telemetry.interval_s or 0.5)
    )
    baseline_s = parse_duration(o("baseline")) if o("baseline") else 5.0
    bound_s = parse_duration(o("drain_bound"))
    if baseline_s < 3 * interval or not 0 < bound_s <= 3600 or not 0.01 <= interval <= 60:
        raise UsageError(
            f"--probe-only: --baseline {baseline_s:g}s must hold 3 samples at --interval {interval:g}s "
            f"(10ms-60s), and --drain-bound {bound_s:g}s be at most 1h"
        )
    settings = ProbeSettings(
        streams=o("probe_streams"),
        rounds=o("probe_rounds"),
        chunks=o("abandon_chunks"),
        max_tokens=o("max_tokens"),
        prompt_words=o("prompt_words"),
        extra={"ignore_eos": True} if target.engine == "vllm" else {},
    )
    settings.validate()
    return ProbeOnlyPlan(settings, baseline_s, bound_s, interval, o("tolerance"))


def telemetry_overrides(
    options: Mapping[str, Any], target: Target, plan: SoakPlan
) -> dict[str, Any]:
    """The recorder settings the options change (interval, NVML off, which process for RSS)."""
    o: Callable[[str], Any] = options.get  # Any: the options are argparse values
    settings = target.telemetry
    out: dict[str, Any] = {"interval_s": plan.interval_s}
    if o("no_nvml"):
        out["nvml"] = False
    if o("no_rss"):
        out["pid"], out["port"] = None, None
    elif o("pid") is not None or o("port") is not None:
        out["pid"], out["port"] = o("pid"), o("port")
    elif settings.pid is None and settings.port is None:
        parts = urlsplit(target.base_url)
        if parts.hostname in LOOPBACK:
            out["port"] = parts.port or (443 if parts.scheme == "https" else 80)
    return out


__all__ = ["FIELD_OPTIONS", "plan_from_options", "probe_plan_from_options", "telemetry_overrides"]
