"""``--error-budget PCT|none``: the share of a load's requests that may fail
(``servecheck/analysis/budget.py``), one option definition and one parser for ``load``, ``accept``
and a load plan's ``error_budget:`` key."""

from __future__ import annotations

import argparse
import os


def add_error_budget_argument(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, env_var: str, what: str = "the run"
) -> None:
    """``--error-budget PCT|none``: the share of ``what``'s requests that may fail
    (``analysis/budget.py``); read with :func:`error_budget`. ``load`` and ``accept`` share it."""
    from servecheck.analysis.budget import DEFAULT_ERROR_BUDGET, percent

    parser.add_argument(
        "--error-budget",
        metavar="PCT",
        default=os.environ.get(env_var),
        help=f"fail {what} when more than PCT of the requests failed (default: "
        f"{percent(DEFAULT_ERROR_BUDGET).replace('%', '%%')}; 'none' for no budget; an "
        f"error_rate SLO replaces it); env {env_var}",
    )


def error_budget(text: str | None) -> float | None:
    """``--error-budget``'s value (or a load plan's ``error_budget``) as a share of the requests;
    ``None`` given: the default budget. A bad value is a usage error naming the option."""
    from servecheck.analysis.budget import DEFAULT_ERROR_BUDGET, parse_error_budget

    return DEFAULT_ERROR_BUDGET if text is None else parse_error_budget(text)


__all__ = ["add_error_budget_argument", "error_budget"]
