"""``servecheck load --repeat N``: N runs of one load spec, and confidence intervals over them.

Each run is an ordinary load run (:func:`servecheck.api.load`, as ``api.load_repeat`` passes
it: its own ``summary.json``,
records, page and JUnit) in ``<run folder>/run-01`` ... ``run-NN``; the run folder's own
``summary.json`` (``kind: repeat``) holds each run's verdict and figures and the intervals
(:mod:`servecheck.analysis.intervals`: Student t over the runs, 95 %). The verdict folds the runs'
with the one rule (``analysis/verdict.py``'s ``compose``): FAIL when any run failed, else
INCONCLUSIVE when any could not measure, else PASS. ``servecheck compare`` reads the intervals
of two repeated runs (analysis/compare.py).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.analysis.verdict import FAIL, RunVerdict
from servecheck.errors import SpecError
from servecheck.load.run import LoadResult
from servecheck.load.spec import LoadSpec

MAX_REPEAT = 50


@dataclass(slots=True)
class RepeatSpec:
    """The load to repeat and how many times (2 ... :data:`MAX_REPEAT`)."""

    load: LoadSpec
    repeat: int = 3
    confidence: float = 0.95

    def validate(self) -> None:
        if not 2 <= self.repeat <= MAX_REPEAT:
            raise SpecError(f"{{repeat}} {self.repeat}: between 2 and {MAX_REPEAT}")
        if self.load.role != "local":
            raise SpecError("{repeat} runs locally: not with {master} or {worker}")


@dataclass(slots=True)
class RepeatResult:
    run_dir: Path
    summary: dict[str, Any]
    runs: list[LoadResult] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if self.summary.get("verdict") == "pass" else 1


def run_repeat(
    spec: RepeatSpec,
    run_one: Callable[[LoadSpec], LoadResult],
    on_log: Callable[[str], None] | None = None,
) -> RepeatResult:
    """Run the load ``spec.repeat`` times with ``run_one`` (``servecheck.api.load``: each run
    gets its page and JUnit), then write the repeat summary."""
    from servecheck.analysis.intervals import METHOD, repeat_intervals
    from servecheck.analysis.verdict import compose

    spec.validate()
    base = spec.load
    rid = base.run_id or time.strftime("%Y%m%d-%H%M%S") + f"-{Path(base.scenario).stem}-repeat"
    run_dir = Path(base.out_dir) / rid
    run_dir.mkdir(parents=True, exist_ok=True)
    runs: list[LoadResult] = []
    for k in range(spec.repeat):
        one = dataclasses.replace(base, out_dir=run_dir, run_id=f"run-{k + 1:02d}")
        if on_log is not None:
            on_log(f"repeat: run {k + 1} of {spec.repeat}")
        runs.append(run_one(one))
    verdicts = [_run_verdict(f"run-{i + 1:02d}", r) for i, r in enumerate(runs)]
    folded = compose(verdicts)
    summaries = [r.summary for r in runs]
    summary: dict[str, Any] = {
        "kind": "repeat",
        "run_id": rid,
        "target": base.target.name,
        "scenario": base.scenario,
        "repeat": spec.repeat,
        "runs": [
            {
                "run_id": f"run-{i + 1:02d}",
                "verdict": s.get("verdict"),
                "steady": (s.get("steady") or {}).get("applied"),
            }
            for i, s in enumerate(summaries)
        ],
        "intervals": repeat_intervals(summaries, spec.confidence),
        "method": f"{METHOD}, {spec.confidence:.0%}",
        "verdict": folded.status,
        "reasons": folded.reasons,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (run_dir / "summary.txt").write_text(format_repeat(summary) + "\n", encoding="utf-8")
    return RepeatResult(run_dir, summary, runs)


def _run_verdict(label: str, run: LoadResult) -> RunVerdict:
    """One run's verdict as the fold takes it: its reasons named by the run (a failed run that
    gave none breached an SLO)."""
    own = RunVerdict.of_summary(run.summary)
    reasons = [f"{label}: {why}" for why in own.reasons]
    return RunVerdict(
        own.status, reasons or ([f"{label}: SLO breached"] if own.status == FAIL else [])
    )


def format_repeat(summary: dict[str, Any]) -> str:
    """The repeat's text: one line a figure (mean and interval), then the verdict."""
    lines = [
        f"repeat {summary['repeat']} runs of {summary['scenario']} on {summary['target']}: "
        f"{summary['method']}"
    ]
    for name, iv in summary["intervals"].items():
        unit = (
            "req/s" if name == "throughput_rps" else "tok/s" if name == "throughput_tps" else "ms"
        )
        span = (
            "no interval (one value)"
            if iv.get("low") is None
            else f"[{iv['low']:.2f}, {iv['high']:.2f}]"
        )
        lines.append(f"  {name:<16}{iv['mean']:>10.2f} {unit:<6} {span}  n={iv['n']}")
    why = summary.get("reasons") or []
    lines.append(
        f"verdict: {str(summary['verdict']).upper()}" + (f" ({'; '.join(why)})" if why else "")
    )
    return "\n".join(lines)


__all__ = ["MAX_REPEAT", "RepeatResult", "RepeatSpec", "format_repeat", "run_repeat"]
