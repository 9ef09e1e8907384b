"""Cold start: time to ready, the first requests against the warm median, requests to warm up.

Why: the first requests after a launch or a hot swap are slower (weights paged in, kernels
compiled or graphs captured, caches empty). An acceptance gate and a cutover check must measure
that and keep it out of the steady-state numbers (the smoke load then runs on a warm server).

:func:`launch` starts the server (``--launch CMD``: a command line, run in its own process
group, its output in ``launch.log``); :func:`measure` waits for readiness with the caller's probe
(the command layer passes the checks' ``wait_ready``: this module does not import checks), then
sends ``requests`` sequential streaming chat completions and times each the way load records do
(TTFT stops at the first token-bearing chunk: each request is read by the load generator's request
function, :func:`~servecheck.load.generator.request.read_stream_sync`, into a
:class:`~servecheck.records.record.RequestRecord`).

Figures: ``time_to_ready_s`` (from launch, or from when the wait began), the first request's TTFT
and E2E, the warm medians (over the last ``warm_window`` requests), their ratios, and
``requests_to_warm``: how many requests came before the first one within ``tolerance`` of the
warm median (25 %, at least 5 ms), itself and as the median of it and the next two. Bounded: a request count, a
per-request timeout, the readiness timeout.

Cold-start SLOs (:func:`cold_start_verdicts`; the grammar is :mod:`servecheck.analysis.slo`'s): ``time_to_ready``,
``first_ttft``, ``first_e2e`` (times), ``first_ttft_ratio``, ``first_e2e_ratio`` (first over warm
median) and ``requests_to_warm``. A figure that was not measured (the server never became ready,
too few requests succeeded for a warm median, none warmed up) fails its SLO as *not measured*:
the stage is INCONCLUSIVE, never a pass.
"""

from __future__ import annotations

import os
import shlex
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from servecheck.analysis.slo import SLO, Verdict
from servecheck.client.factory import ClientSettings, sync_client
from servecheck.config.model import Target
from servecheck.errors import SpecError
from servecheck.load.generator.request import read_stream_sync
from servecheck.load.workload.prompts import words_text
from servecheck.records.record import RequestRecord
from servecheck.signals import die_with_parent

MAX_REQUESTS = 200


def failure(rec: RequestRecord) -> str | None:
    """Why a request of the series does not count: its error class, or ``no-token`` for a
    stream that ended well without a token (no TTFT to compare); None when it counts."""
    if rec.error is not None:
        return rec.error
    return "no-token" if rec.ttft is None else None


def _ms(rec: RequestRecord, key: str) -> float | None:
    """``ttft_ms`` / ``e2e_ms`` of one request (the series' unit); no TTFT for a failed one."""
    if key == "ttft_ms":
        return None if rec.ttft is None or failure(rec) else rec.ttft * 1000
    return None if rec.e2e is None else rec.e2e * 1000


def series_row(rec: RequestRecord) -> dict[str, Any]:
    """One request as the series in ``cold_start`` reads: ms, None where it did not get that far."""
    return {"ttft_ms": _ms(rec, "ttft_ms"), "e2e_ms": _ms(rec, "e2e_ms"), "error": failure(rec)}


