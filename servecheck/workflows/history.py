"""Nightly history: record runs, show a metric's series, judge tonight against the last N nights.

Three typed specs, one function each (``servecheck history add | show | compare``):
:func:`run_history_add` records run folders, :func:`run_history_show` gives a metric's series
with its steps (console table, SVG, HTML page), :func:`run_history_compare` judges tonight
(a run folder, or the target's last recorded run) against ``rolling:N``. The database is
``reports/history.db`` (SQLite) unless ``history`` names another file or a PostgreSQL URL.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servecheck.errors import SpecError, did_you_mean
from servecheck.redact import redact

if TYPE_CHECKING:
    from servecheck.history.analysis import CheckChange, RollingJudgement, Step

_ROLLING = re.compile(r"^rolling:(\d+)$")


@dataclass(slots=True)
class HistoryAddSpec:
    """Run folders of ``servecheck load`` or ``servecheck check`` to record."""

    runs: list[Path]
    history: str | None = None  # file path, sqlite:///..., postgresql://...
    tag: str | None = None  # git or image tag
    engine_version: str | None = None  # when discovery did not see one
    target: str | None = None  # for a check run over several targets
    started_at: str | None = None  # ISO 8601, the night (default: the run's own start)

    def validate(self) -> None:
        if not self.runs:
            raise SpecError("{runs}: give at least one run folder")
        if self.started_at and not re.match(r"^\d{4}-\d\d-\d\d(T[\d:]+Z?)?$", self.started_at):
            raise SpecError(
                "{started_at} {v!r}: expected YYYY-MM-DD[THH:MM:SSZ]", v=self.started_at
            )


@dataclass(slots=True)
class HistoryAddResult:
    added: list[str]  # run ids recorded
    skipped: list[str]  # run ids recorded before
    total: int  # runs in the database


def run_history_add(spec: HistoryAddSpec) -> HistoryAddResult:
    """Read every run folder first (a bad one records nothing), then record each."""
    from servecheck.history.ingest import entry_from_run
    from servecheck.history.store import open_store

    spec.validate()
    entries = [
        entry_from_run(
            p,
            tag=spec.tag,
            engine_version=spec.engine_version,
            target=spec.target,
            started_at=spec.started_at,
        )
        for p in spec.runs
    ]
    store = open_store(spec.history)
    _borrow_versions(store, entries)
    added: list[str] = []
    skipped: list[str] = []
    for e in entries:
        (added if store.add(e) else skipped).append(e.run_id)
    return HistoryAddResult(added, skipped, store.count())


def _borrow_versions(store: Any, entries: list[Any]) -> None:
    """A load run does not ask the engine its version; a check run of the same target and night
    did (in this batch, else recorded already): the load run takes that one."""
    seen = {(e.target, e.night): e.engine_version for e in entries if e.kind == "conformance"}
    for e in entries:
        if e.kind != "load" or e.engine_version:
            continue
        version = seen.get((e.target, e.night))
        if version is None:
            checks = [
                r for r in store.runs(e.target, "conformance") if r["started_at"][:10] == e.night
            ]
            version = next(
                (r["engine_version"] for r in reversed(checks) if r["engine_version"]), None
            )
        e.engine_version = version


def _rows(
    store: Any, target: str, kind: str, model: str | None, limit: int | None
) -> list[dict[str, Any]]:
    rows = store.runs(target, kind, model=model, limit=limit)
    if not rows:
        known = sorted({t for t, _, _ in store.targets()})
        hint = did_you_mean(target, known) or (f" (it has {', '.join(known)})" if known else "")
        raise SpecError(
            "{target} {v!r}: no {k} runs in the history{hint}", v=target, k=kind, hint=hint
        )
    return rows


@dataclass(slots=True)
class HistoryShowSpec:
    """One target's series of one metric (or its checks' first failures)."""

    target: str
    metric: str = "ttft_p95"
    kind: str = "load"  # load | conformance
    model: str | None = None
    last: int | None = None  # only the last N nights
    history: str | None = None
    out: Path | None = None  # where the SVG and report.html go (default reports/history)

    def validate(self) -> None:
        if self.kind not in ("load", "conformance"):
            raise SpecError("{kind} {v!r}: expected load or conformance", v=self.kind)
        if self.last is not None and self.last < 2:
            raise SpecError(f"{{last}} {self.last}: at least 2 nights make a series")


@dataclass(slots=True)
class HistoryShowResult:
    rows: list[dict[str, Any]]
    steps: list[Step]
    failures: list[CheckChange]
    table: str
    figure: Path | None
    page: Path | None


def run_history_show(spec: HistoryShowSpec) -> HistoryShowResult:
    """The series, its steps, the SVG and page; for conformance, which check failed since when."""
    from servecheck.history.analysis import first_failures, steps
    from servecheck.history.figures import series_table, write_series
    from servecheck.history.store import last_nights, open_store

    spec.validate()
    rows = _rows(open_store(spec.history), spec.target, spec.kind, spec.model, None)
    if spec.last is not None:  # nights by date: a night with three runs is one night
        rows = last_nights(rows, spec.last)
    if spec.kind == "conformance":
        fails = first_failures(rows)
        lines = [
            f"{c.check} [{c.model or '-'}]: {c.outcome} since {c.night} (run {c.run_id}, "
            f"engine {c.engine_version or '?'}); last passed {c.last_good_night or 'never in history'}"
            for c in fails
        ]
        table = series_table(rows, "checks_failed", [])
        return HistoryShowResult(
            rows, [], fails, table + "\n" + ("\n".join(lines) or "no check failing"), None, None
        )
    known = sorted({k for r in rows for k in r["metrics"]})
    if spec.metric not in known:
        hint = did_you_mean(spec.metric, known) or f" (it has {', '.join(known)})"
        raise SpecError(
            "{metric} {v!r}: not in {t}'s history{hint}", v=spec.metric, t=spec.target, hint=hint
        )
    found = steps(rows, spec.metric)
    out = Path(spec.out) if spec.out else Path("reports") / "history"
    figure, page = write_series(out, spec.target, rows, spec.metric, found)
    table = series_table(rows, spec.metric, found)
    return HistoryShowResult(rows, found, [], table, figure, page)


@dataclass(slots=True)
class HistoryCompareSpec:
    """Tonight (a run folder, else the last recorded run) against the ``rolling:N`` nights."""

    target: str | None = None
    baseline: str = "rolling:7"
    current: Path | None = None  # a run folder to judge; recorded too when ``record``
    record: bool = False
    thresholds: list[str] = field(default_factory=list)
    alpha: float = 0.01
    kind: str = "load"
    model: str | None = None
    history: str | None = None
    out: Path | None = None

    def nights(self) -> int:
        m = _ROLLING.match(self.baseline)
        if not m or not 2 <= int(m.group(1)) <= 365:
            raise SpecError(
                "{baseline} {v!r}: expected rolling:N, N from 2 to 365", v=self.baseline
            )
        return int(m.group(1))

    def validate(self) -> None:
        self.nights()
        if not 0 < self.alpha < 0.5:
            raise SpecError(f"{{alpha}} {self.alpha}: must be between 0 and 0.5")
        if self.current is None and not self.target:
            raise SpecError("{target}: give a target, or a run folder to judge")


@dataclass(slots=True)
class HistoryCompareResult:
    judgement: RollingJudgement
    out: Path | None
    exit_code: int


def run_history_compare(spec: HistoryCompareSpec) -> HistoryCompareResult:
    """Judge tonight; write ``history-compare.json`` into ``out`` (default: tonight's folder)."""
    from dataclasses import asdict

    from servecheck.history.analysis import judge_rolling
    from servecheck.history.ingest import entry_from_run
    from servecheck.history.store import open_store

    spec.validate()
    store = open_store(spec.history)
    n = spec.nights()
    if spec.current is not None:
        entry = entry_from_run(spec.current, target=spec.target)
        if spec.record:
            store.add(entry)
        tonight = {**asdict(entry), "metrics": dict(entry.metrics), "checks": list(entry.checks)}
        rows = _rows(store, entry.target, entry.kind, spec.model or entry.model, None)
        past = [r for r in rows if r["started_at"] < entry.started_at][-n:]
    else:
        assert spec.target
        rows = _rows(store, spec.target, spec.kind, spec.model, n + 1)
        tonight, past = rows[-1], rows[:-1]
    judged = judge_rolling(past, tonight, overrides=spec.thresholds, alpha=spec.alpha)
    out = spec.out or (Path(spec.current) if spec.current else None)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        text = json.dumps(judged.as_dict(), indent=2, default=str)
        (out / "history-compare.json").write_text(redact(text) + "\n", encoding="utf-8")
    return HistoryCompareResult(judged, out, judged.verdict.exit_code)


__all__ = [
    "HistoryAddResult",
    "HistoryAddSpec",
    "HistoryCompareResult",
    "HistoryCompareSpec",
    "HistoryShowResult",
    "HistoryShowSpec",
    "run_history_add",
    "run_history_compare",
    "run_history_show",
]
