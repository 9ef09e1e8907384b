"""The abandoned-stream probe: open streams, read a few tokens, hang up, see the server drain.

Why: real KV-cache leaks tie to aborted requests. A client that drops a streaming connection
mid-generation must make the engine stop that request and free its KV blocks; an engine that
keeps "running" it, or keeps its blocks, degrades slowly until it preempts or dies. The probe
opens ``streams`` concurrent streaming chat completions, reads ``chunks`` token-bearing chunks of
each, then closes each connection (httpx closes a response it did not read to the end instead of
pooling it, so the server sees the TCP connection go). It does that for ``rounds`` rounds.
Afterwards :func:`wait_drained` watches the telemetry (``requests_running`` back to 0 and
``kv_usage`` back to the idle baseline within a bound) and returns the telemetry library's
:class:`~servecheck.telemetry.leak.DrainVerdict`.

Every loop is bounded: streams, rounds, chunks and a per-stream deadline. Nothing raises for a
server's behaviour: a stream that fails is counted with its error class, like a load record.

Layering: this is load-layer code (client, config, core); it reaches into
``servecheck.telemetry`` only inside :func:`judge_drain` / :func:`wait_drained` /
:func:`probe_with_telemetry`, for the drain verdict (see ARCHITECTURE.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from servecheck.client.factory import ClientSettings, async_client
from servecheck.config.model import Target
from servecheck.errors import UsageError
from servecheck.load.generator.request import read_stream
from servecheck.load.generator.stream import StreamState
from servecheck.load.workload.prompts import words_text
from servecheck.records.record import RequestRecord
from servecheck.signals import run_async

if TYPE_CHECKING:
    import pandas as pd

    from servecheck.telemetry.leak import DrainVerdict
    from servecheck.telemetry.recorder import TelemetryRecorder

MAX_STREAMS = 256
MAX_ROUNDS = 100


def chat_body(
    model: str,
    *,
    max_tokens: int,
    prompt_words: int = 60,
    seed: int = 0,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A streaming chat-completion body with a deterministic prompt of ``prompt_words`` words."""
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "max_tokens": max_tokens,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": words_text(prompt_words, seed)}],
    }
    body.update(extra or {})
    return body


async def stream_chat(
    client: httpx.AsyncClient,
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    abandon_after: int | None = None,
    timeout_s: float = 60.0,
    rec: RequestRecord | None = None,
    progress: Callable[[], None] | None = None,
) -> RequestRecord:
    """Send one streaming request; read it to the end, or hang up after ``abandon_after``
    token-bearing chunks (the record's ``abandoned``). Read by the load generator's request
    function (:func:`~servecheck.load.generator.request.read_stream`), into ``rec`` when given
    (else a bare record sent when it was due). ``progress`` is called on every read (the
    hung-but-healthy watch's sign of life, load/hung_watch.py). Never raises for the server's
    behaviour."""
    if rec is None:
        rec = RequestRecord(
            target="", scenario="abandon", worker="probe", seq=0, t_intended=0.0, t_sent=0.0
        )
    until = None
    if abandon_after is not None or progress is not None:
        stop_at = abandon_after

        def until(st: StreamState) -> bool:
            if progress is not None:
                progress()
            return stop_at is not None and len(st.token_times) >= stop_at

    await read_stream(client, url, body, headers, rec, until=until, timeout_s=timeout_s)
    if not rec.t_intended:
        rec.t_intended = rec.t_sent  # a probe's stream is due when it is sent
    return rec


@dataclass(slots=True)
class ProbeSettings:
    """How hard the probe pushes: ``streams`` concurrent streams per round, ``rounds`` rounds,
    each stream dropped after ``chunks`` token-bearing chunks. ``max_tokens`` should be well
    above ``chunks`` so the drop lands mid-generation; ``extra`` is merged into each body
    (e.g. ``{"ignore_eos": true}`` for vLLM, so a random tiny model does not stop early)."""

    streams: int = 8
    rounds: int = 3
    chunks: int = 3
    max_tokens: int = 256
    pause_s: float = 0.5
    prompt_words: int = 60
    timeout_s: float = 60.0
    extra: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """Raise :class:`UsageError` for settings outside the bounds."""
        if not 1 <= self.streams <= MAX_STREAMS:
            raise UsageError(
                f"abandoned-stream probe: streams {self.streams}: between 1 and {MAX_STREAMS}"
            )
        if not 1 <= self.rounds <= MAX_ROUNDS:
            raise UsageError(
                f"abandoned-stream probe: rounds {self.rounds}: between 1 and {MAX_ROUNDS}"
            )
        if not 1 <= self.chunks < self.max_tokens:
            raise UsageError(
                f"abandoned-stream probe: chunks {self.chunks}: at least 1 and below max_tokens {self.max_tokens}"
            )
        if not 0 <= self.pause_s <= 600 or not 0 < self.timeout_s <= 3600:
            raise UsageError(
                "abandoned-stream probe: pause_s in [0, 600] and timeout_s in (0, 3600]"
            )


