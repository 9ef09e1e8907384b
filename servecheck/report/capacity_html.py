"""The page of ``servecheck capacity`` (the sweep: :mod:`servecheck.workflows.capacity`; the
analysis: :mod:`servecheck.report.capacity`)."""

from __future__ import annotations

from pathlib import Path


def write_capacity_html(run_dir: Path) -> Path:
    """The capacity page: findings, a step table and plots vs load (latency, throughput, goodput)."""
    from servecheck.report import svg
    from servecheck.report.html import (
        Section,
        esc,
        fmt,
        md_table,
        pct,
        read_json,
        table,
        verdict_badge,
        write_page,
    )

    data = read_json(run_dir / "capacity.json")
    steps = data.get("steps") or []
    unit = "users" if data.get("mode") == "users" else "req/s"
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
    if data.get("target_rate"):
        lines.append(
            f"Replicas for {data['target_rate']:g} req/s (headroom {data.get('headroom')}): {data.get('replicas') or 'unknown'}."
        )
    head = (
        f"<p>{verdict_badge(data.get('ok'))} SLOs: {esc(', '.join(data.get('slo') or []) or '(none)')}</p><ul>"
        + "".join(f"<li>{esc(x)}</li>" for x in lines)
        + "</ul>"
    )
    headers = (
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
    )
    rows = [
        (
            str(i + 1),
            f"{s['level']:g}",
            "PASS" if s["passed"] else "FAIL",
            fmt(s["requests_per_s"], digits=2),
            fmt(s["tokens_per_s"]),
            pct(s["error_rate"]),
            pct(s.get("goodput"), 1),
            fmt(s["latency_ms"]["ttft"]["p95"]),
            fmt(s["latency_ms"]["e2e"]["p50"]),
            fmt(s["latency_ms"]["e2e"]["p95"]),
            fmt(s["latency_ms"]["e2e"]["p99"]),
        )
        for i, s in enumerate(steps)
    ]
    html_rows = [
        (esc(r[0]), esc(r[1]), verdict_badge(r[2] == "PASS"), *(esc(c) for c in r[3:]))
        for r in rows
    ]
    parts = [head, table(headers, html_rows, numeric=range(3, 11), raw=range(11))]
    if steps:
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
        parts.append("<div class='plots'>" + "".join(figs) + "</div>")
    parts.append(
        "<p class='muted'>Each step's own report: steps/&lt;nn&gt;-&lt;level&gt;/report.html</p>"
    )
    md = [f"- {x}" for x in lines] + [""] + md_table(headers, rows)
    return write_page(
        run_dir,
        f"servecheck capacity: {data.get('target')}",
        [Section("Capacity", "".join(parts), md, data.get("ok"))],
        ok=data.get("ok"),
        subtitle=run_dir.name,
    )


__all__ = ["write_capacity_html"]
