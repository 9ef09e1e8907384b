"""A closed loop run through the native lane (``lane.py``), for one Locust process.

Each Locust user that would send closed-loop requests holds a slot instead: the lane keeps one
exchange going per slot, and the user's greenlet sleeps until the lane ends. One greenlet here
keeps the lane's queue filled with requests built exactly as the user would build them (the
controller's ``build``), and turns every exchange that ended into its record through the
controller's own ``settle`` (the same record, Locust event and keeper as a reactor request).
The lane ends at the run's end (its deadline or request cap), when the last user leaves, or at
the first failed request: the users then go back to the reactor's path for the rest of the run,
where the outage breaker, Retry-After and the error paths live.

No locust import: the controller is passed in (``locust_user.py``); gevent is looked up in
``sys.modules`` as in ``reactor.py``.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import Any, Protocol

from servecheck.load.generator.lane import Ended, Lane
from servecheck.load.generator.stream import StreamState
from servecheck.load.workload.planned import Send
from servecheck.records.record import RequestRecord

_perf = time.perf_counter
# The loop's pause after each pass: answers gather meanwhile, so one wake-up serves many. With the
# whole command on one core, a pass cost the Python thread up to about 200 us of its own (the hub's
# wake-ups and switches): at 5 ms as much again as the records it settled at 256 streams (issue 46).
# Longer pauses gain little more, and make the other greenlets wait behind longer passes.
GATHER_S = 0.02
MIN_PAUSE_S = 0.001  # the shortest pause, where the queue would otherwise run dry (a fast server)
QUEUE_MAX = 4096  # requests queued at most (a few MB of encoded requests)
SETTLE_RUN = 16  # exchanges settled before the loop lets the other greenlets in (a few ms)
HOLD_POLL_S = 0.25  # how often a holding user looks whether Locust asked it to stop
STOPPING = "stopping"  # locust.user.task.LOCUST_STATE_STOPPING (no locust import here)


class Sender(Protocol):
    """What the lane needs of the controller (``locust_user._Controller``)."""

    deadline: float
    cap: int | None
    sent: int
    inflight: int

    def accepting(self) -> bool: ...
    def build(
        self, user: Any, intended: float, bodies: dict[int, Any] | None = None
    ) -> tuple[Send, RequestRecord, str, bytes]: ...
    def stream_state(self) -> StreamState: ...
    def request_bytes(self, path: str, payload: bytes, request_id: str) -> bytes: ...
    def settle(self, send: Send, rec: RequestRecord, res: Any) -> None: ...
    def unsend(self, count: int) -> None: ...


class LaneRun:
    """The lane's side of a run: slots for users, the queue, the records."""

    def __init__(self, ctrl: Sender, lane: Lane, planner: Any, timeout_s: float) -> None:
        self.ctrl = ctrl
        self.lane = lane
        self.planner = planner  # the user whose rng and bodies plan the lane's requests
        self.timeout_s = timeout_s
        self.over = threading.Event()  # gevent's under Locust: the users' wait
        self.stopping = False
        self.why: str | None = None  # why the lane ended before the run did
        self.users = 0
        self.sends: dict[int, tuple[Send, RequestRecord]] = {}
        self._greenlet: Any = None
        self.bodies: dict[int, Any] = {}  # the run's requests, encoded once per prompt
        self.holders: dict[Any, threading.Event] = {}  # the users holding a slot: their wake-up
        self._polled = 0.0
        self._rate = 0.0  # exchanges ended a second, over the last pass: what the queue covers
        self._t_pass = _perf()
        if ctrl.deadline != float("inf"):
            lane.stop_at(ctrl.deadline)

    # -- users ---------------------------------------------------------------------------

    def hold(self, user: Any) -> None:
        """A user's turn: hold a slot until the lane ends (then the user goes on as usual), or
        until Locust asks the user to stop after its request (its last exchange then ends as
        usual and is recorded; the user waits for that, as for its own request)."""
        self.users += 1
        self.lane.set_slots(self.users)
        self._fill()  # its slot starts now, not at the loop's next pass
        if self._greenlet is None:
            self._greenlet = sys.modules["gevent"].spawn(self._run)
        woken = self.holders[user] = threading.Event()
        try:
            woken.wait()  # set by _end, or by _run once Locust asked this user to stop
            if not self.over.is_set():
                self._leave(drop=False)
                self._wait_out(_perf() + self.timeout_s)
        except BaseException:
            # Locust killed this user: its slot goes, and an exchange on it is dropped without a
            # record, as a reactor request whose user was killed
            if not self.over.is_set():
                self._leave(drop=True)
            raise
        finally:
            self.holders.pop(user, None)

    def _leave(self, drop: bool) -> None:
        self.users -= 1
        if not self.over.is_set():
            self.lane.set_slots(self.users, drop)
            if self.users == 0:
                self.stop("every user stopped")

    def _wait_out(self, until: float) -> None:
        """Until the lane's open exchanges fit its slots again (a retired slot's last ended)."""
        while not self.over.is_set() and _perf() < until and self.lane.open()[0] > self.users:
            sys.modules["gevent"].sleep(HOLD_POLL_S)

    def stop(self, why: str | None = None) -> None:
        """Start nothing more; the lane ends once its open exchanges have."""
        if not self.stopping:
            self.stopping = True
            self.why = why
            self.lane.stop_at(_perf())

    # -- the loop --------------------------------------------------------------------------

    def _run(self) -> None:
        gevent = sys.modules["gevent"]
        hub, sleep = gevent.get_hub(), gevent.sleep
        watcher = hub.loop.io(self.lane.fileno(), 1)
        try:
            while True:
                self._fill()
                hub.wait(watcher)
                ended, idle = self.lane.take()
                self._paced(len(ended))
                for i, e in enumerate(ended):
                    if i and not i % SETTLE_RUN:
                        sleep(0)  # let the other greenlets in (their event-loop lag stays low)
                    self._ended(e)
                if not self.ctrl.accepting():
                    self.stop()
                self._poll_users()
                if idle and self.stopping:
                    break
                # Let answers gather: one wake-up then serves many. Their times are the lane's,
                # and the queue holds enough requests that no slot waits meanwhile (a slot that
                # does is counted: the lane's held time, which flags the run past 1 %).
                sleep(self._pause())
        finally:
            watcher.close()
            self._end()
            self.lane.close()  # its thread's work is done (its figures stay readable)

    def _poll_users(self) -> None:
        """Wake the holding users Locust asked to stop (gracefully: after their request)."""
        now = _perf()
        if now - self._polled < HOLD_POLL_S:
            return
        self._polled = now
        for user, woken in list(self.holders.items()):
            if getattr(user, "_state", None) == STOPPING:
                woken.set()

    def _paced(self, ended: int) -> None:
        """The rate exchanges end at, over the pass that just ended."""
        now = _perf()
        if now > self._t_pass:
            self._rate = ended / (now - self._t_pass)
        self._t_pass = now

    def _pause(self) -> float:
        """The pause before the next pass: :data:`GATHER_S`, or less where the queue would run
        dry before it at the last pass's rate (a fast server; a rate held down by a queue that
        ran dry then grows threefold a pass, with the queue)."""
        if self._rate <= 0:
            return GATHER_S
        return max(MIN_PAUSE_S, min(GATHER_S, 0.5 * self.lane.queued() / self._rate))

    def _fill(self) -> None:
        """Keep enough requests queued that a slot never waits for this greenlet: half a request
        a user, and three passes' worth at the rate the last pass saw."""
        ctrl = self.ctrl
        wanted = max(8, self.users // 2, math.ceil(3 * self._rate * GATHER_S))
        want = min(QUEUE_MAX, wanted) - self.lane.queued()
        while want > 0 and not self.stopping and ctrl.accepting():
            send, rec, path, payload = ctrl.build(self.planner, _perf(), self.bodies)
            st = send.stream = ctrl.stream_state()
            self.sends[rec.seq] = (send, rec)
            request = ctrl.request_bytes(path, payload, rec.request_id)
            self.lane.put(rec.seq, request, self.timeout_s, st)
            want -= 1

    def _ended(self, e: Ended | int) -> None:
        ctrl = self.ctrl
        if isinstance(e, int):  # dropped with its user: no record
            if self.sends.pop(e, None) is not None:
                ctrl.inflight -= 1
            return
        send, rec = self.sends.pop(e.seq)
        send.stream = e.st
        send.t0 = e.t_start
        rec.t_intended = rec.t_sent = ctrl.wall(e.t_start)  # type: ignore[attr-defined]
        ctrl.settle(send, rec, e.res)
        if rec.error is not None and not self.stopping:
            self.stop(f"a request failed ({rec.error}): the reactor reads the rest of the run")

    def _end(self) -> None:
        unsent = self.lane.unsent()
        for seq in unsent:
            self.sends.pop(seq, None)
        for seq in list(self.sends):  # started but never bundled: the lane was closed under them
            self.sends.pop(seq)
            self.ctrl.inflight -= 1
        self.ctrl.unsend(len(unsent))
        self.over.set()
        for woken in self.holders.values():
            woken.set()

    def close(self) -> None:
        """The run ended (Locust stopped): stop the thread; waiting users are released."""
        self.stopping = True
        self.lane.close()
        if self._greenlet is not None and not self._greenlet.dead:
            self._greenlet.kill(block=False)
        if not self.over.is_set():
            self._end()