@dataclass(slots=True)
class ProbeRound:
    """One round: how many streams were opened, dropped mid-generation, finished before the drop
    (``completed``: max_tokens too small, or the model stopped early) or failed."""

    index: int
    t_start: float
    t_end: float
    opened: int = 0
    abandoned: int = 0
    completed: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    first_error: str = ""


@dataclass(slots=True)
class ProbeResult:
    """All rounds. ``t_end`` (wall clock) is when the last connection of the last round closed:
    the ``since`` of the drain check."""

    settings: ProbeSettings
    rounds: list[ProbeRound] = field(default_factory=list)
    t_start: float = 0.0
    t_end: float = 0.0

    @property
    def abandoned(self) -> int:
        return sum(r.abandoned for r in self.rounds)

    @property
    def opened(self) -> int:
        return sum(r.opened for r in self.rounds)

    @property
    def failed(self) -> int:
        return sum(r.failed for r in self.rounds)

    @property
    def completed(self) -> int:
        return sum(r.completed for r in self.rounds)

    def line(self) -> str:
        """A one-line account for the console."""
        s = self.settings
        text = (
            f"abandoned-stream probe: {self.abandoned}/{self.opened} streams dropped after {s.chunks} chunk(s) "
            f"({len(self.rounds)} round(s) x {s.streams} concurrent)"
        )
        if self.completed:
            text += f"; {self.completed} finished before the drop (raise max_tokens)"
        if self.failed:
            first = next((r.first_error for r in self.rounds if r.first_error), "")
            text += f"; {self.failed} failed ({first})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": asdict(self.settings),
            "t_start": self.t_start,
            "t_end": self.t_end,
            "opened": self.opened,
            "abandoned": self.abandoned,
            "completed": self.completed,
            "failed": self.failed,
            "rounds": [asdict(r) for r in self.rounds],
        }


def _client(settings: ClientSettings, streams: int) -> httpx.AsyncClient:
    # Headers are sent per request (stream_chat adds the stream's own).
    return async_client(
        settings.with_(max_connections=max(streams, 1), keepalive=True), default_headers=False
    )


async def run_probe(
    target: Target,
    model: str,
    settings: ProbeSettings | None = None,
    *,
    on_round: Callable[[ProbeRound], None] | None = None,
) -> ProbeResult:
    """Run the probe against ``target`` (see the module docstring); returns what each round did."""
    cfg = settings or ProbeSettings()
    cfg.validate()
    client_settings = ClientSettings.for_target(target)
    url = target.base_url + "/chat/completions"
    headers = dict(client_settings.headers)
    result = ProbeResult(cfg, t_start=time.time())
    async with _client(client_settings, cfg.streams) as client:
        for index in range(cfg.rounds):
            if index and cfg.pause_s:
                await asyncio.sleep(cfg.pause_s)
            rnd = ProbeRound(index + 1, time.time(), 0.0)
            bodies = [
                chat_body(
                    model,
                    max_tokens=cfg.max_tokens,
                    prompt_words=cfg.prompt_words,
                    seed=index * cfg.streams + i,
                    extra=cfg.extra,
                )
                for i in range(cfg.streams)
            ]
            records = await asyncio.gather(
                *(
                    stream_chat(
                        client,
                        url,
                        body,
                        headers,
                        abandon_after=cfg.chunks,
                        timeout_s=cfg.timeout_s,
                    )
                    for body in bodies
                )
            )
            rnd.t_end = time.time()
            for o in records:
                rnd.opened += 1
                if o.abandoned:
                    rnd.abandoned += 1
                elif o.error is None:
                    rnd.completed += 1
                else:
                    rnd.failed += 1
                    rnd.errors[o.error] = rnd.errors.get(o.error, 0) + 1
                    rnd.first_error = rnd.first_error or f"{o.error}: {o.error_message[:200]}"
            result.rounds.append(rnd)
            if on_round is not None:
                on_round(rnd)
    result.t_end = time.time()
    return result


