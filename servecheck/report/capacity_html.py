"""The page of ``servecheck capacity`` (the sweep: :mod:`servecheck.workflows.capacity`; the
analysis: :mod:`servecheck.analysis.capacity`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _findings(data: dict[str, Any], unit: str) -> list[str]:
    """The page's findings: why the sweep stopped, the best level, the knee, the replicas."""
    best, kn = data.get("best"), data.get("knee")
    lines = [
        f"Stopped: {data.get('stop_reason')}.",
        f"Highest load meeting the SLOs: {best['level']:g} {unit} ({best['requests_per_s']:.2f} req/s)."
        if best
        else "No load level met the SLOs.",
        (
            f"Knee ({kn['metric']} vs throughput): {kn['level']:g} {unit}, {kn['requests_per_s']:.2f} req/s, "
            f"{kn['latency_ms']:.1f} ms."
            if kn
            else "No knee found (fewer than three points, or no bend)."
        ),
    ]
    ek = data.get("engine_knee")
    if ek:
        lines.append(f"Engine saturation: {ek['level']:g} {unit} ({ek['why']}).")
    reset = data.get("prefix_cache_reset") or {}
    if reset.get("unavailable"):
        lines.append(f"Note: {reset['unavailable']}.")
    elif reset.get("resets"):
        lines.append(f"Prefix cache reset before each level ({reset['path']}).")
    if data.get("target_rate"):
        lines.append(
            f"Replicas for {data['target_rate']:g} req/s (headroom {data.get('headroom')}): {data.get('replicas') or 'unknown'}."
        )
    return lines


def _unmeasured_steps(steps: list[dict[str, Any]]) -> list[str]:
    """Why each inconclusive step could not measure (a busy machine, a partial run): a step in
    doubt is neither a level that met the SLOs nor one that broke them."""
    return [
        f"step {i + 1} ({s['level']:g}): INCONCLUSIVE: {'; '.join(s.get('reasons') or []) or 'see its report'}"
        for i, s in enumerate(steps)
        if s.get("status") == "inconclusive"
    ]


def _step_headers(unit: str) -> tuple[str, ...]:
    return (
        "step",
        f"load ({unit})",
        "verdict",
        "req/s",
        "tok/s",
        "errors",
        "goodput",
        "TTFT p95",
        "E2E p50",
        "E2E p95",
        "E2E p99",
        "engine waiting max",  # summary.json server.gauges / server.counters (analysis/server_gauges.py)
        "engine preemptions",
    )


