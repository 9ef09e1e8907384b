"""Warm-up: the first part of a load run is sent and recorded, but kept out of the statistics.

Why: the first requests after a start or a swap are slower (weights paged in, kernels compiled,
caches empty); a steady-state SLO judged on them is judged on the wrong thing, and a capacity
plan made from them is too pessimistic. ``--warmup 30s`` or ``--warmup-requests 50`` sends that
much **on top of** the run's bounds, writes those requests to ``records.jsonl`` like every other
(``warmup`` is decided from the merged, send-time-ordered file, so it works across workers
without the generator knowing), leaves them out of every statistic, goodput and SLO, and shows
their own figures in ``summary.json``'s ``warmup`` block.

A request is warm-up when it was sent within ``warmup_s`` of the run's first send, or is among
the first ``warmup_requests`` sent (both given: either makes it warm-up).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from servecheck.analysis.breakdown import Group
from servecheck.errors import SpecError


@dataclass(slots=True)
class Warmup:
    """Splits a send-time-ordered record stream into warm-up and measured requests."""

    seconds: float | None = None
    requests: int | None = None
    first_sent: float | None = None
    last_sent: float | None = None
    group: Group = field(default_factory=Group)  # count, errors, TTFT and E2E histograms

    def __post_init__(self) -> None:
        if self.seconds is not None and self.seconds < 0:
            raise SpecError("{warmup_s} must be >= 0")
        if self.requests is not None and self.requests < 0:
            raise SpecError("{warmup_requests} must be >= 0")

    @property
    def active(self) -> bool:
        return bool(self.seconds) or bool(self.requests)

    def measured(self, records: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        """The records after the warm-up; warm-up ones are summarised here instead."""
        start: float | None = None
        for r in records:
            sent = float(r.get("t_sent") or 0.0)
            if start is None:
                start = sent
            if self._is_warm(sent - start):
                self.add(r, sent)
                continue
            yield r

    def _is_warm(self, since_start: float) -> bool:
        if self.requests and self.count < self.requests:
            return True
        return bool(self.seconds) and since_start < float(self.seconds or 0.0)

    @property
    def count(self) -> int:
        return self.group.count

    def add(self, r: Mapping[str, Any], sent: float) -> None:
        """Count one warm-up request (sent at ``sent``)."""
        self.first_sent = sent if self.first_sent is None else min(self.first_sent, sent)
        self.last_sent = sent if self.last_sent is None else max(self.last_sent, sent)
        self.group.add(r)

    def merge(self, other: Warmup) -> None:
        """Add another worker's warm-up (each kept its share of a warm-up counted in requests)."""
        for name, pick in (("first_sent", min), ("last_sent", max)):
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is not None:
                setattr(self, name, theirs if mine is None else pick(mine, theirs))
        self.group.merge(other.group)

    def state(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "requests": self.requests,
            "first_sent": self.first_sent,
            "last_sent": self.last_sent,
            "group": self.group.state(),
        }

    @classmethod
    def from_state(cls, d: Mapping[str, Any]) -> Warmup:
        w = cls(d["seconds"], d["requests"], d["first_sent"], d["last_sent"])
        w.group = Group.from_state(d["group"])
        return w

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "requests_asked": self.requests,
            "requests": self.count,
            "errors": self.group.errors,
            "span_s": round((self.last_sent or 0.0) - (self.first_sent or 0.0), 6),
            "ttft_ms": self.group.ttft.summary().as_dict(),
            "e2e_ms": self.group.e2e.summary().as_dict(),
        }


def extend_bounds(
    duration_s: float | None, max_requests: int | None, warm: Warmup
) -> tuple[float | None, int | None]:
    """The run's bounds with the warm-up added on top (it is not part of what was asked for)."""
    if duration_s is not None and warm.seconds:
        duration_s += warm.seconds
    if max_requests is not None and warm.requests:
        max_requests += warm.requests
    return duration_s, max_requests
