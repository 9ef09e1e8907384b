"""summary.txt's lines for a load run's sections: the text half of each renderer in
:mod:`servecheck.report.load_sections` (moved here from the analysis modules that compute the
sections, so analysis/ and load/ only measure). Each takes summary.json's object (or one of its
sections) and returns lines; a section the run does not have gives none.

Reasoning phases: Reasoning phases in load summaries: how the phase rows of summary.txt read. A reasoning model's stream has two phases: reasoning deltas, then the answer. Each record keeps ``ttfr`` (first reasoning token), ``ttfa`` (first answer token) and the ITLs of each phase (servecheck/load/generator/stream.py fills them; docs/metrics.md defines them); TTFT stays the first token of any kind. Runs whose streams carried no reasoning print none of this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servecheck.analysis.budget import percent
from servecheck.analysis.sections import (
    ErrorBudget,
    Images,
    PrefixCache,
    Steady,
    TimingsSection,
    Turns,
    WarmupSection,
)
from servecheck.analysis.server_timings import SERVER_PHASES
from servecheck.analysis.server_truth import PHASES
from servecheck.analysis.timings import TTFT_PARTS

PHASE_ROWS = ("ttfr", "ttfa", "itl_reasoning", "itl_answer")
_COLUMNS = ("p50", "p90", "p95", "p99", "p99.9", "max")


def _f(v: float | None, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def phase_lines(latency_ms: dict[str, Any]) -> list[str]:
    """Rows for the summary's latency table (same columns), one per phase metric measured."""
    lines = []
    for name in PHASE_ROWS:
        d = latency_ms.get(name) or {}
        if not d.get("count"):
            continue
        cells = "".join(f"{'-' if d.get(k) is None else format(d[k], '.1f'):>9}" for k in _COLUMNS)
        lines.append(f"{name:<20}{cells}")
    return lines


def format_breakdown(turns: Turns | None, pc: PrefixCache | None) -> list[str]:
    """Text lines for summary.txt's ``turns`` and ``prefix_cache`` (nothing for a plain run)."""
    lines: list[str] = []
    if turns:
        lines.append(
            f"turns ({turns.conversations} conversations)  "
            f"{'n':>6}{'ttft p50':>10}{'p90':>9}{'p99':>9}{'e2e p50':>9}{'history':>9}{'cached':>8}"
        )
        for t, g in turns.by_turn.items():
            ttft, e2e = g.ttft_ms, g.e2e_ms
            hr = g.cache_hit_rate
            lines.append(
                f"  turn {t:<24}{g.count:>6}{_f(ttft.p50):>10}{_f(ttft.p90):>9}"
                f"{_f(ttft.p99):>9}{_f(e2e.p50):>9}{_f(g.history_tokens_mean, '.0f'):>9}"
                f"{'-' if hr is None else format(hr, '.0%'):>8}"
            )
    if pc:
        lines += _prefix_cache_lines(pc)
    return lines


def _prefix_cache_lines(pc: PrefixCache) -> list[str]:
    rate = pc.hit_rate
    lines = [
        "prefix cache (usage.cached_tokens): "
        + (
            f"hit rate {rate:.1%} of prompt tokens, {pc.requests_hit} of "
            f"{pc.requests_reporting} requests hit"
            if rate is not None
            else "not reported by the server"
        )
    ]
    eng = pc.engine  # the engine's file as read: its keys are the load command's
    if eng and eng.get("hit_rate") is not None:
        lines.append(
            f"prefix cache (engine {eng.get('source')}): hit rate {eng['hit_rate']:.1%} "
            f"({eng['hits']:.0f} of {eng['queries']:.0f} tokens queried during the run)"
        )
    elif eng:
        lines.append(f"prefix cache (engine): {eng.get('note') or 'no queries during the run'}")
    for label, d in (
        ("ttft with cached prefix", pc.ttft_cached_ms),
        ("ttft without", pc.ttft_uncached_ms),
        ("ttft first of group", pc.ttft_first_of_group_ms),
        ("ttft later in group", pc.ttft_later_in_group_ms),
    ):
        if d.count:
            lines.append(
                f"  {label:<26} n {d.count:>5}  p50 {_f(d.p50):>8} ms  "
                f"p90 {_f(d.p90):>8} ms  p99 {_f(d.p99):>8} ms"
            )
    return lines


