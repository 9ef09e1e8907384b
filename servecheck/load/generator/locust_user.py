"""The Locust adapter: the only module of the library that imports ``locust``.

:class:`LLMUser` sends streaming chat completions and measures them the way
``servecheck/client/timing.py`` defines (TTFT stops at the first chunk that carries content or a
tool-call delta, never at the role-only chunk), writes one :class:`RequestRecord` per finished
request to this process's JSONL file (a worker also sends it to the master: transport.py), and fires ONE Locust request event
per request (:func:`request_event`: named after the API's path, its time the E2E) so Locust's
web UI and CSVs count requests and failures as the records do (their percentiles are rounded;
the report uses the records).

Reading: the body is read with ``read1`` on the raw response, which returns whatever bytes the
socket has (never waits for a fixed block size as ``iter_content(1024)`` does); TCP_NODELAY is
set on every connection. SSE is split with a small LF-only fast path; a stream that uses CR or
CRLF line ends switches to the project's strict :class:`~servecheck.client.sse.SSEParser`.
Whether a chunk carries a token is decided by the same function the timing client uses.

Per process, :class:`RunContext` (on Locust's ``Environment`` as ``servecheck``, set in the init
event) holds the run's typed config, read once from the 0600 file ``servecheck load`` wrote (or
built from plain ``locust -f``'s options), and the controller. A request goes through the run's
enabled steps (images, model mix, hang-up, cancel: :meth:`_Controller.build_steps`).
:class:`_Controller` owns the record writer, the bounds (duration, request cap),
the open-loop dispatcher and a generator-lag probe; when the bounds are reached and nothing is in
flight it writes ``worker-<id>.json`` and quits the runner. A worker instead sends its last batch
and its totals to the master, whose :class:`~servecheck.load.generator.transport.Collector` writes the run
folder and quits once every worker is done or lost.
"""

from __future__ import annotations

import csv
import gc
import json
import logging
import os
import random
import re
import resource
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import gevent
import psutil
from gevent.lock import Semaphore
from locust import LoadTestShape, User, constant, events, task
from locust.runners import STATE_MISSING, MasterRunner, WorkerRunner

from servecheck.analysis.aggregate import Rule
from servecheck.analysis.host import machine_cpu
from servecheck.analysis.outage import HOLD, PROBE, Breaker
from servecheck.analysis.server_timings import server_timings
from servecheck.analysis.timings import record_stamps
from servecheck.load.generator.apis import (
    api_headers,
    new_state,
    reply_of,
    request_for,
    resolve_api,
)
from servecheck.load.generator.keeper import CHECKPOINT_S, RecordKeeper, request_event
from servecheck.load.generator.lane import Lane, lane_wanted, with_lane
from servecheck.load.generator.lane_run import LaneRun
from servecheck.load.generator.live import LIVE_MESSAGE, LiveFeed, LiveView, registry_for
from servecheck.load.generator.reactor import StreamReactor
from servecheck.load.generator.stream import (
    StreamState,
    classify,
    record_from_stream,
    record_phases,
    retry_after_seconds,
)
from servecheck.load.generator.transport import (
    BATCH_INTERVAL_S,
    DONE_MESSAGE,
    LOCAL_DIR,
    LOST_AFTER_S,
    QUIT_GRACE_S,
    RECORDS_MESSAGE,
    BatchSender,
    Collector,
)
from servecheck.load.generator.wire import WireClient, WireResult
from servecheck.load.hung_watch import HEARTBEAT_PREFIX, answered
from servecheck.load.plan import ENV_CONFIG, PlainInputs, RunConfig
from servecheck.load.workload.cancel import CancelStep, HangUp
from servecheck.load.workload.dataset import dataset_fingerprint
from servecheck.load.workload.images import ImagePool, check_images
from servecheck.load.workload.lengths import apply_lengths
from servecheck.load.workload.mix import WeightedCycle
from servecheck.load.workload.phased import ProfileSchedule
from servecheck.load.workload.planned import PlannedRequest, Send, Steps, single_turn
from servecheck.load.workload.prompts import (
    PromptSet,
    PromptSpec,
    build_prompt_set,
    tokenize_counter,
)
from servecheck.load.workload.schedule import (
    RATE_MODES,
    FixedRate,
    Gamma,
    Poisson,
    Stage,
    StageShape,
    for_worker,
    split_count,
)
from servecheck.load.workload.trace import TraceSchedule, open_schedule
from servecheck.records.record import LOST, RATE_LIMITED, RequestRecord, cached_tokens

__all__ = ["LLMUser", "scenario_shape"]

log = logging.getLogger("servecheck.load")
_perf = time.perf_counter
HEARTBEAT_S = 1.0  # the hung-but-healthy watch's heartbeat (load/hung_watch.py)
LAG_PROBE_S = 0.05
OPEN_MODES = (*RATE_MODES, "trace", "profile")
Encoded = tuple[
    PlannedRequest, str, bytes
]  # a request planned and encoded once (build)  # one dispatcher sends at scheduled times


# ------------------------------------------------------------------ per-process controller


