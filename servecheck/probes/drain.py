"""The drain measurement: what a server does with its streams and new requests when it is told
to stop (SIGTERM to an engine, a gateway hook).

:func:`measure_drain` starts ``streams`` streaming requests with a long ``max_tokens``, waits
until each has its first token, runs the drain action (a callable the workflow hands in: a
signal to a process it launched, or a hook command), then

* reads every in-flight stream to its end and classifies it (:data:`STREAM_OUTCOMES`):
  ``finished`` (a ``finish_reason`` of stop/length), ``ended`` (an explicit other end: a
  ``finish_reason`` such as ``abort``, or an error event in the stream), ``cut`` (the stream
  stopped with neither) or ``hung`` (no byte for ``stream_idle_s``, or still streaming at the
  deadline);
* sends new small requests, one at a time on a fresh connection at ``probe_rate``, until the
  port refuses them (twice in a row, with every stream done) or the deadline, and classifies each
  (:data:`PROBE_OUTCOMES`): ``served``, ``503``, ``429``, ``refused``, ``reset`` (closed with no
  answer), ``hang`` (no answer within ``probe_timeout_s``), ``html-5xx`` (an HTML error page) or
  ``other`` (any other status).

The verdict (:func:`DrainReport.verdict`): FAIL when a stream was cut or hung, when a new request
hung, got an HTML page or another status, or when the server still served new requests at the
deadline (the drain did not take effect); INCONCLUSIVE when no stream was in flight when the
drain began, or the drain action itself failed; else PASS. Every wait is bounded; errors are
records, never exceptions. No argparse, no option names: the command and the workflow own those.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from servecheck.config.model import Target
from servecheck.records.record import RecordError, RequestRecord, http_error, status_error

if TYPE_CHECKING:
    from servecheck.load.generator.stream import StreamState

STREAM_OUTCOMES = ("finished", "ended", "cut", "hung", "before-drain", "no-first-token")
PROBE_OUTCOMES = ("served", "503", "429", "refused", "reset", "hang", "html-5xx", "other")
GOOD_PROBES = frozenset({"served", "503", "429", "refused", "reset"})
NORMAL_FINISH = frozenset({"stop", "length"})
EXIT_WAIT_S = 5.0  # how long a launched server gets to exit after the last probe


@dataclass(slots=True)
class DrainOptions:
    """How the drain is measured; every wait is bounded by one of these."""

    streams: int = 4
    max_tokens: int = 256
    first_token_timeout_s: float = 120.0
    stream_idle_s: float = 30.0  # no byte for this long after the drain began: hung
    deadline_s: float = 120.0  # from the drain action: streams still going are hung, probes stop
    probe_rate: float = 2.0  # new requests per second after the drain began
    probe_timeout_s: float = 5.0  # a new request unanswered for this long: hang
    extra_body: dict[str, Any] = field(default_factory=dict)  # ignore_eos ...

    def problems(self) -> list[str]:
        """What is out of range, each naming the field in braces (a SpecError's shape)."""
        out = []
        if not 1 <= self.streams <= 64:
            out.append(f"{{streams}} {self.streams}: between 1 and 64")
        if not 1 <= self.max_tokens <= 100_000:
            out.append(f"{{max_tokens}} {self.max_tokens}: between 1 and 100000")
        if not 0 < self.probe_rate <= 50:
            out.append(f"{{probe_rate}} {self.probe_rate:g}/s: above 0 and at most 50/s")
        for name in ("first_token_timeout_s", "stream_idle_s", "deadline_s", "probe_timeout_s"):
            value = getattr(self, name)
            if not 0 < value <= 3600:
                out.append(f"{{{name}}} {value:g}s: above 0 and at most 1h")
        return out


@dataclass(slots=True)
class ActionOutcome:
    """What the drain action did: its description, whether it worked, when it ended (s after it
    began; None while it runs or when it never ended within the deadline)."""

    what: str
    ok: bool = True
    detail: str = ""
    ended_s: float | None = None


class DrainAction:
    """The drain trigger the workflow hands in: :meth:`start` begins it (a signal, a hook
    command), :meth:`poll` says how it is doing (called until it ends), :meth:`exited_s` when
    the server's process is known to have exited (None: unknown or still running)."""

    what = "drain"

    def start(self) -> None:
        raise NotImplementedError

    def poll(self, t: float) -> ActionOutcome:
        return ActionOutcome(self.what, True, "", 0.0)

    def exited_s(self) -> float | None:
        return None

    def wait_exited(self, timeout_s: float) -> float | None:
        """:meth:`exited_s`, waiting up to ``timeout_s`` where the action knows the process."""
        return self.exited_s()

    def finish(self) -> None:
        """Bounded clean-up once the measurement is over (kill a hook still running)."""


@dataclass(slots=True)
class DrainReport:
    """Everything measured: the streams, the new requests, the action, the timings.

    The streams and the new requests are records (:class:`~servecheck.records.record.RequestRecord`:
    wall-clock times, ``outcome`` the class above, ``error_message`` the detail); ``t0`` is when
    the drain action began on the same clock, so every ``..._s`` is seconds after it."""

    target: str
    model: str
    action: ActionOutcome
    options: DrainOptions
    streams: list[RequestRecord] = field(default_factory=list)
    probes: list[RequestRecord] = field(default_factory=list)
    t0: float = 0.0
    refused_s: float | None = None  # first new request refused after every stream was done
    exited_s: float | None = None  # the process exited (when the workflow knows the process)
    streams_done_s: float | None = None  # the last in-flight stream ended

    @property
    def in_flight(self) -> list[RequestRecord]:
        return [s for s in self.streams if s.outcome in ("finished", "ended", "cut", "hung")]

    def since(self, wall: float | None) -> float | None:
        """A record's time as seconds after the drain action began (negative: before it)."""
        return None if wall is None else round(wall - self.t0, 4)

    @property
    def drain_time_s(self) -> float | None:
        """From the drain action to drained: streams over and the server gone (port refusing or
        process exited), whichever is known first; None when it never got there."""
        gone = [t for t in (self.refused_s, self.exited_s) if t is not None]
        if not gone or self.streams_done_s is None:
            return None
        return round(max(min(gone), self.streams_done_s), 3)

    def verdict(self) -> tuple[str, list[str]]:
        """``(pass|fail|inconclusive, reasons)``, by the rule in the module docstring."""
        fail: list[str] = []
        streams = Counter(s.outcome for s in self.streams)
        probes = Counter(p.outcome for p in self.probes)
        for outcome, what in (("cut", "cut without a finish reason"), ("hung", "hung")):
            if streams[outcome]:
                fail.append(f"{streams[outcome]} of {len(self.in_flight)} in-flight streams {what}")
        for outcome, what in (
            ("hang", "hung (no answer within {t:g} s)"),
            ("html-5xx", "got an HTML error page"),
            ("other", "got another answer"),
        ):
            if probes[outcome]:
                seen = sorted({p.error_message for p in self.probes if p.outcome == outcome})[:3]
                text = what.format(t=self.options.probe_timeout_s)
                fail.append(f"{probes[outcome]} new requests {text}: {'; '.join(seen)}")
        gone = self.refused_s is not None or self.exited_s is not None
        if self.probes and not gone and probes["served"] == len(self.probes):
            fail.append(
                f"every new request was still served {self.since(self.probes[-1].t_sent):.1f} s "
                f"after {self.action.what}: the drain did not take effect"
            )
        if fail:
            return "fail", fail
        unsure: list[str] = []
        if not self.action.ok:
            unsure.append(f"the drain action failed: {self.action.detail}")
        if not self.in_flight:
            why = next((s.error_message for s in self.streams if s.error_message), "")
            unsure.append(
                f"no stream was in flight when the drain began ({dict(streams)}"
                + (f"; {why}" if why else "")
                + "): raise max_tokens, or see why the streams failed"
            )
        if unsure:
            return "inconclusive", unsure
        return "pass", []

    def stream_row(self, rec: RequestRecord) -> dict[str, Any]:
        """One in-flight stream as drain.json lists it (times in seconds after the action)."""
        first = None if rec.ttft is None else rec.t_sent + rec.ttft
        times = [] if first is None else list(itertools.accumulate(rec.itls, initial=first))
        before = sum(1 for t in times if t < self.t0)
        return {
            "index": rec.seq,
            "outcome": rec.outcome,
            "first_token_s": self.since(first),
            "end_s": self.since(rec.t_done),
            "tokens_before": before,
            "tokens_after": len(times) - before,
            "finish_reason": rec.finish_reason,
            "done": rec.error is None,  # read to its [DONE] with nothing wrong on the way
            "status": rec.status,
            "detail": rec.error_message,
        }

    def probe_row(self, rec: RequestRecord) -> dict[str, Any]:
        """One new request as drain.json lists it."""
        return {
            "sent_s": self.since(rec.t_sent),
            "outcome": rec.outcome,
            "took_s": None if rec.e2e is None else round(rec.e2e, 4),
            "status": rec.status,
            "detail": rec.error_message,
        }

    def as_dict(self) -> dict[str, Any]:
        status, reasons = self.verdict()
        return {
            "kind": "drain",
            "target": self.target,
            "model": self.model,
            "action": asdict(self.action),
            "options": asdict(self.options),
            "verdict": status,
            "reasons": reasons,
            "drain_ok": status == "pass",
            "drain_time_s": self.drain_time_s,
            "streams_done_s": self.streams_done_s,
            "refused_s": self.refused_s,
            "exited_s": self.exited_s,
            "stream_outcomes": dict(Counter(s.outcome for s in self.streams)),
            "finish_reasons": dict(
                Counter(str(s.finish_reason) for s in self.in_flight if s.finish_reason)
            ),
            "probe_outcomes": dict(Counter(p.outcome for p in self.probes)),
            "streams": [self.stream_row(s) for s in self.streams],
            "probes": [self.probe_row(p) for p in self.probes],
        }


# --------------------------------------------------------------------------- the streams


class _Clock:
    """The records' clock (epoch seconds, kept on the monotonic clock from one anchor) and when
    the drain action began on it (``t0``, set by :meth:`start`)."""

    def __init__(self) -> None:
        self.t0: float | None = None
        self.begun = threading.Event()
        self._wall0, self._mono0 = time.time(), time.monotonic()

    def wall(self) -> float:
        return self._wall0 + (time.monotonic() - self._mono0)

    def now(self) -> float:
        """Seconds after the drain action began (0 before it)."""
        t = self.wall()
        return round(t - (self.t0 if self.t0 is not None else t), 4)

    def start(self) -> float:
        """Mark the drain action's start; returns it (epoch seconds, the records' clock)."""
        self.t0 = t0 = self.wall()
        self.begun.set()
        return t0


def _stream_body(model: str, opts: DrainOptions) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Count from one to one thousand in words."}],
        "max_tokens": opts.max_tokens,
        "temperature": 0,
        "stream": True,
        **opts.extra_body,
    }


