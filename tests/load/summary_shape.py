"""summary.json's shape: every key path (list items as ``[]``, worker record files as ``*``)
with the JSON types seen there. The typed summary must keep today's keys and types, and this is
how a test holds a real run's file against the one the untyped code wrote."""

from __future__ import annotations

import re
from typing import Any

_DYNAMIC = re.compile(r"^records-.*\.jsonl$")  # one key per worker process: its pid varies
# Containers whose keys or items depend on what the run met (a connection opened or reused,
# which request was slowest, which error classes): their paths may come and go between runs.
DATA_DEPENDENT = (
    ".timings.phases_ms.",
    ".timings.slowest.",
    ".requests.errors.",
    ".slices.rows[].hdr.",
)
# An engine histogram's percentile is interpolated (``p95_ms``) or, where its bucket has no
# finite upper neighbour, only bounded (``p95_le_ms`` beside a null ``p95_ms``), by the data
# (analysis/server_truth.py): whether the ``_le_ms`` key is there is not the summary's shape.
DATA_DEPENDENT_ENDINGS = ("_le_ms",)


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def shape(doc: Any, path: str = "", out: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """Every path of ``doc`` and the JSON types found there."""
    out = {} if out is None else out
    out.setdefault(path or ".", set()).add(_kind(doc))
    if isinstance(doc, dict):
        for k, v in doc.items():
            shape(v, f"{path}.{'*' if _DYNAMIC.match(k) else k}", out)
    elif isinstance(doc, list):
        for v in doc:
            shape(v, f"{path}[]", out)
    return out


def differences(baseline: dict[str, set[str]], got: dict[str, set[str]]) -> list[str]:
    """What ``got`` lost or gained against ``baseline`` (a null where a value was, or the other
    way round, is a run's data, not the shape)."""
    out: list[str] = []
    for path in sorted(set(baseline) | set(got)):
        if path.startswith(DATA_DEPENDENT) or path.endswith(DATA_DEPENDENT_ENDINGS):
            continue
        item = path.split("[]", 1)[0] + "[]" if "[]" in path else None
        if path not in got:
            if item is not None and item not in got:
                continue  # an item's keys, where this run's list was empty
            out.append(f"missing {path} (was {sorted(baseline[path])})")
        elif path not in baseline:
            if item is not None and item not in baseline:
                continue  # where the baseline's list was empty (a lagging run's reasons)
            out.append(f"new {path} ({sorted(got[path])})")
        else:
            was, now = baseline[path] - {"null"}, got[path] - {"null"}
            if was and now and not now <= was:
                out.append(f"{path}: {sorted(now)}, was {sorted(was)}")
    return out
