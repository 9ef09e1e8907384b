"""Hung but healthy: an engine that answers its health check while it generates nothing.

Production reports it (vLLM #40926, #39863): under sustained traffic the engine livelocks,
``/health`` and ``/v1/models`` answer 200, the engine reports requests running, and no token
leaves. :mod:`servecheck.analysis.down` sees a target that stops answering; this module sees one
that keeps answering everything but generation. A :class:`HungWatch` is fed what the monitor
(``load/hung_watch.py``) observes and decides; it sends nothing itself.

Three witnesses, each enough on its own, and every one only while the last health answer was 2xx
(a target whose health check fails is down or degraded, and says so itself):

* **the client**: streams are open and none of them has received a token (nor finished) for
  ``stall_s`` seconds;
* **the engine's counters** (where /metrics exists): ``requests_running > 0`` and the generated
  token counter flat for ``stall_s`` seconds;
* **the canary**: one 1-token request every ``canary_every_s`` must produce its token within
  ``canary_within_s``.

``stall_s`` (N) comes from the target's latency budget where the run has one
(:func:`default_stall_s`): the longest a healthy engine at its budget leaves every stream
without a token is about one TTFT (a stream waiting for a slot, then its prefill) or a few
dozen ITLs (another request's long prefill in the same batch), so N is four TTFT budgets or
fifty ITL budgets, whichever is longer, never under 10 s; 30 s without a budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servecheck.errors import SpecError, UsageError
from servecheck.redact import redact

NAME = "hung but healthy"
DEFAULT_STALL_S = 30.0
MIN_STALL_S = 10.0
TTFT_FACTOR = 4.0
ITL_FACTOR = 50.0
DEFAULT_CANARY_EVERY_S = 30.0
HEALTH_KEPT = 5  # the last health answers kept as evidence


def default_stall_s(ttft_budget_s: float | None, itl_budget_s: float | None) -> float:
    """N from the run's latency budget (module docstring); 30 s without one."""
    parts = [
        factor * budget
        for factor, budget in ((TTFT_FACTOR, ttft_budget_s), (ITL_FACTOR, itl_budget_s))
        if budget is not None and budget > 0
    ]
    return max(MIN_STALL_S, *parts) if parts else DEFAULT_STALL_S


@dataclass(slots=True, frozen=True)
class HungRule:
    """``stall_s`` None: N from the budget (:func:`default_stall_s`); 0: the watch is off.
    ``canary_every_s`` 0: no canary; ``canary_within_s`` None: N."""

    stall_s: float | None = None
    canary_every_s: float = DEFAULT_CANARY_EVERY_S
    canary_within_s: float | None = None

    @property
    def active(self) -> bool:
        return self.stall_s is None or self.stall_s > 0

    def resolved(self, ttft_budget_s: float | None, itl_budget_s: float | None) -> HungRule:
        """The rule with N and T filled in from the budget."""
        n = (
            self.stall_s
            if self.stall_s is not None
            else default_stall_s(ttft_budget_s, itl_budget_s)
        )
        within = self.canary_within_s if self.canary_within_s is not None else n
        return HungRule(n, self.canary_every_s, within)

    def text(self) -> str:
        if not self.active:
            return "off"
        n = "from the budget" if self.stall_s is None else f"{self.stall_s:g}s"
        canary = f"every {self.canary_every_s:g}s" if self.canary_every_s > 0 else "off"
        return f"stall {n}, canary {canary}"


def _duration(text: str, what: str) -> float:
    from servecheck.load.workload.schedule import parse_duration

    try:
        value = parse_duration(text)
    except (ValueError, UsageError):
        value = -1.0
    if value <= 0:
        # ``what`` is the spec field; the command names it as its own option
        raise SpecError(
            "{" + what + "} {text!r}: give a duration such as 20s or 2m, or off", text=text
        )
    return value


def parse_hung_after(text: str | None, canary: str | None = None) -> HungRule:
    """``--hung-after N`` (a duration, or ``off``) and ``--canary EVERY[,WITHIN]`` (or ``off``)."""
    stall: float | None = None
    if text is not None and str(text).strip():
        raw = str(text).strip().lower()
        stall = 0.0 if raw in ("off", "0", "never") else _duration(raw, "hung_after")
    every, within = DEFAULT_CANARY_EVERY_S, None
    if canary is not None and str(canary).strip():
        raw = str(canary).strip().lower()
        if raw in ("off", "0", "never"):
            every = 0.0
        else:
            first, _, second = raw.partition(",")
            every = _duration(first, "canary")
            within = _duration(second, "canary") if second.strip() else None
    return HungRule(stall, every, within)


@dataclass(slots=True)
class HungFinding:
    """The finding: when, which witness, and the evidence (summary.json / soak.json ``hung``)."""

    at_s: float  # seconds from the run's start
    witness: str  # client | engine | canary
    line: str
    evidence: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "at_s": round(self.at_s, 1),
            "witness": self.witness,
            "line": self.line,
            **self.evidence,
        }


