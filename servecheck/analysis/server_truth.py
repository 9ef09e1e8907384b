"""What the engine itself counted over a load run, beside what the client counted.

Two full scrapes of the engine's ``/metrics`` bracket the run (one before Locust starts, one
after it ended, settled until the engine's request counter stops moving); their deltas are
the window's engine figures. Then:

* **reconciliation**: completed requests, prompt tokens, generated tokens (reasoning included)
  and cached prompt tokens, engine delta vs the client's sums over every record of the run
  (warm-up included: the engine saw it too). A gap beyond the tolerance is a finding that names
  the side and the size;
* **decomposition**: the engine's TTFT, queue, prefill, decode and e2e histograms over the
  window (mean, and p50/p95 where buckets allow) beside the client's TTFT; the difference of
  the means is network plus gateway, and a large one is a finding.

The rules, their tolerances and why each finding is a FAIL or a warning: ``docs/metrics.md``
(section "Engine truth"). A window delta includes every other client's traffic on the engine:
an engine that counted *more* than the client may have served someone else, one that counted
*fewer* cannot be explained that way. Telemetry is imported inside functions (layering).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.analysis.stats import Histogram
from servecheck.config.model import Target
from servecheck.redact import redact

SERVER_FILE = "server.json"
SETTLE_S = 3.0  # at most this long for the engine's counters to catch up after the run
SETTLE_STEP_S = 0.5
# Reconciliation: a gap is a finding beyond max(REQUEST_FLOOR requests' worth, SHARE of the
# client's count). Two requests' worth covers one request in flight at each edge of the window.
REQUEST_FLOOR = 2
SHARE = 0.02
# Decomposition: client TTFT above the engine's by more than both bounds is a finding.
GAP_MS = 50.0
GAP_SHARE = 0.30
# Engines whose prompt counter counts only the prompt tokens they computed (cache hits left out).
PROMPT_EXCLUDES_CACHED = frozenset({"llamacpp"})
COUNTED = ("requests", "prompt_tokens", "generation_tokens", "cached_tokens")
# The engine counter(s) of each quantity, first present wins.
_CANONICAL_OF = {
    "requests": ("requests_success_total",),
    "prompt_tokens": ("prompt_tokens_total",),
    "generation_tokens": ("generation_tokens_total",),
    "cached_tokens": ("cached_tokens_total", "prefix_cache_hits_total"),
}
_WORDS = {
    "requests": "completed requests",
    "prompt_tokens": "prompt tokens",
    "generation_tokens": "generation tokens",
    "cached_tokens": "cached prompt tokens",
}
_CLIENT_SOURCE = {
    "requests": "successful responses",
    "prompt_tokens": "usage fields reported",
    "generation_tokens": "usage fields reported",
    "cached_tokens": "usage fields reported",
}
PHASES = ("queue_seconds", "prefill_seconds", "ttft_seconds", "decode_seconds", "e2e_seconds")
WARN, FAIL = "warning", "fail"


@dataclass(slots=True)
class Snapshot:
    """One full scrape: when, and every sample (or why there is none)."""

    t: float
    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.note is None


def metrics_source(target: Target) -> tuple[str, str]:
    """The /metrics URL to reconcile against and the engine whose names it exposes: the
    target's ``metrics_url`` (a gateway's upstream engine, ``metrics_engine`` naming it), else
    ``<server root>/metrics`` with the target's own engine."""
    url = target.telemetry.metrics_url or target.metrics_url or target.server_root + "/metrics"
    return url, target.metrics_engine or target.engine


def snapshot(target: Target, timeout_s: float) -> Snapshot:
    """One scrape of the target's metrics URL; failures are a ``note``, never an exception."""
    import httpx

    from servecheck.client.factory import ClientSettings, sync_client
    from servecheck.telemetry.prometheus import parse_samples

    url, _ = metrics_source(target)
    now = time.time()
    settings = ClientSettings.for_target(target, timeout_s=timeout_s, connect_timeout_s=timeout_s)
    try:
        with sync_client(settings, bound_body=True) as client:  # /metrics that never ends
            r = client.get(url)
    except httpx.HTTPError as exc:
        return Snapshot(now, note=f"cannot read {redact(url)}: {type(exc).__name__}")
    if r.status_code != 200:
        return Snapshot(now, note=f"{redact(url)} answered HTTP {r.status_code}")
    try:
        return Snapshot(now, parse_samples(r.text))
    except ValueError as exc:
        return Snapshot(now, note=f"{redact(url)}: not Prometheus text ({str(exc)[:80]})")


