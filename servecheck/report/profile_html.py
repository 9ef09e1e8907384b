"""The load page's section for a phased load profile: summary.json's ``profile``
(servecheck/load/workload/phased.py) as a table of its phases (window, offered rate, requests, errors,
TTFT and E2E p50 / p95 / p99) and, for ``recovery``, the time to recover (or "did not recover")
and the p95 TTFT of each slice after the overload; for ``churn``, the connection set-up cost.
Renders only; a run without a profile shows nothing."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any


def _esc(value: Any) -> str:
    return escape(str(value), quote=True)


def _ms(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1f}"


def _row(cells: list[Any], head: bool = False) -> str:
    tag = "th" if head else "td"
    return "<tr>" + "".join(f"<{tag}>{_esc(c)}</{tag}>" for c in cells) + "</tr>"


def _phases(sec: Mapping[str, Any]) -> str:
    head = ["phase", "from s", "to s", "offered /s", "requests", "errors"]
    head += [f"ttft {p}" for p in ("p50", "p95", "p99")] + ["e2e p95"]
    rows = [_row(head, head=True)]
    for ph in sec.get("phases") or []:
        t, e = ph.get("ttft_ms") or {}, ph.get("e2e_ms") or {}
        rate = ph.get("offered_rate")
        rows.append(
            _row(
                [
                    ph.get("name"),
                    f"{ph.get('start_s', 0):.1f}",
                    f"{ph.get('end_s', 0):.1f}",
                    "-" if rate is None else f"{rate:g}",
                    ph.get("count", 0),
                    ph.get("errors", 0),
                    *(_ms(t.get(p)) for p in ("p50", "p95", "p99")),
                    _ms(e.get("p95")),
                ]
            )
        )
    return "<table class='profile'>" + "".join(rows) + "</table>"


def _recovery(rec: Mapping[str, Any]) -> str:
    if rec.get("recovered") and not rec.get("never_left"):
        line = (
            f"Recovered {rec['recovery_s']:.1f} s after the overload ended: p95 TTFT back within "
            f"{float(rec['within']):.0%} of its pre-overload {rec['pre_overload_ttft_p95_ms']:.1f} ms "
            f"(at most {rec['bound_ms']:.1f} ms)"
            + (
                f" for {n} consecutive slices and not above it for as many again."
                if (n := rec.get("sustain_slices"))
                else " and staying there."  # a summary written before issue 41
            )
        )
    else:
        line = str(rec.get("note") or "The recovery was not measured.")
    after = rec.get("after_slices") or []
    table = ""
    if after:
        rows = [_row(["s after the overload (slice end)", "ttft p95 ms"], head=True)]
        rows += [_row([f"{end:.1f}", _ms(p95)]) for end, p95 in after]
        table = "<table class='recovery'>" + "".join(rows) + "</table>"
    return f"<p>{_esc(line)}</p>{table}"


def _churn(churn: Mapping[str, Any]) -> str:
    c = churn.get("connections") or {}
    share = churn.get("setup_share")
    parts = [
        f"Connections new {c.get('new', 0)}, reused {c.get('reused', 0)}; set-up "
        f"{float(churn.get('setup_mean_ms') or 0.0):.2f} ms on average"
        + ("" if share is None else f", {share:.1%} of the wait for the first token")
    ]
    for key, d in (churn.get("setup_ms") or {}).items():
        parts.append(f"{key}: p50 {_ms(d.get('p50'))} ms, p99 {_ms(d.get('p99'))} ms")
    return "<p>" + "<br>".join(_esc(p) for p in parts) + "</p>"


def profile_html(sec: Mapping[str, Any] | None) -> str:
    """summary.json's ``profile`` section, or "" when the run had no profile."""
    if not isinstance(sec, dict):
        return ""
    out = f"<h3>Load profile: {_esc(sec.get('text'))}</h3>" + _phases(sec)
    if isinstance(sec.get("recovery"), dict):
        out += _recovery(sec["recovery"])
    if isinstance(sec.get("churn"), dict):
        out += _churn(sec["churn"])
    return out