def _read_stream(
    target: Target,
    rec: RequestRecord,
    body: dict[str, Any],
    opts: DrainOptions,
    clock: _Clock,
    first: threading.Event,
) -> None:
    """One streaming request into ``rec``, read by the load generator's request function and
    classified (:data:`STREAM_OUTCOMES`); never raises."""
    from servecheck.client.factory import ClientSettings, sync_client
    from servecheck.load.generator.request import read_stream_sync
    from servecheck.load.generator.stream import StreamState
    from servecheck.load.generator.wire import WireResult

    settings = ClientSettings.for_target(
        target,
        # the read bound: a stream without a byte this long is hung (before the drain too: its
        # first token must come within it, the first-token wait bounds the start as a whole)
        timeout_s=min(opts.first_token_timeout_s, opts.stream_idle_s),
        connect_timeout_s=min(target.connect_timeout_s, 10.0),
        max_connections=1,
        keepalive=False,
    )
    st = StreamState(fast=False)  # every chunk parsed: vLLM's last token chunk has the finish
    res = WireResult()

    def until(state: StreamState) -> bool:
        if state.token_times and not first.is_set():
            first.set()
        return clock.begun.is_set() and clock.now() > opts.deadline_s

    url = settings.base_url + "/chat/completions"
    with sync_client(settings) as client:
        # The whole stream's bound: its first token, then the drain's deadline (``until`` ends it
        # there once the drain began), with an idle wait to spare; never for ever.
        whole_s = opts.first_token_timeout_s + opts.deadline_s + opts.stream_idle_s
        read_stream_sync(
            client,
            url,
            body,
            {},
            rec,
            until=until,
            timeout_s=whole_s,
            clock=clock.wall,
            state=st,
            res=res,
        )
    rec.t_intended = rec.t_sent
    rec.finish_reason = st.finish_reason
    rec.outcome = _stream_outcome(
        rec, st, res.hung_up, clock.begun.is_set(), opts, settings.timeout_s
    )