@dataclass(slots=True)
class ColdStart:
    """What :func:`measure` found; ``ok`` is False when the server never became ready or no
    request succeeded (then nothing else is a measurement)."""

    launched: bool
    ready: bool
    ready_detail: str
    time_to_ready_s: float | None
    probes: list[RequestRecord] = field(default_factory=list)
    warm_window: int = 10
    tolerance: float = 0.25

    @property
    def ok(self) -> bool:
        return self.ready and any(failure(p) is None for p in self.probes)

    def _good(self, key: str) -> list[float]:
        values = [_ms(p, key) for p in self.probes if failure(p) is None]
        return [v for v in values if v]

    def warm_median(self, key: str) -> float | None:
        good = self._good(key)
        if len(good) < 2:
            return None
        # The last requests, never more than half the series (the first ones are the cold part).
        return statistics.median(good[-min(self.warm_window, max(1, len(good) // 2)) :])

    @property
    def requests_to_warm(self) -> int | None:
        """Requests before the first warm one: within tolerance of the warm median itself and as
        the median of it and the next two (so one lucky or unlucky request does not decide it)."""
        warm = self.warm_median("ttft_ms")
        if warm is None:
            return None
        bound = warm + max(5.0, warm * self.tolerance)
        inf = float("inf")
        ttfts = [inf if (t := _ms(p, "ttft_ms")) is None else t for p in self.probes]
        for i in range(len(ttfts)):
            window = sorted(ttfts[i : i + 3])
            if ttfts[i] <= bound and window[len(window) // 2] <= bound:
                return i
        return None

    def as_dict(self) -> dict[str, Any]:
        first = series_row(self.probes[0]) if self.probes else None
        wt, we = self.warm_median("ttft_ms"), self.warm_median("e2e_ms")

        def ratio(a: float | None, b: float | None) -> float | None:
            return round(a / b, 3) if a is not None and b else None

        return {
            "ok": self.ok,
            "launched": self.launched,
            "ready": self.ready,
            "ready_detail": self.ready_detail,
            "time_to_ready_s": self.time_to_ready_s,
            "requests": len(self.probes),
            "failed": sum(1 for p in self.probes if failure(p)),
            "first_ttft_ms": first["ttft_ms"] if first else None,
            "first_e2e_ms": first["e2e_ms"] if first else None,
            "first_error": first["error"] if first else None,
            "warm_ttft_median_ms": wt,
            "warm_e2e_median_ms": we,
            "first_vs_warm_ttft": ratio(first["ttft_ms"] if first else None, wt),
            "first_vs_warm_e2e": ratio(first["e2e_ms"] if first else None, we),
            "requests_to_warm": self.requests_to_warm,
            "warm_window": self.warm_window,
            "tolerance": self.tolerance,
            "series": [series_row(p) for p in self.probes],
        }

    def line(self) -> str:
        d = self.as_dict()
        if not self.ready:
            return f"not ready: {self.ready_detail}"

        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f} ms"

        return (
            f"ready after {d['time_to_ready_s']:.1f} s; first request TTFT {ms(d['first_ttft_ms'])}"
            f" / E2E {ms(d['first_e2e_ms'])} vs warm median {ms(d['warm_ttft_median_ms'])} / "
            f"{ms(d['warm_e2e_median_ms'])}; warm after {d['requests_to_warm']} request(s)"
        )


# The SLO metric -> (the ColdStart.as_dict key, the factor to the SLO's unit).
SLO_VALUES = {
    "time_to_ready": ("time_to_ready_s", 1000.0),
    "first_ttft": ("first_ttft_ms", 1.0),
    "first_e2e": ("first_e2e_ms", 1.0),
    "first_ttft_ratio": ("first_vs_warm_ttft", 1.0),
    "first_e2e_ratio": ("first_vs_warm_e2e", 1.0),
    "requests_to_warm": ("requests_to_warm", 1.0),
}


def cold_start_verdicts(slos: list[SLO], cold: ColdStart) -> list[Verdict]:
    """Each cold-start SLO against what :func:`measure` found; a missing figure fails it with
    the note ``not measured: ...`` (the caller reports the stage INCONCLUSIVE)."""
    d = cold.as_dict()
    why = (
        f"the server never became ready ({cold.ready_detail})"
        if not cold.ready
        else "no request succeeded"
        if not cold.ok
        else "too few successful requests for a warm median, or none warmed up"
    )
    out: list[Verdict] = []
    for slo in slos:
        key, factor = SLO_VALUES[slo.metric]
        value = d.get(key)
        if value is None:
            out.append(Verdict(slo, None, False, f"not measured: {why}"))
        else:
            out.append(Verdict(slo, float(value) * factor, slo.holds(float(value) * factor)))
    return out


def launch(command: str, log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``command`` (a command line, split like a shell would, no shell) in its own group."""
    argv = shlex.split(command)
    if not argv:
        raise SpecError("{launch}: empty command")
    log = open(log_path, "wb")  # noqa: SIM115 - the child holds it; closed with the process
    try:
        return subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=os.environ,
            # A servecheck killed with -9 must not leave the launched server running (issue 14).
            preexec_fn=die_with_parent,
        )
    except OSError as exc:
        log.close()
        raise SpecError(
            "{launch}: cannot run {cmd!r}: {why}", cmd=argv[0], why=exc.strerror
        ) from None


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> int | None:
    """SIGTERM the launched process group, SIGKILL after ``timeout_s``; its exit code."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass
    return proc.returncode


def timed_request(
    client: httpx.Client, target: Target, model: str, max_tokens: int, seed: int
) -> RequestRecord:
    """One streaming chat completion, read and timed as a load record (never raises)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": words_text(40, seed)}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
    }
    rec = RequestRecord(
        target=target.name,
        scenario="cold-start",
        worker="cold-start",
        seq=seed,
        t_intended=0.0,
        t_sent=0.0,
    )
    read_stream_sync(client, target.base_url + "/chat/completions", body, {}, rec)
    rec.t_intended = rec.t_sent  # sequential: each is due when the one before it ended
    return rec


def measure(
    target: Target,
    model: Callable[[], str],
    wait_ready: Callable[[float], tuple[bool, str]],
    ready_timeout_s: float,
    *,
    started: float | None = None,
    launched: bool = False,
    requests: int = 30,
    max_tokens: int = 32,
    on_log: Callable[[str], None] | None = None,
) -> ColdStart:
    """Wait for readiness, then time ``requests`` sequential requests.

    ``started``: the ``time.monotonic()`` of the launch (time to ready counts from it; default:
    now). ``wait_ready(timeout_s) -> (ready, detail)``; ``model()`` is asked after readiness
    (a starting server cannot list its models yet).
    """
    if not 2 <= requests <= MAX_REQUESTS:
        raise SpecError(f"{{cold_start_requests}} {requests}: between 2 and {MAX_REQUESTS}")
    say = on_log or (lambda s: None)
    t0 = started if started is not None else time.monotonic()
    ready, detail = wait_ready(max(0.1, ready_timeout_s - (time.monotonic() - t0)))
    result = ColdStart(
        launched=launched,
        ready=ready,
        ready_detail=detail,
        time_to_ready_s=round(time.monotonic() - t0, 3) if ready else None,
    )
    if not ready:
        say(f"cold start: {result.line()}")
        return result
    name = model()
    # The target's own client: its verify_tls, never a proxy of the environment.
    with sync_client(ClientSettings.for_target(target)) as client:
        for i in range(requests):
            probe = timed_request(client, target, name, max_tokens, seed=i)
            if probe.status is None and probe.error == "stream-error":
                # A kept-alive connection the server had closed (seen on llama.cpp): the request
                # never reached it; one retry on a fresh connection, as the load reader does.
                probe = timed_request(client, target, name, max_tokens, seed=i)
            result.probes.append(probe)
    say(f"cold start: {result.line()}")
    return result
