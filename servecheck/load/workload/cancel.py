"""Cancellation injection: a share of a run's requests is cancelled by the client at a set point.

Why: a client that gives up (a closed tab, a timeout upstream, a user pressing stop) is the
engine's everyday case, and an engine that keeps the cancelled request's running slot or its KV
blocks leaks under it. ``--cancel SHARE@POINT`` (plan key ``cancel:``) cancels ``SHARE`` of the
requests, drawn per request by the user's seeded generator, at one of:

* ``headers``: as soon as the response headers are in (the engine has accepted the request);
* ``tokens:K``: after the K-th token chunk;
* ``ms:T``: T milliseconds after the request was sent, once its headers are in: at the first
  read after T ms, or at the reactor's tick (0.1 s) when the stream is silent (an https run, read
  by blocking reads, cancels at its next read).

The client closes the connection there. The record's ``cancelled`` holds the point
(``headers``, ``tokens:8``, ``ms:200``) and ``error`` stays null: a cancelled request is its own
class, neither a success nor a failure, out of latency, throughput, goodput and the error budget,
and counted in ``requests.cancelled``. A request that failed before its point (refused, an HTTP
error) is a failure as usual.

Afterwards the engine must come back down: the telemetry recorder keeps sampling its
``requests_running`` and ``kv_usage`` after the load, and the telemetry library's drain verdict
(:func:`servecheck.telemetry.leak.check_drain`) says whether they returned to the idle baseline
within ``DRAIN_BOUND_S`` (``cancel-drain.json``, summary.json's ``cancel`` section). Not drained:
the run FAILs (the engine leaked what the cancelled requests held); no telemetry or nothing
cancelled: INCONCLUSIVE, never a silent pass.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from servecheck.analysis.sections import CancelSection
from servecheck.errors import SpecError

if TYPE_CHECKING:
    from servecheck.load.generator.wire import WireResult
    from servecheck.load.workload.planned import Send
    from servecheck.records.record import RequestRecord

POINTS = ("headers", "tokens", "ms")
DRAIN_BOUND_S = 30.0  # how long the engine has to come back down after the load
DRAIN_FILE = "cancel-drain.json"
_perf = time.perf_counter


@dataclass(frozen=True, slots=True)
class CancelRule:
    """Cancel ``share`` (0..1] of the requests at ``point`` (``headers``, ``tokens`` after
    ``value`` tokens, ``ms`` after ``value`` milliseconds)."""

    share: float
    point: str
    value: float = 0.0

    @property
    def where(self) -> str:
        """The point as the records and the summary spell it: ``headers``, ``tokens:8``, ``ms:200``."""
        return self.point if self.point == "headers" else f"{self.point}:{self.value:g}"

    def text(self) -> str:
        return f"{self.share * 100:g}%@{self.where}"

    def as_dict(self) -> dict[str, Any]:
        return {"share": self.share, "point": self.point, "value": self.value}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> CancelRule | None:
        if not d:
            return None
        return cls(float(d["share"]), str(d["point"]), float(d.get("value") or 0.0))


def parse_cancel(text: str | None) -> CancelRule | None:
    """``--cancel`` / plan ``cancel:``: ``SHARE@POINT``, e.g. ``10%@headers``, ``10%@tokens:8``,
    ``5%@ms:200``; None or ``off``: no cancellation. A bad value is a usage error naming it."""
    if text is None or str(text).strip().lower() in ("", "off", "none"):
        return None
    raw = str(text).strip()
    share_text, at, point_text = raw.partition("@")
    point, _, value_text = point_text.strip().lower().partition(":")
    problem = _problem(share_text.strip(), at, point, value_text.strip())
    if problem:
        raise SpecError(
            "{cancel} {text!r}: " + problem + "; write SHARE@POINT, e.g. 10%@headers, "
            "10%@tokens:8 or 5%@ms:200",
            text=text,
        )
    share = float(share_text.strip()[:-1]) / 100.0
    value = float(value_text) if value_text else 0.0
    return CancelRule(share, point, value)


def _problem(share: str, at: str, point: str, value: str) -> str:
    """What is wrong with a ``--cancel`` value ('' when nothing)."""
    if not at:
        return "no @POINT"
    if not share.endswith("%"):
        return f"the share {share!r} needs % (e.g. 10%)"
    try:
        pct = float(share[:-1])
    except ValueError:
        return f"the share {share!r} is not a percentage"
    if not 0 < pct <= 100 or math.isnan(pct):
        return f"the share {share!r} must be above 0% and at most 100%"
    if point not in POINTS:
        return f"unknown point {point!r} (one of headers, tokens:K, ms:T)"
    if point == "headers":
        return "headers takes no number" if value else ""
    try:
        n = float(value)
    except ValueError:
        return f"{point} needs a number ({point}:{'8' if point == 'tokens' else '200'})"
    if point == "tokens" and (n != int(n) or n < 1):
        return f"tokens:{value}: a whole number of tokens, at least 1"
    if point == "ms" and not (n > 0 and math.isfinite(n)):
        return f"ms:{value}: a positive number of milliseconds"
    return ""


class _Tokens(Protocol):
    token_times: list[float]


@dataclass(slots=True)
class Drawn:
    """One request drawn for cancellation: ``until`` is the reader's hang-up test."""

    rule: CancelRule
    until: Callable[[], bool]


