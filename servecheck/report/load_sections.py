"""A load run's report sections, in ONE list that both outputs loop over: summary.txt (and
the console) takes each renderer's text lines, the HTML page (report/html.py's ``load_section``)
its fragment, summary.md its Markdown lines. A new section is one renderer and one line in
:data:`LOAD_SECTIONS`.

The head (what ran, requests, throughput, latency percentiles) and the verdict lines frame the
list in both outputs; their layouts differ too much to share one renderer (a table of two
figures a row on the page, four lines of text in summary.txt).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from servecheck.analysis.budget import SOURCE as BUDGET
from servecheck.analysis.sections import Slices, Steady, Summary
from servecheck.analysis.slo import Verdict
from servecheck.analysis.typed_json import to_json
from servecheck.report.agent_html import agent_html, agent_markdown, agent_text
from servecheck.report.faults_html import faults_html
from servecheck.report.load_text import (
    budget_line,
    format_breakdown,
    format_images,
    format_timings,
    format_warmup,
    phase_lines,
    profile_lines,
    server_gauges_lines,
    server_truth_lines,
    steady_line,
)
from servecheck.report.profile_html import profile_html
from servecheck.report.server_html import esc, server_html
from servecheck.report.timings_html import Tables, timings_html, timings_markdown


def _none(_s: Summary, _tables: Tables) -> list[str]:
    return []


@dataclass(frozen=True, slots=True)
class Renderer:
    """One section of a load run's report: its summary.txt lines and its page fragment (HTML
    and Markdown; ``tables``: report/html.py's table helpers, which import this module)."""

    name: str
    text: Callable[[Summary], list[str]]
    html: Callable[[Summary, Tables], str]
    markdown: Callable[[Summary, Tables], list[str]] = _none


def _scenario_text(s: Summary) -> list[str]:
    return (
        format_breakdown(s.turns, s.prefix_cache)
        + format_images(s.images)
        + format_warmup(s.warmup)
    )


def _scenario_html(s: Summary, _tables: Tables) -> str:
    extra = _scenario_text(s)  # turns, prefix cache, --images by size, the warm-up
    if not extra:
        return ""
    return "<h3>Turns, prefix cache, images, warm-up</h3><pre>" + esc("\n".join(extra)) + "</pre>"


def steady_html(steady: Steady | None, slices: Slices | None) -> list[str]:
    """The page's section: the window the SLOs judged and a table of the slices (no plots:
    those come with the time-series pictures)."""
    lines = steady_line(steady)
    rows = (None if slices is None else slices.rows) or []
    if not lines and not rows:
        return []
    out = "<h3>Steady window and time slices</h3><pre>" + esc("\n".join(lines)) + "</pre>"
    if rows:

        def cell(v: Any) -> str:
            return "-" if v is None else esc(f"{v:g}" if isinstance(v, float) else str(v))

        head: tuple[str, ...] = ("from s", "to s", "requests", "errors", "req/s", "tok/s")
        head += ("in flight", "ttft p50", "ttft p95", "ttft p99", "itl p95", "e2e p95")
        body = "".join(
            "<tr>"
            + "".join(
                f"<td>{cell(v)}</td>"
                for v in (
                    r.get("start_s"),
                    r.get("end_s"),
                    r.get("count"),
                    r.get("errors"),
                    r.get("requests_per_s"),
                    r.get("output_tokens_per_s"),
                    r.get("in_flight"),
                    (r.get("ttft_ms") or {}).get("p50"),
                    (r.get("ttft_ms") or {}).get("p95"),
                    (r.get("ttft_ms") or {}).get("p99"),
                    (r.get("itl_ms") or {}).get("p95"),
                    (r.get("e2e_ms") or {}).get("p95"),
                )
            )
            + "</tr>"
            for r in rows
        )
        out += (
            "<table class='slices'><tr>"
            + "".join(f"<th>{esc(h)}</th>" for h in head)
            + "</tr>"
            + body
            + "</table>"
        )
    return [out]


def _profile(s: Summary) -> dict[str, Any] | None:
    # The profile's renderers still walk its JSON (their tests build it as a dict).
    return None if s.profile is None else to_json(s.profile)


def _server(s: Summary) -> dict[str, Any] | None:
    # The engine's truth has its renderers over its JSON: its inner parts are still objects.
    return None if s.server is None else to_json(s.server)


def _server_text(s: Summary) -> list[str]:
    server = _server(s)
    return server_truth_lines(server) + server_gauges_lines(server)


def _budget_text(s: Summary) -> list[str]:
    return [budget_line(s.error_budget)] if s.error_budget else []


