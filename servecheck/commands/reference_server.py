"""``servecheck reference-server``: run the deterministic reference engine.

Its options are a table in the library (``servecheck.reference.options.OPTIONS``), read here
with argparse and validated by the library; ``--reference-arg`` values of the other commands are
read from the same table (``commands/options.checked_reference_args``)."""

from __future__ import annotations

import argparse

from servecheck.commands.options import add_option_table
from servecheck.reference.options import OPTIONS, from_values, to_config, validate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_option_table(parser, OPTIONS)


def run(args: argparse.Namespace) -> int:
    from servecheck.reference.faults import list_faults

    if args.list_faults:
        print(list_faults())
        return 0
    opts = from_values(vars(args))
    validate(opts)
    from servecheck.reference.server import serve

    serve(to_config(opts), host=opts.host, port=opts.port, ready_file=opts.ready_file)
    return 0


__all__ = ["add_arguments", "run"]