def draw(rule: CancelRule | None, rng: random.Random, stream: _Tokens, t0: float) -> Drawn | None:
    """Whether this request is cancelled (``rule.share`` of them, by ``rng``), and its hang-up
    test: asked by the reader once the headers are in (then after each read, and at the
    reactor's tick), true at the point. ``t0``: the send time on ``perf_counter``."""
    if rule is None or rng.random() >= rule.share:
        return None
    if rule.point == "headers":
        return Drawn(rule, lambda: True)
    if rule.point == "tokens":
        k = int(rule.value)
        return Drawn(rule, lambda: len(stream.token_times) >= k)
    at = t0 + rule.value / 1000.0
    return Drawn(rule, lambda: _perf() >= at)


def outcome(drawn: Drawn | None, hung_up: bool, error: Any) -> str | None:
    """A record's ``cancelled``: the point, for a drawn request the client hung up on there
    (the reader then reports no error: the missing ``[DONE]`` is ours); None for one that was
    not drawn, or failed before its point (it keeps its error)."""
    if drawn is None or not hung_up or error is not None:
        return None
    return drawn.rule.where


@dataclass(slots=True)
class CancelStep:
    """The run's steps for ``--cancel``: draw each request, and say in its record whether the
    client hung up at the point (``cancelled``) rather than gave up (``abandoned``)."""

    rule: CancelRule

    def arm(self, send: Send) -> None:
        send.drawn = drawn = draw(self.rule, send.rng, send.stream, send.t0)
        if drawn is not None:
            send.until = drawn.until  # it replaces a scenario's hang-up

    def settle(self, send: Send, rec: RequestRecord, res: WireResult) -> None:
        rec.cancelled = outcome(send.drawn, res.hung_up, rec.error)
        rec.abandoned = res.hung_up and rec.cancelled is None


@dataclass(slots=True)
class HangUp:
    """A scenario's abandoned streams (``LLMUser.hang_up_after_tokens``): this share of the
    requests hangs up after this many tokens, as a client that navigates away does."""

    after_tokens: int
    share: float = 1.0

    def arm(self, send: Send) -> None:
        if send.rng.random() < self.share:
            stream, stop_at = send.stream, self.after_tokens

            def until() -> bool:
                return len(stream.token_times) >= stop_at

            send.until = until


# ------------------------------------------------------------------ after the load: did it drain?


def wait_after_run(recorder: Any, run_dir: Path, started: float, bound_s: float) -> None:
    """The engine's running requests and KV usage after a load with cancellations: the
    recorder (still sampling) is watched until they are back at the idle baseline (the samples
    before ``started``) or ``bound_s`` passed; the verdict goes to ``cancel-drain.json``."""
    from servecheck.probes.abandon import wait_drained

    since = time.time()
    try:
        # A poll a second: a busy engine answers /metrics late, and wait_drained waits up to 4
        # polls past the bound for samples that cover it before it says it cannot tell.
        verdict = wait_drained(
            recorder, since, bound_s, baseline_window=(started - 30.0, started), poll_s=1.0
        ).to_dict()
        # check_drain speaks of the abandoned-stream probe; here what came before was the load.
        verdict["message"] = str(verdict.get("message", "")).replace("the probe", "the load")
    except Exception as exc:  # noqa: BLE001 - telemetry never stops a run: the verdict says so
        verdict = {"status": "insufficient_data", "message": f"{type(exc).__name__}: {exc}"}
    (run_dir / DRAIN_FILE).write_text(json.dumps(verdict) + "\n", encoding="utf-8")


def section(
    rule: CancelRule | None, cancelled: int, run_dir: Path
) -> tuple[CancelSection | None, str, str]:
    """summary.json's ``cancel`` section and its verdict: ``(section, status, reason)`` with
    status ``pass`` / ``fail`` / ``inconclusive`` (``""``: no cancellation asked)."""
    if rule is None:
        return None, "", ""
    try:
        drain = json.loads((run_dir / DRAIN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        drain = None
    out = CancelSection(rule=rule.text(), cancelled=cancelled, drain=drain)
    if not cancelled:
        return out, "inconclusive", f"cancel {rule.text()}: no request was cancelled"
    if drain is None:
        why = "no engine telemetry (/metrics) to see it drain"
        return out, "inconclusive", f"cancel {rule.text()}: {cancelled} cancelled, but {why}"
    status = str(drain.get("status"))
    message = str(drain.get("message") or status)
    if status == "ok":
        return out, "pass", f"cancel {rule.text()}: {cancelled} cancelled; {message}"
    if status == "not_drained":
        return out, "fail", f"cancel {rule.text()}: {cancelled} cancelled and the engine {message}"
    return out, "inconclusive", f"cancel {rule.text()}: {cancelled} cancelled; {message}"


__all__ = [
    "DRAIN_BOUND_S",
    "DRAIN_FILE",
    "POINTS",
    "CancelRule",
    "Drawn",
    "draw",
    "outcome",
    "parse_cancel",
    "section",
    "wait_after_run",
]
