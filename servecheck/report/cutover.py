"""Hot-swap pre-cutover: greedy-output agreement between two targets, and a steady probe that
watches an alias/gateway target while the model behind it is swapped.

Agreement: each prompt is sent to OLD and NEW with ``temperature: 0`` (and ``seed: 0``); the
outputs are compared exactly, and where they differ by word-level Levenshtein distance
normalised by the longer output (0 = same words, 1 = nothing in common).

Swap probe (:func:`run_swap_probe`): a fixed-rate open loop of small non-streaming requests
(bounded by a duration, a rate and a cap on requests in flight). Afterwards
:func:`analyse_swap` reports the failed requests by error class, the longest stretch of time
with no successful response (measured between completions, including the start and end of the
run) and every change of the ``model`` field of successful answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from servecheck.config.model import Target
from servecheck.load.records import RecordError, http_error

DEFAULT_PROMPTS: tuple[str, ...] = (
    "What is the capital of France? Answer in one word.",
    "Count from one to ten in words, separated by commas.",
    "Write one sentence about the sea.",
    "Translate 'good morning' into German.",
    "What is 17 multiplied by 3?",
    "Name three primary colours.",
    "Give a synonym for 'happy'.",
    "Complete the sequence: 2, 4, 8, 16, ...",
    "Write a haiku about autumn.",
    "Explain in one sentence what a CPU does.",
    "List the days of the week.",
    "Reply with the word 'ready' and nothing else.",
)


def words(text: str) -> list[str]:
    return text.split()


def levenshtein(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Edit distance between two sequences (insertions, deletions, substitutions), O(len(a)*len(b))."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def normalised_distance(a: str, b: str) -> float:
    """Word-level Levenshtein distance divided by the longer output's word count (0..1)."""
    wa, wb = words(a), words(b)
    longest = max(len(wa), len(wb))
    return 0.0 if longest == 0 else levenshtein(wa, wb) / longest


@dataclass(slots=True)
class PromptResult:
    prompt: str
    old: str | None
    new: str | None
    identical: bool
    distance: float | None
    old_error: str = ""
    new_error: str = ""


@dataclass(slots=True)
class Agreement:
    """Greedy-output agreement over a prompt set."""

    results: list[PromptResult] = field(default_factory=list)
    old_model: str = ""
    new_model: str = ""

    @property
    def compared(self) -> list[PromptResult]:
        return [r for r in self.results if r.old is not None and r.new is not None]

    @property
    def identical_share(self) -> float | None:
        c = self.compared
        return None if not c else sum(r.identical for r in c) / len(c)

    @property
    def mean_distance(self) -> float | None:
        c = self.compared
        return None if not c else sum(r.distance or 0.0 for r in c) / len(c)

    @property
    def errors(self) -> int:
        return sum(1 for r in self.results if r.old is None or r.new is None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "old_model": self.old_model,
            "new_model": self.new_model,
            "prompts": len(self.results),
            "compared": len(self.compared),
            "identical_share": self.identical_share,
            "mean_distance": self.mean_distance,
            "errors": self.errors,
            "results": [asdict(r) for r in self.results],
        }