class _Controller:
    """One per Locust process that sends load (local runner or worker)."""

    def __init__(self, environment: Any, cfg: RunConfig, index: int) -> None:
        self.env = environment
        self.cfg = cfg
        self.index = index
        # the model mix (a plan's models): each request names the next model of the cycle
        self.mix = WeightedCycle(cfg.model_mix) if cfg.model_mix else None
        self.worker = (
            f"w{index}-{os.getpid()}"
            if cfg.workers > 1 or isinstance(environment.runner, WorkerRunner)
            else f"local-{os.getpid()}"
        )
        # A worker's records go to the master over Locust's channel (transport.py); its own
        # folder keeps an append-only copy in local/, apart from the files the master writes.
        runner = environment.runner
        self.sender: BatchSender | None = None
        self.out_dir = Path(cfg.records_dir)
        if isinstance(runner, WorkerRunner):
            self.out_dir = self.out_dir / LOCAL_DIR
            self.sender = BatchSender(
                self.worker, lambda data: runner.send_message(RECORDS_MESSAGE, data)
            )
        self.out_dir.mkdir(parents=True, exist_ok=True)
        rule = Rule.from_dict(cfg.aggregate) if cfg.aggregate else Rule(mode=cfg.mode)
        self.keeper = RecordKeeper(  # the aggregate, and the records --records keeps
            self.out_dir,
            self.worker,
            cfg.records,
            rule.share(index, cfg.workers),
            seed=cfg.seed * 1009 + index,
            sender=self.sender,
        )
        self.epoch0 = time.time()
        self.perf0 = _perf()
        self.start = self.perf0
        self.deadline = float("inf")
        self.cap: int | None = None
        if cfg.max_requests is not None:
            self.cap = split_count(
                cfg.max_requests, index % max(1, cfg.workers), max(1, cfg.workers)
            )
        self.sent = 0
        self.inflight = 0
        # The streams open now and the requests ended, for the hung-but-healthy watch's
        # heartbeat file (load/hung_watch.py reads it; analysis/hung.py decides).
        self.open_sends: dict[int, Send] = {}
        self.progress = 0  # tokens of ended streams, and answers that were not a stuck stream
        self.tokens = 0
        self.finished = False
        self.planned: int | None = None
        self.loop_lag: list[float] = []
        # Each request's X-Request-Id (and the record's request_id): run, worker, sequence number.
        self.rid_prefix = re.sub(r"[^A-Za-z0-9._:-]", "_", f"{cfg.run_id}-{self.worker}")
        self.prompts = PromptSet()
        self.dispatcher_claimed = False
        self.sched: FixedRate | Poisson | Gamma | TraceSchedule | ProfileSchedule | None = None
        self.profile = cfg.profile
        # Headers, auth, timeouts and TLS: the run's ClientSettings (client/factory.py), plus
        # what a stream and the API add (load/generator/apis.py).
        settings = cfg.client_settings()
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            **settings.headers,
        }
        if self.profile is not None and not self.profile.keepalive:
            # churn: the server closes each connection after its answer, so every request
            # opens its own and its set-up shows in the TTFT decomposition (analysis/timings.py)
            self.headers["Connection"] = "close"
        self.headers.update(api_headers(cfg.api, cfg.api_key))
        settings = settings.with_(headers=self.headers)
        # --images: drawn or read once per process, before the run's clock (load/workload/images.py)
        self.images = ImagePool(cfg.images, cfg.seed * 31 + index) if cfg.images else None
        # Plain HTTP: one reader for all streams (the native thread or the epoll loop), kernel
        # arrival times (reactor.py);
        # https: a blocking read per greenlet (wire.py).
        self.wire: StreamReactor | WireClient
        rid = cfg.request_id_header
        if cfg.base_url.startswith("https:"):
            self.wire = WireClient.from_settings(settings, request_id_header=rid)
        else:
            self.wire = StreamReactor.from_settings(settings, request_id_header=rid)
        self._probe: Any = None
        self.cpu0 = 0.0
        self.machine0: Any = None  # psutil.cpu_times() at the first request (analysis/host.py)
        # --cancel (load/workload/cancel.py) and the outage breaker over this process's records
        # (analysis/outage.py): during an outage one probe at a time, the other sends held or lost.
        self.cancel = cfg.cancel
        self.breaker = Breaker(self.keeper.agg.outages)
        # --web / --metrics-port: the aggregate read once a tick (load/generator/live.py), not per request
        self.live = LiveFeed(self.keeper.agg, self.worker) if cfg.live else None
        self.steps = Steps()  # the per-request steps: build_steps, once the user class is known
        self.honour_retry_after = bool(cfg.retry_after_max_s) and cfg.mode not in RATE_MODES
        self.stopped: str | None = None  # why Locust stopped it before its bounds (--web)
        self.lane_run: LaneRun | None = None  # the closed loop's native lane (lane_run.py)
        self.lane_refused = False
        self.lane_lock = Semaphore()

    def auth_headers(self) -> dict[str, str]:
        """The API key as the target takes it (a side probe's: /tokenize)."""
        return self.cfg.auth_headers()

    def wall(self, t_perf: float) -> float:
        return self.epoch0 + (t_perf - self.perf0)

    def begin(self) -> None:
        # Everything alive now (Locust, gevent, the prompts) lives for the whole run: move it out of
        # the collector's sight, and collect young objects less often. A full collection walking
        # it all stalled the one event loop for 10-30 ms, and every stream waited.
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu0 = ru.ru_utime + ru.ru_stime
        self.machine0 = psutil.cpu_times()
        self.start = _perf()
        if self.cfg.duration_s:
            self.deadline = self.start + self.cfg.duration_s
        if self.cfg.mode in OPEN_MODES and (self.cfg.rate or self.cfg.trace or self.profile):
            sched = self.sched = self.arrivals()
            planned = sched.planned(self.cfg.duration_s) if self.cfg.duration_s else None
            if self.cap is not None:
                planned = self.cap if planned is None else min(planned, self.cap)
            self.planned = planned
        self._probe = gevent.spawn(self._lag_probe)
        if self.sender is not None:
            gevent.spawn(self._send_batches)
        gevent.spawn(self._checkpoints)
        gevent.spawn(self._heartbeats)
        if self.live is not None:
            gevent.spawn(self._live_ticks)

    def _live_ticks(self) -> None:
        """The live view's piece every tick: to this process's view, or to the master."""
        tick = float((self.cfg.live or {}).get("tick_s") or 1.0)
        while not self.finished:
            gevent.sleep(tick)
            self.live_tick()

    def live_tick(self) -> None:
        if self.live is None:
            return
        piece = self.live.tick(time.time(), self.inflight)
        runner = self.env.runner
        try:
            if isinstance(runner, WorkerRunner):
                runner.send_message(LIVE_MESSAGE, piece)
            else:
                view = getattr(self.env, "servecheck_live", None)
                if view is not None:
                    view.feed(piece)
        except Exception as exc:  # noqa: BLE001 - the live view is a nicety: the run goes on
            log.warning("live view: %s", exc)

    def _checkpoints(self) -> None:
        """The aggregate's state every CHECKPOINT_S: a process killed mid-run leaves it."""
        while not self.finished:
            gevent.sleep(CHECKPOINT_S)
            if not self.finished:
                self.keeper.checkpoint()

    def _heartbeats(self) -> None:
        """Every second: how many streams are open, the oldest's age and a progress count (every
        token received, and every answer but a stuck stream's: load/hung_watch.py's ``answered``)
        that stands still only when no stream moves."""
        path = self.out_dir / f"{HEARTBEAT_PREFIX}{self.worker}.json"
        while not self.finished:
            gevent.sleep(HEARTBEAT_S)
            now = _perf()
            opened = [s.t0 for s in self.open_sends.values()]
            moving = sum(len(s.stream.token_times) for s in self.open_sends.values() if s.stream)
            lane = self.lane_run
            if lane is not None and not lane.over.is_set():
                n, oldest, reads = lane.lane.open()  # the lane's open exchanges, reads so far
                opened += [oldest] * n
                moving += reads
            beat = {
                "t": time.time(),
                "open": len(opened),
                "oldest_open_s": now - min(opened) if opened else 0.0,
                "progress": self.progress + moving,
            }
            tmp = path.with_suffix(".tmp")
            try:
                tmp.write_text(json.dumps(beat), encoding="utf-8")
                tmp.replace(path)
            except OSError as exc:  # a nicety for the watch: the run goes on
                log.warning("heartbeat: %s", exc)

    def _send_batches(self) -> None:
        """Hand queued records to the master every BATCH_INTERVAL_S (full batches go at once)."""
        while not self.finished and self.sender is not None:
            gevent.sleep(BATCH_INTERVAL_S)
            self._flush()

    def _flush(self) -> None:
        if self.sender is None:
            return
        try:
            self.sender.flush(self.sent)
        except Exception as exc:  # noqa: BLE001 - the local copy still has them; the master counts the gap
            log.warning("could not send records to the master: %s", exc)

    def arrivals(self) -> FixedRate | Poisson | Gamma | TraceSchedule | ProfileSchedule:
        """This worker's open-loop schedule: a fixed rate, Poisson, gamma, or its share of a
        trace or of a load profile's arrivals (load/workload/phased.py)."""
        cfg = self.cfg
        if cfg.trace:
            return open_schedule(cfg, self.index)
        if cfg.mode == "profile" and self.profile is not None:
            return ProfileSchedule(
                self.profile,
                self.index % cfg.workers,
                cfg.workers,
                cfg.seed,
                cfg.profile_poisson,
            )
        return for_worker(
            cfg.rate or 1.0,
            cfg.mode == "poisson",
            cfg.seed,
            self.index % cfg.workers,
            cfg.workers,
            burstiness=cfg.burstiness if cfg.mode == "gamma" else None,
        )

    def _lag_probe(self) -> None:
        """Sleep a fixed interval and record the overshoot: the generator's own scheduling delay."""
        while not self.finished:
            t = _perf()
            gevent.sleep(LAG_PROBE_S)
            self.loop_lag.append(max(0.0, _perf() - t - LAG_PROBE_S))

    def accepting(self) -> bool:
        if self.finished or _perf() >= self.deadline:
            return False
        return self.cap is None or self.sent < self.cap

    def maybe_finish(self) -> None:
        if not self.finished and not self.accepting() and self.inflight == 0 and self.bounded:
            self.finish(quit_runner=True)

    @property
    def bounded(self) -> bool:
        return self.cfg.duration_s is not None or self.cfg.max_requests is not None

    def finish(self, quit_runner: bool) -> None:
        if self.finished:
            return
        self.finished = True
        self.live_tick()  # the live view's last piece: its charts end where the run did
        if self.lane_run is not None:
            self.lane_run.close()  # first: its thread's CPU is counted as it stops
        ru = resource.getrusage(resource.RUSAGE_SELF)
        info = {
            "worker": self.worker,
            "index": self.index,
            "pid": os.getpid(),
            "mode": self.cfg.mode,
            "sent": self.sent,
            "records": self.keeper.count,
            "planned": self.planned,
            "tokens_client": self.tokens,
            "prompt_method": self.prompts.method,
            "cpu_s": round(
                ru.ru_utime + ru.ru_stime - self.cpu0, 4
            ),  # since the first request, not imports
            "started": self.wall(self.start),
            "ended": self.wall(_perf()),
            "loop_lag_s": [round(x, 6) for x in self.loop_lag],
            "host_cpu": (
                None
                if self.machine0 is None
                else machine_cpu(self.machine0, psutil.cpu_times(), psutil.cpu_count() or 1)
            ),
            "reader": self.reader_info(),
            "stopped": self.stopped,
        }
        self.keeper.close()
        self.wire.close()
        path = self.out_dir / f"worker-{self.worker}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(info), encoding="utf-8")
        os.replace(tmp, path)
        runner = self.env.runner
        if isinstance(runner, WorkerRunner) and self.sender is not None:
            # The last batch, then the totals the master checks it received (same connection,
            # so they arrive in this order). Then the master quits once every worker is done,
            # and its quit collects the workers' final Locust stats.
            self._flush()
            hist = self.keeper.totals()
            info["histograms"] = hist["histograms"]
            totals = {**self.sender.totals(), "ok": hist["ok"], "tokens": hist["tokens"]}
            # Our last Locust stats go first too: the master's quit waits only a fixed 0.5 s for
            # final reports, which a loaded machine misses (its CSV then counted 12 of 24).
            send_stats = getattr(runner, "_send_stats", None)
            try:
                if callable(send_stats):
                    send_stats()
                runner.send_message(
                    DONE_MESSAGE,
                    {
                        "worker": self.worker,
                        "records": self.keeper.count,
                        "sent": self.sent,
                        "aggregate": self.keeper.agg.state(),
                        "complete": quit_runner,
                        "dataset": dataset_fingerprint(self.cfg.dataset),
                        "totals": totals,
                        "info": info,
                    },
                )
            except Exception as exc:  # noqa: BLE001 - the master then reports this worker lost
                log.warning("could not tell the master this worker is done: %s", exc)
        elif quit_runner and runner is not None:
            gevent.spawn_later(0.05, _quit, self.env)

    def reader_info(self) -> dict[str, Any]:
        """Which reader timed the tokens, and how (kernel receive stamps or the reader's clock)."""
        w = self.wire
        if isinstance(w, StreamReactor):
            info = {
                "kind": w.kind,
                "reads": w.reads,
                "wakes": w.wakes,
                "kernel_stamps": w.kernel_stamps,
                "user_stamps": w.user_stamps,
                "thread": w.thread_stats(),
            }
            return info if self.lane_run is None else with_lane(info, self.lane_run.lane.stats())
        return {
            "kind": "blocking",
            "reads": None,
            "wakes": None,
            "kernel_stamps": 0,
            "user_stamps": None,
        }

    # -- one request -------------------------------------------------------------

    def admit(self, intended: float) -> str | None:
        """The breaker's word on a send due now (analysis/outage.py): ``send``, ``probe``, or None
        (an outage: open loop, the send is recorded as lost; closed loop, it waited in vain)."""
        while True:
            how = self.breaker.admit(_perf())
            if how != HOLD:
                return how
            if self.cfg.mode in OPEN_MODES:
                self.sent += 1
                wall = self.wall(intended)
                rec = RequestRecord(
                    target=self.cfg.target,
                    scenario=self.cfg.scenario,
                    worker=self.worker,
                    seq=self.sent,
                    t_intended=wall,
                    t_sent=wall,
                    t_done=wall,
                    request_id=f"{self.rid_prefix}-{self.sent}",
                    error=LOST,
                    error_message="not sent: the target was down (an outage, analysis/outage.py)",
                )
                if self.keeper.keep(rec):
                    self._flush()
                self._fire(rec)
                return None
            if not self.accepting():
                return None
            gevent.sleep(0.1)

    def build_steps(self, user_cls: type[LLMUser] | None) -> Steps:
        """The run's per-request steps, the enabled ones only, each from its feature's module
        (load/workload/planned.py's Steps): a new feature adds a step here, not a branch in
        :meth:`send`. Built once per run."""
        steps = Steps()
        if self.images is not None:  # --images (load/workload/images.py)
            steps.shape.append(self.images.shape)
        if self.mix is not None:  # a model mix (load/workload/mix.py)
            steps.shape.append(self.mix.shape)
        stop_at = getattr(user_cls, "hang_up_after_tokens", None)
        if user_cls is not None and stop_at is not None and stop_at > 0:  # abandoned streams
            steps.arm.append(HangUp(stop_at, user_cls.hang_up_share).arm)
        if self.cancel is not None:  # --cancel (load/workload/cancel.py): after a hang-up, wins
            cancel = CancelStep(self.cancel)
            steps.arm.append(cancel.arm)
            steps.settle.append(cancel.settle)
        return steps

    def build(
        self, user: LLMUser, intended: float, bodies: dict[int, Encoded] | None = None
    ) -> tuple[Send, RequestRecord, str, bytes]:
        """The next request as ``user`` plans it: its steps applied, its body, its record
        (counted as sent from here). ``bodies``: a cache of single-turn requests by prompt,
        for a run whose requests are the plain ones (the lane's: no steps, no plan of its own)."""
        cfg = self.cfg
        if bodies is None:
            # a PlannedRequest (servecheck/load/workload/conversation.py), then the run's steps
            send = Send(user.plan_request(self), user.rng, cfg.model)
            for shape in self.steps.shape:
                shape(send)
            prompt = send.prompt
            path, body = request_for(
                cfg.api, send.model, prompt, user.kind_body(prompt.kind), cfg.extra_body
            )
            payload = json.dumps(body).encode()
        else:
            prompt, path, payload = self._encoded(user, bodies)
            send = Send(prompt, user.rng, cfg.model)
        self.sent += 1
        self.inflight += 1
        seq = self.sent
        t0 = send.t0 = _perf()
        if seq == 1:
            self.keeper.begin(self.wall(t0))  # the run's start on this process's clock
        rec = RequestRecord(
            target=cfg.target,
            scenario=cfg.scenario,
            worker=self.worker,
            seq=seq,
            t_intended=self.wall(intended),
            t_sent=self.wall(t0),
            kind=prompt.kind,
            prompt_tokens=prompt.prompt_tokens,
            request_id=f"{self.rid_prefix}-{seq}",
            model=send.model if send.named else None,
            **prompt.fields,
        )
        return send, rec, path, payload

    def _encoded(self, user: LLMUser, bodies: dict[int, Encoded]) -> Encoded:
        """A plain single-turn request's planned form, path and body, encoded once per prompt
        (the prompt set is a fixed list: load/workload/prompts.py)."""
        drawn = self.prompts.pick(user.rng)
        hit = bodies.get(id(drawn))
        if hit is None:
            cfg, prompt = self.cfg, single_turn(drawn)
            path, body = request_for(
                cfg.api, cfg.model, prompt, user.kind_body(prompt.kind), cfg.extra_body
            )
            hit = bodies[id(drawn)] = (prompt, path, json.dumps(body).encode())
        return hit

    def send(self, user: LLMUser, intended: float) -> None:
        """Send one streaming request; record it whatever happens. Never raises."""
        cfg = self.cfg
        how = self.admit(intended)  # the outage breaker (analysis/outage.py)
        if how is None:
            return
        send, rec, path, payload = self.build(user, intended)
        prompt, seq, t0 = send.prompt, rec.seq, send.t0
        st = send.stream = new_state(cfg.api, prompt.capture)  # chat's reader, or messages'
        self.open_sends[seq] = send
        # A scenario that continues from the reply (multi-turn) gets the stream's bytes: every read
        # then goes through the parser (no token shortcut), and the text is taken after the end.
        raw: list[bytes] | None = [] if prompt.capture else None
        feed = st.feed if raw is None else _capture(st.feed, raw)
        for arm in self.steps.arm:
            arm(send)
        try:
            res = self.wire.post_stream(
                path,
                payload,
                feed,
                deadline=t0 + cfg.timeout_s,
                tokens=st if raw is None and st.fast else None,
                request_id=rec.request_id,
                until=send.until,
            )
        except Exception as exc:  # noqa: BLE001 - a bug here must cost one record, not the run
            res = WireResult(
                error="stream-error", error_message=f"{type(exc).__name__}: {exc}", t_end=_perf()
            )
        except BaseException:
            # Locust stopped this user mid-request (a shape stepping down, the run ending): the
            # generator cancelled it, so it is neither a success nor a server error; no record.
            self.inflight -= 1
            self.open_sends.pop(seq, None)
            self.breaker.probing = False
            raise
        self.open_sends.pop(seq, None)
        self.settle(send, rec, res)
        if how == PROBE:
            self.breaker.probed(_perf())
        if prompt.state is not None:
            user.after_response(prompt, rec, reply_of(st, b"".join(raw or ())), st.usage)
        if rec.retry_after_s and self.honour_retry_after:
            # Closed loop, --honour-retry-after: this user backs off as a well-behaved client
            # would (open-loop arrivals are the schedule and are not delayed).
            gevent.sleep(
                max(0.0, min(rec.retry_after_s, cfg.retry_after_max_s, self.deadline - _perf()))
            )

    def settle(self, send: Send, rec: RequestRecord, res: WireResult) -> None:
        """A request that ended (the reactor's or the lane's): its record filled and kept, its
        Locust event fired."""
        self._record(send, rec, res)
        self.progress += len(send.stream.token_times) + answered(rec)
        if self.keeper.keep(rec):
            self._flush()
        self.inflight -= 1
        self._fire(rec)

    # -- the native lane (lane.py, lane_run.py) ---------------------------------------------

    def lane_for(self, user: LLMUser) -> LaneRun | None:
        """The closed loop's native lane, where this run can use it (else None: the reactor)."""
        with self.lane_lock:  # resolving the address yields: every other user waits for it here
            if self.lane_run is not None:
                return None if self.lane_run.over.is_set() else self.lane_run
            if self.lane_refused or not self._lane_fits(user):
                self.lane_refused = True
                return None
            wire = self.wire
            assert isinstance(wire, StreamReactor)
            lane = Lane(wire.origin, wire.connect_timeout_s, wire.read_timeout_s)
            self.lane_run = LaneRun(self, lane, user, self.cfg.timeout_s)
            return self.lane_run

    def _lane_fits(self, user: LLMUser) -> bool:
        """Only the common run: closed loop, plain HTTP with the native reader, chat, no
        per-request steps, single-turn requests, no back-off (lane.py says why)."""
        cls = type(user)
        return (
            lane_wanted()
            and self.cfg.mode not in OPEN_MODES
            and self.cfg.api == "chat"
            and isinstance(self.wire, StreamReactor)
            and self.wire.kind == "thread"
            and not (self.steps.shape or self.steps.arm or self.steps.settle)
            and not self.honour_retry_after
            and cls.plan_request is LLMUser.plan_request
            and cls.after_response is LLMUser.after_response
        )

    def stream_state(self) -> StreamState:
        return new_state(self.cfg.api, False)

    def request_bytes(self, path: str, payload: bytes, request_id: str) -> bytes:
        assert isinstance(self.wire, StreamReactor)
        return self.wire.origin.request(path, payload, request_id)

    def unsend(self, count: int) -> None:
        """Requests built for the lane that it never sent (the run stopped first)."""
        self.sent -= count
        self.inflight -= count

    def _record(self, send: Send, rec: RequestRecord, res: WireResult) -> None:
        """Fill ``rec`` from the reader's result and the stream's state, then the steps'."""
        st = send.stream
        t_end = res.t_end or _perf()
        if res.t_sent:
            # Time from the send itself, not from building the request (a pooled connection
            # sends at once; a new one first connects, which is part of the request's latency
            # only in TTFT-from-intended).
            send.t0 = res.t_sent
            rec.t_sent = self.wall(send.t0)
        t0 = send.t0
        st.close(t_end)
        rec.status = res.status
        rec.t_done = self.wall(t_end)
        rec.error, rec.error_message = classify(res, st)
        if rec.error == RATE_LIMITED:
            rec.retry_after_s = retry_after_seconds(res.headers.get("retry-after"))
        rec.abandoned = res.hung_up  # a cancel step says which hang-ups were its own
        for settle in self.steps.settle:
            settle(send, rec, res)
        self.tokens += len(st.token_times)
        record_from_stream(
            rec,
            ttft=None if st.t_first is None else st.t_first - t0,
            e2e=t_end - t0,
            token_times=st.token_times,
            usage=st.usage,
        )
        if st.usage is not None:
            rec.cached_tokens = cached_tokens(st.usage)
        if st.timed is not None:  # once a request, from the chunk that carried them
            rec.server_timings = server_timings(st.timed)
        record_phases(rec, st, t0)
        record_stamps(rec, res, st, t0, self.cfg.request_id_header)

    def _fire(self, rec: RequestRecord) -> None:
        self.env.events.request.fire(**request_event(rec, self.cfg.api, self.cfg.scenario))


