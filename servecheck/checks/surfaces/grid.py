"""GRID-*: every declared invariant on every request variant it applies to (issue 43).

The tables and the judging live in :mod:`servecheck.checks.grid`; this module only registers
each (invariant, variant) cell as a check, so each shows in reports, JUnit and the fault matrix
under its derived id (``GRID-USAGE[chat,stream,n=2,usage]``).
"""

from __future__ import annotations

from collections.abc import Callable

from servecheck.checks.context import CheckContext
from servecheck.checks.grid import Invariant, Variant, cell_id, cells, run_cell
from servecheck.checks.registry import check


def _cell(invariant: Invariant, variant: Variant) -> Callable[[CheckContext], None]:
    def run(ctx: CheckContext) -> None:
        run_cell(ctx, invariant, variant)

    run.__doc__ = f"{invariant.description}, on [{variant.label}]"
    return run


def _register() -> None:
    for invariant, variant in cells():
        check(
            cell_id(invariant, variant),
            f"{invariant.description}, on [{variant.label}]",
            invariant.expectation,
            requires=variant.requires,
        )(_cell(invariant, variant))


_register()