# summary.txt's order; the page shows them in the same order between its head and pictures.
LOAD_SECTIONS: tuple[Renderer, ...] = (
    Renderer("scenario", _scenario_text, _scenario_html),  # turns, prefix cache, images, warm-up
    Renderer(  # agent sessions (analysis/agent_stats.py)
        "agent",
        lambda s: agent_text(s.agent),
        lambda s, t: agent_html(s.agent, t),
        lambda s, t: agent_markdown(s.agent, t),
    ),
    Renderer(
        "steady",
        lambda s: steady_line(s.steady),
        lambda s, _t: "".join(steady_html(s.steady, s.slices)),
    ),
    Renderer(
        "timings",
        lambda s: format_timings(s.timings),
        lambda s, t: timings_html(s.timings, t),
        lambda s, t: timings_markdown(s.timings, t),
    ),
    Renderer(  # load/workload/phased.py
        "profile",
        lambda s: profile_lines(_profile(s)),
        lambda s, _t: profile_html(_profile(s)),
    ),
    Renderer("server", _server_text, lambda s, _t: server_html(_server(s))),  # engine truth
    Renderer("faults", lambda _s: [], lambda s, _t: faults_html(s.cancel, s.outages)),
    Renderer("error budget", _budget_text, lambda _s, _t: ""),  # the page: the SLO table
)


def _ms(d: dict[str, Any], key: str) -> str:
    v = d.get(key)
    return "-" if v is None else f"{v:.1f}"


def format_summary(summary: dict[str, Any] | Summary, verdicts: Sequence[Verdict]) -> str:
    """The short text summary printed at the end and kept as summary.txt (``summary``: the
    typed summary, or summary.json's object)."""
    s = summary if isinstance(summary, Summary) else Summary.from_json(summary)
    head, req, thr, lat, tok = s.head, s.requests, s.throughput, s.latency_ms, s.tokens
    lines = [
        f"run {head.run_id}  target {head.target}  scenario {head.scenario}  mode {head.mode}"
        + (f"  api {head.api}" if (head.api or "chat") != "chat" else ""),
        f"requests {req.total}  ok {req.ok}  failed {req.failed} ({req.error_rate:.2%})"
        + (f"  abandoned on purpose {req.abandoned}" if req.abandoned else "")
        + (f"  rate-limited {req.rate_limited}" if req.rate_limited else "")
        + (f"  cancelled {req.cancelled}" if req.cancelled else "")
        + (f"  errors {req.errors}" if req.errors else ""),
        f"throughput {thr.requests_per_s:.2f} req/s  {thr.output_tokens_per_s:.1f} output tokens/s"
        f"  over {s.window_s:.1f} s  goodput {'-' if s.goodput is None else format(s.goodput, '.1%')}",
        f"{'ms':<20}{'p50':>9}{'p90':>9}{'p95':>9}{'p99':>9}{'p99.9':>9}{'max':>9}",
    ]
    reasoned = bool(tok.reasoning_requests)
    for name in ("ttft", "itl", "tpot", "e2e", "ttft_from_intended", "e2e_from_intended", "lag"):
        d = lat.get(name) or {}
        if not d.get("count"):
            continue
        lines.append(
            f"{name:<20}"
            + "".join(f"{_ms(d, k):>9}" for k in ("p50", "p90", "p95", "p99", "p99.9", "max"))
        )
    lines += phase_lines(lat) if reasoned else []
    if reasoned:
        lines.append(
            f"tokens: reasoning {tok.reasoning}, answer {tok.answer} "
            f"({tok.reasoning_requests} requests reasoned"
            + (
                f"; usage said 0 reasoning tokens for {tok.reasoning_usage_zero}: counted from the stream)"
                if tok.reasoning_usage_zero
                else ")"
            )
        )
    if tok.discrepant_requests or tok.usage_missing:
        lines.append(
            f"tokens: usage {tok.output_usage}, client chunks {tok.output_client}, "
            f"{tok.discrepant_requests} requests differ, {tok.usage_missing} without usage"
        )
    for section in LOAD_SECTIONS:
        lines += section.text(s)
    lines += [v.line() for v in verdicts]
    if s.schedule.behind and req.ok:  # with nothing ok the server is to blame (the verdict says)
        lines += [f"WARNING: {r}" for r in s.schedule.reasons]
    lines += [f"note: {n}" for n in s.schedule.notes]
    breached = [  # the budget's breach is a reason of its own
        v.slo for v in s.slo if not v.passed and v.source != BUDGET
    ]
    why = [*s.reasons, *([f"SLO breached: {', '.join(breached)}"] if breached else [])]
    lines.append(f"verdict: {s.verdict.upper()}" + (f" ({'; '.join(why)})" if why else ""))
    return "\n".join(lines)


__all__ = ["LOAD_SECTIONS", "Renderer", "format_summary", "steady_html"]
