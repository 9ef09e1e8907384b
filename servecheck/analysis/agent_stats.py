"""summary.json's ``agent`` section: what agent sessions as load measured (load/workload/agent.py).

One pass over the merged records, kept only when they carry ``session``:

* **by turn** and **by context length** (buckets of ``context_tokens``): TTFT and E2E, mean
  context, and the prefix-cache hit rate where it was measured: the server's
  ``usage.prompt_tokens_details.cached_tokens`` first, else the engine's own per-request count
  (llama.cpp's ``timings.cache_n``, kept as ``server_timings.cached_n``); where neither came,
  ``cache_note`` says so, and the engine's run-wide counters (engine-prefix-cache.json) are
  given beside when it exposes them.
* **tool wait vs server time**: the tool's think time the sessions spent between turns against
  the time their requests spent at the server (E2E), and the share of the first.
* **session E2E**: a root session that reached its last turn, from its first send to its last
  answer (tool waits and subagent fan-outs inside).
* **fan-out**: a fork whose branches all ended, from the parent's answer that forked to the
  last branch's last answer.

The SLO keys ``session_e2e_<stat>`` and ``turn_ttft_<stat>`` (analysis/slo.py) are judged here:
``turn_ttft_p95`` is the worst turn's p95, so every turn is held to the bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from servecheck.analysis.sections import AgentRow, AgentSection, JSONObject
from servecheck.analysis.slo import SLO, Verdict
from servecheck.analysis.stats import Histogram

MAX_TURN_ROWS = 64  # turns past this share the last row ("64+")
BUCKETS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
USAGE, ENGINE_TIMINGS = "usage.cached_tokens", "engine timings.cache_n"


def bucket(tokens: int) -> str:
    """The context-length bucket a request falls in: ``<1k``, ``1k-2k`` ... ``128k+``."""
    low = 0
    for edge in BUCKETS:
        if tokens < edge:
            return f"<{edge // 1024}k" if low == 0 else f"{low // 1024}k-{edge // 1024}k"
        low = edge
    return f"{BUCKETS[-1] // 1024}k+"


@dataclass(slots=True)
class _Row:
    count: int = 0
    errors: int = 0
    ttft: Histogram = field(default_factory=Histogram)
    e2e: Histogram = field(default_factory=Histogram)
    context_sum: int = 0
    context_n: int = 0
    usage: list[int] = field(default_factory=lambda: [0, 0])  # cached, prompt
    engine: list[int] = field(default_factory=lambda: [0, 0])

    def add(self, r: Mapping[str, Any]) -> None:
        self.count += 1
        ctx = r.get("context_tokens")
        if isinstance(ctx, int):
            self.context_sum += ctx
            self.context_n += 1
        if r.get("error"):
            self.errors += 1
            return
        if r.get("ttft") is not None:
            self.ttft.record(float(r["ttft"]))
        # A request the client hung up on ended when it left, not when an answer did: its time
        # is no answer's E2E (the summary and analysis/breakdown.py leave it out too).
        if r.get("e2e") is not None and not r.get("abandoned"):
            self.e2e.record(float(r["e2e"]))
        ct, pt = r.get("cached_tokens"), r.get("prompt_tokens")
        if isinstance(ct, int) and isinstance(pt, int) and pt > 0:
            self.usage[0] += ct
            self.usage[1] += pt
        st = r.get("server_timings") or {}
        cn, pn = st.get("cached_n"), st.get("prompt_n")
        if isinstance(cn, (int, float)) and isinstance(pn, (int, float)) and pn > 0:
            self.engine[0] += int(cn)
            self.engine[1] += int(pn)

    def row(self) -> AgentRow:
        rate, source = None, None
        if self.usage[1]:
            rate, source = round(self.usage[0] / self.usage[1], 4), USAGE
        elif self.engine[1]:
            rate, source = round(self.engine[0] / self.engine[1], 4), ENGINE_TIMINGS
        return AgentRow(
            count=self.count,
            errors=self.errors,
            ttft_ms=self.ttft.summary().as_dict(),
            e2e_ms=self.e2e.summary().as_dict(),
            context_tokens_mean=round(self.context_sum / self.context_n, 1)
            if self.context_n
            else None,
            cache_hit_rate=rate,
            cache_source=source,
        )


@dataclass(slots=True)
class _Session:
    first_sent: float | None = None
    last_done: float | None = None
    end: str | None = None
    failed: bool = False
    root: bool = True
    parent: str | None = None
    turn_done: dict[int, float] = field(default_factory=dict)

    def add(self, r: Mapping[str, Any]) -> None:
        sent, done = r.get("t_sent"), r.get("t_done")
        if isinstance(sent, (int, float)):
            self.first_sent = sent if self.first_sent is None else min(self.first_sent, sent)
        if isinstance(done, (int, float)):
            self.last_done = done if self.last_done is None else max(self.last_done, done)
            if isinstance(r.get("turn"), int):
                self.turn_done[int(r["turn"])] = float(done)
        if r.get("error"):
            self.failed = True
        elif r.get("session_end"):
            self.end = str(r["session_end"])
        if r.get("parent"):
            self.root, self.parent = False, str(r["parent"])


@dataclass(slots=True)
class _Pass:
    turns: dict[int, _Row] = field(default_factory=dict)
    buckets: dict[str, _Row] = field(default_factory=dict)
    sessions: dict[str, _Session] = field(default_factory=dict)
    tool_wait: Histogram = field(default_factory=Histogram)
    tool_s: float = 0.0
    server_s: float = 0.0

    def add(self, r: Mapping[str, Any]) -> None:
        sid = r.get("session")
        if sid is None:
            return
        self.sessions.setdefault(str(sid), _Session()).add(r)
        turn = r.get("turn")
        if isinstance(turn, int):
            self.turns.setdefault(min(turn, MAX_TURN_ROWS), _Row()).add(r)
        ctx = r.get("context_tokens")
        if isinstance(ctx, int):
            self.buckets.setdefault(bucket(ctx), _Row()).add(r)
        wait = r.get("tool_wait_s")
        if isinstance(wait, (int, float)):
            self.tool_s += float(wait)
            self.tool_wait.record(float(wait))
        if r.get("e2e") is not None:
            self.server_s += float(r["e2e"])


def _fanouts(sessions: Mapping[str, _Session]) -> Histogram:
    """Each fork whose branches all ended: the parent's forking answer to the last branch's."""
    forks: dict[str, list[_Session]] = {}
    for s in sessions.values():
        if s.parent is not None:
            forks.setdefault(s.parent, []).append(s)
    out = Histogram()
    for name, branches in forks.items():
        parent_sid, _, turn = name.rpartition("@")
        parent = sessions.get(parent_sid)
        forked = None if parent is None or not turn.isdigit() else parent.turn_done.get(int(turn))
        ended = all(b.end is not None or b.failed for b in branches)
        last = max((b.last_done for b in branches if b.last_done is not None), default=None)
        if forked is not None and ended and last is not None:
            out.record(max(0.0, last - forked))
    return out


def _cache_note(rows: Mapping[int, _Row], engine: JSONObject | None) -> str | None:
    if any(r.usage[1] or r.engine[1] for r in rows.values()):
        return None
    why = (
        "not measured: the server reported no usage.prompt_tokens_details.cached_tokens and no "
        "per-request cache count (llama.cpp's timings.cache_n)"
    )
    if engine and engine.get("hit_rate") is not None:
        return why + "; the engine's counters over the whole run are given beside"
    note = (engine or {}).get("note")
    return why + (f"; engine counters: {note}" if note else "")


def agent_section(
    records: Iterable[Mapping[str, Any]], engine: JSONObject | None = None
) -> AgentSection | None:
    """summary.json's ``agent``, or None when no record belongs to an agent session.
    ``engine``: the engine's prefix-cache counters over the run (engine-prefix-cache.json)."""
    p = _Pass()
    for r in records:
        p.add(r)
    if not p.sessions:
        return None
    roots = [s for s in p.sessions.values() if s.root]
    session_e2e = Histogram()
    for s in roots:
        if s.end == "done" and not s.failed and s.first_sent is not None and s.last_done:
            session_e2e.record(max(0.0, s.last_done - s.first_sent))
    fan = _fanouts(p.sessions)
    total = p.tool_s + p.server_s
    return AgentSection(
        sessions=len(roots),
        completed=sum(1 for s in roots if s.end == "done" and not s.failed),
        ended_by_context=sum(1 for s in p.sessions.values() if s.end == "context" and not s.failed),
        ended_by_error=sum(1 for s in p.sessions.values() if s.failed),
        open_at_end=sum(1 for s in p.sessions.values() if s.end is None and not s.failed),
        branches=len(p.sessions) - len(roots),
        forks=len({s.parent for s in p.sessions.values() if s.parent is not None}),
        by_turn={
            (f"{t}+" if t == MAX_TURN_ROWS else str(t)): row.row()
            for t, row in sorted(p.turns.items())
        },
        by_context={k: p.buckets[k].row() for k in sorted(p.buckets, key=_bucket_order)},
        cache_note=_cache_note(p.turns, engine),
        engine_hit_rate=None if not engine else engine.get("hit_rate"),
        tool_wait_s=round(p.tool_s, 3),
        server_s=round(p.server_s, 3),
        tool_share=round(p.tool_s / total, 4) if total > 0 else None,
        tool_wait_ms=p.tool_wait.summary().as_dict(),
        session_e2e_ms=session_e2e.summary().as_dict(),
        fanout_ms=fan.summary().as_dict(),
    )


def _bucket_order(label: str) -> int:
    digits = "".join(ch for ch in label.split("-")[0] if ch.isdigit())
    return -1 if label.startswith("<") else int(digits or 0)


def agent_value(slo: SLO, section: AgentSection | None) -> float | None:
    """The value of an agent SLO (``session_e2e_*``, ``turn_ttft_*``; ms) in the section."""
    if section is None:
        return None
    stat = slo.stat or "p50"
    if slo.metric == "session_e2e":
        return section.session_e2e_ms.get(stat)
    values = [row.ttft_ms.get(stat) for row in section.by_turn.values()]
    measured = [v for v in values if v is not None]
    return max(measured) if measured else None


def judge(slos: Iterable[SLO], section: AgentSection | None) -> list[Verdict]:
    """The agent SLOs against the section; nothing measured fails, as for every SLO."""
    out = []
    for slo in slos:
        value = agent_value(slo, section)
        if value is None:
            why = "no agent session measured this" if section is not None else "not an agent run"
            out.append(Verdict(slo, None, False, why))
        else:
            note = "the worst turn" if slo.metric == "turn_ttft" else ""
            out.append(Verdict(slo, value, slo.holds(value), note))
    return out