def _stream_outcome(
    rec: RequestRecord,
    st: StreamState,
    hung_up: bool,
    begun: bool,
    opts: DrainOptions,
    idle_s: float,
) -> str:
    """The stream's class; a hung one's error and detail say which bound it ran into."""
    if hung_up:  # the deadline (until)
        rec.abandoned = False
        rec.error = "timeout"
        rec.error_message = f"still streaming {opts.deadline_s:g} s after the drain began"
        return "hung"
    if rec.status is not None and rec.status != 200:
        rec.error_message = f"HTTP {rec.status}: {rec.error_message[:160]}"
        return "no-first-token"
    started = "before-drain" if rec.ttft is not None else "no-first-token"
    if rec.error == "timeout":  # the read bound
        rec.error_message = f"no byte for {idle_s:g} s"
        return "hung" if begun else started
    if not begun:
        return started
    if st.finish_reason in NORMAL_FINISH:
        return "finished"
    if st.finish_reason or (st.problem and st.problem_kind == "stream-error"):
        return "ended"  # another finish reason, or an error event in the stream
    return "cut"


# --------------------------------------------------------------------------- new requests


def _probe(
    target: Target, model: str, opts: DrainOptions, clock: _Clock, seq: int
) -> RequestRecord:
    import httpx

    from servecheck.client.factory import ClientSettings, sync_client

    settings = ClientSettings.for_target(
        target,
        timeout_s=opts.probe_timeout_s,
        connect_timeout_s=min(opts.probe_timeout_s, 5.0),
        max_connections=1,
        keepalive=False,
    )
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 1,
        "temperature": 0,
    }
    sent = clock.wall()
    rec = RequestRecord(target.name, "drain", "new-request", seq, t_intended=sent, t_sent=sent)
    start = time.monotonic()

    def done(
        outcome: str, error: RecordError | None, status: int | None = None, detail: str = ""
    ) -> RequestRecord:
        rec.e2e = time.monotonic() - start
        rec.t_done = sent + rec.e2e
        rec.outcome, rec.error, rec.status, rec.error_message = outcome, error, status, detail
        return rec

    try:
        with sync_client(settings) as client:
            resp = client.post(settings.base_url + "/chat/completions", json=body)
    except httpx.ConnectError:
        return done("refused", "connect", detail="connection refused")
    except httpx.TimeoutException as exc:
        why = f"{type(exc).__name__} after {opts.probe_timeout_s:g} s"
        return done("hang", "timeout", detail=why)
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        # closed before an answer: a client retries it as a refused connection
        return done("reset", "stream-error", detail=f"{type(exc).__name__}: {exc}"[:200])
    except httpx.HTTPError as exc:
        return done("other", "stream-error", detail=f"{type(exc).__name__}: {exc}"[:200])
    status, kind = resp.status_code, resp.headers.get("content-type", "")
    text = resp.text[:200]
    html = "html" in kind or text.lstrip().startswith("<")
    if 200 <= status < 300:
        return done("served", None, status)
    if status in (503, 429):
        return done(str(status), status_error(status, resp.headers), status, text[:80])
    failed = http_error(status)
    if status >= 500 and html:
        detail = f"HTTP {status} {kind or 'no content-type'}: {text[:60]}"
        return done("html-5xx", failed, status, detail)
    return done("other", failed, status, f"HTTP {status}: {text[:80]}")


