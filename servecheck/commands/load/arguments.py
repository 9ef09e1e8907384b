"""The options of ``servecheck load``, one function a kind (what to send, distribution, guards,
replay); :func:`servecheck.commands.load.add_arguments` puts them in one group."""

from __future__ import annotations

import argparse
import os

from servecheck.commands.load import agent_arguments, live
from servecheck.commands.load.measurement import add_measurement_arguments
from servecheck.commands.load.profile_arguments import add_profile_arguments
from servecheck.commands.options import (
    add_api_arguments,
    add_dataset_arguments,
    add_error_budget_argument,
    add_model_argument,
    add_target_arguments,
)
from servecheck.load.workload.trace import FORMATS as TRACE_FORMATS

# Spec field -> option, for the library's SpecError (the rest follow from each option's dest).
FIELD_OPTIONS = {
    "retry_after_max_s": "--honour-retry-after",
    "slos": "--slo",
    "metrics_interval_s": "--server-metrics",
    **live.FIELD_OPTIONS,  # --web, --web-auth, --metrics-port (commands/load/generator/live.py)
}


def add_workload_arguments(g: argparse._ArgumentGroup) -> None:
    """What to send and judge: plan, scenario, loop, duration, SLOs, model."""
    env = os.environ.get
    g.add_argument(
        "--plan",
        metavar="NAME|FILE",
        default=env("SERVECHECK_LOAD_PLAN"),
        help="load plan from loadtests/ (e.g. smoke); options override it",
    )
    g.add_argument(
        "--scenario",
        metavar="NAME",
        default=None,
        help="scenario in scenarios/ or a locustfile path (default: chat)",
    )
    g.add_argument(
        "--users", type=int, metavar="N", default=None, help="closed loop: N concurrent users"
    )
    g.add_argument(
        "--rate",
        metavar="R/s",
        default=None,
        help="open loop: R requests per second (5/s, 300/min)",
    )
    g.add_argument(
        "--poisson",
        action="store_true",
        default=None,
        help="open loop with Poisson (exponential) gaps instead of a fixed rate",
    )
    g.add_argument(
        "--arrival",
        choices=("fixed", "poisson", "gamma"),
        default=None,
        help="open-loop gaps: fixed (default), poisson (as --poisson) or gamma (see --burstiness)",
    )
    g.add_argument(
        "--burstiness",
        metavar="B",
        default=None,
        help="gamma arrivals' shape, as vllm bench serve: 1 is Poisson, < 1 burstier, > 1 "
        "more even (implies --arrival gamma; default 1 with it)",
    )
    for name, what in (("input", "prompt"), ("output", "output")):
        g.add_argument(
            f"--{name}-tokens",
            metavar="N[:SD]",
            default=None,
            help=f"{what} length in tokens instead of the scenario's: mean N, standard deviation "
            "SD (default 0)"
            + (
                "; exact with ignore_eos where the engine has it, else a ceiling"
                if name == "output"
                else ""
            ),
        )
    g.add_argument(
        "--seed",
        type=int,
        metavar="N",
        default=None,
        help="seed for prompts and Poisson gaps (default: 0)",
    )
    g.add_argument(
        "--duration",
        metavar="TIME",
        default=env("SERVECHECK_LOAD_DURATION"),
        help="how long to send (30s, 5m); env SERVECHECK_LOAD_DURATION",
    )
    g.add_argument(
        "--max-requests", type=int, metavar="N", default=None, help="stop after N requests"
    )
    g.add_argument(
        "--slo",
        action="append",
        metavar="EXPR",
        default=[],
        help="SLO such as ttft_p95<=500ms (repeatable; the target's slo list is added)",
    )
    add_error_budget_argument(g, "SERVECHECK_LOAD_ERROR_BUDGET")
    add_model_argument(g)
    g.add_argument(
        "--model-mix",
        metavar="NAME=W,...",
        help="split the traffic across models by weight, e.g. a base and its LoRA adapters "
        "(servecheck-tiny=3,lora-a=1); each record names its model; plans: models:",
    )
    add_api_arguments(g)