def judge_drain(
    frame: pd.DataFrame,
    since: float,
    bound_s: float,
    *,
    baseline_window: tuple[float, float] | None = None,
    tolerance: float = 0.02,
) -> DrainVerdict:
    """The telemetry library's :func:`~servecheck.telemetry.leak.check_drain` for a probe that
    ended at ``since`` (wall clock, like the frame's ``t``)."""
    from servecheck.telemetry.leak import check_drain

    return check_drain(frame, since, bound_s, baseline_window=baseline_window, tolerance=tolerance)


def wait_drained(
    recorder: TelemetryRecorder,
    since: float,
    bound_s: float,
    *,
    baseline_window: tuple[float, float] | None = None,
    tolerance: float = 0.02,
    poll_s: float = 0.5,
    hold_s: float | None = None,
    on_poll: Callable[[float], None] | None = None,
) -> DrainVerdict:
    """Watch a running recorder after a probe; return the drain verdict.

    Returns early once the server has been drained for ``hold_s`` (default: the shorter of
    2 s and a quarter of the bound); else once ``bound_s`` after ``since`` has passed and the
    verdict is final. A busy engine answers ``/metrics`` late, so while telemetry lags behind
    the bound (``insufficient_data``) it waits a grace of ``max(2 s, 4 polls)`` more, never longer.
    """
    hold = min(2.0, bound_s / 4) if hold_s is None else hold_s
    end = since + bound_s
    hard = end + max(2.0, 4 * poll_s)
    while True:
        if on_poll is not None:
            on_poll(time.time() - since)
        time.sleep(max(0.0, min(poll_s, hard - time.time())))
        verdict = judge_drain(
            recorder.frame(), since, bound_s, baseline_window=baseline_window, tolerance=tolerance
        )
        now = time.time()
        if (
            verdict.status == "ok"
            and verdict.drained_after_s is not None
            and now - since - verdict.drained_after_s >= hold
        ):
            return verdict
        if now >= hard or (now >= end and verdict.status != "insufficient_data"):
            return verdict


def discover_model(target: Target) -> str:
    """The target's first ``models`` entry, else the first id ``/v1/models`` lists
    (:func:`servecheck.client.models.model_for_target`)."""
    from servecheck.client.models import model_for_target

    return model_for_target(target).model


@dataclass(slots=True)
class ProbeReport:
    """:func:`probe_with_telemetry`'s outcome: the probe, the drain verdict and the phase times."""

    probe: ProbeResult
    drain: DrainVerdict
    baseline: tuple[float, float]

    @property
    def passed(self) -> bool:
        return self.drain.passed and self.probe.abandoned > 0


def probe_with_telemetry(
    target: Target,
    run_dir: Path | str,
    *,
    model: str | None = None,
    settings: ProbeSettings | None = None,
    bound_s: float = 30.0,
    baseline_s: float = 2.0,
    tolerance: float = 0.02,
    interval_s: float = 0.5,
    nvml: bool = False,
    telemetry: Mapping[str, Any] | None = None,
) -> ProbeReport:
    """Stand-alone probe: sample the target's metrics (``TelemetryRecorder.for_target``), take an
    idle baseline of ``baseline_s``, run the probe, then wait for the drain (:func:`wait_drained`).
    Telemetry goes to ``<run_dir>/telemetry/``."""
    from servecheck.telemetry.recorder import TelemetryRecorder

    if not 0 < bound_s <= 3600 or not 0 < baseline_s <= 3600:
        raise UsageError("abandoned-stream probe: bound_s and baseline_s must be in (0, 3600]")
    model = model or discover_model(target)
    settings = settings or ProbeSettings()
    with TelemetryRecorder.for_target(
        target, run_dir, dict(telemetry or {}), interval_s=interval_s, nvml=nvml
    ) as rec:
        rec.wait_ready()
        t0 = time.time()
        rec.mark("baseline")
        time.sleep(baseline_s)
        baseline = (t0, time.time())
        rec.mark("abandon-probe")
        probe = run_async(run_probe(target, model, settings))
        rec.mark("drain")
        drain = wait_drained(
            rec,
            probe.t_end,
            bound_s,
            baseline_window=baseline,
            tolerance=tolerance,
            poll_s=max(interval_s, 0.2),
        )
        rec.mark("end")
    return ProbeReport(probe, drain, baseline)


__all__ = [
    "ProbeReport",
    "ProbeResult",
    "ProbeRound",
    "ProbeSettings",
    "chat_body",
    "discover_model",
    "judge_drain",
    "probe_with_telemetry",
    "run_probe",
    "stream_chat",
    "wait_drained",
]