# --------------------------------------------------------------------------- the run


def measure_drain(
    target: Target,
    model: str,
    action: DrainAction,
    opts: DrainOptions,
    say: Callable[[str], None] | None = None,
) -> DrainReport:
    """Streams in flight, the drain action, new requests until refused or the deadline."""
    say = say or (lambda _line: None)
    clock = _Clock()
    body = _stream_body(model, opts)
    records = [
        RequestRecord(target.name, "drain", "stream", i, 0.0, 0.0, outcome="no-first-token")
        for i in range(opts.streams)
    ]
    firsts = [threading.Event() for _ in records]
    threads = [
        threading.Thread(
            target=_read_stream,
            args=(target, rec, body, opts, clock, ev),
            name=f"drain-stream-{rec.seq}",
            daemon=True,
        )
        for rec, ev in zip(records, firsts, strict=True)
    ]
    for th in threads:
        th.start()
    wait_until = time.monotonic() + opts.first_token_timeout_s
    for th, ev in zip(threads, firsts, strict=True):
        while not ev.is_set() and th.is_alive() and time.monotonic() < wait_until:
            ev.wait(0.05)
    running = sum(
        1 for th, ev in zip(threads, firsts, strict=True) if ev.is_set() and th.is_alive()
    )
    say(f"drain: {running} of {opts.streams} streams in flight; {action.what}")
    t0 = clock.start()
    try:
        action.start()
        report = DrainReport(target.name, model, ActionOutcome(action.what), opts, records, t0=t0)
        _probe_until_drained(target, model, opts, clock, threads, action, report)
        for th in threads:  # each reader ends by its own bounds (deadline, idle timeout)
            th.join(timeout=max(0.0, opts.deadline_s + opts.stream_idle_s - clock.now()) + 5.0)
    finally:
        action.finish()
    report.action = action.poll(clock.now())
    # The server refuses new requests before its process is gone; on a busy host its exit can
    # come a few seconds after the last probe, so a known process gets that long to show it.
    report.exited_s = action.wait_exited(EXIT_WAIT_S)
    ends = [s.t_done for s in report.in_flight if s.t_done is not None]
    if report.in_flight and len(ends) == len(report.in_flight):
        report.streams_done_s = report.since(max(ends))
    return report


