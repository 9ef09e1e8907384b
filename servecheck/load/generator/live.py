"""The live view of a load run: what ``--web`` and ``--metrics-port`` show while it runs.

Built on the run's streaming aggregate (``analysis/aggregate.py``): each Locust process already
feeds every finished request into its :class:`~servecheck.analysis.aggregate.Aggregate`, whose time
slices (``analysis/steady.py``'s :class:`~servecheck.analysis.steady.Scan`, epoch-aligned, one mergeable
HDR histogram per metric and slice) are the live charts. Nothing here runs per request: a
:class:`LiveFeed` reads the aggregate once a tick (:data:`TICK_S`) and makes a *piece* (the slices
that changed since its last tick, the run's counters), and a :class:`LiveView` in the process that
serves the view (the local runner, or a distributed run's master, to which every worker sends its
pieces over Locust's channel) merges the pieces slice by slice, as the master merges the final
aggregates.

Two things the slices do not hold are added a tick at a time: TTFA (the aggregate's TTFA
histogram's growth since the last tick goes into the slice of the tick) and the error classes
(likewise from its error counts). They are therefore placed by when the tick saw them, within a
tick of when the request ended; the slices' own figures are placed by the request's end.

The window the gauges show is the last complete slice (``--slice-s``, 5 s by default); the
series holds every slice of the run (the current one, partial, last). The warm-up is not in the
slices (it is kept out of the statistics), so the view starts after it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from servecheck.analysis.aggregate import Aggregate
from servecheck.analysis.stats import Histogram
from servecheck.analysis.steady import Scan

__all__ = [
    "LIVE_MESSAGE",
    "METRIC_PREFIX",
    "TICK_S",
    "LiveFeed",
    "LiveView",
    "metric_names",
    "parse_bind",
    "is_loopback",
    "registry_for",
]

LIVE_MESSAGE = "servecheck_live"  # a worker's piece, to its master (Locust's message channel)
TICK_S = 1.0
METRIC_PREFIX = "servecheck_load"
QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
_LATENCIES = ("ttft", "ttfa", "itl", "e2e")
_MARGIN_S = 1.0  # a request recorded after the last tick ended at most this long before it


def parse_bind(
    text: str, default_host: str = "127.0.0.1", what: str = "address"
) -> tuple[str, int]:
    """``PORT`` or ``HOST:PORT`` (``[::1]:PORT``) -> (host, port); a ValueError names the text."""
    value = str(text).strip()
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "", value
    host = host.strip("[]") or default_host
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{what} {text!r}: PORT or HOST:PORT, the port 1-65535")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether a bind address is reachable only from this machine."""
    import ipaddress

    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# ------------------------------------------------------------------ one process's feed


@dataclass(slots=True)
class _Extra:
    """What a slice gets a tick at a time: TTFA and the error classes (see the module's note)."""

    ttfa: Histogram = field(default_factory=Histogram)
    errors: dict[str, int] = field(default_factory=dict)

    def merge(self, other: _Extra) -> None:
        self.ttfa.add(other.ttfa)
        for k, n in other.errors.items():
            self.errors[k] = self.errors.get(k, 0) + n

    def state(self) -> dict[str, Any]:
        return {"ttfa": self.ttfa.state(), "errors": dict(self.errors)}

    @classmethod
    def from_state(cls, d: Mapping[str, Any]) -> _Extra:
        return cls(Histogram.from_state(d["ttfa"]), {k: int(v) for k, v in d["errors"].items()})


