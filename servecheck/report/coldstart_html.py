"""The "Cold start" section of the accept and cutover pages (the stage:
:mod:`servecheck.workflows.coldstart`)."""

from __future__ import annotations

from typing import Any


def cold_start_section(stage: dict[str, Any]) -> Any:
    """Time to ready, first request against the warm median, requests to warm up, the series."""
    from servecheck.report.html import Section, esc, table

    def ms(v: Any) -> str:
        return "-" if v is None else f"{v:.1f} ms"

    rows = [
        ("time to ready", f"{stage.get('time_to_ready_s')} s"),
        ("first request TTFT", ms(stage.get("first_ttft_ms"))),
        ("first request E2E", ms(stage.get("first_e2e_ms"))),
        ("warm median TTFT", ms(stage.get("warm_ttft_median_ms"))),
        ("warm median E2E", ms(stage.get("warm_e2e_median_ms"))),
        ("first / warm TTFT", str(stage.get("first_vs_warm_ttft"))),
        ("first / warm E2E", str(stage.get("first_vs_warm_e2e"))),
        ("requests to warm up", str(stage.get("requests_to_warm"))),
        ("requests timed (failed)", f"{stage.get('requests')} ({stage.get('failed')})"),
    ]
    series = ", ".join(
        "-" if p.get("ttft_ms") is None else f"{p['ttft_ms']:.0f}"
        for p in stage.get("series") or []
    )
    slos = stage.get("slo") or []
    slo_html = ""
    if slos:
        # The cold-start SLOs (workflows/coldstart.py): held, breached, or not measured.
        slo_rows = [
            (
                str(v.get("slo")),
                "PASS" if v.get("passed") else "FAIL",
                "not measured" if v.get("observed") is None else f"{v['observed']:g} {v['unit']}",
                f"{v.get('source')}{': ' + v['note'] if v.get('note') else ''}",
            )
            for v in slos
        ]
        slo_html = f"<p>Cold-start SLOs: {esc(str(stage.get('verdict', '')).upper())}</p>" + table(
            ("SLO", "verdict", "observed", "source"), slo_rows
        )
    return Section(
        "Cold start",
        table(("figure", "value"), rows)
        + f"<p>TTFT of each request after readiness (ms): {esc(series)}</p>"
        + slo_html,
        [f"- cold start: {stage.get('detail')}"]
        + [f"- SLO {v.get('slo')}: {'PASS' if v.get('passed') else 'FAIL'}" for v in slos],
        stage.get("ok"),
    )