def _capture(feed: Any, raw: list[bytes]) -> Any:
    def capturing(data: bytes, t: float) -> None:
        raw.append(data)
        feed(data, t)

    return capturing


@dataclass(slots=True)
class RunContext:
    """This Locust process's run, hung on Locust's ``Environment`` as ``servecheck`` (the one
    object Locust hands every part, env.py): the typed config, read once from the run's 0600
    file, and the controller, built on first use.

    Plain ``locust -f`` has no file: ``cfg`` is then built from :attr:`inputs` (Locust options
    registered by servecheck/scenarios/_options.py) when the first user starts.
    """

    inputs: PlainInputs
    cfg: RunConfig | None = None
    from_file: bool = False  # servecheck load's config; else built per test (plain locust -f)
    ctrl: _Controller | None = None
    # users start concurrently and model discovery yields: one of them builds the controller
    lock: Semaphore = field(default_factory=lambda: Semaphore(1))

    @classmethod
    def open(cls, environment: Any) -> RunContext:
        inputs = PlainInputs.of(getattr(environment, "parsed_options", None))
        path = os.environ.get(ENV_CONFIG)
        cfg = RunConfig.load(path) if path else None
        if cfg is not None:  # the dataset's sizing is a scenario knob, read at the edge
            cfg.dataset_sample = inputs.dataset_sample
            cfg.dataset_max_tokens = inputs.dataset_max_tokens
        return cls(inputs, cfg, from_file=cfg is not None)


