"""The agent section of a load run's report (summary.json's ``agent``, analysis/agent_stats.py):
summary.txt's lines, the page's tables and summary.md's, all from the same rows so the three
outputs agree. Renders only; a run without agent sessions shows nothing.

The page's table helpers come in as arguments (``Tables``): report/html.py imports the module
that lists this one, so importing it back would make an import circle."""

from __future__ import annotations

from typing import Any

from servecheck.analysis.sections import AgentRow, AgentSection, Percentiles
from servecheck.report.timings_html import Tables, esc

_HEAD = ("requests", "errors", "ttft p50", "ttft p95", "e2e p95", "context tokens", "cache hit")


def _ms(d: Percentiles, key: str) -> str:
    v = d.get(key)
    return "-" if v is None else f"{v:.1f}"


def _cells(row: AgentRow) -> tuple[Any, ...]:
    hit = "-" if row.cache_hit_rate is None else f"{row.cache_hit_rate:.1%}"
    return (
        row.count,
        row.errors,
        _ms(row.ttft_ms, "p50"),
        _ms(row.ttft_ms, "p95"),
        _ms(row.e2e_ms, "p95"),
        "-" if row.context_tokens_mean is None else f"{row.context_tokens_mean:.0f}",
        hit,
    )


def turn_rows(a: AgentSection) -> list[tuple[Any, ...]]:
    return [(t, *_cells(r)) for t, r in a.by_turn.items()]


def context_rows(a: AgentSection) -> list[tuple[Any, ...]]:
    return [(b, *_cells(r)) for b, r in a.by_context.items()]


def agent_lines(a: AgentSection | None) -> list[str]:
    """The prose of the section: sessions, where time went, session E2E, fan-out, the cache."""
    if a is None:
        return []
    lines = [
        f"agent sessions {a.sessions}: completed {a.completed}, ended at the context "
        f"{a.ended_by_context}, failed {a.ended_by_error}, open at the end {a.open_at_end}; "
        f"subagent forks {a.forks} ({a.branches} branches)",
        f"time: tool wait {a.tool_wait_s:.1f} s vs server {a.server_s:.1f} s"
        + ("" if a.tool_share is None else f" ({a.tool_share:.1%} waiting on tools)")
        + f"; tool wait p50 {_ms(a.tool_wait_ms, 'p50')} ms p95 {_ms(a.tool_wait_ms, 'p95')} ms",
        f"session e2e p50 {_ms(a.session_e2e_ms, 'p50')} ms p95 {_ms(a.session_e2e_ms, 'p95')} ms "
        f"({a.session_e2e_ms.get('count') or 0} completed sessions); fan-out (fork to last branch) "
        f"p50 {_ms(a.fanout_ms, 'p50')} ms p95 {_ms(a.fanout_ms, 'p95')} ms "
        f"({a.fanout_ms.get('count') or 0} forks)",
    ]
    sources = sorted({r.cache_source for r in a.by_turn.values() if r.cache_source})
    if a.cache_note:
        lines.append(f"prefix cache per turn: {a.cache_note}")
    elif sources:
        lines.append(f"prefix cache per turn from {', '.join(sources)}")
    if a.engine_hit_rate is not None:
        lines.append(f"prefix cache, the engine's counters over the run: {a.engine_hit_rate:.1%}")
    return lines


def _text_table(first: str, rows: list[tuple[Any, ...]]) -> list[str]:
    head = f"{first:<9}" + "".join(f"{h:>15}" for h in _HEAD)
    return [head] + [f"{str(r[0]):<9}" + "".join(f"{str(c):>15}" for c in r[1:]) for r in rows]


def agent_text(a: AgentSection | None) -> list[str]:
    """summary.txt's lines (and the console's)."""
    if a is None:
        return []
    return [
        *agent_lines(a),
        "agent TTFT by turn (ms)",
        *_text_table("turn", turn_rows(a)),
        "agent TTFT by context length (ms)",
        *_text_table("context", context_rows(a)),
    ]


def agent_html(a: AgentSection | None, tables: Tables) -> str:
    """The page's section ('' without agent sessions)."""
    if a is None:
        return ""
    numeric = range(1, 8)
    return (
        "<h3>Agent sessions</h3><pre>"
        + esc("\n".join(agent_lines(a)))
        + "</pre><h4>TTFT by turn (ms)</h4>"
        + tables.html(("turn", *_HEAD), turn_rows(a), numeric=numeric)
        + "<h4>TTFT by context length (ms)</h4>"
        + tables.html(("context", *_HEAD), context_rows(a), numeric=numeric)
    )


def agent_markdown(a: AgentSection | None, tables: Tables) -> list[str]:
    """summary.md's part."""
    if a is None:
        return []
    return [
        "#### Agent sessions",
        "",
        *(f"- {line}" for line in agent_lines(a)),
        "",
        *tables.markdown(("turn", *_HEAD), turn_rows(a)),
        "",
        *tables.markdown(("context", *_HEAD), context_rows(a)),
        "",
    ]
