"""The option groups of ``servecheck soak`` (schedule, load, abandoned streams, telemetry), one
function a group; :func:`servecheck.commands.soak.add_arguments` puts them together."""

from __future__ import annotations

import argparse

from servecheck.commands.options import add_max_tokens_argument, add_model_argument
from servecheck.commands.options.hung import add_hung_arguments
from servecheck.load.soak import MAX_CYCLES, MIN_CYCLES
from servecheck.load.workload.soak_mix import MEMBERS


def add_schedule_arguments(parser: argparse.ArgumentParser) -> None:
    """The cycle schedule: how many, how long, the idle between."""
    g = parser.add_argument_group("schedule (required: --cycles, --cycle, --idle)")
    g.add_argument(
        "--cycles",
        type=int,
        metavar="K",
        help=f"identical load cycles ({MIN_CYCLES}-{MAX_CYCLES}), each member of --mix's",
    )
    g.add_argument("--cycle", metavar="TIME", help="load time per cycle, e.g. 10m")
    g.add_argument("--idle", metavar="TIME", help="idle (drain) time after each cycle, e.g. 2m")
    g.add_argument(
        "--baseline", metavar="TIME", help="idle baseline before the first cycle (default: --idle)"
    )
    g.add_argument(
        "--settle",
        metavar="TIME",
        help="part of each idle not measured, so queues empty first (default: half of --idle)",
    )
    g.add_argument(
        "--max-total",
        default="24h",
        metavar="TIME",
        help="refuse a plan longer than this (default: %(default)s)",
    )


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """The load of a cycle: streams in flight, model, request shape."""
    w = parser.add_argument_group("load")
    c = w.add_mutually_exclusive_group()
    c.add_argument(
        "--concurrency",
        "--users",
        dest="concurrency",
        type=int,
        default=4,
        metavar="N",
        help="streams in flight during a cycle (closed loop; default: %(default)s)",
    )
    w.add_argument(
        "--mix",
        default=None,
        metavar="MEMBERS",
        help="what the cycles send, members in turn, each its own cycles so a leak names the "
        f"member: {', '.join(MEMBERS)} (e.g. chat,errors,cancel; default: chat). --cycles is "
        "per member",
    )
    add_model_argument(w)
    add_max_tokens_argument(w, 128, "max_tokens per request")
    w.add_argument(
        "--prompt-words",
        type=int,
        default=60,
        metavar="N",
        help="prompt length in words (default: %(default)s)",
    )
    w.add_argument(
        "--shared-prefix",
        type=int,
        default=0,
        metavar="WORDS",
        help="every request opens with one of 4 shared system prompts of WORDS words, so the "
        "engine's prefix cache is in play (a retained cache must read as retention, not a leak)",
    )


def add_abandon_arguments(parser: argparse.ArgumentParser) -> None:
    """Abandoned streams: the share dropped per cycle, the probe and its drain bound."""
    a = parser.add_argument_group("abandoned streams")
    a.add_argument(
        "--abandon",
        action="store_true",
        help="drop a share of each cycle's streams mid-generation, then run the abandoned-stream probe and the drain check",
    )
    a.add_argument(
        "--probe-only",
        action="store_true",
        help="no load cycles: idle baseline (--baseline, default 5s), the abandoned-stream probe, the drain check",
    )
    a.add_argument(
        "--abandon-share",
        type=float,
        default=0.25,
        metavar="SHARE",
        help="share of streams dropped per cycle (default: %(default)s)",
    )
    a.add_argument(
        "--abandon-chunks",
        type=int,
        default=3,
        metavar="N",
        help="token chunks read before dropping (default: %(default)s)",
    )
    a.add_argument(
        "--cancel",
        metavar="SHARE@tokens:K",
        default=None,
        help="as servecheck load's --cancel: cancel SHARE of each cycle's streams after K "
        "tokens (--abandon with that share and K chunks), e.g. 10%%@tokens:8",
    )
    a.add_argument(
        "--probe-streams",
        type=int,
        default=8,
        metavar="N",
        help="concurrent streams per probe round (default: %(default)s)",
    )
    a.add_argument(
        "--probe-rounds",
        type=int,
        default=3,
        metavar="N",
        help="probe rounds (default: %(default)s)",
    )
    a.add_argument(
        "--drain-bound",
        default="30s",
        metavar="TIME",
        help="time allowed to drain after the probe (default: %(default)s)",
    )


def add_telemetry_arguments(parser: argparse.ArgumentParser) -> None:
    """Telemetry and the leak verdicts: tolerances, sampling, the engine process."""
    v = parser.add_argument_group("telemetry and verdicts")
    v.add_argument(
        "--tolerance",
        type=float,
        default=0.02,
        metavar="F",
        help="KV-usage tolerance above baseline (default: %(default)s)",
    )
    v.add_argument(
        "--rss-tolerance",
        default="auto",
        metavar="SIZE",
        help="RSS tolerance above baseline, e.g. 256MiB; auto (the default): 5%% of the baseline, "
        "at least 32 MiB and twice the noise floor. Whatever the tolerance, a significant rise "
        "that keeps going is a leak",
    )
    v.add_argument(
        "--no-cache-flush",
        action="store_true",
        help="do not flush the engine's prefix cache before each drain measurement (vLLM "
        "POST /reset_prefix_cache, SGLang /flush_cache); retained cache and a leak may then "
        "read alike",
    )
    add_hung_arguments(v, "soak")  # --hung-after, --canary (commands/options/hung.py)
    v.add_argument(
        "--fail-on-retention",
        action="store_true",
        help="treat a flat KV plateau above baseline as a failure (when prefix caching is off)",
    )
    v.add_argument(
        "--interval",
        metavar="TIME",
        help="sampling interval (default: the target's telemetry.interval_s, else 0.5s)",
    )
    v.add_argument(
        "--pid", type=int, metavar="PID", help="engine process for RSS (default: telemetry.pid)"
    )
    v.add_argument(
        "--port",
        type=int,
        metavar="PORT",
        help="find the engine process by its port (default: telemetry.port, "
        "else a loopback target's port)",
    )
    v.add_argument("--no-rss", action="store_true", help="do not sample process RSS")
    v.add_argument("--no-nvml", action="store_true", help="do not sample NVML GPU memory")