def add_distributed_arguments(g: argparse._ArgumentGroup) -> None:
    """Locust processes and the distributed master / workers, the run id."""
    g.add_argument(
        "--processes",
        type=int,
        metavar="N",
        default=None,
        help="Locust --processes N: N worker processes on this machine",
    )
    g.add_argument(
        "--master",
        action="store_true",
        help="distributed: run the Locust master and merge the workers' records",
    )
    g.add_argument("--worker", action="store_true", help="distributed: run one Locust worker")
    g.add_argument(
        "--expect-workers",
        type=int,
        metavar="N",
        default=1,
        help="distributed: number of workers (give it to the master and to each worker)",
    )
    g.add_argument(
        "--master-host",
        metavar="HOST",
        default="127.0.0.1",
        help="distributed: master address for a worker (default: %(default)s)",
    )
    g.add_argument(
        "--master-port",
        type=int,
        metavar="PORT",
        default=5557,
        help="distributed: master port (default: %(default)s)",
    )
    g.add_argument(
        "--run-id",
        metavar="ID",
        default=None,
        help="run directory name (give master and workers the same one)",
    )


def add_guard_arguments(g: argparse._ArgumentGroup) -> None:
    """Guards on the generator and the target: lag, down, Retry-After, in-flight cap, CPUs."""
    g.add_argument(
        "--max-lag",
        metavar="TIME",
        default="25ms",
        help="flag the run when schedule or generator lag p99 exceeds this (default: %(default)s)",
    )
    g.add_argument(
        "--allow-lag",
        action="store_true",
        help="report a lagging generator as a warning, not a failed run",
    )
    g.add_argument(
        "--down-after",
        metavar="N,WINDOW",
        default=None,
        help="stop the run and fail it when N consecutive requests over WINDOW failed to connect "
        "(the target went down mid-run; an HTTP error is not down); 'off' never stops "
        "(default: 10,5s)",
    )
    g.add_argument(
        "--honour-retry-after",
        metavar="MAX",
        default=None,
        help="closed loop: after a rate-limited answer (429, 503 with Retry-After) a user waits "
        "the Retry-After it was given, at most MAX (e.g. 10s); default: no wait",
    )
    g.add_argument(
        "--max-inflight",
        type=int,
        metavar="N",
        default=None,
        help="open loop: cap on requests in flight per process (default: 1024)",
    )
    g.add_argument(
        "--no-tokenize",
        action="store_true",
        help="size prompts with the chars-per-token estimate even when the target has /tokenize",
    )
    g.add_argument(
        "--cpus",
        metavar="LIST",
        default=None,
        help="pin the generator to these CPUs (taskset -c LIST)",
    )


def add_replay_arguments(g: argparse._ArgumentGroup) -> None:
    """Trace replay, datasets and warm-up."""
    g.add_argument(
        "--trace",
        metavar="FILE",
        default=None,
        help="replay a trace file on its schedule (Mooncake, BurstGPT, Azure or servecheck JSONL)",
    )
    g.add_argument(
        "--trace-format",
        choices=TRACE_FORMATS,
        default="auto",
        help="trace file format (default: detected from the file)",
    )
    g.add_argument(
        "--speed",
        type=float,
        metavar="F",
        default=None,
        help="trace replay speed factor: 2 sends twice as fast (default: 1)",
    )
    add_dataset_arguments(g)
    g.add_argument(
        "--warmup",
        metavar="TIME",
        default=None,
        help="send this long first (on top of --duration), recorded but kept out of the figures and SLOs",
    )
    g.add_argument(
        "--warmup-requests",
        type=int,
        metavar="N",
        default=None,
        help="the first N requests (on top of --max-requests) are warm-up",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck load`` (each also readable from a SERVECHECK_LOAD_* variable)."""
    g = parser.add_argument_group("load")
    add_target_arguments(g, target="one", target_default="none: required")
    add_workload_arguments(g)
    add_profile_arguments(g)  # --profile (load/workload/phased.py)
    agent_arguments.add_agent_arguments(g)  # --agent (load/workload/agent.py)
    add_distributed_arguments(g)
    add_guard_arguments(g)
    add_replay_arguments(g)
    add_measurement_arguments(g)
    live.add_live_arguments(g)  # --web, --web-auth, --metrics-port (commands/load/live.py)
    g.add_argument("--quiet", action="store_true", help="no live progress")