def run_context(environment: Any) -> RunContext:
    """The run hung on ``environment`` (by the init event; opened here for an Environment that
    never fired it, as a test's)."""
    ctx = getattr(environment, "servecheck", None)
    if ctx is None:
        ctx = environment.servecheck = RunContext.open(environment)
    return ctx


@events.init.add_listener
def _open_run(environment: Any, **_: Any) -> None:
    """Read the run's config once per process, before any other part needs it."""
    environment.servecheck = RunContext.open(environment)


def _plain_config(environment: Any, user_cls: type[LLMUser] | None, opts: PlainInputs) -> RunConfig:
    """Plain ``locust -f``: the target from ``--servecheck-target`` or ``--host``, and the rest
    from the options (servecheck/scenarios/_options.py), as one RunConfig."""
    base, headers, target_name, timeout = environment.host or "", {}, "host", 60.0
    target = None
    api_key: str | None = None
    verify_tls = True
    if opts.target:
        from servecheck.client.factory import ClientSettings
        from servecheck.config.loader import load_targets

        target = load_targets(opts.targets_file).get(opts.target)
        settings = ClientSettings.for_target(target)
        base, target_name, timeout = settings.base_url, target.name, settings.timeout_s
        headers = dict(target.headers)
        verify_tls = settings.verify_tls
        auth = target.auth_headers()
        if auth:
            api_key = next(iter(auth.values())).removeprefix("Bearer ")
    if not base:
        raise RuntimeError(
            "no target: pass --host http://HOST:PORT/v1 or --servecheck-target NAME "
            "(or its variable: servecheck/scenarios/_options.py)"
        )
    from servecheck.client.models import choose_model, model_for_target

    # Never a guessed model: a failed listing stops the run and says how to name one. A named
    # target's declared models: and verify_tls count, as for every other runner.
    choice = (
        model_for_target(target, opts.model)
        if target is not None
        else choose_model(base, headers, explicit=opts.model, what=target_name)
    )
    logging.getLogger(__name__).info("servecheck: %s", choice.line())
    run_id = time.strftime("locust-%Y%m%d-%H%M%S")
    scenario = getattr(user_cls, "scenario", "chat")
    return RunConfig(
        run_id=run_id,
        target=target_name,
        scenario=scenario,
        base_url=base,
        model=choice.model,
        headers=headers,
        timeout_s=timeout,
        api_key=api_key,
        api_key_header=target.api_key_header if target is not None else "authorization",
        verify_tls=verify_tls,
        records_dir=opts.records_dir or str(Path("reports") / run_id),
        dataset=opts.dataset,
        dataset_format=opts.dataset_format,
        dataset_sample=opts.dataset_sample,
        dataset_max_tokens=opts.dataset_max_tokens,
        # Plain locust -f has no --trace: the option replays a file on its schedule.
        mode="trace" if opts.trace else "closed",
        # A bound Locust has no option for: stop after N requests (-t stays the backstop).
        max_requests=opts.max_requests,
        trace=str(Path(opts.trace).resolve()) if opts.trace else None,
        trace_format=opts.trace_format,
        trace_speed=opts.trace_speed,
        api=resolve_api(opts.api, scenario),
        images=check_images(opts.images),
    )


