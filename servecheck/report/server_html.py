"""The load page's "Server (engine truth)" part: summary.json's ``server`` section as tables
(reconciliation, TTFT decomposition, findings). Renders only (``analysis/server_truth.py`` measured)."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from servecheck.redact import redact

NUM = ' class="num"'
PHASE_LABELS = (
    ("queue_seconds", "engine queue"),
    ("prefill_seconds", "engine prefill"),
    ("ttft_seconds", "engine TTFT"),
    ("decode_seconds", "engine decode"),
    ("e2e_seconds", "engine e2e"),
)


def _num(v: Any, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _pct(e: Mapping[str, Any], key: str) -> str:
    """A percentile, or "<= bound" where the bucket is too coarse to place it."""
    if e.get(f"{key}_ms") is None and e.get(f"{key}_le_ms") is not None:
        return f"<= {e[f'{key}_le_ms']:.0f}"
    return _num(e.get(f"{key}_ms"))


def esc(value: Any) -> str:
    return html.escape(redact("" if value is None else str(value)), quote=True)


def table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Sequence[int] = ()
) -> str:
    """A plain table like report/html.py's (which imports this module, so none is shared)."""
    out = ["<table><thead><tr>", *(f"<th>{esc(h)}</th>" for h in headers), "</tr></thead><tbody>"]
    for row in rows:
        cells = (f"<td{NUM if i in numeric else ''}>{esc(c)}</td>" for i, c in enumerate(row))
        out += ["<tr>", *cells, "</tr>"]
    return "".join([*out, "</tbody></table>"])


def server_html(section: Mapping[str, Any] | None) -> str:
    """The part as HTML ('' without a section)."""
    if not section:
        return ""
    head = f"<h3>Server (engine truth)</h3><p>metrics from {esc(section.get('metrics_url'))}"
    head += f" ({esc(section.get('engine'))} names)</p>"
    if not section.get("available"):
        note = esc(section.get("note"))
        return head + f'<p class="flag">No server metrics: {note}</p>'
    rows = [
        (
            r["quantity"],
            _num(r.get("engine"), 0),
            _num(r.get("client"), 0),
            _num(r.get("gap"), 0),
            _num(r.get("tolerance"), 0),
            ("held" if r.get("held") else "GAP") if r.get("judged") else (r.get("note") or "-"),
        )
        for r in section.get("reconciliation") or []
    ]
    parts = [
        head,
        "<h4>Reconciliation (engine counter deltas over the run window vs the client)</h4>",
        table(
            ("quantity", "engine", "client", "gap", "tolerance", "result"),
            rows,
            numeric=(1, 2, 3, 4),
        ),
    ]
    dec = section.get("decomposition") or {}
    client = dec.get("client_ttft_ms") or {}
    engine = dec.get("engine") or {}
    drows = [
        (
            "client TTFT",
            _num(client.get("mean")),
            _num(client.get("p50")),
            _num(client.get("p95")),
            client.get("count", 0),
        )
    ]
    for key, label in PHASE_LABELS:
        e = engine.get(key) or {}
        if e.get("note"):
            drows.append((label, e["note"], "", "", ""))
        else:
            drows.append(
                (
                    label,
                    _num(e.get("mean_ms")),
                    _pct(e, "p50"),
                    _pct(e, "p95"),
                    _num(e.get("count"), 0),
                )
            )
    if dec.get("network_gateway_ms") is not None:
        drows.append(
            (
                "network + gateway (client - engine TTFT)",
                _num(dec["network_gateway_ms"]),
                "",
                "",
                "",
            )
        )
    parts += [
        "<h4>TTFT decomposition (ms)</h4>",
        table(("phase", "mean", "p50", "p95", "count"), drows, numeric=(1, 2, 3, 4)),
    ]
    parts.append(state_html(section))
    findings = section.get("findings") or []
    if findings:
        frows = [
            ("FAIL" if f.get("severity") == "fail" else "warning", f.get("id"), f.get("message"))
            for f in findings
        ]
        parts += ["<h4>Findings</h4>", table(("severity", "id", "finding"), frows)]
    return "".join(parts)


def state_html(section: Mapping[str, Any]) -> str:
    """The engine's gauges (min / mean / max / last over the window's samples) and counter
    rises (``server.gauges``, ``server.counters``: analysis/server_gauges.py); '' without them."""
    raw_g, raw_c = section.get("gauges"), section.get("counters")
    gauges: dict[str, Any] = raw_g if isinstance(raw_g, dict) else {}
    counters: dict[str, Any] = raw_c if isinstance(raw_c, dict) else {}
    rows = [
        (
            name,
            *(_num(g.get(k), 3) for k in ("min", "mean", "max", "last")),
            g.get("samples", 0),
            g.get("source_metric") or "-",
        )
        for name, g in gauges.items()
        if isinstance(g, dict)
    ]
    crows = [
        (
            name,
            _num(c.get("delta"), 0) if c.get("delta") is not None else c.get("note") or "-",
            c.get("from") or "-",
            c.get("source_metric") or "-",
        )
        for name, c in counters.items()
        if isinstance(c, dict)
    ]
    out = []
    if rows:
        out += [
            "<h4>Engine gauges over the run window (sampled)</h4>",
            table(
                ("gauge", "min", "mean", "max", "last", "samples", "metric"),
                rows,
                numeric=(1, 2, 3, 4, 5),
            ),
        ]
    if crows:
        out += [
            "<h4>Engine counters: rise over the run window</h4>",
            table(("counter", "rise", "from", "metric"), crows, numeric=(1,)),
        ]
    return "".join(out)
