"""The hung-but-healthy monitor beside a load or a soak (the decision: ``analysis/hung.py``).

A thread asks, once a poll: the target's health (its ``health_url``, else ``/health``, else
``/v1/models`` where ``/health`` is not served), the engine's /metrics (``requests_running`` and
``generation_tokens_total`` under the engine's names, ``telemetry/prometheus.py``), and the
caller's streams (a callable: how many are open, the oldest's age, the last token any got). When
the caller wants a canary (``canary_due``: a long load, a soak's idle phase), a second thread sends
one streamed 1-token chat request every ``canary_every_s`` and waits ``canary_within_s`` for its
token. The first witness that speaks while health answers 2xx sets :attr:`HungMonitor.finding`;
the caller stops its run on it.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from servecheck.analysis.hung import HungFinding, HungRule, HungWatch

if TYPE_CHECKING:
    from servecheck.config.model import Target

ClientView = Callable[[], tuple[int, float, float | None]]  # open, oldest open s, last token t
ASK_TIMEOUT_S = 2.0
HUNG_METRICS = ("requests_running", "generation_tokens_total")  # all the watch reads of /metrics
SHARED_FRESH = 2.0  # a shared reading older than this many polls: scrape the page here instead
T = TypeVar("T")
HEARTBEAT_PREFIX = "heartbeat-"  # each Locust process's file (load/generator/locust_user.py)


def answered(rec: Any) -> int:
    """1 for a request the server finished or answered with a refusal (a 429 or a 500 is a
    server that answers), 0 for one that ended without (a stream stuck after its 200 that timed
    out, a connection that failed): only the first kind is a sign of life."""
    return int(rec.error is None or rec.status not in (None, 200))


@dataclass(slots=True)
class Heartbeats:
    """The Locust processes' heartbeat files as a :data:`ClientView`: their open streams, and
    the last time any progress count moved (a token on an open stream, or a request ended)."""

    folder: Path
    progress: dict[str, float] = field(default_factory=dict)
    moved_at: float | None = None

    def __call__(self) -> tuple[int, float, float | None]:
        opened, oldest = 0, 0.0
        for p in self.folder.glob(f"{HEARTBEAT_PREFIX}*.json"):
            try:
                beat = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            opened += int(beat.get("open") or 0)
            oldest = max(oldest, float(beat.get("oldest_open_s") or 0.0))
            count = float(beat.get("progress") or 0.0)
            if self.progress.get(p.name) != count:
                self.progress[p.name] = count
                self.moved_at = float(beat.get("t") or time.time())
        return opened, oldest, self.moved_at

    def remove(self) -> None:
        """The files go when the run ends: they were the watch's, not the run's."""
        for p in self.folder.glob(f"{HEARTBEAT_PREFIX}*"):
            p.unlink(missing_ok=True)


@dataclass(slots=True)
class OpenStreams:
    """A soak's streams as a :data:`ClientView`: the open ones, when each opened, the last read
    any got. ``finding`` is the monitor's finding (its line), for the cycle to stop on."""

    opened: dict[int, float] = field(default_factory=dict)
    moved_at: float | None = None
    finding: Callable[[], str | None] = lambda: None
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    async def watch(self, read: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """``await read(*args, progress=..., **kwargs)`` with the stream counted open meanwhile."""
        k = next(self._ids)
        self.opened[k] = time.time()
        try:
            rec = await read(*args, progress=self.touch, **kwargs)
        finally:
            self.opened.pop(k, None)
        if answered(rec):
            self.touch()
        return rec

    def touch(self) -> None:
        self.moved_at = time.time()

    def __call__(self) -> tuple[int, float, float | None]:
        starts = list(self.opened.values())  # read from the monitor's thread
        return len(starts), (time.time() - min(starts)) if starts else 0.0, self.moved_at


@dataclass(slots=True)
class HungMonitor:
    """Start with :meth:`start`, read :attr:`finding`, end with :meth:`stop` (idempotent)."""

    target: Target
    model: str
    watch: HungWatch
    client: ClientView | None = None
    canary_due: Callable[[], bool] = lambda: False
    poll_s: float = 1.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _metrics_dead: bool = False
    _models_for_health: bool = False
    # Another reader's scrapes of the same /metrics page (the run's Prometheus sampler), used
    # instead of scraping it again while they are fresh: (wall time, canonical values) or None.
    shared: Callable[[], tuple[float, dict[str, float]] | None] | None = None
    _engine_at: float = 0.0  # the newest engine reading taken, either way

    @classmethod
    def for_target(
        cls,
        target: Target,
        model: str,
        rule: HungRule,
        started: float,
        client: ClientView | None = None,
        canary_due: Callable[[], bool] | None = None,
    ) -> HungMonitor:
        watch = HungWatch(rule, started)
        poll = max(0.2, min(1.0, float(rule.stall_s or 30.0) / 5))
        return cls(target, model, watch, client, canary_due or (lambda: False), poll)

    @property
    def finding(self) -> HungFinding | None:
        return self.watch.finding

    def start(self) -> HungMonitor:
        if not self.watch.rule.active:
            return self
        self._threads = [threading.Thread(target=self._observe, daemon=True, name="hung-watch")]
        if self.watch.rule.canary_every_s > 0:
            self._threads.append(
                threading.Thread(target=self._canaries, daemon=True, name="canary")
            )
        for th in self._threads:
            th.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for th in self._threads:
            th.join(timeout=ASK_TIMEOUT_S + 1)  # a canary in flight is a daemon: not waited for

    # -------------------------------------------------------------- the observing thread

    def _observe(self) -> None:
        from servecheck.client.factory import ClientSettings, sync_client

        settings = ClientSettings.for_target(
            self.target, timeout_s=ASK_TIMEOUT_S, connect_timeout_s=ASK_TIMEOUT_S
        )
        with sync_client(settings, bound_body=True) as http:
            while not self._stop.wait(self.poll_s):
                now = time.time()
                self._health(http, now)
                self._engine(http, now)
                if self.client is not None:
                    self.watch.saw_client(now, *self.client())
                if self.watch.check(time.time()) is not None:
                    return

    def _health(self, http: Any, now: float) -> None:
        import httpx

        url = self.target.health_url or self.target.server_root + "/health"
        if self._models_for_health:
            url = self.target.base_url + "/models"
        try:
            status = http.get(url).status_code
        except httpx.HTTPError as exc:
            self.watch.saw_health(now, None, url, type(exc).__name__)
            return
        if status == 404 and not self._models_for_health and not self.target.health_url:
            self._models_for_health = True  # no /health: /v1/models answers for the server
            return self._health(http, now)
        self.watch.saw_health(now, status, url)
        return None

    def share(self, sampler: Any) -> HungMonitor:
        """Read the engine's counters from ``sampler`` (a started PrometheusSampler) where it
        scrapes this watch's page, with this watch's names, at least as often as it polls."""
        from servecheck.telemetry.prometheus import MetricMap

        mine = self._metric_map(MetricMap).only(*HUNG_METRICS).candidates
        if (
            sampler.url == self._metrics_url()
            and sampler.interval_s <= self.poll_s
            and sampler.mapping.only(*HUNG_METRICS).candidates == mine
        ):
            self.shared = lambda: sampler.latest
        return self

    def _engine(self, http: Any, now: float) -> None:
        import httpx

        from servecheck.telemetry.prometheus import MetricMap, extract

        if self._metrics_dead:
            return
        got = self.shared() if self.shared is not None else None
        if got is not None and now - got[0] <= SHARED_FRESH * self.poll_s:
            if got[0] > self._engine_at:  # a new scrape of the sampler's: the same page, read
                self._engine_at = got[0]
                values = got[1]
                self.watch.saw_engine(
                    got[0], values.get("requests_running"), values.get("generation_tokens_total")
                )
            return
        try:
            r = http.get(self._metrics_url())
            wanted = self._metric_map(MetricMap).only(*HUNG_METRICS)
            found = extract(r.text, wanted) if r.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            found = {}
        running, generated = found.get("requests_running"), found.get("generation_tokens_total")
        if running is None and generated is None and self.watch.generated is None:
            self._metrics_dead = True  # no engine counters here: the client and canary judge
        self._engine_at = now
        self.watch.saw_engine(
            now,
            None if running is None else running.value,
            None if generated is None else generated.value,
        )

    def _metrics_url(self) -> str:
        return self.target.metrics_url or self.target.server_root + "/metrics"

    def _metric_map(self, kind: Any) -> Any:
        engine = getattr(self.target, "metrics_engine", None) or self.target.engine
        return kind.for_engine(str(engine or "vllm"))

    # -------------------------------------------------------------- the canary

    def _canaries(self) -> None:
        from servecheck.client.factory import ClientSettings, sync_client

        rule = self.watch.rule
        within = float(rule.canary_within_s or rule.stall_s or 30.0)
        settings = ClientSettings.for_target(
            self.target, timeout_s=within, connect_timeout_s=min(within, ASK_TIMEOUT_S * 2)
        )
        with sync_client(settings) as http:
            while not self._stop.wait(rule.canary_every_s):
                if self.watch.finding is not None:
                    return
                if self.canary_due():
                    self._one_canary(http, settings.headers, within)

    def _one_canary(self, http: Any, headers: Any, within: float) -> None:
        from servecheck.load.generator.request import read_stream_sync
        from servecheck.records.record import RequestRecord

        body = {
            "model": self.model,
            "stream": True,
            "max_tokens": 1,
            "messages": [{"role": "user", "content": "Say OK."}],
        }
        rec = RequestRecord(
            target=self.target.name,
            scenario="canary",
            worker="canary",
            seq=0,
            t_intended=0.0,
            t_sent=0.0,
        )
        t0 = time.monotonic()
        read_stream_sync(
            http,
            self.target.base_url + "/chat/completions",
            body,
            headers,
            rec,
            until=lambda st: bool(st.token_times),
            timeout_s=within,
        )
        # A stream that ended whole without a text token is an answer too: a random-weight or
        # reasoning model's one token may decode to nothing (measured on vLLM CPU's tiny model).
        token = rec.ttft is not None or (rec.error is None and rec.status == 200)
        why = "" if token else (rec.error_message or rec.error or "no token")
        if not token and rec.status is not None and rec.status >= 400:
            return  # an answered refusal (429, 503): the server is up and says why; not hung
        self.watch.saw_canary(time.time(), time.monotonic() - t0, token, why)


__all__ = [
    "HEARTBEAT_PREFIX",
    "ClientView",
    "Heartbeats",
    "HungMonitor",
    "OpenStreams",
    "answered",
]