def _coarsen(extra: dict[int, _Extra], width: float, to: float) -> dict[int, _Extra]:
    """The extras at a slice width doubled until it is ``to`` (as a Scan coarsens)."""
    while width < to:
        merged: dict[int, _Extra] = {}
        for i, ex in extra.items():
            merged.setdefault(i // 2, _Extra()).merge(ex)
        extra, width = merged, width * 2
    return extra


def _errors_of(agg: Aggregate) -> dict[str, int]:
    errs = dict(agg.whole.errors)
    limited = agg.whole.counts["rate_limited"]
    if limited:
        errs["rate-limited"] = limited
    return errs


class LiveFeed:
    """One Locust process's pieces of the live view, read from its aggregate once a tick."""

    def __init__(self, agg: Aggregate, worker: str) -> None:
        self.agg = agg
        self.worker = worker
        self.extra: dict[int, _Extra] = {}
        self._width: float | None = None
        self._last: float | None = None  # the previous tick's time
        self._ttfa = Histogram()
        self._errors: dict[str, int] = {}

    def tick(self, now: float | None = None, in_flight: int = 0) -> dict[str, Any]:
        """The piece for this tick: the slices that may have changed since the last one (all of
        them when the slice width changed), the run's counters so far."""
        now = time.time() if now is None else now
        agg, scan = self.agg, self.agg.scan
        width = scan.slice_s
        full = width != self._width
        if full and self._width is not None:
            self.extra = _coarsen(self.extra, self._width, width)
        self._width = width
        here = int(math.floor(now / width))
        ttfa = agg.whole.hist["ttfa"]
        grown = ttfa.copy()
        grown.subtract(self._ttfa)
        errors = _errors_of(agg)
        new_errors = {k: n - self._errors.get(k, 0) for k, n in errors.items()}
        if grown.count or any(n > 0 for n in new_errors.values()):
            ex = self.extra.setdefault(here, _Extra())
            ex.ttfa.add(grown)
            for k, n in new_errors.items():
                if n > 0:
                    ex.errors[k] = ex.errors.get(k, 0) + n
        self._ttfa, self._errors = ttfa.copy(), errors
        since = -math.inf if full or self._last is None else self._last - _MARGIN_S
        low = int(math.floor(since / width)) if math.isfinite(since) else None
        self._last = now
        c = agg.whole.counts

        def changed(i: int) -> bool:
            return low is None or i >= low

        return {
            "worker": self.worker,
            "t": now,
            "full": full,
            "slice_s": width,
            "first_sent": scan.first_sent,
            "slices": {str(i): sl.state() for i, sl in scan.slices.items() if changed(i)},
            "extra": {str(i): ex.state() for i, ex in self.extra.items() if changed(i)},
            "totals": {
                "requests": c["total"],
                "ok": c["ok"],
                "errors": errors,
                "output_tokens": c["output_tokens"],
                "in_flight": in_flight,
                "warmup": agg.count - agg.edges.measured,
            },
        }


# ------------------------------------------------------------------ the serving process's view


@dataclass(slots=True)
class _Source:
    scan: Scan
    extra: dict[int, _Extra]
    totals: dict[str, Any]
    t: float


class LiveView:
    """The merged live view: every process's latest pieces, slice by slice. ``info``: the run's
    labels (run id, target, scenario, model)."""

    def __init__(
        self,
        info: Mapping[str, str] | None = None,
        tick_s: float = TICK_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.info = dict(info or {})
        self.tick_s = tick_s
        self.clock = clock
        self.sources: dict[str, _Source] = {}
        self._cache: tuple[float, dict[str, Any]] | None = None

    def feed(self, piece: Mapping[str, Any]) -> None:
        """One process's piece (:meth:`LiveFeed.tick`); a malformed one raises ValueError."""
        try:
            worker = str(piece["worker"])
            width = float(piece["slice_s"])
            slices = {int(i): st for i, st in piece["slices"].items()}
            extra = {int(i): _Extra.from_state(st) for i, st in piece["extra"].items()}
            src = self.sources.get(worker)
            if src is None or piece.get("full") or src.scan.slice_s != width:
                scan = Scan.from_state(
                    {
                        "slice_s": width,
                        "nth": 0,
                        "first_sent": piece["first_sent"],
                        "last_sent": None,
                        "nth_sent": None,
                        "seen": 0,
                        "slices": {},
                    }
                )
                src = self.sources[worker] = _Source(scan, {}, {}, 0.0)
            fresh = Scan.from_state(
                {
                    "slice_s": width,
                    "nth": 0,
                    "first_sent": piece["first_sent"],
                    "last_sent": None,
                    "nth_sent": None,
                    "seen": 0,
                    "slices": {str(i): st for i, st in slices.items()},
                }
            )
            src.scan.first_sent = piece["first_sent"]
            src.scan.slices.update(fresh.slices)  # a slice's state replaces the older one
            src.extra.update(extra)
            src.totals = dict(piece["totals"])
            src.t = float(piece["t"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a live piece that could not be read: {exc}") from None
        self._cache = None

    def _merged(self) -> tuple[Scan | None, dict[int, _Extra]]:
        live = [s for s in self.sources.values() if s.scan.first_sent is not None]
        if not live:
            return None, {}
        width = max(s.scan.slice_s for s in live)
        merged = Scan(slice_s=width)
        extra: dict[int, _Extra] = {}
        for s in live:
            merged.merge(s.scan)
            for i, ex in _coarsen(dict(s.extra), s.scan.slice_s, width).items():
                extra.setdefault(i, _Extra()).merge(ex)
        return merged, extra

    def snapshot(self, now: float | None = None) -> dict[str, Any]:
        """What the page and the metrics show: the run's counters, the window (the last complete
        slice), and the series of slices (the current one last, marked ``partial``)."""
        now = self.clock() if now is None else now
        if self._cache is not None and now - self._cache[0] < min(0.5, self.tick_s / 2):
            return self._cache[1]
        scan, extra = self._merged()
        # The series runs to the latest tick (a stalled server shows as empty windows, not as
        # a chart that stopped), the current slice partial.
        latest = max((s.t for s in self.sources.values()), default=now)
        rows = [] if scan is None else _rows(scan, extra, now, latest)
        complete = [r for r in rows if not r["partial"]]
        snap = {
            "info": self.info,
            "t": now,
            "workers": len(self.sources),
            "slice_s": None if scan is None else scan.slice_s,
            "totals": _totals(s.totals for s in self.sources.values()),
            "window": complete[-1] if complete else (rows[-1] if rows else None),
            "series": rows,
        }
        self._cache = (now, snap)
        return snap


def _totals(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "requests": 0,
        "ok": 0,
        "errors": {},
        "output_tokens": 0,
        "in_flight": 0,
        "warmup": 0,
    }
    for t in parts:
        for k in ("requests", "ok", "output_tokens", "in_flight", "warmup"):
            out[k] += int(t.get(k) or 0)
        for k, n in (t.get("errors") or {}).items():
            out["errors"][k] = out["errors"].get(k, 0) + int(n)
    return out


def _rows(
    scan: Scan, extra: Mapping[int, _Extra], now: float, latest: float
) -> list[dict[str, Any]]:
    width = scan.slice_s
    t0 = float(scan.first_sent or 0.0)
    first = int(math.floor(t0 / width))
    last = max(max(scan.slices, default=first), int(math.floor(latest / width)))
    last = min(last, int(math.floor(now / width)))
    rows: list[dict[str, Any]] = []
    for i in range(first, last + 1):
        sl = scan.slices.get(i)
        ex = extra.get(i, _Extra())
        lo, hi = max(t0, i * width), (i + 1) * width
        partial = now < hi
        span = max(min(hi, now) - lo, 1e-9)
        count = sl.count if sl else 0
        errors = sl.errors if sl else 0
        row: dict[str, Any] = {
            "start_s": round(lo - t0, 3),
            "end_s": round(min(hi, now) - t0, 3),
            "partial": partial,
            "count": count,
            "errors": errors,
            "requests_per_s": round((count - errors) / span, 4),
            "output_tokens_per_s": round((sl.tokens if sl else 0) / span, 3),
            "in_flight": round((sl.busy_s if sl else 0.0) / span, 3),
            "error_ratio": round(errors / count, 4) if count else 0.0,
            "error_classes": dict(sorted(ex.errors.items())),
        }
        for m in _LATENCIES:
            h = ex.ttfa if m == "ttfa" else (sl.hist[m] if sl else Histogram())
            d = h.summary()
            row[f"{m}_ms"] = {name: d.get(name) for name, _ in QUANTILES}
        rows.append(row)
    return rows


# ------------------------------------------------------------------ OpenMetrics


def metric_names() -> list[str]:
    """Every sample name :func:`registry_for` serves, as a scrape shows it (counters end in
    ``_total``); the Grafana dashboard's test holds it to what is served."""
    p = METRIC_PREFIX
    return [
        f"{p}_info",
        f"{p}_requests_total",
        f"{p}_errors_total",
        f"{p}_output_tokens_total",
        f"{p}_in_flight",
        f"{p}_workers",
        f"{p}_warmup_requests",
        f"{p}_window_seconds",
        f"{p}_window_requests_per_second",
        f"{p}_window_output_tokens_per_second",
        f"{p}_window_error_ratio",
        f"{p}_window_in_flight",
        *(f"{p}_window_{m}_seconds" for m in _LATENCIES),
    ]


def registry_for(view: LiveView) -> Any:
    """A prometheus-client registry whose one collector reads ``view``'s snapshot per scrape."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        InfoMetricFamily,
    )

    p = METRIC_PREFIX

    class _Collector:
        def collect(self) -> Iterable[Any]:
            snap = view.snapshot()
            tot, win = snap["totals"], snap["window"]
            info = InfoMetricFamily(f"{p}", "the run this generator is sending")
            info.add_metric([], {k: str(v) for k, v in view.info.items()})
            yield info
            req = CounterMetricFamily(
                f"{p}_requests", "finished requests (warm-up excluded)", labels=["outcome"]
            )
            failed = sum(tot["errors"].values())
            req.add_metric(["ok"], tot["ok"])
            req.add_metric(["error"], failed)
            yield req
            err = CounterMetricFamily(
                f"{p}_errors", "failed requests by error class", labels=["error_class"]
            )
            for cls, n in sorted(tot["errors"].items()):
                err.add_metric([cls], n)
            yield err
            yield CounterMetricFamily(
                f"{p}_output_tokens",
                "output tokens of finished requests",
                value=tot["output_tokens"],
            )
            yield GaugeMetricFamily(
                f"{p}_in_flight", "requests in flight now", value=tot["in_flight"]
            )
            yield GaugeMetricFamily(
                f"{p}_workers", "Locust processes reporting", value=snap["workers"]
            )
            yield GaugeMetricFamily(
                f"{p}_warmup_requests", "warm-up requests finished", value=tot["warmup"]
            )
            yield from _window_families(GaugeMetricFamily, snap, win)

        def describe(self) -> Iterable[Any]:
            return []

    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector())
    return reg


def _window_families(gauge: Any, snap: Mapping[str, Any], win: Any) -> Iterable[Any]:
    p = METRIC_PREFIX
    yield gauge(
        f"{p}_window_seconds",
        "width of the window the window_ gauges cover",
        value=float(snap["slice_s"] or 0.0),
    )
    for name, key, what in (
        ("requests_per_second", "requests_per_s", "successful requests per second"),
        ("output_tokens_per_second", "output_tokens_per_s", "output tokens per second"),
        ("error_ratio", "error_ratio", "failed share of the window's requests"),
        ("in_flight", "in_flight", "mean requests in flight"),
    ):
        g = gauge(f"{p}_window_{name}", f"{what}, last complete window")
        if win is not None:
            g.add_metric([], float(win[key]))
        yield g
    for m in _LATENCIES:
        g = gauge(
            f"{p}_window_{m}_seconds",
            f"{m.upper()} quantiles, last complete window",
            labels=["quantile"],
        )
        if win is not None:
            for stat, q in QUANTILES:
                v = win[f"{m}_ms"][stat]
                if v is not None:
                    g.add_metric([f"{q:g}"], v / 1000.0)
        yield g


# ------------------------------------------------------------------ the run's options


def live_config(
    web: str | None,
    web_auth: str | None,
    metrics: str | None,
    role: str = "local",
    otlp: str | None = None,
) -> dict[str, Any] | None:
    """The run config's ``live`` from the spec's ``web`` / ``web_auth`` / ``metrics_port`` /
    ``otlp`` (None: none is on), checked: a usage error names the field. A web UI bound beyond
    loopback needs ``web_auth`` (USER:PASS): Locust's UI can start and stop load."""
    from servecheck.errors import SpecError

    out: dict[str, Any] = {"web": None, "metrics": None, "otlp": None, "tick_s": TICK_S}
    if role == "worker":
        # A worker on another machine always sends its pieces: it cannot know whether its
        # master serves a view (the master drops them when it does not); a piece a second.
        if web is not None or metrics is not None or otlp is not None or web_auth:
            raise SpecError(
                "{web} / {metrics_port} / {otlp} are the master's: a worker sends its view to it"
            )
        return out
    if web is None and metrics is None and otlp is None:
        if web_auth:
            raise SpecError("{web_auth} protects {web}: give {web} [HOST:]PORT with it")
        return None
    if otlp is not None:
        out["otlp"] = _otlp_endpoint(otlp)
    for name, text in (("web", web), ("metrics_port", metrics)):
        if text is None:
            continue
        try:
            host, port = parse_bind(text)
        except ValueError as exc:
            raise SpecError("{" + name + "} {why}", why=str(exc).split(" ", 1)[1]) from None
        out["web" if name == "web" else "metrics"] = [host, port]
    if out["web"] is not None:
        if web_auth is not None and (":" not in web_auth or not web_auth.split(":", 1)[1]):
            raise SpecError("{web_auth}: USER:PASS (a password, not empty)")
        if not is_loopback(out["web"][0]) and not web_auth:
            raise SpecError(
                "{web} {host}: Locust's UI starts and stops load; bound beyond loopback it "
                "needs {web_auth} USER:PASS (HTTP Basic), or bind 127.0.0.1",
                host=out["web"][0],
            )
    if out["web"] is not None and out["web"] == out["metrics"]:
        raise SpecError("{web} and {metrics_port} name the same address")
    return out


def otlp_missing() -> str | None:
    """What is not installed for ``otlp`` (the ``otlp`` extra; None: nothing is missing)."""
    import importlib.util

    for mod in ("opentelemetry.sdk.metrics", "opentelemetry.exporter.otlp.proto.http"):
        try:
            if importlib.util.find_spec(mod) is None:
                return mod
        except ModuleNotFoundError:
            return mod
    return None


def _otlp_endpoint(url: str) -> str:
    from urllib.parse import urlsplit

    from servecheck.errors import SpecError

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SpecError("{otlp} {url!r}: an http(s) URL (http://HOST:4318/v1/metrics)", url=url)
    lacking = otlp_missing()
    if lacking:
        raise SpecError(
            "{otlp} needs the otlp extra (pip install 'servecheck[otlp]'): no {mod}", mod=lacking
        )
    return url


def check_free(live: Mapping[str, Any] | None) -> None:
    """Each address the live view will listen on is free now (a usage error before the run,
    not a Locust that dies at its start)."""
    import socket

    from servecheck.errors import SpecError

    for name, key in (("{web}", "web"), ("{metrics_port}", "metrics")):
        bind = (live or {}).get(key)
        if not bind:
            continue
        family = socket.AF_INET6 if ":" in bind[0] else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((bind[0], int(bind[1])))
            except OSError as exc:
                raise SpecError(
                    name + " {host}:{port}: cannot listen there ({why})",
                    host=bind[0],
                    port=bind[1],
                    why=exc.strerror or str(exc),
                ) from None