def settled(target: Target, timeout_s: float, first: Snapshot | None = None) -> Snapshot:
    """A scrape after the run, repeated (every SETTLE_STEP_S, SETTLE_S at most) until the
    request and token counters stop moving: engines update them a little after the answer."""
    last = first or snapshot(target, timeout_s)
    deadline = time.monotonic() + SETTLE_S
    while last.ok and time.monotonic() < deadline:
        time.sleep(SETTLE_STEP_S)
        nxt = snapshot(target, timeout_s)
        if not nxt.ok:
            return last
        if not _moving(last, nxt):
            return nxt
        last = nxt
    return last


def _moving(a: Snapshot, b: Snapshot) -> bool:
    keys = [k for k in a.samples if k.endswith(("_total", "_count", "_sum"))]
    return any(_total(a.samples, k) != _total(b.samples, k) for k in keys)


def _total(samples: Mapping[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    return math.fsum(v for _, v in samples.get(name, []) if not math.isnan(v))


# ------------------------------------------------------------------ the client's side


_COUNTED = (
    "requests",
    "failed",
    "abandoned",
    "prompt_tokens",
    "generation_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "usage_missing",
    "cached_reported",
)


@dataclass(slots=True)
class ClientCounts:
    """What the client counted over every record of the run (warm-up included), one record at a
    time and mergeable: each worker keeps one (``analysis/aggregate.py``) and the master adds them."""

    requests: int = 0
    failed: int = 0
    abandoned: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    usage_missing: int = 0
    cached_reported: int = 0  # successful requests whose usage carried cached_tokens
    ttft: Histogram = field(default_factory=Histogram)

    @classmethod
    def of(cls, records: Iterable[Mapping[str, Any]]) -> ClientCounts:
        c = cls()
        for r in records:
            c.add(r)
        return c

    def add(self, r: Mapping[str, Any]) -> None:
        if r.get("abandoned") or r.get("cancelled"):  # hung up on purpose: no usage to count
            self.abandoned += 1
            return
        if r.get("error"):
            self.failed += 1
            return
        self.requests += 1
        if r.get("output_tokens") is None or r.get("prompt_tokens") is None:
            self.usage_missing += 1
        self.prompt_tokens += int(r.get("prompt_tokens") or 0)
        self.generation_tokens += int(r.get("output_tokens") or 0)
        self.reasoning_tokens += int(r.get("reasoning_tokens") or 0)
        if r.get("cached_tokens") is not None:
            self.cached_reported += 1
            self.cached_tokens += int(r["cached_tokens"])
        if r.get("ttft") is not None:
            self.ttft.record(float(r["ttft"]))

    def merge(self, other: ClientCounts) -> None:
        for name in _COUNTED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.ttft.add(other.ttft)

    def state(self) -> dict[str, Any]:
        return {**{n: getattr(self, n) for n in _COUNTED}, "ttft": self.ttft.state()}

    @classmethod
    def from_state(cls, d: Mapping[str, Any]) -> ClientCounts:
        c = cls(ttft=Histogram.from_state(d["ttft"]))
        for name in _COUNTED:
            setattr(c, name, int(d[name]))
        return c


# ------------------------------------------------------------------ reconciliation


def _finding(fid: str, severity: str, message: str, **facts: Any) -> dict[str, Any]:
    return {"id": fid, "severity": severity, "message": message, **facts}


def tolerance(name: str, client: ClientCounts, value: float) -> float:
    """The largest gap that is not a finding: max(two requests' worth, 2% of ``value``)."""
    per_request = 1.0 if name == "requests" else (value / client.requests if client.requests else 0)
    return max(REQUEST_FLOOR * per_request, SHARE * value)


def _client_value(name: str, client: ClientCounts, engine: str) -> tuple[float, str]:
    if name == "prompt_tokens" and engine in PROMPT_EXCLUDES_CACHED:
        return float(client.prompt_tokens - client.cached_tokens), "prompt minus cached tokens"
    return float(getattr(client, name)), _CLIENT_SOURCE[name]


def _skip_reason(name: str, client: ClientCounts) -> str | None:
    if name != "requests" and client.usage_missing:
        return f"{client.usage_missing} successful requests carried no usage"
    if name == "cached_tokens" and client.cached_reported < client.requests:
        return "the usage fields carried no cached_tokens (prompt_tokens_details)"
    return None


def reconcile(
    before: Snapshot,
    after: Snapshot,
    client: ClientCounts,
    engine: str,
    user_map: Mapping[str, str] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One row per counted quantity (engine delta, client count, gap, tolerance, judged), and
    the findings. Engine fewer than client: FAIL; engine more: a warning (other traffic,
    aborted or failed requests the client has no usage for)."""
    from servecheck.telemetry.prometheus import MetricMap, find_counter

    mapping = MetricMap.for_engine(engine, user_map)
    rows: list[dict[str, Any]] = []
    findings: list[dict[str, Any]] = []
    for name in COUNTED:
        row: dict[str, Any] = {"quantity": name}
        rows.append(row)
        a = b = None
        for canonical in _CANONICAL_OF[name]:
            a = find_counter(after.samples, mapping, canonical)
            b = find_counter(before.samples, mapping, canonical)
            if a is not None and b is not None:
                break
        row["canonical"] = canonical
        if a is None or b is None:
            row["note"] = f"the engine exposes no {' or '.join(_CANONICAL_OF[name])}"
            continue
        delta = a.value - b.value
        value, source = _client_value(name, client, engine)
        row.update(source_metric=a.source_metric, engine=delta, client=value, client_source=source)
        if delta < 0:
            row["note"] = "the counter went down: the engine restarted during the run"
            continue
        skip = _skip_reason(name, client)
        if skip:
            row["note"] = f"not judged: {skip}"
            continue
        gap, tol = delta - value, tolerance(name, client, value)
        row.update(gap=gap, tolerance=round(tol, 3), judged=True, held=abs(gap) <= tol)
        if abs(gap) <= tol:
            continue
        share = abs(gap) / value if value else float("inf")
        more = gap > 0
        size = f"{share:.0%}" if math.isfinite(share) else f"{abs(gap):.0f}"
        msg = (
            f"engine counted {size} {'more' if more else 'fewer'} {_WORDS[name]} than the "
            f"client's {source} ({delta:.0f} vs {value:.0f}; tolerance {tol:.0f})"
        )
        if more and (client.failed or client.abandoned):
            msg += (
                f"; {client.failed + client.abandoned} failed or abandoned requests have no usage"
            )
        if name == "generation_tokens" and client.reasoning_tokens:
            msg += f"; the usage counted {client.reasoning_tokens} reasoning tokens"
        fid = f"SERVER-COUNT-{name.upper().replace('_', '-')}"
        # Cached-token counters differ by design across engines (blocks vs tokens): a warning.
        severity = FAIL if (not more and name != "cached_tokens") else WARN
        findings.append(_finding(fid, severity, msg, side="engine" if more else "client"))
    return rows, findings


# ------------------------------------------------------------------ decomposition


def _delta_histogram(before: Snapshot, after: Snapshot, mapping: Any, canonical: str) -> Any:
    from servecheck.telemetry.prometheus import Histogram, find_histogram

    a = find_histogram(after.samples, mapping, canonical)
    if a is None:
        return None
    b = find_histogram(before.samples, mapping, canonical)
    if b is None:
        return a
    prev = dict(b.buckets)
    buckets = [(bound, n - prev.get(bound, 0.0)) for bound, n in a.buckets]
    return Histogram(a.name, a.sum - b.sum, a.count - b.count, buckets)


def quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """The q-quantile from cumulative buckets, linear inside a bucket (as Prometheus'
    ``histogram_quantile``); None without buckets or when it falls in the ``+Inf`` bucket."""
    found = bucket_of(buckets, q)
    if found is None:
        return None
    return found[0]


def bucket_of(buckets: list[tuple[float, float]], q: float) -> tuple[float, float, float] | None:
    """(interpolated q-quantile, its bucket's lower bound, upper bound), or None."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lo_bound, lo_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return None
            width = count - lo_count
            frac = (rank - lo_count) / width if width > 0 else 1.0
            return lo_bound + (bound - lo_bound) * frac, lo_bound, bound
        lo_bound, lo_count = bound, count
    return None


def _percentile(buckets: list[tuple[float, float]], q: float, key: str) -> dict[str, Any]:
    """``{key}_ms`` when the quantile's bucket resolves it (its lower bound at least half its
    upper), else ``{key}_le_ms``: only that it is at most the bucket's upper bound (vLLM's queue
    and prefill buckets start at 0.3 s: interpolating inside (0, 0.3] would invent 150 ms)."""
    found = bucket_of(buckets, q)
    if found is None:
        return {f"{key}_ms": None}
    value, lo, hi = found
    if lo >= hi / 2:
        return {f"{key}_ms": _ms(value)}
    return {f"{key}_ms": None, f"{key}_le_ms": _ms(hi)}


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 2)


def _client_ttft(ttft: Histogram) -> dict[str, Any]:
    d = ttft.summary()
    if not d.count:
        return {"count": 0}
    return {"count": d.count, "mean": d.mean, "p50": d.get("p50"), "p95": d.get("p95")}


def decompose(
    before: Snapshot,
    after: Snapshot,
    client: ClientCounts,
    engine: str,
    user_map: Mapping[str, str] | None = None,
    behind: bool = False,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The engine's phase histograms over the window beside the client's TTFT, and findings:
    a histogram the engine's map names but its page lacks (warning), a network + gateway gap
    beyond both bounds (warning; not judged when the generator fell ``behind``: its own lag
    is inside the client's TTFT then)."""
    from servecheck.telemetry.prometheus import MetricMap

    mapping = MetricMap.for_engine(engine, user_map)
    phases: dict[str, Any] = {}
    findings: list[dict[str, Any]] = []
    for canonical in PHASES:
        names = mapping.candidates.get(canonical, ())
        if not names:
            phases[canonical] = {"note": f"{engine} exposes no such histogram"}
            continue
        h = _delta_histogram(before, after, mapping, canonical)
        if h is None:
            phases[canonical] = {"note": f"missing from /metrics: {', '.join(names)}"}
            findings.append(
                _finding(
                    "SERVER-METRIC-MISSING",
                    WARN,
                    f"the engine's {canonical} histogram ({', '.join(names)}) is not on its "
                    f"/metrics page: a renamed family or a build without it",
                    metric=canonical,
                )
            )
            continue
        mean = h.sum / h.count if h.count > 0 else None
        phases[canonical] = {
            "source_metric": h.name,
            "count": h.count,
            "mean_ms": _ms(mean),
            **_percentile(h.buckets, 0.5, "p50"),
            **_percentile(h.buckets, 0.95, "p95"),
        }
    out: dict[str, Any] = {"client_ttft_ms": _client_ttft(client.ttft), "engine": phases}
    engine_ttft = phases.get("ttft_seconds", {}).get("mean_ms")
    client_mean = out["client_ttft_ms"].get("mean")
    if engine_ttft is not None and client_mean is not None:
        gap = round(client_mean - engine_ttft, 2)
        out["network_gateway_ms"] = gap
        out["bound"] = {"ms": GAP_MS, "share": GAP_SHARE}
        if behind:
            out["note"] = "gap not judged: the generator fell behind (its lag is in client TTFT)"
        elif gap > GAP_MS and gap > GAP_SHARE * client_mean:
            findings.append(
                _finding(
                    "SERVER-TTFT-GAP",
                    WARN,
                    f"client TTFT exceeds the engine's by {gap:.0f} ms on average "
                    f"({gap / client_mean:.0%} of the client's {client_mean:.0f} ms): network "
                    f"plus gateway; a buffering gateway or proxy holds the first bytes",
                    gap_ms=gap,
                )
            )
    return out, findings


# ------------------------------------------------------------------ the run's section


def server_section(
    target: Target,
    before: Snapshot,
    after: Snapshot | None,
    client: ClientCounts,
    telemetry: list[dict[str, Any]] | None = None,
    behind: bool = False,
) -> dict[str, Any]:
    """summary.json's ``server``: the metrics source, the sampled series, the reconciliation,
    the decomposition and every finding."""
    url, engine = metrics_source(target)
    out: dict[str, Any] = {"metrics_url": redact(url), "engine": engine}
    if telemetry is not None:
        out["sampled"] = telemetry
    if not before.ok or after is None or not after.ok:
        out.update(available=False, note=before.note or (after.note if after else "no scrape"))
        out["findings"] = []
        return out
    user = target.telemetry.metrics
    rows, found = reconcile(before, after, client, engine, user)
    decomposition, found2 = decompose(before, after, client, engine, user, behind)
    out.update(
        available=True,
        window={"start": before.t, "end": after.t, "s": round(after.t - before.t, 3)},
        reconciliation=rows,
        decomposition=decomposition,
        findings=found + found2,
    )
    return out


def write(run_dir: Path, section: Mapping[str, Any]) -> None:
    (run_dir / SERVER_FILE).write_text(json.dumps(section, indent=2) + "\n", encoding="utf-8")


def read(run_dir: Path) -> dict[str, Any] | None:
    """``server.json`` of a run (written by :func:`write`), or None."""
    try:
        data = json.loads((run_dir / SERVER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def verdict_of(section: Mapping[str, Any] | None) -> Any:
    """The section's findings as a stage verdict: a FAIL finding fails the run, warnings keep a
    pass a pass but ride along in its reasons (``warning: ...``)."""
    from servecheck.analysis.verdict import FAIL as RUN_FAIL
    from servecheck.analysis.verdict import PASS, RunVerdict

    findings = list((section or {}).get("findings") or [])
    fails = [f"server: {f['message']}" for f in findings if f.get("severity") == FAIL]
    warns = [f"warning: server: {f['message']}" for f in findings if f.get("severity") != FAIL]
    return RunVerdict(RUN_FAIL if fails else PASS, fails + warns)