def _user_class(environment: Any) -> type[LLMUser] | None:
    for cls in environment.user_classes or ():
        if issubclass(cls, LLMUser):
            return cls
    return None


def controller(environment: Any) -> _Controller:
    """This process's controller, created on first use (after the runner exists)."""
    ctx = run_context(environment)
    ctrl = ctx.ctrl
    if ctrl is not None:
        return ctrl
    with ctx.lock:  # users start concurrently and model discovery yields: build one controller
        ctrl = ctx.ctrl
        if ctrl is not None:
            return ctrl
        user_cls = _user_class(environment)
        if ctx.cfg is None:  # plain locust -f: built per test (its own run id and folder)
            ctx.cfg = _plain_config(environment, user_cls, ctx.inputs)
        cfg = ctx.cfg
        runner = environment.runner
        index = (
            max(0, getattr(runner, "worker_index", 0)) if isinstance(runner, WorkerRunner) else 0
        )
        ctrl = _Controller(environment, cfg, index)
        if cfg.prompts:
            ctrl.prompts = PromptSet(
                prompts=[_prompt(p) for p in cfg.prompts],
                weights=[float(p.get("weight", 1.0)) for p in cfg.prompts],
                method=cfg.prompt_method,
            )
        else:
            mix = user_cls.mix if user_cls is not None else [PromptSpec(128, 64)]
            mix = apply_lengths(mix, cfg.input_tokens, cfg.output_tokens, cfg.seed)
            counter, flavour = (None, "")
            if cfg.use_tokenize:
                root = cfg.base_url.rstrip("/").removesuffix("/v1")
                counter, flavour = tokenize_counter(
                    root, cfg.model, ctrl.auth_headers(), timeout_s=cfg.probe_timeout_s
                )
            if cfg.context_length:
                # A scenario's lengths are for a big model; on a small context keep every request
                # inside it (16 tokens for the chat template), or the run measures 400s.
                room = cfg.context_length - 16
                # Without the target's /tokenize the prompt length is a chars-per-token guess, which a
                # small or odd tokenizer can miss by 2x (measured: 253 guessed, 515 real on the
                # project's tiny model): then only half the prompt's share of the room is used.
                share = 1.0 if counter is not None else 0.5
                mix = [
                    replace(
                        m,
                        prompt_tokens=max(
                            8,
                            min(
                                m.prompt_tokens,
                                int((room - min(m.output_tokens, room // 2)) * share),
                            ),
                        ),
                        output_tokens=min(m.output_tokens, room // 2),
                    )
                    for m in mix
                ]
            ctrl.prompts = build_prompt_set(mix, seed=cfg.seed, count=counter, tokenizer=flavour)
        ctrl.steps = ctrl.build_steps(user_cls)
        if user_cls is not None:
            user_cls.prepare_run(ctrl)
        ctrl.begin()
        ctx.ctrl = ctrl
    return ctrl


def _prompt(d: dict[str, Any]) -> Any:
    from servecheck.load.workload.prompts import Prompt

    return Prompt(d["text"], int(d["prompt_tokens"]), int(d["max_tokens"]), d.get("kind", "chat"))


def _master_run(ctx: RunContext) -> tuple[str, str | None]:
    """The master's run folder and the fingerprint of the dataset it was given, from its run
    configuration (``servecheck load --master``), else its options (plain ``locust -f``)."""
    if ctx.cfg is not None:
        return ctx.cfg.records_dir, dataset_fingerprint(ctx.cfg.dataset)
    records_dir = ctx.inputs.records_dir or str(
        Path("reports") / time.strftime("locust-%Y%m%d-%H%M%S")
    )
    return records_dir, dataset_fingerprint(ctx.inputs.dataset)


@events.init.add_listener
def _on_init(environment: Any, **_: Any) -> None:
    runner = environment.runner
    if not isinstance(runner, MasterRunner):
        return
    expected = int(getattr(environment.parsed_options, "expect_workers", 1) or 1)
    # The master alone writes the run folder: records arrive over Locust's channel.
    records_dir, dataset = _master_run(run_context(environment))
    collector = Collector(records_dir, expected, dataset=dataset)
    quitting: list[bool] = []

    def maybe_quit() -> None:
        if not quitting and collector.finished(runner.worker_count):
            quitting.append(True)
            gevent.spawn_later(0.05, _quit, environment)

    def on_records(msg: Any, **_kw: Any) -> None:
        collector.on_batch(str(msg.node_id), msg.data)

    def on_done(msg: Any, **_kw: Any) -> None:
        led = collector.on_done(str(msg.node_id), msg.data)
        if led.mismatch:
            log.error("worker %s: records differ from what it sent: %s", led.worker, led.mismatch)
        maybe_quit()

    missing_since: dict[str, float] = {}

    def watch() -> None:
        # Locust marks a worker missing after its heartbeats stop (about 3 s) and forgets one that
        # quit; either way, one that never said done is lost, and the run says so. Missing
        # heartbeats also happen to a live worker on a starved machine (Locust heals it on the
        # next one), so a missing worker is lost only after LOST_AFTER_S; one that quit gets
        # QUIT_GRACE_S for a done message still on its way.
        while True:
            gevent.sleep(0.5)
            now = _perf()
            for led in collector.running():
                node = runner.clients.get(led.node)
                if node is not None and node.state != STATE_MISSING:
                    missing_since.pop(led.node, None)
                    continue
                since = missing_since.setdefault(led.node, now)
                if now - since >= (QUIT_GRACE_S if node is None else LOST_AFTER_S):
                    collector.on_lost(led.node)
                    log.error(
                        "worker %s disconnected: %d records kept, %d requests lost",
                        led.worker,
                        led.records,
                        led.lost_requests,
                    )
            maybe_quit()

    runner.register_message(RECORDS_MESSAGE, on_records)
    runner.register_message(DONE_MESSAGE, on_done)
    gevent.spawn(watch)
    environment.events.quitting.add_listener(lambda **_kw: collector.close())


def _quit(environment: Any) -> None:
    """Quit the runner, and Locust's web UI with it (``--web``: Locust would keep it up)."""
    environment.runner.quit()
    web_ui = getattr(environment, "web_ui", None)
    if web_ui is not None:
        web_ui.stop()


@events.init.add_listener
def _live_init(environment: Any, **_: Any) -> None:
    """``--web`` / ``--metrics-port``: the live view, served by the local runner or the master
    (whose workers send it their pieces); load/generator/live.py, load/generator/live_web.py."""
    cfg = run_context(environment).cfg
    runner = environment.runner
    if cfg is None or isinstance(runner, WorkerRunner):
        return
    if isinstance(runner, MasterRunner):  # workers on other machines send pieces regardless

        def on_live(msg: Any, **_kw: Any) -> None:
            view = getattr(environment, "servecheck_live", None)
            try:
                if view is not None:
                    view.feed(msg.data)
            except ValueError as exc:
                log.warning("live view: worker %s: %s", msg.node_id, exc)

        runner.register_message(LIVE_MESSAGE, on_live)
    if not cfg.live:
        return
    info = {
        "run_id": cfg.run_id,
        "target": cfg.target,
        "scenario": cfg.scenario,
        "model": cfg.model,
    }
    view = LiveView(info, float(cfg.live.get("tick_s") or 1.0))
    environment.servecheck_live = view
    web_ui = getattr(environment, "web_ui", None)
    if cfg.live.get("web") and web_ui is not None:
        from servecheck.load.generator.live_web import install

        install(web_ui, view, cfg.web_auth or None)
    if cfg.live.get("otlp"):
        from servecheck.load.generator.live_otlp import start

        provider = start(view, str(cfg.live["otlp"]))
        environment.events.quitting.add_listener(lambda **_kw: provider.shutdown())
    metrics = cfg.live.get("metrics")
    if metrics:
        from gevent.pywsgi import WSGIServer
        from prometheus_client import make_wsgi_app

        server = WSGIServer(
            (metrics[0], int(metrics[1])), make_wsgi_app(registry_for(view)), log=None
        )
        server.start()
        environment.events.quitting.add_listener(lambda **_kw: server.stop(timeout=1))


@events.test_stop.add_listener
def _on_test_stop(environment: Any, **_: Any) -> None:
    ctx = run_context(environment)
    ctrl, ctx.ctrl = ctx.ctrl, None  # a new test from the web UI gets a fresh controller ...
    if not ctx.from_file:
        ctx.cfg = None  # ... and, under plain locust -f, a fresh run id and folder
    if ctrl is not None and not ctrl.finished:
        # --web: Stop in Locust's UI ends the run, and its summary says it ended early
        web = bool(ctrl.cfg.live and ctrl.cfg.live.get("web"))
        if web and ctrl.accepting():
            ctrl.stopped = "stopped by Locust before the run's bounds (its web UI's Stop)"
        ctrl.finish(quit_runner=web)


@events.quitting.add_listener
def _on_quitting(environment: Any, **_: Any) -> None:
    _on_test_stop(environment)


@events.init.add_listener
def _final_csv_init(environment: Any, **_: Any) -> None:
    """``--csv``: Locust's final ``_stats.csv`` and ``_failures.csv`` as its stats are at the end."""
    prefix = getattr(getattr(environment, "parsed_options", None), "csv_prefix", None)
    if prefix and not isinstance(environment.runner, WorkerRunner):
        environment.events.quit.add_listener(lambda **_kw: write_final_csv(environment, prefix))


def write_final_csv(environment: Any, prefix: str) -> None:
    """Rewrite ``<prefix>_stats.csv`` and ``<prefix>_failures.csv`` from Locust's final stats.

    Locust's CSV writer rewrites them once a second and not at exit, so a run's last second was
    missing (a 40-request run's file counted 0; issue 41). Its ``quit`` event comes after the
    runner stopped and before it closes its files, whose buffers its writer flushed on its last
    pass (each pass ends in a truncate), so nothing of its own overwrites these."""
    from locust.stats import PERCENTILES_TO_REPORT, StatsCSV

    stats_csv = StatsCSV(environment, PERCENTILES_TO_REPORT)
    for suffix, write in (("stats", stats_csv.requests_csv), ("failures", stats_csv.failures_csv)):
        try:
            with open(f"{prefix}_{suffix}.csv", "w", newline="", encoding="utf-8") as f:
                write(csv.writer(f))
        except OSError as exc:  # Locust's own file then stands, a second short
            log.warning("could not rewrite Locust's %s CSV: %s", suffix, exc)


# ------------------------------------------------------------------ the user


class LLMUser(User):
    """A streaming chat-completions user. Subclass it in a locustfile and set ``mix``/``kinds``.

    Closed loop (default): each user sends its next request when the previous one ends.
    Open loop (``servecheck load --rate``): the first user of each process becomes the dispatcher
    that spawns a request at every scheduled time; other users idle.
    """

    abstract = True
    wait_time = constant(0)
    scenario: ClassVar[str] = "chat"
    mix: ClassVar[list[PromptSpec]] = [PromptSpec(128, 64)]
    # request kind -> extra body keys (response_format, tools ...)
    kinds: ClassVar[dict[str, dict[str, Any]]] = {}
    # Abandoned streams: this share of requests hangs up after this many tokens (the record says
    # ``abandoned``); None never does. What a client that navigates away does to the server.
    hang_up_after_tokens: ClassVar[int | None] = None
    hang_up_share: ClassVar[float] = 1.0

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self.rng = random.Random()

    def on_start(self) -> None:
        if isinstance(self.environment.runner, MasterRunner):
            return
        ctrl = controller(self.environment)
        self.rng = random.Random(ctrl.cfg.seed * 1_000_003 + ctrl.index * 10_007 + id(self) % 9973)

    @classmethod
    def prepare_run(cls, ctrl: _Controller) -> None:
        """Once per process, before the run's clock starts: a scenario builds what it needs
        (shared prompts, a trace's corpus) here, so the time is in no request's lag."""

    def kind_body(self, kind: str) -> dict[str, Any]:
        return self.kinds.get(kind, {})

    def plan_request(self, ctrl: _Controller) -> PlannedRequest:
        """The next request to send: one user message from the mix. Scenarios that build their
        own (multi-turn, shared prefix) override it and get the reply in :meth:`after_response`."""
        return single_turn(ctrl.prompts.pick(self.rng))

    def after_response(
        self, req: PlannedRequest, rec: RequestRecord, reply: str, usage: dict[str, Any] | None
    ) -> None:
        """Called after a request whose ``state`` is set, with its record and reply text."""

    @task
    def run_one(self) -> None:
        ctrl = controller(self.environment)
        if ctrl.cfg.mode in OPEN_MODES:
            if ctrl.dispatcher_claimed:
                self._idle(ctrl)
                return
            ctrl.dispatcher_claimed = True
            self._dispatch(ctrl)
            return
        if not ctrl.accepting():
            self._idle(ctrl)
            return
        lane = ctrl.lane_for(self)
        if lane is not None:
            lane.hold(self)  # until the lane ends: then on through the reactor, as below
            ctrl.maybe_finish()
            return
        ctrl.send(self, _perf())
        ctrl.maybe_finish()

    def _idle(self, ctrl: _Controller) -> None:
        ctrl.maybe_finish()
        gevent.sleep(0.1)

    def _dispatch(self, ctrl: _Controller) -> None:
        """Open loop: sleep until each absolute slot time, then spawn the request."""
        cfg = ctrl.cfg
        sched = ctrl.sched or ctrl.arrivals()
        gate = Semaphore(cfg.max_inflight)
        greenlets: list[Any] = []
        start = ctrl.start
        for dispatched, offset in enumerate(sched.offsets()):
            due = start + offset
            if (
                due >= ctrl.deadline
                or not ctrl.accepting()
                or (ctrl.cap is not None and dispatched >= ctrl.cap)
            ):
                break
            delay = due - _perf()
            if delay > 0.002:
                gevent.sleep(delay - 0.0015)  # the hub's timers are ~1 ms coarse ...
            while _perf() < due:
                gevent.sleep(0)  # ... so yield-spin the last stretch (other greenlets still run)
            gate.acquire()  # at the in-flight cap the slot waits: that shows as lag, not as silence
            greenlets.append(gevent.spawn(self._one, ctrl, due, gate))
            if len(greenlets) > 4096:
                greenlets = [g for g in greenlets if not g.dead]
        gevent.joinall(greenlets, timeout=cfg.drain_s + cfg.timeout_s)
        ctrl.maybe_finish()
        while not ctrl.finished:
            self._idle(ctrl)

    def _one(self, ctrl: _Controller, due: float, gate: Semaphore) -> None:
        try:
            ctrl.send(self, due)
        finally:
            gate.release()


# ------------------------------------------------------------------ shapes


def scenario_shape() -> type[LoadTestShape] | None:
    """A concrete LoadTestShape class when the run config has stages, else None.

    A locustfile does ``LoadShape = scenario_shape()``: Locust picks up a shape class only when
    one is defined, so plain closed/open-loop runs keep ``-u``/``-r`` control. It runs when the
    locustfile is imported, before Locust's init event: it reads the stages from the config
    file itself (the run's context, read once at init, holds the rest).
    """
    path = os.environ.get(ENV_CONFIG)
    if not path:
        return None
    cfg = RunConfig.load(path)
    if not cfg.shape:
        return None
    stages = StageShape(
        [Stage(float(s["end"]), int(s["users"]), float(s["spawn_rate"])) for s in cfg.shape]
    )

    class PlanShape(LoadTestShape):
        """Stages from the load plan (ramp / steps / spike)."""

        def tick(self) -> tuple[int, float] | None:
            return stages.tick(self.get_run_time())

    return PlanShape
