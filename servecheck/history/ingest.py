"""A run folder (``servecheck load`` or ``servecheck check``) as one :class:`RunEntry`.

A load run gives its metrics under the names ``servecheck compare`` judges (``ttft_p95``,
``throughput_rps``, ``error_rate`` ...: analysis/compare.py's ``DEFAULT_THRESHOLDS``); a
conformance run gives every check's outcome from ``results.jsonl`` and its counts as metrics
(``checks_failed`` ...). The engine and its version come from what discovery saw
(conformance ``summary.json``'s ``targets``, a load run's ``server``), unless given.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from servecheck.errors import SpecError, UsageError
from servecheck.history.store import RunEntry

_LATENCY = ("ttft", "itl", "e2e", "tpot")
_PCTS = ("p50", "p90", "p95", "p99")


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(
            f"{path.parent}: no summary.json (not a load or check run folder)"
        ) from None
    except ValueError as exc:
        raise UsageError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return data


def load_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """A load summary's figures under compare's metric names (milliseconds, fractions, per s)."""
    out: dict[str, float] = {}
    lat = summary.get("latency_ms") or {}
    for fam in _LATENCY:
        for p in _PCTS:
            v = (lat.get(fam) or {}).get(p)
            if isinstance(v, int | float):
                out[f"{fam}_{p}"] = float(v)
    thr = summary.get("throughput") or {}
    for name, key in (
        ("throughput_rps", "requests_per_s"),
        ("throughput_tps", "output_tokens_per_s"),
    ):
        if isinstance(thr.get(key), int | float):
            out[name] = float(thr[key])
    req = summary.get("requests") or {}
    if isinstance(req.get("error_rate"), int | float):
        out["error_rate"] = float(req["error_rate"])
    if isinstance(summary.get("goodput"), int | float):
        out["goodput"] = float(summary["goodput"])
    if isinstance(req.get("total"), int):
        out["requests"] = float(req["total"])
    return out


def _checks(run_dir: Path, target: str | None = None) -> list[tuple[str, str | None, str]]:
    """Each check's outcome from results.jsonl (only ``target``'s when given)."""
    path = run_dir / "results.jsonl"
    out: list[tuple[str, str | None, str]] = []
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict) or (target and row.get("target") != target):
            continue
        if row.get("check") and row.get("outcome"):
            out.append((str(row["check"]), row.get("model"), str(row["outcome"])))
    return out


def _conformance(run_dir: Path, summary: dict[str, Any], target: str | None) -> RunEntry:
    infos = summary.get("targets") or {}
    checks = _checks(run_dir)
    names = sorted(infos) or sorted({c[0] for c in checks})
    name = target or (next(iter(sorted(infos)), None))
    if name is None:
        raise SpecError("{target}: {d}: the run names no target; name one", d=str(run_dir))
    if infos and name not in infos:
        raise UsageError(f"{run_dir}: the run has no target {name!r} (it has {', '.join(names)})")
    info = infos.get(name) or {}
    if len(infos) > 1:  # a run over several targets: only this target's checks
        checks = _checks(run_dir, name)
    counts = summary.get("counts") or {}
    outcomes: dict[str, int] = {}
    for _, _, outcome in checks:
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    counts = outcomes or counts
    bad = sum(int(counts.get(k, 0)) for k in ("failed", "error", "xpassed"))
    started = summary.get("started")
    verdict = "inconclusive" if summary.get("partial") or not counts else "fail" if bad else "pass"
    models = info.get("models") or []
    return RunEntry(
        kind="conformance",
        run_id=run_dir.name,
        target=name,
        started_at=_iso(started) if isinstance(started, int | float) else _mtime(run_dir),
        verdict=verdict,
        model=models[0] if models else None,
        engine=info.get("engine"),
        engine_version=info.get("version"),
        metrics={f"checks_{k}": float(v) for k, v in counts.items()},
        checks=checks,
    )


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _mtime(run_dir: Path) -> str:
    return _iso((run_dir / "summary.json").stat().st_mtime)


def entry_from_run(
    run_dir: Path | str,
    *,
    tag: str | None = None,
    engine_version: str | None = None,
    target: str | None = None,
    started_at: str | None = None,
) -> RunEntry:
    """The history entry of a load or check run folder; ``started_at`` overrides the run's own."""
    root = Path(run_dir)
    if not root.is_dir():
        raise UsageError(f"{root}: no such run folder")
    summary = _read(root / "summary.json")
    kind = summary.get("kind")
    if kind == "conformance":
        entry = _conformance(root, summary, target)
    elif kind is None and isinstance(summary.get("latency_ms"), dict):
        server = summary.get("server") or {}
        entry = RunEntry(
            kind="load",
            run_id=str(summary.get("run_id") or root.name),
            target=str(target or summary.get("target") or "?"),
            started_at=str(summary.get("started_at") or _mtime(root)),
            verdict=str(summary.get("verdict") or "inconclusive"),
            model=summary.get("model"),
            # summary.json's head since issue 41 (the version the engine reported before the
            # run); an older summary only had the server section's
            engine=summary.get("engine")
            or (server.get("engine") if isinstance(server, dict) else None),
            engine_version=summary.get("engine_version")
            or (server.get("version") if isinstance(server, dict) else None),
            metrics=load_metrics(summary),
        )
    else:
        raise UsageError(
            f"{root}: a {kind or 'unknown'} run; history keeps load and check runs "
            "(a repeated load keeps each run in a folder of its own: add those)"
        )
    entry.run_dir = str(root.resolve())
    entry.tag = tag or entry.tag
    entry.engine_version = engine_version or entry.engine_version
    if started_at:
        entry.started_at = started_at
    return entry
