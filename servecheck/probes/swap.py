"""A swap done by servecheck itself under live load (``servecheck cutover --swap ACTION``), with
the engine's own mechanism, and what the load saw of it.

Actions (:func:`parse_swap`):

* ``lora-load:NAME=PATH``: vLLM's ``POST /v1/load_lora_adapter`` (runtime LoRA);
* ``lora-unload:NAME``: ``POST /v1/unload_lora_adapter``;
* ``xinference-relaunch:MODEL``: Xinference's terminate (``DELETE /v1/models/MODEL``) and launch
  (``POST /v1/models``) of the same model with the launch settings it reported before
  (``GET /v1/models/MODEL``: name, type, engine, format, size, quantization), then a wait until
  it is listed again.

The load is the swap probe's fixed-rate open loop (:mod:`servecheck.probes.swap_probe`), streamed
so that each request has a TTFT (first event of the stream), with traffic split across models by
weight. :func:`swap_impact` reads the records against the swap's start:

* ``failed``: requests that failed over the whole run (every model the probe sends to is one
  that should stay served through the swap);
* ``ttft_spike_ms``: the highest per-slice TTFT p95 from the swap's start on, less the p95 of
  the requests sent before it (0 when nothing rose);
* ``settle_s``: from the swap's start to the start of the first slice after which every slice
  is settled (no failure, p95 within :data:`SETTLE_FACTOR` of the baseline, or
  :data:`SETTLE_SLACK_MS` above it); None when the run ended unsettled.

SLOs ``swap_failed_requests`` and ``swap_ttft_spike`` (:mod:`servecheck.analysis.slo`) judge them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from servecheck.analysis.slo import SLO, Verdict
from servecheck.config.model import Target
from servecheck.errors import UsageError
from servecheck.records.record import RequestRecord

KINDS = ("lora-load", "lora-unload", "xinference-relaunch")
SETTLE_FACTOR = 1.5
SETTLE_SLACK_MS = 25.0
RELAUNCH_TIMEOUT_S = 600.0
# What Xinference's model description carries that its launch takes back.
_LAUNCH_KEYS = (
    "model_name",
    "model_type",
    "model_engine",
    "model_format",
    "model_size_in_billions",
    "quantization",
    "replica",
)


@dataclass(slots=True, frozen=True)
class SwapAction:
    """One swap: its kind, the adapter or model it names, and the adapter's path (lora-load)."""

    kind: str
    name: str
    path: str | None = None

    @property
    def text(self) -> str:
        tail = f"={self.path}" if self.path else ""
        return f"{self.kind}:{self.name}{tail}"


def parse_swap(text: str) -> SwapAction:
    """``lora-load:NAME=PATH``, ``lora-unload:NAME`` or ``xinference-relaunch:MODEL``; a
    :class:`UsageError` naming what is wrong."""
    kind, sep, rest = text.strip().partition(":")
    if kind not in KINDS or not sep:
        from servecheck.errors import did_you_mean

        raise UsageError(
            f"swap {text!r}: write KIND:NAME with KIND one of {', '.join(KINDS)}"
            f"{did_you_mean(kind, KINDS)} (lora-load:NAME=PATH, lora-unload:NAME, "
            "xinference-relaunch:MODEL)"
        )
    if kind == "lora-load":
        name, eq, path = rest.partition("=")
        if not name.strip() or not eq or not path.strip():
            raise UsageError(f"swap {text!r}: lora-load needs NAME=PATH (the adapter's folder)")
        return SwapAction(kind, name.strip(), path.strip())
    if not rest.strip() or "=" in rest:
        raise UsageError(f"swap {text!r}: {kind} takes a name only ({kind}:NAME)")
    return SwapAction(kind, rest.strip())


@dataclass(slots=True)
class SwapOutcome:
    """What the swap's own requests answered, and when (seconds from the probe's start)."""

    ok: bool
    detail: str
    t_start: float = 0.0
    t_end: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def perform(
    target: Target, action: SwapAction, timeout_s: float = RELAUNCH_TIMEOUT_S
) -> SwapOutcome:
    """Do ``action`` on ``target``; never raises for HTTP or socket errors (they are the outcome)."""
    import httpx

    from servecheck.client.factory import ClientSettings, sync_client

    settings = ClientSettings.for_target(target, timeout_s=min(timeout_s, 600.0))
    try:
        with sync_client(settings) as client:
            base = target.base_url
            if action.kind == "lora-load":
                r = client.post(
                    base + "/load_lora_adapter",
                    json={"lora_name": action.name, "lora_path": action.path},
                )
                return SwapOutcome(r.is_success, f"HTTP {r.status_code} {r.text[:200]}")
            if action.kind == "lora-unload":
                r = client.post(base + "/unload_lora_adapter", json={"lora_name": action.name})
                return SwapOutcome(r.is_success, f"HTTP {r.status_code} {r.text[:200]}")
            return _relaunch(client, base, action.name, timeout_s)
    except httpx.HTTPError as exc:
        return SwapOutcome(False, f"{type(exc).__name__}: {exc}")