def _probe_until_drained(
    target: Target,
    model: str,
    opts: DrainOptions,
    clock: _Clock,
    threads: list[threading.Thread],
    action: DrainAction,
    report: DrainReport,
) -> None:
    """New requests at ``probe_rate`` until two refusals in a row with every stream over, or the
    deadline."""
    interval = 1.0 / opts.probe_rate
    refused_in_row = 0
    while clock.now() < opts.deadline_s:
        due = len(report.probes) * interval
        if clock.now() < due:
            time.sleep(min(due - clock.now(), 0.5))
            continue
        probe = _probe(target, model, opts, clock, len(report.probes))
        report.probes.append(probe)
        streams_over = not any(th.is_alive() for th in threads)
        if probe.outcome == "refused" and streams_over:
            refused_in_row += 1
            if report.refused_s is None:
                report.refused_s = report.since(probe.t_sent)
        else:
            refused_in_row = 0
            if probe.outcome != "refused":
                report.refused_s = None  # it answered again: not gone yet
        if refused_in_row >= 2 or (streams_over and action.exited_s() is not None):
            return


__all__ = [
    "GOOD_PROBES",
    "PROBE_OUTCOMES",
    "STREAM_OUTCOMES",
    "ActionOutcome",
    "DrainAction",
    "DrainOptions",
    "DrainReport",
    "measure_drain",
]
