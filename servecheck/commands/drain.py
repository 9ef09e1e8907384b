"""``servecheck drain``: does the server drain on shutdown?

Streams in flight, then the server is told to stop (SIGTERM to a server this command launches
with ``--launch``, to the embedded reference or to an engine ``servecheck engine up`` started; else
the target's ``drain: {command: ...}`` hook from targets.yaml), then new requests until the port
refuses them. In-flight streams must finish, or end with an explicit finish reason; new
requests must get 503 or a refused connection, never a hang or an HTML 500. The run is
:func:`servecheck.workflows.drain.run_drain`; the run folder gets ``drain.json``.

Exit codes: 0 PASS, 1 FAIL or INCONCLUSIVE, 2 for a usage error.
"""

from __future__ import annotations

import argparse

from servecheck import api
from servecheck.commands.options import (
    add_max_tokens_argument,
    add_model_argument,
    add_ready_timeout_argument,
    add_run_arguments,
    add_target_arguments,
    checked_reference_args,
    out_dir,
)
from servecheck.workflows.drain import DrainSpec

# Spec field -> option where the names differ beyond an option's dest (and dest + "_s").
FIELD_OPTIONS = {
    "slos": "--slo",
    "deadline_s": "--deadline",
    "probe_rate": "--probe-rate",
    "probe_timeout_s": "--probe-timeout",
    "first_token_timeout_s": "--first-token-timeout",
    "stream_idle_s": "--stream-idle",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck drain``."""
    add_target_arguments(parser)
    add_model_argument(parser)
    parser.add_argument(
        "--launch",
        metavar="CMD",
        help="start this server command now, wait until the target is ready, then SIGTERM it "
        "mid-stream (split like a shell would, no shell)",
    )
    add_ready_timeout_argument(parser, "300s")
    g = parser.add_argument_group("drain")
    g.add_argument(
        "--streams",
        type=int,
        default=4,
        metavar="N",
        help="streams in flight when the drain begins (default: %(default)s)",
    )
    add_max_tokens_argument(g, 256, "length of each in-flight stream")
    g.add_argument(
        "--deadline",
        default="120s",
        metavar="TIME",
        help="from the drain on: a stream still going is hung, new requests stop "
        "(default: %(default)s)",
    )
    g.add_argument(
        "--probe-rate",
        default="2/s",
        metavar="R/s",
        help="new requests per second after the drain began (default: %(default)s)",
    )
    g.add_argument(
        "--probe-timeout",
        default="5s",
        metavar="TIME",
        help="a new request unanswered for this long hangs (default: %(default)s)",
    )
    g.add_argument(
        "--first-token-timeout",
        default="120s",
        metavar="TIME",
        help="how long the streams may take to their first token (default: %(default)s)",
    )
    g.add_argument(
        "--stream-idle",
        default="30s",
        metavar="TIME",
        help="a stream without a byte for this long hangs (default: %(default)s)",
    )
    g.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="EXPR",
        help="drain SLO, e.g. drain_ok or drain_time<=30s (repeatable; the target's slo: too)",
    )
    add_run_arguments(parser, "drain")


def spec_from_args(args: argparse.Namespace) -> DrainSpec:
    """The :class:`DrainSpec` for the options (SLOs parsed here, before any traffic)."""
    from servecheck.analysis.slo import parse_slos
    from servecheck.load.workload.schedule import parse_duration, parse_rate
    from servecheck.probes.drain import DrainOptions

    options = DrainOptions(
        streams=args.streams,
        max_tokens=args.max_tokens,
        first_token_timeout_s=parse_duration(args.first_token_timeout),
        stream_idle_s=parse_duration(args.stream_idle),
        deadline_s=parse_duration(args.deadline),
        probe_rate=parse_rate(args.probe_rate),
        probe_timeout_s=parse_duration(args.probe_timeout),
    )
    return DrainSpec(
        target=args.target or "reference",
        targets_file=args.targets_file,
        model=args.model,
        launch=args.launch,
        ready_timeout_s=parse_duration(args.ready_timeout),
        options=options,
        slos=parse_slos(args.slo),
        out=out_dir(args),
        run_id=args.run_id,
        reference_args=checked_reference_args(args.reference_arg),
    )


def run(args: argparse.Namespace) -> int:
    """Drain the target and judge it; exit 0 only on PASS."""
    return api.drain(spec_from_args(args)).exit_code


__all__ = ["add_arguments", "run", "spec_from_args"]