def _relaunch(client: Any, base: str, uid: str, timeout_s: float) -> SwapOutcome:
    """Xinference: describe, terminate, launch again with the described settings, wait until
    listed."""
    deadline = time.monotonic() + timeout_s
    d = client.get(f"{base}/models/{uid}")
    if not d.is_success:
        return SwapOutcome(False, f"describe {uid}: HTTP {d.status_code} {d.text[:200]}")
    desc = d.json()
    body = {k: desc[k] for k in _LAUNCH_KEYS if desc.get(k) is not None}
    missing = [k for k in ("model_name", "model_engine") if k not in body]
    if missing:
        return SwapOutcome(False, f"describe {uid}: no {', '.join(missing)} to relaunch with")
    body.setdefault("model_type", "LLM")
    t = client.delete(f"{base}/models/{uid}")
    if not t.is_success:
        return SwapOutcome(False, f"terminate {uid}: HTTP {t.status_code} {t.text[:200]}")
    launch = client.post(f"{base}/models", json={"model_uid": uid, **body})
    if not launch.is_success:
        return SwapOutcome(False, f"launch {uid}: HTTP {launch.status_code} {launch.text[:300]}")
    while time.monotonic() < deadline:
        listed = client.get(f"{base}/models")
        if listed.is_success and f'"{uid}"' in listed.text:
            return SwapOutcome(True, f"terminated and relaunched {uid} ({body['model_engine']})")
        time.sleep(0.5)
    return SwapOutcome(False, f"{uid} not listed {timeout_s:g} s after its relaunch")


def _p95(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


@dataclass(slots=True)
class SwapImpact:
    """What the probe's requests saw of the swap (ms, seconds, counts)."""

    requests: int
    failed: int
    failed_after_swap: int
    baseline_ttft_p95_ms: float | None
    peak_ttft_p95_ms: float | None
    ttft_spike_ms: float | None
    settle_s: float | None
    slice_s: float
    slices: list[dict[str, Any]]
    by_model: dict[str, dict[str, int]]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def swap_impact(
    records: Sequence[RequestRecord], swap_at: float, slice_s: float = 1.0
) -> SwapImpact:
    """Failures, the TTFT spike and the time to settle of ``records`` (the swap probe's, with
    ``ttft`` in seconds) around a swap that started at ``swap_at`` s."""
    before = [
        r.ttft * 1000.0 for r in records if r.ok and r.ttft is not None and r.t_sent < swap_at
    ]
    base = _p95(before)
    after = [r for r in records if r.t_sent >= swap_at]
    end = max((r.t_sent for r in after), default=swap_at)
    slices: list[dict[str, Any]] = []
    for i in range(int((end - swap_at) // slice_s) + 1):
        lo = swap_at + i * slice_s
        part = [r for r in after if lo <= r.t_sent < lo + slice_s]
        ttfts = [r.ttft * 1000.0 for r in part if r.ok and r.ttft is not None]
        slices.append(
            {
                "t": round(lo, 3),
                "requests": len(part),
                "failed": sum(not r.ok for r in part),
                "ttft_p95_ms": None if not ttfts else round(_p95(ttfts) or 0.0, 3),
            }
        )
    peaks = [s["ttft_p95_ms"] for s in slices if s["ttft_p95_ms"] is not None]
    peak = max(peaks) if peaks else None
    spike = None if base is None or peak is None else max(0.0, peak - base)
    by_model: dict[str, dict[str, int]] = {}
    for r in records:
        row = by_model.setdefault(r.model or "?", {"requests": 0, "failed": 0})
        row["requests"] += 1
        row["failed"] += int(not r.ok)
    return SwapImpact(
        requests=len(records),
        failed=sum(not r.ok for r in records),
        failed_after_swap=sum(not r.ok for r in after),
        baseline_ttft_p95_ms=None if base is None else round(base, 3),
        peak_ttft_p95_ms=peak,
        ttft_spike_ms=None if spike is None else round(spike, 3),
        settle_s=_settle(slices, base, swap_at),
        slice_s=slice_s,
        slices=slices,
        by_model=by_model,
    )


def swap_verdicts(slos: Sequence[SLO], impact: SwapImpact) -> list[Verdict]:
    """Each swap SLO against ``impact``; a figure that could not be measured (no TTFT before or
    after the swap) fails its SLO with the reason."""
    out = []
    for slo in slos:
        if slo.metric == "swap_failed_requests":
            value: float | None = float(impact.failed)
            note = ""
        else:
            value = impact.ttft_spike_ms
            note = "no streamed answer before or after the swap to compare" if value is None else ""
        out.append(
            Verdict(slo, None, False, note)
            if value is None
            else Verdict(slo, value, slo.holds(value), note)
        )
    return out


def _settle(slices: list[dict[str, Any]], base: float | None, swap_at: float) -> float | None:
    if base is None:
        return None
    bound = max(base * SETTLE_FACTOR, base + SETTLE_SLACK_MS)

    def settled(s: dict[str, Any]) -> bool:
        p95 = s["ttft_p95_ms"]
        return s["failed"] == 0 and s["requests"] > 0 and p95 is not None and p95 <= bound

    first = None
    for i in range(len(slices) - 1, -1, -1):
        if not settled(slices[i]):
            break
        first = i
    if first is None:
        return None
    return max(0.0, round(slices[first]["t"] - swap_at, 3))  # slice starts are rounded


__all__ = [
    "KINDS",
    "SwapAction",
    "SwapImpact",
    "SwapOutcome",
    "parse_swap",
    "perform",
    "swap_impact",
    "swap_verdicts",
]
