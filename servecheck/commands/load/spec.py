"""``servecheck load``'s options -> a typed :class:`~servecheck.load.run.LoadSpec` (parsed and
checked here, at the edge: the library never sees the options)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from servecheck.analysis.aggregate import parse_records
from servecheck.analysis.down import parse_down_after
from servecheck.analysis.hung import parse_hung_after
from servecheck.analysis.slo import parse_slos
from servecheck.analysis.steady import parse_steady_window
from servecheck.analysis.timings import request_id_header
from servecheck.commands.load.agent_arguments import agent_fields
from servecheck.commands.load.live import live_fields
from servecheck.commands.load.profile_arguments import profile_fields
from servecheck.commands.options import error_budget, fault_options
from servecheck.config.model import Target
from servecheck.errors import UsageError
from servecheck.load.generator.stream import parse_retry_after_cap
from servecheck.load.generator.wire import REQUEST_ID
from servecheck.load.spec import LoadSpec
from servecheck.load.workload.images import normalise_images
from servecheck.load.workload.lengths import parse_lengths
from servecheck.load.workload.mix import parse_model_mix
from servecheck.load.workload.schedule import (
    parse_burstiness,
    parse_duration,
    parse_rate,
    shape_from_spec,
)


def spec_from_options(
    target: Target, options: Mapping[str, Any], plan: Mapping[str, Any] | None = None
) -> LoadSpec:
    """A :class:`LoadSpec` from ``servecheck load``'s options layered over a load plan (the
    option values are parsed and checked here, at the edge; the library gets typed values).

    ``options`` uses the option names of the command (``users``, ``rate``, ``duration``,
    ``max_lag`` ..., as in ``vars(args)``); an option that is ``None`` takes the plan's value.
    """
    plan = dict(plan or {})
    o: Callable[[str], Any] = options.get  # Any: the options are argparse values

    def pick(name: str) -> Any:
        v = o(name)
        return v if v is not None else plan.get(name)

    users, rate = o("users"), o("rate")
    shape = None
    if o("speed") is not None and o("speed") <= 0:
        raise UsageError(f"--speed {o('speed'):g}: must be > 0")
    if users is None and rate is None and o("trace") is None and o("profile") is None:
        users, rate = plan.get("users"), plan.get("rate")
        if plan.get("shape"):
            shape = shape_from_spec(dict(plan["shape"]))
    duration = pick("duration")
    max_lag_text = o("max_lag") or "25ms"
    max_lag = parse_duration(max_lag_text) * 1000.0
    role = "master" if o("master") else "worker" if o("worker") else "local"
    warm_plan: dict[str, Any] = dict(plan.get("warmup") or {})  # load_plan normalised both
    data_plan: dict[str, Any] = dict(plan.get("dataset") or {})
    if o("master") and o("worker"):
        raise UsageError("--master and --worker exclude each other")
    return LoadSpec(
        target=target,
        scenario=pick("scenario")
        or ("trace" if o("trace") else "agent" if pick("agent") is not None else "chat"),
        users=int(users) if users is not None else None,
        rate=parse_rate(rate) if rate is not None else None,
        **_arrival(pick),
        input_tokens=_lengths(pick, "input_tokens"),
        output_tokens=_lengths(pick, "output_tokens"),
        seed=int(pick("seed") or 0),
        shape=shape,
        duration_s=parse_duration(duration) if duration is not None else None,
        max_requests=pick("max_requests"),
        slos=parse_slos([*(o("slo") or []), *(plan.get("slo") or [])], "cli"),
        error_budget=error_budget(pick("error_budget")),
        model=o("model"),
        processes=pick("processes"),
        role=role,
        expect_workers=o("expect_workers") or 1,
        master_host=o("master_host") or "127.0.0.1",
        master_port=o("master_port") or 5557,
        out_dir=Path(o("out") or "reports"),
        run_id=o("run_id"),
        max_lag_ms=max_lag
        if max_lag_text != "25ms" or "max_lag" not in plan
        else parse_duration(plan["max_lag"]) * 1000.0,
        max_inflight=int(pick("max_inflight") or 1024),
        retry_after_max_s=parse_retry_after_cap(pick("honour_retry_after")),
        extra_body=dict(plan.get("extra_body") or {}),
        use_tokenize=not o("no_tokenize"),
        request_id_header=request_id_header(o("request_id_header") or REQUEST_ID),
        cpus=o("cpus"),
        progress=not o("quiet"),
        allow_lag=bool(o("allow_lag")),
        trace=o("trace"),
        trace_format=o("trace_format") or "auto",
        trace_speed=float(o("speed") or 1.0),
        warmup_s=parse_duration(o("warmup")) if o("warmup") else warm_plan.get("seconds"),
        warmup_requests=o("warmup_requests")
        if o("warmup_requests") is not None
        else warm_plan.get("requests"),
        dataset=o("dataset") or data_plan.get("path"),
        dataset_format=o("dataset_format")
        if o("dataset") or o("dataset_format") not in (None, "auto")
        else data_plan.get("format", "auto"),
        down_after=parse_down_after(o("down_after")),
        hung=parse_hung_after(o("hung_after"), o("canary")),
        **fault_options(options, plan),  # --cancel, --cancel-drain (commands/options/faults.py)
        api=pick("api"),
        images=normalise_images(pick("images")),
        model_mix=parse_model_mix(o("model_mix"), "--model-mix") or list(plan.get("models") or []),
        server_metrics=o("server_metrics") != "off",
        metrics_interval_s=_interval(o("server_metrics")),
        steady_window=parse_steady_window(pick("steady_window")),
        **profile_fields(pick),  # profile and slice_s
        records=parse_records(pick("records")),
        **live_fields(o),  # --web, --web-auth, --metrics-port (commands/load/generator/live.py)
        **agent_fields(pick),  # --agent, a plan's agent: (load/workload/agent.py)
    )


def _interval(text: str | None) -> float | None:
    """``--server-metrics``: None (default) or off -> None, else a positive duration."""
    if text is None or text == "off":
        return None
    return parse_duration(text)  # a usage error on a bad or non-positive one


__all__ = ["spec_from_options"]


ARRIVALS = ("fixed", "poisson", "gamma")


def _arrival(pick: Callable[[str], Any]) -> dict[str, Any]:
    """``--arrival`` / ``--poisson`` / ``--burstiness`` (or the plan's keys) -> the spec's
    ``poisson`` and ``burstiness``; ``--burstiness`` alone means gamma arrivals."""
    arrival, burst, poisson = pick("arrival"), pick("burstiness"), bool(pick("poisson"))
    if arrival is not None and arrival not in ARRIVALS:
        raise UsageError(f"arrival {arrival!r}: one of {', '.join(ARRIVALS)}")
    if burst is not None and arrival in ("fixed", "poisson"):
        raise UsageError(f"--burstiness shapes gamma arrivals, not --arrival {arrival}")
    if arrival == "fixed" and poisson:
        raise UsageError("--arrival fixed and --poisson exclude each other")
    if arrival == "gamma" or burst is not None:
        return {"poisson": poisson, "burstiness": parse_burstiness(1.0 if burst is None else burst)}
    return {"poisson": poisson or arrival == "poisson", "burstiness": None}


def _lengths(pick: Callable[[str], Any], name: str) -> Any:
    text = pick(name)
    return None if text is None else parse_lengths(str(text), "--" + name.replace("_", "-"))
