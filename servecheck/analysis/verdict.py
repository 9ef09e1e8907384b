"""One verdict model for every run (load, accept, capacity, cutover, soak): PASS / FAIL /
INCONCLUSIVE with reasons, folded from the run's stage verdicts by :func:`compose`; nothing
succeeded is never a pass.

A run is ``pass`` only when something was measured and every SLO held; a run in which no request
succeeded is ``fail`` (the server answered, wrongly, or not at all), whether or not an SLO was
given, because a pipeline gated on the exit code must not ship a dead endpoint. A run that could
not measure what it claims (no request finished, the generator fell behind) is ``inconclusive``.
Both exit 1; only ``pass`` exits 0.

Each workflow turns its stages (readiness, conformance, a load, a cold start, a leak test, a
drain ...) into :class:`RunVerdict` values and lets :func:`compose` decide: a stage that failed
fails the run, one that could not measure makes it inconclusive, no stage at all is never a pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

# A closed set, checked by mypy: the JSON writes these strings as they are.
Status = Literal["pass", "fail", "inconclusive"]
PASS: Final = "pass"
FAIL: Final = "fail"
INCONCLUSIVE: Final = "inconclusive"
STATUSES: Final[tuple[Status, ...]] = get_args(Status)


def as_status(value: object) -> Status:
    """A status read from a file or a stage's ``verdict``: one of the three, else INCONCLUSIVE
    (what :func:`compose` made of any other word: not a pass, not a failure)."""
    for status in STATUSES:
        if value == status:
            return status
    return INCONCLUSIVE


# What the error classes of the records say about who is at fault: shown in the reason, so a
# reader sees "the server" and not the generator's CPU when every response was broken.
_ERROR_MEANING = {
    "connect": "the target refused or did not accept connections",
    "timeout": "the server did not finish a response within the target's timeout_s",
    "too-large": "the server's responses exceeded the reader's size bound",
    "stream-error": "the server broke its streams",
    "invalid-sse": "the server did not answer with an event stream (e.g. an HTML page)",
    "rate-limited": "the server shed every request (HTTP 429, or 503 with Retry-After)",
    "lost": "the target was down: the sends due were held back (an outage, analysis/outage.py)",
}


@dataclass(slots=True)
class RunVerdict:
    """``status`` (pass | fail | inconclusive), why, and the exit code it implies."""

    status: Status
    reasons: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == PASS

    @property
    def exit_code(self) -> int:
        return 0 if self.status == PASS else 1

    @classmethod
    def of(cls, ok: bool, *reasons: str, otherwise: Status = FAIL) -> RunVerdict:
        """PASS when ``ok`` (no reasons), else ``otherwise`` (FAIL) with ``reasons``."""
        return cls(PASS, []) if ok else cls(otherwise, [r for r in reasons if r])

    @classmethod
    def of_summary(cls, summary: Mapping[str, Any]) -> RunVerdict:
        """The verdict a run wrote (``summary.json``'s ``verdict`` and ``reasons``); a summary
        without one (a run that died before it judged) is INCONCLUSIVE."""
        return cls(
            as_status(summary.get("verdict")), [str(r) for r in summary.get("reasons") or []]
        )


def compose(stages: Iterable[RunVerdict]) -> RunVerdict:
    """The one rule that folds stage verdicts into a run's: FAIL when a stage failed, else
    INCONCLUSIVE when a stage could not measure, else PASS; no stage at all is INCONCLUSIVE.
    The reasons are the stages' reasons, in order."""
    parts = list(stages)
    reasons = [r for v in parts for r in v.reasons]
    if not parts:
        return RunVerdict(INCONCLUSIVE, ["nothing was run", *reasons])
    if any(v.status == FAIL for v in parts):
        return RunVerdict(FAIL, reasons)
    if any(v.status != PASS for v in parts):
        return RunVerdict(INCONCLUSIVE, reasons)
    return RunVerdict(PASS, reasons)


def stage_verdict(name: str, stage: Mapping[str, Any]) -> RunVerdict:
    """A workflow stage's dict (``ok``, and ``verdict`` where the stage has its own, as a load
    or a cold start does) as a verdict; the reason names the stage and gives its ``detail``."""
    word = str(stage.get("verdict") or (PASS if stage.get("ok") else FAIL))
    if word == PASS and not stage.get("ok"):
        word = FAIL  # a stage's ok is the last word on a pass
    if word == PASS:
        return RunVerdict(PASS, [])
    # Another word than the three (none is written today) folds as INCONCLUSIVE, as compose
    # folded it before the status was typed; the reason keeps the word as it was written.
    return RunVerdict(as_status(word), [f"{name}: {stage.get('detail') or word}"])


@dataclass(slots=True)
class Stage:
    """One stage of a workflow (readiness, conformance, agreement, a load, a cold start, a
    drain, a swap ...): what it reports (``facts``: the run file keeps them under the stage's
    name, unchanged) and its verdict, decided once, where the stage is made.

    Workflows hand stages to each other as these, so that no caller re-reads ``ok`` or
    ``verdict`` out of a dict to decide a run."""

    name: str
    facts: dict[str, Any]
    verdict: RunVerdict

    @classmethod
    def judged(cls, name: str, facts: dict[str, Any], detail: str | None = None) -> Stage:
        """The stage whose verdict :func:`stage_verdict` reads from ``facts`` (``ok``, and
        ``verdict`` where it has its own); ``detail`` (else the facts' own) is its reason."""
        seen = facts if detail is None else {**facts, "detail": detail}
        return cls(name, facts, stage_verdict(name, seen))

    @property
    def ok(self) -> bool:
        """The stage's own ``ok`` (readiness gates what follows on it, not on the verdict)."""
        return bool(self.facts.get("ok"))


def stage_facts(stages: Mapping[str, Stage]) -> dict[str, dict[str, Any]]:
    """The stages as a run file writes them: each stage's facts under its name."""
    return {name: stage.facts for name, stage in stages.items()}


def nothing_succeeded(
    total: int, ok: int, errors: Mapping[str, int], cause: str | None = None
) -> str | None:
    """The reason a run with ``total`` requests of which ``ok`` succeeded fails, or None.
    ``cause``: what the records say beyond the top error class (the timeouts' own kind)."""
    if total <= 0 or ok > 0:
        return None
    top = sorted(errors.items(), key=lambda kv: -kv[1])[:3]
    named = ", ".join(f"{n} {kind}" for kind, n in top) or "no error class"
    meaning = _ERROR_MEANING.get(top[0][0], "") if top else ""
    if top and top[0][0].startswith("http-"):
        meaning = f"the server answered HTTP {top[0][0][5:]}"
    meaning = cause or meaning
    return f"nothing succeeded: 0 of {total} requests ok ({named})" + (
        f": {meaning}" if meaning else ""
    )


def load_run_verdict(
    *,
    total: int,
    ok: int,
    errors: Mapping[str, int],
    slo_ok: bool,
    unmeasured: Iterable[str] = (),
    down: str | None = None,
    over_budget: str | None = None,
    partial: str | None = None,
    cause: str | None = None,
) -> RunVerdict:
    """The run's verdict. ``unmeasured`` are reasons the run could not measure what it claims
    (the generator fell behind, no request finished, locust died): they make it inconclusive.
    ``down`` (the target did not accept a connection before the load) is a FAIL, and so is
    ``over_budget`` (more requests failed than the error budget allows, ``analysis/budget.py``),
    unless nothing succeeded, which says more (``cause``: why, in the records' words).
    ``partial`` ("partial run: it ran 30.6 s of 60 s") follows ``down`` when the target's going
    down stopped the run."""
    if down:  # nothing else about the run means anything then
        return RunVerdict(FAIL, [down, *([partial] if partial else [])])
    dead = nothing_succeeded(total, ok, errors, cause)
    other = list(unmeasured)
    finished = ["no request finished"] if total == 0 and slo_ok else []
    return compose(
        [
            RunVerdict.of(dead is None, dead or ""),
            RunVerdict.of(dead is not None or not over_budget, over_budget or ""),
            RunVerdict.of(slo_ok),  # the breached SLOs are listed by their own verdicts
            RunVerdict.of(not (finished or other), *finished, *other, otherwise=INCONCLUSIVE),
        ]
    )


__all__ = [
    "FAIL",
    "INCONCLUSIVE",
    "PASS",
    "STATUSES",
    "RunVerdict",
    "Stage",
    "Status",
    "as_status",
    "compose",
    "load_run_verdict",
    "nothing_succeeded",
    "stage_facts",
    "stage_verdict",
]