def format_images(section: Images | None) -> list[str]:
    """summary.txt's lines for the ``images`` section (none for a run without images)."""
    if not section:
        return []
    lines = [
        f"images (COUNTxWxH)  {'n':>6}{'errors':>8}{'ttft p50':>10}{'p95':>9}"
        f"{'prompt p50':>12}{'tok/image':>11}"
    ]
    for key, s in section.by_size.items():
        t = s.ttft_ms
        lines.append(
            f"  {key:<18}{s.count:>6}{s.errors:>8}{_f(t.p50):>10}{_f(t.p95):>9}"
            f"{_f(s.prompt_tokens_p50, '.0f'):>12}{_f(s.tokens_per_image_p50):>11}"
        )
    return lines


def format_warmup(w: WarmupSection | None) -> list[str]:
    """One line for summary.txt when the run had a warm-up."""
    if w is None:
        return []
    t, e = w.ttft_ms, w.e2e_ms

    def ms(d: Mapping[str, Any], k: str) -> str:
        v = d.get(k)
        return "-" if v is None else f"{v:.1f}"

    return [
        f"warm-up (not in the figures above): {w.requests} requests, {w.errors} failed, "
        f"ttft p50 {ms(t, 'p50')} max {ms(t, 'max')} ms, e2e p50 {ms(e, 'p50')} max {ms(e, 'max')} ms"
    ]


def steady_line(st: Steady | None) -> list[str]:
    """summary.txt's line about the window."""
    if st is None:
        return []
    if not st.applied:
        return [f"steady window: {st.how}"]
    figures = st.figures or {}
    req = figures.get("requests") or {}
    lat = (figures.get("latency_ms") or {}).get("ttft") or {}
    p95 = lat.get("p95")
    return [
        f"steady window {st.start_s:g}-{st.end_s:g} s ({st.how}): "
        f"{req.get('total', 0)} requests, ttft p95 "
        + ("-" if p95 is None else f"{p95:.1f} ms")
        + " (the SLOs are judged here; the error budget on the whole run)"
    ]


def format_timings(t: TimingsSection | None) -> list[str]:
    """summary.txt's lines: the TTFT parts at p50 / p99 and the slowest request by TTFT."""
    if t is None:
        return []
    ph = t.phases_ms
    parts = [
        f"{k} {ph[k].p50:.2f}/{ph[k].p99:.2f}" for k in ("connect", "tls", *TTFT_PARTS) if k in ph
    ]
    conns = t.connections
    lines = [
        "ttft parts ms p50/p99: " + ("  ".join(parts) or "-"),
        f"connections new {conns.new} reused {conns.reused}; request id "
        + (
            f"{t.request_id_header}, echoed by {t.request_id_echoed}"
            if t.request_id_header
            else "header off"
        )
        + f"; body ids {t.response_ids}"
        + f" ({t.request_id_in_body} name the request id)",
    ]
    if t.server is not None:
        srv = [
            f"{k.removeprefix('server_')} {ph[k].p50:.2f}/{ph[k].p99:.2f}"
            for k, _f, _w in SERVER_PHASES
            if k in ph
        ]
        broken = [f"{c.id} {c.violated}/{c.checked}" for c in t.server.checks if c.violated]
        lines.append(
            f"server timings ({t.server.requests} requests) ms p50/p99: {'  '.join(srv) or '-'}; "
            + ("broken: " + ", ".join(broken) if broken else "every check held")
        )
    slow = t.slowest.by_ttft
    if slow:
        top = slow[0]
        lines.append(
            f"slowest ttft {top.ttft_ms} ms: request {top.request_id}"
            + (f" (engine id {top.response_id})" if top.response_id else "")
        )
    return lines


