"""``servecheck clients``: real agent clients against a target, each in a network namespace.

Installs the pinned clients on demand into servecheck's cache (``--install-only`` does only
that), runs each on a scripted task (a plain streamed answer, a tool round trip) inside a
network namespace that reaches the target and nothing else, and prints a verdict per client and
route: works, fails with the request and the answer that broke it, or not run with the reason.
The run is :func:`servecheck.clients.run.run_clients`; the run folder gets ``clients.json``.

Exit codes: 0 every client works, 1 a client fails or could not run (INCONCLUSIVE), 2 usage.
"""

from __future__ import annotations

import argparse

from servecheck.commands.options import (
    add_model_argument,
    add_run_arguments,
    add_target_arguments,
    checked_reference_args,
    out_dir,
)
from servecheck.errors import UsageError, did_you_mean


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck clients``."""
    from servecheck.clients.catalog import CLIENTS

    add_target_arguments(parser)
    add_model_argument(parser)
    g = parser.add_argument_group("clients")
    g.add_argument(
        "--client",
        action="append",
        default=[],
        metavar="NAME",
        help=f"a client to run (repeatable; default: all of {', '.join(CLIENTS)})",
    )
    g.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        metavar="S",
        help="seconds each client has for its task on one route (default: %(default)s)",
    )
    g.add_argument(
        "--install-only",
        action="store_true",
        help="only install the clients into the cache (from npm and PyPI), run nothing",
    )
    g.add_argument(
        "--record-shapes",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="record each client's request shapes against the reference (--agent) and write "
        "the CLIENT-SHAPE fixtures <client>.json into DIR (default: the package's fixture "
        "folder, from a checkout)",
    )
    add_run_arguments(parser, "clients", reference_note=" (it always runs with --agent)")


def run(args: argparse.Namespace) -> int:
    """Run the clients and print each verdict; exit 0 only when every client works."""
    from servecheck.clients.catalog import CLIENTS
    from servecheck.clients.run import ClientsSpec, run_clients

    for name in args.client:
        if name not in CLIENTS:
            raise UsageError(f"--client: unknown client {name!r}{did_you_mean(name, CLIENTS)}")
    if args.timeout <= 0:
        raise UsageError(f"--timeout: {args.timeout:g} is too small (more than 0 seconds)")
    if args.record_shapes is not None:
        return _record(args)
    spec = ClientsSpec(
        target=args.target or "reference",
        targets_file=args.targets_file,
        model=args.model,
        clients=tuple(dict.fromkeys(args.client)),
        timeout_s=args.timeout,
        out=out_dir(args),
        run_id=args.run_id,
        install_only=args.install_only,
        reference_args=tuple(checked_reference_args(args.reference_arg)),
    )
    result = run_clients(spec)
    for outcome in result.outcomes:
        if outcome.broke:
            print(f"\n{outcome.client} {outcome.version} on {outcome.route} broke on:")
            print(outcome.broke)
    print(f"servecheck clients: {result.verdict.status.upper()}; {result.run_dir / 'clients.json'}")
    return result.exit_code


def _record(args: argparse.Namespace) -> int:
    """``--record-shapes``: write the fixtures; 0 when every chosen client gave its shapes."""
    from pathlib import Path

    from servecheck.clients.shapes import ShapesSpec, default_folder, record_shapes

    if args.target not in (None, "reference"):
        raise UsageError("--record-shapes: shapes are recorded against the reference only")
    folder = Path(args.record_shapes) if args.record_shapes else default_folder()
    if folder is None:
        raise UsageError("--record-shapes: name a folder (servecheck is not run from a checkout)")
    done = record_shapes(
        ShapesSpec(folder, tuple(dict.fromkeys(args.client)), timeout_s=args.timeout)
    )
    missing = [r for r in done if r.path is None]
    for r in missing:
        print(f"no shape: {r.line()}")
    print(f"servecheck clients --record-shapes: {len(done) - len(missing)} written in {folder}")
    return 1 if missing else 0


__all__ = ["add_arguments", "run"]