def read_prompts(path: str | Path | None) -> list[str]:
    """Prompts from a file (one per line; ``#`` comments and blank lines skipped), or the built-in set."""
    if path is None:
        return list(DEFAULT_PROMPTS)
    lines = [ln.strip() for ln in Path(path).read_text(encoding="utf-8").splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def model_of(target: Target) -> str:
    """The target's first declared model, else the first one its /models lists."""
    if target.models:
        return target.models[0]
    from servecheck.client.http import ServeClient

    with ServeClient.for_target(target) as client:
        ex = client.get("/models")
        data = ex.json() if ex.ok else None
    try:
        return str(data["data"][0]["id"])  # type: ignore[index]
    except (TypeError, KeyError, IndexError):
        from servecheck.errors import UsageError

        raise UsageError(
            f"target {target.name!r}: no models declared and GET /models gave none ({ex.describe(200)})"
        ) from None


def greedy_outputs(
    target: Target, model: str, prompts: Sequence[str], max_tokens: int = 64
) -> list[tuple[str | None, str]]:
    """(text or None, error) per prompt, ``temperature: 0, seed: 0``, one request at a time."""
    from servecheck.client.http import ServeClient

    out: list[tuple[str | None, str]] = []
    with ServeClient.for_target(target) as client:
        for p in prompts:
            body = {
                "model": model,
                "messages": [{"role": "user", "content": p}],
                "temperature": 0,
                "seed": 0,
                "max_tokens": max_tokens,
            }
            ex = client.post("/chat/completions", body)
            data = ex.json() if ex.ok else None
            try:
                out.append((str(data["choices"][0]["message"]["content"] or ""), ""))  # type: ignore[index]
            except (TypeError, KeyError, IndexError):
                out.append((None, ex.describe(300)))
    return out


def agreement(old: Target, new: Target, prompts: Sequence[str], max_tokens: int = 64) -> Agreement:
    """Send every prompt to both targets greedily and compare the answers."""
    mo, mn = model_of(old), model_of(new)
    a = greedy_outputs(old, mo, prompts, max_tokens)
    b = greedy_outputs(new, mn, prompts, max_tokens)
    res = Agreement(old_model=mo, new_model=mn)
    for p, (ta, ea), (tb, eb) in zip(prompts, a, b, strict=True):
        both = ta is not None and tb is not None
        res.results.append(
            PromptResult(
                p,
                ta,
                tb,
                both and ta == tb,
                normalised_distance(ta or "", tb or "") if both else None,
                ea,
                eb,
            )
        )
    return res


# ------------------------------------------------------------------ swap under load


@dataclass(slots=True)
class ProbeRecord:
    """One probe request: times relative to the probe start (s)."""

    t_sent: float
    t_done: float
    ok: bool
    status: int | None
    error: str | None
    model: str | None
    lag: float = 0.0  # how late the probe sent it (s): the probe's own health


@dataclass(slots=True)
class ModelChange:
    t: float
    old: str | None
    new: str | None


@dataclass(slots=True)
class SwapReport:
    """What a client of the alias saw during the swap."""

    duration_s: float
    requests: int
    ok: int
    failed: int
    errors: dict[str, int]
    longest_gap_s: float
    gap_start_s: float
    gap_end_s: float
    models_seen: list[str]
    model_changes: list[ModelChange]
    first_failure_s: float | None = None
    last_failure_s: float | None = None
    probe_lag_max_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def _probe(
    target: Target,
    model: str,
    duration_s: float,
    rate: float,
    max_inflight: int,
    on_tick: Callable[[float, int, int], None] | None,
) -> list[ProbeRecord]:
    import httpx

    headers = {**target.headers, **target.auth_headers(), "content-type": "application/json"}
    timeout = httpx.Timeout(min(target.timeout_s, 30.0), connect=min(target.connect_timeout_s, 5.0))
    records: list[ProbeRecord] = []
    sem = asyncio.Semaphore(max_inflight)
    t0 = time.perf_counter()
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Reply with one word."}],
        "max_tokens": 4,
        "temperature": 0,
    }
    limits = httpx.Limits(max_connections=max_inflight, max_keepalive_connections=max_inflight)

    async def one(client: httpx.AsyncClient, due: float) -> None:
        async with sem:
            sent = time.perf_counter() - t0
            status: int | None = None
            try:
                r = await client.post(
                    target.base_url + "/chat/completions", json=body, headers=headers
                )
                status = r.status_code
                served = None
                if 200 <= r.status_code < 300:
                    try:
                        served = r.json().get("model")
                    except ValueError:
                        served = None
                ok = 200 <= r.status_code < 300
                err: RecordError | None = None if ok else http_error(r.status_code)
            except httpx.TimeoutException:
                ok, err, served = False, "timeout", None
            except httpx.TransportError:
                ok, err, served = False, "connect", None
            records.append(
                ProbeRecord(
                    sent,
                    time.perf_counter() - t0,
                    ok,
                    status,
                    err,
                    served if ok else None,
                    max(0.0, sent - due),
                )
            )

    async with httpx.AsyncClient(
        timeout=timeout, limits=limits, verify=target.verify_tls
    ) as client:
        tasks: set[asyncio.Task[None]] = set()
        n = 0
        while True:
            due = n / rate
            now = time.perf_counter() - t0
            if due >= duration_s:
                break
            if due > now:
                await asyncio.sleep(due - now)
            task = asyncio.create_task(one(client, due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            n += 1
            if on_tick is not None and n % max(1, int(rate)) == 0:
                on_tick(time.perf_counter() - t0, len(records), sum(1 for r in records if not r.ok))
        if tasks:
            await asyncio.wait(tasks, timeout=min(target.timeout_s, 30.0) + 5.0)
    records.sort(key=lambda r: r.t_done)
    return records


def run_swap_probe(
    target: Target,
    model: str,
    *,
    duration_s: float,
    rate: float = 10.0,
    max_inflight: int = 64,
    on_tick: Callable[[float, int, int], None] | None = None,
) -> tuple[list[ProbeRecord], float]:
    """Send ``rate`` requests/s to ``target`` for ``duration_s``; return the records and the run length."""
    t0 = time.perf_counter()
    records = asyncio.run(_probe(target, model, duration_s, rate, max_inflight, on_tick))
    return records, max(duration_s, time.perf_counter() - t0)


def analyse_swap(records: Sequence[ProbeRecord], duration_s: float) -> SwapReport:
    """Failures, the longest time without a successful completion, and served-model changes."""
    recs = sorted(records, key=lambda r: r.t_done)
    ok = [r for r in recs if r.ok]
    bad = [r for r in recs if not r.ok]
    errors: dict[str, int] = {}
    for r in bad:
        errors[r.error or "?"] = errors.get(r.error or "?", 0) + 1
    end = max(duration_s, recs[-1].t_done if recs else 0.0)
    marks = [0.0, *(r.t_done for r in ok), end]
    gap, gs, ge = 0.0, 0.0, end
    for a, b in zip(marks, marks[1:], strict=False):
        if b - a > gap:
            gap, gs, ge = b - a, a, b
    changes: list[ModelChange] = []
    seen: list[str] = []
    last: str | None = None
    for r in ok:
        if r.model not in seen and r.model is not None:
            seen.append(r.model)
        if last is not None and r.model != last:
            changes.append(ModelChange(round(r.t_done, 3), last, r.model))
        last = r.model
    return SwapReport(
        duration_s=round(end, 3),
        requests=len(recs),
        ok=len(ok),
        failed=len(bad),
        errors=errors,
        longest_gap_s=round(gap, 3),
        gap_start_s=round(gs, 3),
        gap_end_s=round(ge, 3),
        models_seen=seen,
        model_changes=changes,
        first_failure_s=round(bad[0].t_sent, 3) if bad else None,
        last_failure_s=round(bad[-1].t_done, 3) if bad else None,
        probe_lag_max_s=round(max((r.lag for r in recs), default=0.0), 3),
    )


def swap_timeline(
    records: Sequence[ProbeRecord], bin_s: float = 0.5
) -> tuple[list[float], list[float], list[float]]:
    """(t, ok/s, failed/s) in bins of completion time, for the plot."""
    if not records:
        return [], [], []
    n = int(max(r.t_done for r in records) // bin_s) + 1
    ok, bad = [0.0] * n, [0.0] * n
    for r in records:
        (ok if r.ok else bad)[int(r.t_done // bin_s)] += 1 / bin_s
    return [(i + 0.5) * bin_s for i in range(n)], ok, bad


__all__ = [
    "Agreement",
    "DEFAULT_PROMPTS",
    "ModelChange",
    "ProbeRecord",
    "PromptResult",
    "SwapReport",
    "agreement",
    "analyse_swap",
    "greedy_outputs",
    "levenshtein",
    "model_of",
    "normalised_distance",
    "read_prompts",
    "run_swap_probe",
    "swap_timeline",
]
