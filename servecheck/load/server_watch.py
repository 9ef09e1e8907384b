"""The engine's /metrics beside a load run: a scrape before, the telemetry recorder during, a
settled scrape after (:class:`ServerWatch`, started by ``load/run.py`` around Locust).

What the scrapes hold is written to ``server-window.json`` in the run folder; the summary half
(``load/summary.py``) turns it and the records into summary.json's ``server`` section
(``analysis/server_truth.py``). The recorder writes ``telemetry/prometheus.jsonl`` (the series)
stamped with wall-clock ``time.time()`` seconds, the clock of the records' ``t_sent`` and
``t_done``. A target without /metrics is said once and the run goes on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servecheck.analysis import server_truth

if TYPE_CHECKING:
    from servecheck.analysis.server_truth import ClientCounts
    from servecheck.load.spec import LoadSpec

WINDOW_FILE = "server-window.json"
DEFAULT_INTERVAL_S = 1.0
READY_S = 2.0  # the recorder's first scrape may take this long before Locust starts


def _snap_dict(s: server_truth.Snapshot) -> dict[str, Any]:
    return {"t": s.t, "note": s.note, "samples": s.samples}


def snap_of(d: Any) -> server_truth.Snapshot | None:
    if not isinstance(d, dict) or "t" not in d:
        return None
    samples = {
        str(k): [(dict(lab), float(v)) for lab, v in rows]
        for k, rows in (d.get("samples") or {}).items()
    }
    return server_truth.Snapshot(float(d["t"]), samples, d.get("note"))


@dataclass(slots=True)
class ServerWatch:
    """Inert (``spec`` None) for a worker or with ``server_metrics`` off."""

    spec: LoadSpec | None = None
    run_dir: Path = Path(".")
    timeout_s: float = 2.0
    before: server_truth.Snapshot | None = None
    recorder: Any = None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def start(
        cls, spec: LoadSpec, run_dir: Path, timeout_s: float, say: Callable[[str], None]
    ) -> ServerWatch:
        """The scrape before the run, then the recorder; says once when there is no /metrics."""
        if spec.role == "worker" or not spec.server_metrics:
            return cls()
        watch = cls(spec, run_dir, timeout_s)
        watch.before = server_truth.snapshot(spec.target, timeout_s)
        if not watch.before.ok:
            say(f"server metrics: {watch.before.note}; the run goes on without them")
            return watch
        from servecheck.telemetry import TelemetryRecorder

        settings = spec.target.telemetry.as_settings()
        interval = spec.metrics_interval_s or spec.target.telemetry.interval_s or DEFAULT_INTERVAL_S
        try:
            watch.recorder = TelemetryRecorder.for_target(
                spec.target, run_dir, settings, interval_s=float(interval)
            ).start()
        except Exception as exc:  # telemetry never stops a load run
            watch.notes.append(f"recorder did not start: {type(exc).__name__}")
            return watch
        watch.recorder.wait_ready(min(READY_S, timeout_s * 2))
        return watch

    def prometheus(self) -> Any:
        """The recorder's Prometheus sampler of the engine's /metrics, or None."""
        from servecheck.telemetry.samplers import PrometheusSampler

        samplers = getattr(self.recorder, "samplers", None) or []
        return next((s for s in samplers if isinstance(s, PrometheusSampler)), None)

    def unreachable(self) -> bool:
        """The scrape before the run got no answer at all (refused, timed out): other scrapes of
        the same URL would only wait their timeout too."""
        b = self.before
        return b is not None and not b.ok and (b.note or "").startswith("cannot read")

    def stop(self) -> list[dict[str, Any]]:
        """Stop the recorder (if any); its samplers' summaries."""
        if self.recorder is None:
            return []
        rec, self.recorder = self.recorder, None
        return [s.to_dict() for s in rec.stop()]

    def finish(self) -> None:
        """Stop sampling, take the settled scrape, write ``server-window.json``."""
        if self.spec is None or self.before is None:
            return
        sampled = self.stop()
        after = server_truth.settled(self.spec.target, self.timeout_s) if self.before.ok else None
        window = {
            "before": _snap_dict(self.before),
            "after": _snap_dict(after) if after is not None else None,
            "sampled": sampled,
            "notes": self.notes,
        }
        (self.run_dir / WINDOW_FILE).write_text(json.dumps(window) + "\n", encoding="utf-8")


def section(
    spec: LoadSpec, run_dir: Path, client: ClientCounts, behind: bool = False
) -> dict[str, Any] | None:
    """summary.json's ``server`` section from ``server-window.json`` (None: nothing scraped)."""
    try:
        window = json.loads((run_dir / WINDOW_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    before = snap_of(window.get("before"))
    if before is None:
        return None
    after = snap_of(window.get("after"))
    out = server_truth.server_section(
        spec.target, before, after, client, window.get("sampled"), behind
    )
    from servecheck.analysis import server_gauges

    server_gauges.add_to(out, run_dir, before, after, spec.target.telemetry.metrics)
    if window.get("notes"):
        out["notes"] = window["notes"]
    return out