def _step_rows(steps: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """One row of plain text a step (the HTML table escapes it; Markdown takes it as is)."""
    from servecheck.report.html import fmt, pct

    return [
        (
            str(i + 1),
            f"{s['level']:g}",
            str(s.get("status") or ("pass" if s["passed"] else "fail")).upper(),
            fmt(s["requests_per_s"], digits=2),
            fmt(s["tokens_per_s"]),
            pct(s["error_rate"]),
            pct(s.get("goodput"), 1),
            fmt(s["latency_ms"]["ttft"]["p95"]),
            fmt(s["latency_ms"]["e2e"]["p50"]),
            fmt(s["latency_ms"]["e2e"]["p95"]),
            fmt(s["latency_ms"]["e2e"]["p99"]),
            fmt(s.get("waiting_max"), digits=0),
            fmt(s.get("preemptions"), digits=0),
        )
        for i, s in enumerate(steps)
    ]


def _plots_vs_load(steps: list[dict[str, Any]], unit: str, kn: dict[str, Any] | None) -> list[str]:
    """Latency, throughput and goodput vs load, and the knee's metric vs throughput."""
    from servecheck.report import svg

    xs = [s["level"] for s in steps]
    lat = [
        (f"{fam.upper()} {p}", xs, [s["latency_ms"][fam][p] for s in steps])
        for fam, p in (
            ("ttft", "p50"),
            ("ttft", "p95"),
            ("e2e", "p50"),
            ("e2e", "p95"),
            ("e2e", "p99"),
        )
    ]
    figs = [
        svg.line_plot("Latency vs load", f"load ({unit})", "ms", lat),
        svg.line_plot(
            "Throughput vs load",
            f"load ({unit})",
            "req/s",
            [("requests/s", xs, [s["requests_per_s"] for s in steps])],
        ),
        svg.line_plot(
            "Goodput and error rate vs load",
            f"load ({unit})",
            "share",
            [
                ("goodput", xs, [s.get("goodput") for s in steps]),
                ("error rate", xs, [s["error_rate"] for s in steps]),
            ],
        ),
    ]
    metric = (kn or {}).get("metric") or "e2e_p95"
    fam, _, stat = metric.partition("_")
    figs.append(
        svg.line_plot(
            f"{metric} vs throughput" + (" (knee dashed)" if kn else ""),
            "req/s",
            "ms",
            [
                (
                    metric,
                    [s["requests_per_s"] for s in steps],
                    [s["latency_ms"][fam][stat] for s in steps],
                )
            ],
            hline=kn["latency_ms"] if kn else None,
            hline_label="knee latency" if kn else "",
        )
    )
    return figs


def write_capacity_html(run_dir: Path) -> Path:
    """The capacity page: findings, a step table and plots vs load (latency, throughput, goodput)."""
    from servecheck.analysis.verdict import RunVerdict
    from servecheck.report.html import (
        Section,
        esc,
        md_table,
        read_json,
        status_badge,
        table,
        write_page,
    )

    data = read_json(run_dir / "capacity.json")
    verdict = RunVerdict.of_summary(data)  # the page's one verdict, as capacity.json has it
    steps = data.get("steps") or []
    from servecheck.analysis.capacity import UNITS

    unit = UNITS.get(str(data.get("mode")), "req/s")
    kn = data.get("knee")
    lines = _findings(data, unit)
    head = (
        f"<p>{status_badge(verdict.status)} SLOs: {esc(', '.join(data.get('slo') or []) or '(none)')}</p><ul>"
        + "".join(f"<li>{esc(x)}</li>" for x in lines)
        + "</ul>"
    )
    headers = _step_headers(unit)
    rows = _step_rows(steps)
    html_rows = [
        (esc(r[0]), esc(r[1]), status_badge(r[2].lower()), *(esc(c) for c in r[3:])) for r in rows
    ]
    parts = [head, table(headers, html_rows, numeric=range(3, 13), raw=range(13))]
    if steps:
        parts.append("<div class='plots'>" + "".join(_plots_vs_load(steps, unit, kn)) + "</div>")
    prod = production_table(steps, unit, kn)
    if prod is not None:
        p_headers, p_rows, p_figs = prod
        parts.append(
            "<h3>Turns and prefix cache per level</h3><p class='muted'>First: the first request "
            "of each conversation or prefix group (nothing to reuse); later: the rest. Hit rate: "
            "cached prompt tokens from usage.cached_tokens, and the engine's own counters.</p>"
            + table(
                p_headers, [[esc(c) for c in r] for r in p_rows], numeric=range(1, len(p_headers))
            )
            + ("<div class='plots'>" + "".join(p_figs) + "</div>" if p_figs else "")
        )
    parts.append(
        "<p class='muted'>Each step's own report: steps/&lt;nn&gt;-&lt;level&gt;/report.html</p>"
    )
    unmeasured = _unmeasured_steps(steps)
    if unmeasured:
        parts.insert(1, "<p class='flag'>" + "<br>".join(esc(x) for x in unmeasured) + "</p>")
    md = [f"- {x}" for x in lines + unmeasured] + [""] + md_table(headers, rows)
    if prod is not None:
        md += ["", "Turns and prefix cache per level:", ""] + md_table(prod[0], prod[1])
    return write_page(
        run_dir,
        f"servecheck capacity: {data.get('target')}",
        [Section("Capacity", "".join(parts), md, verdict.passed, verdict.status)],
        verdict=verdict,
        subtitle=run_dir.name,
    )


def _count(b: dict[str, Any], *keys: str) -> int:
    return sum(int((b.get(k) or {}).get("count") or 0) for k in keys)


def _measured(b: dict[str, Any] | None) -> bool:
    """Whether a step's breakdown holds a figure (a plain chat step's has only empty ones and
    a note that the engine has no prefix-cache counters)."""
    if not b:
        return False
    return bool(
        b.get("by_turn")
        or b.get("requests_reporting")
        or b.get("hit_rate") is not None
        or b.get("engine_hit_rate") is not None
        or _count(b, "ttft_first_ms", "ttft_later_ms", "ttft_cached_ms", "ttft_uncached_ms")
    )


def production_table(
    steps: list[dict[str, Any]], unit: str, kn: dict[str, Any] | None
) -> tuple[list[str], list[list[str]], list[str]] | None:
    """Headers, rows and plots of the per-level turns / prefix-cache table (steps whose summary
    had those sections: multi-turn, shared-prefix, trace, dataset), or None for plain chat."""
    from servecheck.report import svg
    from servecheck.report.html import fmt, pct

    rows_of = [s for s in steps if _measured(s.get("breakdown"))]
    if not rows_of:  # plain chat: the section would be a table of dashes and empty plots
        return None
    turn_keys: list[str] = []
    for s in rows_of:
        for t in s["breakdown"].get("by_turn") or {}:
            if t not in turn_keys:
                turn_keys.append(t)
    headers = [
        f"load ({unit})",
        "TTFT first p50",
        "first p90",
        "TTFT later p50",
        "later p90",
        *(f"turn {t} p50" for t in turn_keys),
        "hit rate (usage)",
        "requests hit",
        "hit rate (engine)",
        "TTFT cached p50",
        "uncached p50",
    ]
    rows = []
    for s in rows_of:
        b = s["breakdown"]
        first, later = b.get("ttft_first_ms") or {}, b.get("ttft_later_ms") or {}
        by_turn = b.get("by_turn") or {}
        reporting = b.get("requests_reporting")
        rows.append(
            [
                f"{s['level']:g}" + (" (knee)" if kn and kn.get("level") == s["level"] else ""),
                fmt(first.get("p50")),
                fmt(first.get("p90")),
                fmt(later.get("p50")),
                fmt(later.get("p90")),
                *(fmt((by_turn.get(t) or {}).get("ttft_p50")) for t in turn_keys),
                pct(b.get("hit_rate"), 1) if b.get("hit_rate") is not None else "not reported",
                f"{b.get('requests_hit')}/{reporting}" if reporting else "-",
                pct(b.get("engine_hit_rate"), 1)
                if b.get("engine_hit_rate") is not None
                else (b.get("engine_note") or "-"),
                fmt((b.get("ttft_cached_ms") or {}).get("p50")),
                fmt((b.get("ttft_uncached_ms") or {}).get("p50")),
            ]
        )
    xs = [s["level"] for s in rows_of]
    figs = []
    if any(_count(s["breakdown"], "ttft_first_ms", "ttft_later_ms") for s in rows_of):
        figs.append(
            svg.line_plot(
                "TTFT p90: first vs later requests",
                f"load ({unit})",
                "ms",
                [
                    (
                        "first p90",
                        xs,
                        [(s["breakdown"].get("ttft_first_ms") or {}).get("p90") for s in rows_of],
                    ),
                    (
                        "later p90",
                        xs,
                        [(s["breakdown"].get("ttft_later_ms") or {}).get("p90") for s in rows_of],
                    ),
                ],
            )
        )
    if any(
        s["breakdown"].get("hit_rate") is not None
        or s["breakdown"].get("engine_hit_rate") is not None
        for s in rows_of
    ):
        figs.append(
            svg.line_plot(
                "Prefix-cache hit rate vs load",
                f"load ({unit})",
                "share",
                [
                    ("usage.cached_tokens", xs, [s["breakdown"].get("hit_rate") for s in rows_of]),
                    (
                        "engine counters",
                        xs,
                        [s["breakdown"].get("engine_hit_rate") for s in rows_of],
                    ),
                ],
            )
        )
    return headers, rows, figs


__all__ = ["production_table", "write_capacity_html"]
