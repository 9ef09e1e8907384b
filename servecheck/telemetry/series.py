"""Time-series records on disk: one append-only JSONL file per sampler.

Every line is one JSON object::

    {"t": 1764447650.12, "t_mono": 8123.4, "source": "prometheus", "kind": "sample",
     "metric": "kv_usage", "value": 0.31, "labels": {"from": "vllm:kv_cache_usage_perc"}}

A failed sample is a *gap* record (``kind: "gap"``, ``metric: "gap"``, ``value: null``) with
``error_class`` and a redacted ``error``. Lines are flushed one sample at a time, so a run
that is killed keeps everything written so far; :func:`load_series` skips a torn last line.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from servecheck.redact import redact

if TYPE_CHECKING:
    import pandas as pd

TELEMETRY_DIR = "telemetry"
GAP = "gap"
_MAX_ERROR_CHARS = 500

COLUMNS = ["t", "t_mono", "source", "kind", "metric", "value", "labels", "error_class", "error"]


@dataclass(slots=True)
class Sample:
    """One measured value of one metric at one moment.

    ``t`` is wall-clock unix seconds (what phase markers use), ``t_mono`` is
    ``time.monotonic()`` of the same moment (for durations immune to clock steps).
    """

    t: float
    t_mono: float
    source: str
    metric: str
    value: float
    labels: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        value: float | None = self.value if math.isfinite(self.value) else None
        return {
            "t": self.t,
            "t_mono": self.t_mono,
            "source": self.source,
            "kind": "sample",
            "metric": self.metric,
            "value": value,
            "labels": self.labels,
        }


@dataclass(slots=True)
class Gap:
    """A sample that could not be taken: the error is data, not an exception."""

    t: float
    t_mono: float
    source: str
    error_class: str
    error: str
    labels: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "t_mono": self.t_mono,
            "source": self.source,
            "kind": GAP,
            "metric": GAP,
            "value": None,
            "labels": self.labels,
            "error_class": self.error_class,
            "error": self.error,
        }


_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s'\"]+@")


def gap_from_exception(
    t: float, t_mono: float, source: str, exc: BaseException, prefix: str = ""
) -> Gap:
    """A gap record for ``exc`` with its class name and a redacted, bounded message
    (registered secrets, bearer tokens and ``user:password@`` in URLs are masked)."""
    message = redact(prefix + (str(exc) or type(exc).__name__))
    message = _URL_USERINFO.sub(lambda m: m.group(1) + "***@", message)
    if len(message) > _MAX_ERROR_CHARS:
        message = message[: _MAX_ERROR_CHARS - 3] + "..."
    return Gap(t, t_mono, source, type(exc).__name__, message)


class SeriesWriter:
    """Append-only JSONL writer; thread-safe, flushed after every :meth:`write`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, records: Iterable[Sample | Gap]) -> None:
        lines = "".join(json.dumps(r.to_json(), separators=(",", ":")) + "\n" for r in records)
        if not lines:
            return
        with self._lock:
            if self._fh is None:
                raise ValueError(f"{self.path} is closed")
            self._fh.write(lines)
            self._fh.flush()

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line from a killed run
            if isinstance(row, dict) and "t" in row and "metric" in row:
                rows.append(row)
    return rows


def _number(value: Any) -> float:
    """A sample's value as :func:`load_series` coerces it: a number or a numeric string, else NaN."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return math.nan
    return math.nan


def read_samples(path: Path | str) -> list[tuple[float, str, str, float, dict[str, Any]]]:
    """One telemetry file's samples (gaps left out) as ``(t, source, metric, value, labels)``,
    sorted by ``t`` (stable), values coerced as :func:`load_series` does (NaN where not a
    number). The summary and the report read the run's engine series with this: the same rows
    as the frame, without importing pandas (most of a short run's post-run time)."""
    out: list[tuple[float, str, str, float, dict[str, Any]]] = []
    p = Path(path)
    if not p.exists():
        return out
    for row in _read_jsonl(p):
        if (row.get("kind") or "sample") != "sample":
            continue
        try:
            t = float(row["t"])
        except (TypeError, ValueError):
            continue
        labels = row.get("labels")
        src = row.get("source")
        out.append(
            (
                t,
                "" if src is None else str(src),
                str(row["metric"]),
                _number(row.get("value")),
                labels if isinstance(labels, dict) else {},
            )
        )
    out.sort(key=lambda r: r[0])
    return out


def load_series(where: Path | str | Iterable[Path | str]) -> pd.DataFrame:
    """Load telemetry records into one long DataFrame sorted by ``t``.

    ``where`` is a run folder (its ``telemetry/*.jsonl`` are read), a folder of ``.jsonl``
    files, one file, or several files. Columns: ``t``, ``t_mono``, ``source``, ``kind``
    (``sample`` / ``gap``), ``metric``, ``value`` (float, NaN for gaps), ``labels`` (dict),
    ``error_class``, ``error``. An empty frame still has these columns.
    """
    paths: list[Path] = []
    items = [where] if isinstance(where, str | Path) else list(where)
    for item in items:
        p = Path(item)
        if p.is_dir():
            sub = p / TELEMETRY_DIR
            paths.extend(sorted((sub if sub.is_dir() else p).glob("*.jsonl")))
        elif p.exists():
            paths.append(p)
    import pandas as pd  # here, not at import: writers must work without pandas

    rows: list[dict[str, Any]] = []
    for p in paths:
        rows.extend(_read_jsonl(p))
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["value"] = pd.to_numeric(frame["value"], errors="coerce").astype(float)
    frame["t"] = frame["t"].astype(float)
    frame["t_mono"] = pd.to_numeric(frame["t_mono"], errors="coerce").astype(float)
    frame["kind"] = frame["kind"].fillna("sample")
    frame["labels"] = [lab if isinstance(lab, dict) else {} for lab in frame["labels"]]
    return frame.sort_values("t", kind="stable").reset_index(drop=True)


def select(
    frame: pd.DataFrame,
    metric: str,
    *,
    source: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Rows of ``metric`` (samples only), optionally of one source and matching ``labels``."""
    mask = (frame["kind"] == "sample") & (frame["metric"] == metric)
    if source is not None:
        mask &= frame["source"] == source
    out = frame[mask]
    if labels:
        keep = [all(lab.get(k) == v for k, v in labels.items()) for lab in out["labels"]]
        out = out[keep]
    return out
