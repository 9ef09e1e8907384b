"""The error budget: the share of failed requests a run may have and still pass.

Without it a load run with no ``error_rate`` SLO passed at any error rate short of 100 %: a
server that answered every second request with a 500 got PASS. Every run that sends load
(``load``, the smoke load of ``accept``, each step of ``capacity``) is judged against the same
budget, :data:`DEFAULT_ERROR_BUDGET` (1 %), unless it is set (``--error-budget 5%``,
``--max-error-rate`` of capacity, ``none`` to drop it) or an ``error_rate`` SLO is given (in
``--slo`` or the target's ``slo`` list), which then is the budget. The budget is an ordinary
``error_rate<=X%`` SLO with the source :data:`SOURCE`, so it is judged, printed and written
like every other SLO (summary.txt, summary.json ``slo`` and ``error_budget``, JUnit).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from servecheck.analysis.slo import SLO, parse_slo
from servecheck.errors import SpecError

DEFAULT_ERROR_BUDGET = 0.01  # a fraction: 1 % of the requests may fail
SOURCE = "error budget"
_OFF = ("none", "off")


def percent(share: float) -> str:
    """``0.01`` -> ``"1%"``, ``0.005`` -> ``"0.5%"``."""
    return f"{share * 100:g}%"


def parse_error_budget(text: str, field: str = "error_budget") -> float | None:
    """``"1%"`` -> 0.01; ``"none"`` or ``"off"`` -> None (no budget). A bare number is refused:
    ``1`` could mean 1 % or 100 %."""
    value = str(text).strip()
    if value.lower() in _OFF:
        return None
    number = value.removesuffix("%").strip()
    try:
        share = float(number) / 100.0
    except ValueError:
        share = math.nan
    if not value.endswith("%") or math.isnan(share):
        raise SpecError(
            f"{{{field}}} {{text!r}}: a percentage of failed requests, e.g. 1% or 0.5% ('none' for no budget)",
            text=text,
        )
    if not 0.0 <= share <= 1.0:
        raise SpecError(f"{{{field}}} {{text!r}}: between 0% and 100%", text=text)
    return share


def budget_slo(share: float) -> SLO:
    """The budget as the SLO ``error_rate<=X%`` (source :data:`SOURCE`)."""
    return parse_slo(f"error_rate<={percent(share)}", SOURCE)


def with_error_budget(
    slos: Sequence[SLO], share: float | None, besides: Iterable[SLO] = ()
) -> list[SLO]:
    """``slos`` plus the budget's SLO, unless the budget is off or an ``error_rate`` SLO is among
    ``slos`` or ``besides`` (the target's own SLOs, judged elsewhere): that one is the budget."""
    if share is None or any(s.metric == "error_rate" for s in [*slos, *besides]):
        return list(slos)
    return [*slos, budget_slo(share)]


def budget_summary(slos: Iterable[SLO], verdicts: Iterable[Any] = ()) -> dict[str, Any]:
    """summary.json's ``error_budget``: the bound the run's failed requests were judged against,
    where it came from (``default``, ``set``, ``slo`` or ``off``), and whether it held."""
    rule = next((s for s in slos if s.metric == "error_rate" and s.op in ("<=", "<")), None)
    if rule is None:
        return {"max_error_rate": None, "source": "off", "slo": None, "passed": None}
    held = next((v.passed for v in verdicts if v.slo == rule), None)
    if rule.source != SOURCE:
        source = "slo"
    else:
        source = "default" if math.isclose(rule.bound, DEFAULT_ERROR_BUDGET) else "set"
    return {"max_error_rate": rule.bound, "source": source, "slo": rule.text, "passed": held}


__all__ = [
    "DEFAULT_ERROR_BUDGET",
    "SOURCE",
    "budget_slo",
    "budget_summary",
    "parse_error_budget",
    "percent",
    "with_error_budget",
]