def profile_lines(sec: Mapping[str, Any] | None) -> list[str]:
    """summary.txt's lines for the profile section."""
    if not isinstance(sec, dict):
        return []
    out = [f"profile {sec.get('text')}:"]
    for ph in sec.get("phases") or []:
        t = ph.get("ttft_ms") or {}
        p95 = "-" if t.get("p95") is None else f"{t['p95']:.1f}"
        out.append(
            f"  {ph['name']:<22} {ph['start_s']:>7.1f}-{ph['end_s']:<7.1f}s  "
            f"{ph['count']:>6} req  {ph['errors']:>4} err  ttft p95 {p95} ms"
        )
    rec = sec.get("recovery")
    if isinstance(rec, dict):
        if rec.get("recovered") and not rec.get("never_left"):
            out.append(
                f"  recovered {rec['recovery_s']:.1f} s after the overload (p95 TTFT back within "
                f"{rec['within']:.0%} of {rec['pre_overload_ttft_p95_ms']:.1f} ms"
                + (f" for {n} consecutive slices)" if (n := rec.get("sustain_slices")) else ")")
            )
        else:
            out.append(f"  {rec.get('note') or 'recovery not measured'}")
    churn = sec.get("churn")
    if isinstance(churn, dict):
        c = churn["connections"]
        share = churn.get("setup_share")
        out.append(
            f"  connections new {c['new']} reused {c['reused']}; set-up {churn['setup_mean_ms']:.2f} ms"
            " mean" + ("" if share is None else f" ({share:.1%} of the wait for the first token)")
        )
    return out


def server_truth_lines(section: Mapping[str, Any] | None) -> list[str]:
    """summary.txt's lines for the section."""
    if not section:
        return []
    if not section.get("available"):
        return [f"server metrics: none ({section.get('note')})"]
    out = []
    for row in section.get("reconciliation") or []:
        if row.get("judged"):
            out.append(
                f"server {row['quantity']}: engine {row['engine']:.0f}, client {row['client']:.0f}"
                f" ({'held' if row['held'] else 'GAP'}, tolerance {row['tolerance']:.0f})"
            )
    dec = section.get("decomposition") or {}
    if dec.get("network_gateway_ms") is not None:
        eng = dec["engine"]
        parts = [
            f"{k.removesuffix('_seconds')} {eng[k]['mean_ms']:.1f}"
            for k in PHASES
            if (eng.get(k) or {}).get("mean_ms") is not None
        ]
        out.append(
            f"server ttft (mean ms): client {dec['client_ttft_ms']['mean']:.1f}, engine "
            + ", ".join(parts)
            + f"; network+gateway {dec['network_gateway_ms']:.1f}"
        )
    out += [f"server {f['severity']}: {f['message']}" for f in section.get("findings") or []]
    return out


def server_gauges_lines(section: Mapping[str, Any] | None) -> list[str]:
    """summary.txt's line for the gauges and the preemptions counter ([] without them)."""
    gauges_ = (section or {}).get("gauges") or {}
    parts = [
        f"{name.removeprefix('requests_')} {g['max']:g}"
        for name, g in gauges_.items()
        if isinstance(g, dict) and isinstance(g.get("max"), int | float)
    ]
    pre = ((section or {}).get("counters") or {}).get("preemptions_total") or {}
    if isinstance(pre.get("delta"), int | float):
        parts.append(f"preemptions +{pre['delta']:g}")
    return ["server gauges (max over the window): " + ", ".join(parts)] if parts else []


def budget_line(budget: ErrorBudget) -> str:
    """The summary's statement of the budget, e.g. ``error budget: 1% of requests may fail (default)``."""
    if budget.source == "off":
        return "error budget: none (switched off): any share of failed requests passes"
    how = {
        "default": "default; an error budget or an error_rate SLO sets it",
        "set": "set for this run",
        "slo": f"the SLO {budget.slo}",
    }.get(str(budget.source), str(budget.source))
    return (
        f"error budget: {percent(float(budget.max_error_rate or 0.0))} of requests may fail ({how})"
    )


__all__ = [
    "PHASE_ROWS",
    "budget_line",
    "format_breakdown",
    "format_images",
    "format_timings",
    "format_warmup",
    "phase_lines",
    "profile_lines",
    "server_gauges_lines",
    "server_truth_lines",
    "steady_line",
]
