"""``--reference-arg``: the reference server's option table as argparse options, and the check
of the values a command passes to the embedded server (before it starts)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from servecheck.errors import UsageError

if TYPE_CHECKING:
    from servecheck.reference.options import Option


def add_option_table(parser: argparse.ArgumentParser, table: Sequence[Option]) -> None:
    """Add a library option table (``servecheck.reference.options.OPTIONS``) as argparse options."""
    for opt in table:
        kw: dict[str, Any] = {"help": opt.help}
        if opt.metavar:
            kw["metavar"] = opt.metavar
        if opt.dest:
            kw["dest"] = opt.dest
        if opt.kind == "flag":
            kw["action"] = "store_true"
        elif opt.kind == "append":
            kw["action"] = "append"
            if opt.default is not None:
                kw["default"] = list(opt.default)
        else:
            default = os.environ.get(opt.env, opt.default) if opt.env else opt.default
            if opt.kind in ("int", "float"):
                kw["type"] = int if opt.kind == "int" else float
                default = kw["type"](default)
            kw["default"] = default
        parser.add_argument(opt.flag, **kw)


class _ReferenceArgParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"--reference-arg: {message}")


def checked_reference_args(extra_args: Sequence[str]) -> list[str]:
    """``--reference-arg`` values, read as the embedded server will read them and validated
    before it starts: a bad value is a usage error naming it (rc 2), not a traceback from the
    child process. Returns them as given."""
    from servecheck.reference.options import OPTIONS, from_values, validate

    if not extra_args:
        return []
    parser = _ReferenceArgParser(
        prog="servecheck reference-server", add_help=False, exit_on_error=False
    )
    add_option_table(parser, OPTIONS)
    try:
        args = parser.parse_args(list(extra_args))
    except argparse.ArgumentError as exc:
        raise UsageError(f"--reference-arg: {exc}") from None
    try:
        validate(from_values(vars(args)))
    except UsageError as exc:
        raise UsageError(f"--reference-arg: {exc}") from None
    return list(extra_args)