@dataclass(slots=True)
class HungWatch:
    """Fed observations (wall-clock ``t``); :attr:`finding` is set once, then kept."""

    rule: HungRule  # resolved: stall_s and canary_within_s are numbers
    started: float
    health: list[dict[str, Any]] = field(default_factory=list)
    running: float | None = None
    generated: float | None = None
    flat_since: float | None = None  # running > 0 and the counter unchanged since
    open_streams: int = 0
    oldest_open_s: float = 0.0
    progress_at: float | None = None  # the last token (or end) of any stream
    moved_at: float | None = None  # the last time the generated-token counter rose
    canaries: list[dict[str, Any]] = field(default_factory=list)
    finding: HungFinding | None = None

    @property
    def stall_s(self) -> float:
        return float(self.rule.stall_s or DEFAULT_STALL_S)

    def healthy(self) -> bool:
        status = self.health[-1].get("status") if self.health else None
        return isinstance(status, int) and 200 <= status < 300

    def saw_health(self, t: float, status: int | None, url: str, error: str = "") -> None:
        entry: dict[str, Any] = {"t_s": round(t - self.started, 1), "url": redact(url)}
        entry.update(status=status) if status is not None else entry.update(
            error=redact(error)[:120]
        )
        self.health = [*self.health[-(HEALTH_KEPT - 1) :], entry]

    def saw_engine(self, t: float, running: float | None, generated: float | None) -> None:
        """One scrape; None for a value the engine does not expose."""
        if running is None or generated is None:
            self.running, self.generated, self.flat_since = running, generated, None
            return
        moved = self.generated is None or generated != self.generated
        if moved and self.generated is not None:
            self.moved_at = t
        if running <= 0:
            self.flat_since = None
        elif moved or self.flat_since is None:
            self.flat_since = t  # requests running: the counter must move from here on
        self.running, self.generated = running, generated

    def saw_client(
        self, t: float, open_streams: int, oldest_open_s: float, progress_at: float | None
    ) -> None:
        """The load's streams: how many are open, the oldest's age, the last token any got."""
        self.open_streams, self.oldest_open_s = open_streams, oldest_open_s
        if progress_at is not None:
            self.progress_at = max(self.progress_at or progress_at, progress_at)
        elif open_streams and self.progress_at is None:
            self.progress_at = t - oldest_open_s

    def saw_canary(self, t: float, waited_s: float, token: bool, error: str = "") -> None:
        entry: dict[str, Any] = {
            "t_s": round(t - self.started, 1),
            "waited_s": round(waited_s, 2),
            "token": token,
        }
        if error:
            entry["error"] = redact(error)[:160]
        self.canaries = [*self.canaries[-4:], entry]

    def check(self, t: float) -> HungFinding | None:
        """The finding, once one witness speaks while health answers 2xx."""
        if self.finding is not None or not self.rule.active or not self.healthy():
            return self.finding
        witness, why = self._witness(t)
        if witness:
            self.finding = HungFinding(
                t - self.started,
                witness,
                f"{NAME} at t={t - self.started:.1f}s: {why}",
                self._evidence(t),
            )
        return self.finding

    def _witness(self, t: float) -> tuple[str, str]:
        n = self.stall_s
        last = self.health[-1]
        health = f"{last['url']} answered {last['status']}"
        if self.flat_since is not None and t - self.flat_since >= n:
            return "engine", (
                f"the engine reports {self.running:g} running requests and its generated-token "
                f"counter stayed at {self.generated:g} for {t - self.flat_since:.0f} s while {health}"
            )
        if self.open_streams and self.progress_at is not None and t - self.progress_at >= n:
            return "client", (
                f"{self.open_streams} open streams got no token for {t - self.progress_at:.0f} s "
                f"(the oldest open {self.oldest_open_s:.0f} s) while {health}"
            )
        miss = self.canaries[-1] if self.canaries and not self.canaries[-1]["token"] else None
        if miss is not None and not self._progress_within(t, miss["waited_s"]):
            return "canary", (
                f"a 1-token canary request got no token within {miss['waited_s']:g} s "
                f"({miss.get('error') or 'no token'}) while {health}"
            )
        return "", ""

    def _progress_within(self, t: float, seconds: float) -> bool:
        """Whether the engine's counter or any stream moved in the last ``seconds``: a canary
        that waited behind a queue that still moves is slow, not hung."""
        return any(at is not None and t - at < seconds for at in (self.moved_at, self.progress_at))

    def _evidence(self, t: float) -> dict[str, Any]:
        return {
            "stall_s": self.stall_s,
            "health": list(self.health),
            "engine": {
                "requests_running": self.running,
                "generation_tokens_total": self.generated,
                "flat_for_s": None if self.flat_since is None else round(t - self.flat_since, 1),
            },
            "streams": {
                "open": self.open_streams,
                "oldest_open_s": round(self.oldest_open_s, 1),
                "no_token_for_s": None
                if self.progress_at is None
                else round(t - self.progress_at, 1),
            },
            "canaries": list(self.canaries),
        }


__all__ = [
    "NAME",
    "HungFinding",
    "HungRule",
    "HungWatch",
    "default_stall_s",
    "parse_hung_after",
]
