"""The load page's TTFT decomposition: summary.json's ``timings`` (servecheck/analysis/timings.py) as
a table of phases (p50 / p90 / p99 / max, ms) and the slowest requests with their ids, so the
client's TTFT splits into parts a reader can see and a slow request can be found in the engine's
log. Renders only; a run without the section (older records) shows nothing.

The page's own table helpers come in as arguments (``Tables``): ``report/html.py`` calls this
module, so importing it back would make an import circle."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from html import escape
from typing import Any, NamedTuple

from servecheck.analysis.sections import SlowRequest, TimingsSection
from servecheck.analysis.timings import PHASES, TTFT_PARTS


class Tables(NamedTuple):
    """``report/html.py``'s ``table`` and ``md_table``."""

    html: Callable[..., str]
    markdown: Callable[[Sequence[str], Iterable[Sequence[Any]]], list[str]]


def esc(value: Any) -> str:
    return escape(str(value), quote=True)


def fmt(value: Any, digits: int = 1) -> str:
    return (
        "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)
    )


_COLUMNS = ("p50", "p90", "p99", "max")


def _phase_rows(t: TimingsSection) -> list[tuple[Any, ...]]:
    ph = t.phases_ms
    return [
        (
            key + (" (in TTFT)" if key in TTFT_PARTS else ""),
            what,
            *(fmt(getattr(ph[key], c), digits=2) for c in _COLUMNS),
            ph[key].count,
        )
        for key, what in PHASES
        if key in ph
    ]


def _slow_rows(rows: list[SlowRequest]) -> list[tuple[Any, ...]]:
    out = []
    for r in rows:
        s = r.stamps or {}
        out.append(
            (
                r.request_id or "-",
                r.response_id or "-",
                fmt(r.ttft_ms),
                fmt(r.e2e_ms),
                "new" if r.new_conn else "reused",
                fmt(s.get("headers"), digits=2),
                fmt(s.get("body"), digits=2),
            )
        )
    return out


def timings_html(t: TimingsSection | None, tables: Tables) -> str:
    """summary.json's ``timings`` section as HTML ('' without one)."""
    if t is None:
        return ""
    conns = t.connections
    header = t.request_id_header
    note = (
        f"<p>connections: {esc(conns.new)} new, {esc(conns.reused)} reused "
        f"(keep-alive). Request id header: <code>{esc(header or 'off')}</code>"
        + (f", echoed by the server on {esc(t.request_id_echoed)} answers" if header else "")
        + f"; the body's id on {esc(t.response_ids)}"
        + f" ({esc(t.request_id_in_body)} of them name the request id).</p>"
    )
    parts = [
        "<h3>TTFT decomposition (ms from request start)</h3>",
        note,
        tables.html(
            ("phase", "spans", *_COLUMNS, "samples"),
            _phase_rows(t),
            numeric=range(2, 7),
        ),
    ]
    if t.server is not None:
        parts.append(
            f"<h4>The engine's own timings, per request ({esc(t.server.requests)} requests "
            "carried them)</h4>"
            + tables.html(
                ("check", "what it holds", "checked", "violated"), _server_rows(t), numeric=(2, 3)
            )
        )
    slow = t.slowest.by_ttft
    if slow:
        parts.append(
            "<h4>Slowest requests by TTFT (grep the engine's log for the ids)</h4>"
            + tables.html(
                ("request id", "engine id", "ttft", "e2e", "connection", "headers", "first byte"),
                _slow_rows(slow),
                numeric=range(2, 7),
            )
        )
    return "".join(parts)


def _server_rows(t: TimingsSection) -> list[tuple[Any, ...]]:
    if t.server is None:
        return []
    return [(c.id, c.description, c.checked, c.violated) for c in t.server.checks]


def timings_markdown(t: TimingsSection | None, tables: Tables) -> list[str]:
    """summary.md lines: the phase table and the server-timing checks ([] without a
    ``timings`` section)."""
    if t is None:
        return []
    rows = [(r[0], *r[2:]) for r in _phase_rows(t)]
    out = (
        ["TTFT decomposition (ms):", *tables.markdown(("phase", *_COLUMNS, "n"), rows)]
        if rows
        else []
    )
    if t.server is not None:
        out += [
            f"Server timings per request ({t.server.requests} requests carried them):",
            *tables.markdown(("check", "what it holds", "checked", "violated"), _server_rows(t)),
        ]
    return out


__all__ = ["Tables", "timings_html", "timings_markdown"]
