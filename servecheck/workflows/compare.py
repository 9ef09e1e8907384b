"""A regression verdict between two run folders: :class:`CompareSpec` -> :func:`run_compare`.

Writes ``compare.json``, ``report.html`` and ``summary.md`` into ``out`` (default
``<current>/compare``). Exit code 0 no regression, 1 a regression (a metric significantly worse
beyond its threshold, or a newly failing check) or INCONCLUSIVE (a run doubted its own
measurement: its generator fell behind, it was partial or it has no verdict).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from servecheck.errors import SpecError
from servecheck.redact import redact

if TYPE_CHECKING:
    from servecheck.analysis.compare import Comparison


@dataclass(slots=True)
class CompareSpec:
    """Two run folders (``servecheck check`` or ``load`` runs) and how to judge them."""

    baseline: Path
    current: Path
    thresholds: list[str] = field(default_factory=list)  # METRIC=CHANGE, as --threshold
    alpha: float = 0.01
    seed: int = 0
    bootstrap: int = 1000
    out: Path | None = None

    def validate(self) -> None:
        """Raise :class:`UsageError` naming the option when a setting is out of range."""
        if not 0 < self.alpha < 0.5:
            raise SpecError(f"{{alpha}} {self.alpha}: must be between 0 and 0.5")
        if not 100 <= self.bootstrap <= 20000:
            raise SpecError(f"{{bootstrap}} {self.bootstrap}: must be between 100 and 20000")


@dataclass(slots=True)
class CompareResult:
    """The comparison, where its files went, and the exit code."""

    comparison: Comparison
    out_dir: Path
    page: Path
    exit_code: int

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


def run_compare(spec: CompareSpec) -> CompareResult:
    """Compare ``current`` with ``baseline``; write the files; exit code 1 on a regression or
    an INCONCLUSIVE comparison."""
    from servecheck.analysis.compare import compare_runs
    from servecheck.report.compare import comparison_section
    from servecheck.report.html import write_page

    spec.validate()
    cmp = compare_runs(
        spec.baseline,
        spec.current,
        threshold_overrides=spec.thresholds,
        alpha=spec.alpha,
        seed=spec.seed,
        n_boot=spec.bootstrap,
    )
    out = Path(spec.out) if spec.out else Path(spec.current) / "compare"
    out.mkdir(parents=True, exist_ok=True)
    data = cmp.as_dict()
    (out / "compare.json").write_text(redact(json.dumps(data, indent=2)) + "\n", encoding="utf-8")
    page = write_page(
        out,
        f"servecheck compare: {Path(spec.current).name} vs {Path(spec.baseline).name}",
        [comparison_section(cmp)],
        # INCONCLUSIVE is neither PASS nor FAIL: the title then carries no badge of its own
        # and the section's says it, so the page has one verdict.
        ok={"regression": False, "inconclusive": None}.get(cmp.verdict, True),
    )
    return CompareResult(cmp, out, page, cmp.exit_code)


__all__ = ["CompareResult", "CompareSpec", "run_compare"]
