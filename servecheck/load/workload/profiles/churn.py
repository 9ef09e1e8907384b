"""``churn[:rate=5]``: a new connection per request (keep-alive off); the report shows the
connection set-up cost. Without its own rate the run's loop (users or rate) sends."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servecheck.load.workload.profiles.base import Phase, Profile, SliceView


@dataclass(frozen=True, slots=True)
class Churn(Profile):
    kind = "churn"
    optional = ("rate", "for")

    @property
    def schedules(self) -> bool:
        return self.params.get("rate") is not None

    @property
    def keepalive(self) -> bool:
        return False

    def phases(self, duration: float | None) -> list[Phase]:
        end = self.duration or duration or 0.0
        return [Phase("churn", 0.0, end, self.params.get("rate"))]

    def figures(
        self, views: Sequence[SliceView], end: float, timings: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        return {"churn": setup_cost(timings)}


def setup_cost(timings: Mapping[str, Any] | None) -> dict[str, Any]:
    """What setting up a connection cost, from the TTFT decomposition (analysis/timings.py)."""
    t = timings or {}
    ph = t.get("phases_ms") or {}
    conns = t.get("connections") or {}
    setup = {k: ph[k] for k in ("connect", "tls") if k in ph}
    mean_setup = sum(float(v.get("mean") or 0.0) for v in setup.values())
    parts = [float((ph.get(k) or {}).get("mean") or 0.0) for k in ("send", "wait_headers")]
    parts += [
        float((ph.get(k) or {}).get("mean") or 0.0) for k in ("headers_to_body", "body_to_token")
    ]
    ttft_mean = sum(parts)
    return {
        "connections": {"new": conns.get("new", 0), "reused": conns.get("reused", 0)},
        "setup_ms": setup,
        "setup_mean_ms": round(mean_setup, 3),
        # The set-up as a share of what the request waited for its first token, set-up included.
        "setup_share": round(mean_setup / (mean_setup + ttft_mean), 4)
        if mean_setup + ttft_mean > 0
        else None,
    }
