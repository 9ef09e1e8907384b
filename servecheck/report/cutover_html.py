"""The page of ``servecheck cutover`` (the run: :mod:`servecheck.workflows.cutover`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from servecheck.errors import UsageError

if TYPE_CHECKING:
    from servecheck.records.record import RequestRecord
    from servecheck.report.html import Section


def part_message(name: str, p: dict[str, Any]) -> str:
    """One line for a part of a cutover verdict (agreement, load, conformance, swap)."""
    if name == "agreement":
        share = p.get("identical_share")
        dist = p.get("mean_distance")
        return (
            f"identical {'-' if share is None else f'{share:.0%}'} (minimum {p['min_agreement']:.0%}), mean word edit distance "
            f"{'-' if dist is None else f'{dist:.3f}'}, {p['errors']} failed requests"
        )
    if name == "load":
        return "regressions: " + (", ".join(p["regressions"]) or "none")
    if name == "conformance":
        return f"servecheck check exit code {p['exit_code']}"
    if name in ("cold_start", "drain"):
        return str(p.get("detail") or "")
    if name == "swap":
        return (
            f"{p['failed']} failed requests (allowed {p['max_failed']}), longest gap {p['longest_gap_s']:.2f} s "
            f"(allowed {p['max_gap_s']:g} s), model changes: "
            + (
                ", ".join(f"{c['old']} -> {c['new']} at {c['t']:.2f} s" for c in p["model_changes"])
                or "none"
            )
        )
    if name == "swap_impact":
        return _impact_message(p)
    return ""


def _impact_message(p: dict[str, Any]) -> str:
    """servecheck's own swap: what it did, failed requests, the TTFT spike, the time to settle."""

    def ms(v: Any) -> str:
        return "-" if v is None else f"{v:.0f} ms"

    settle = p.get("settle_s")
    out = p.get("outcome") or {}
    return (
        f"{p.get('action')} {'done' if out.get('ok') else 'FAILED'} in {p.get('swap_duration_s', 0):.2f} s "
        f"({out.get('detail', '')[:80]}); {p.get('failed')} failed requests; TTFT p95 "
        f"{ms(p.get('baseline_ttft_p95_ms'))} before, peak {ms(p.get('peak_ttft_p95_ms'))} after "
        f"(spike {ms(p.get('ttft_spike_ms'))}); settled "
        + ("never" if settle is None else f"{settle:.1f} s after the swap began")
        + "".join(f"; {'PASS' if v['passed'] else 'FAIL'} {v['slo']}" for v in p.get("slos", []))
    )


def write_cutover_html(run_dir: Path) -> Path:
    """The cutover page: parts and verdicts, agreement table, load deltas or the swap timeline."""
    from servecheck.analysis.verdict import RunVerdict
    from servecheck.report.html import conformance_section, read_json, write_page

    data = read_json(run_dir / "cutover.json")
    parts = data.get("parts") or {}
    sections = [_verdict_section(data, parts)]
    if "cold_start" in parts:
        from servecheck.report.coldstart_html import cold_start_section

        sections.append(cold_start_section(parts["cold_start"]))
    if data.get("mode") == "swap":
        sections.append(_swap_section(run_dir, data))
        return write_page(
            run_dir,
            f"servecheck cutover (swap via {data.get('via')})",
            sections,
            verdict=RunVerdict.of_summary(data),
            subtitle=run_dir.name,
        )
    if (run_dir / "conformance").is_dir():
        sections.append(
            conformance_section(run_dir / "conformance", f"Conformance of {data.get('to')}")
        )
    agr = read_json(run_dir / "agreement.json")
    if agr:
        sections.append(_agreement_section(agr, parts))
    if (run_dir / "load-old").is_dir() and (run_dir / "load-new").is_dir():
        sections.append(_load_section(run_dir))
    return write_page(
        run_dir,
        f"servecheck cutover: {data.get('from')} -> {data.get('to')}",
        sections,
        verdict=RunVerdict.of_summary(data),
        subtitle=run_dir.name,
    )


def _verdict_section(data: dict[str, Any], parts: dict[str, Any]) -> Section:
    """Each part's verdict and one line about it."""
    from servecheck.analysis.verdict import as_status
    from servecheck.report.html import Section, esc, table, verdict_badge

    return Section(
        "Verdict",
        table(
            ("part", "verdict", "detail"),
            (
                (esc(n), verdict_badge(p.get("ok")), esc(part_message(n, p)))
                for n, p in parts.items()
            ),
            raw=(0, 1, 2),
        )
        + (f"<p class='flag'>{esc(data['note'])}</p>" if data.get("note") else ""),
        [
            f"- {n}: {'ok' if p.get('ok') else 'FAILED'}: {part_message(n, p)}"
            for n, p in parts.items()
        ],
        data.get("ok"),
        as_status(data.get("verdict")) if data.get("verdict") else None,
    )


def _probe_records(run_dir: Path) -> list[RequestRecord]:
    """The swap probe's records (probe.json), none where the file is missing or broken."""
    import json

    from servecheck.records.record import RequestRecord

    try:
        raw = json.loads((run_dir / "probe.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raw = []
    return [
        RequestRecord(
            target="",
            scenario="swap-probe",
            worker="probe",
            seq=i,
            t_intended=r["t_sent"] - r.get("lag", 0.0),
            t_sent=r["t_sent"],
            t_done=r["t_done"],
            status=r["status"],
            error=r["error"],  # probe.json's ok is "no error": the record's ok reads it back
            served_model=r["model"],
        )
        for i, r in enumerate(raw)
    ]


def _impact_figure(impact: dict[str, Any], events: list[tuple[float, str]]) -> str:
    """TTFT p95 per second from the swap on, beside the baseline before it."""
    from servecheck.report import svg

    slices = [s for s in impact.get("slices") or [] if s.get("ttft_p95_ms") is not None]
    if not slices:
        return ""
    ts = [s["t"] for s in slices]
    series = [("TTFT p95 ms", ts, [s["ttft_p95_ms"] for s in slices])]
    if impact.get("baseline_ttft_p95_ms") is not None:
        series.append(("p95 before the swap", ts, [impact["baseline_ttft_p95_ms"]] * len(ts)))
    return svg.timeline("TTFT p95 per second after the swap", "ms", series, events=events)


def _swap_section(run_dir: Path, data: dict[str, Any]) -> Section:
    """The swap report's figures and the timeline of ok / failed requests per second."""
    from servecheck.analysis.cutover import swap_timeline
    from servecheck.report import svg
    from servecheck.report.html import Section, table

    rep = data.get("report") or {}
    impact = (data.get("parts") or {}).get("swap_impact")
    ts, okr, badr = swap_timeline(_probe_records(run_dir))
    events = [(c["t"], f"{c['old']} -> {c['new']}") for c in rep.get("model_changes") or []]
    if impact is not None:  # servecheck's own swap: its start, not a mix's every alternation
        events = [((impact.get("outcome") or {}).get("t_start", 0.0), str(impact.get("action")))]
    fig = svg.timeline(
        f"Requests to {data.get('via')} during the swap",
        "per second",
        [("ok/s", ts, okr), ("failed/s", ts, badr)],
        spans=[
            (
                rep.get("gap_start_s", 0),
                rep.get("gap_end_s", 0),
                f"longest gap {rep.get('longest_gap_s', 0):.2f} s",
            )
        ],
        events=events,
    )
    if impact is not None:
        fig += _impact_figure(impact, events)
    changes = rep.get("model_changes") or []
    rows: list[tuple[str, Any]] = [
        ("requests", rep.get("requests")),
        ("ok", rep.get("ok")),
        ("failed", rep.get("failed")),
        ("errors", ", ".join(f"{k}: {v}" for k, v in (rep.get("errors") or {}).items()) or "-"),
        (
            "longest gap without a success",
            f"{rep.get('longest_gap_s')} s ({rep.get('gap_start_s')} s to {rep.get('gap_end_s')} s)",
        ),
        ("models seen", ", ".join(rep.get("models_seen") or []) or "-"),
        ("probe sent late by up to", f"{rep.get('probe_lag_max_s', 0)} s"),
        (
            "model changes",
            "; ".join(f"{c['old']} -> {c['new']} at {c['t']} s" for c in changes) or "none",
        ),
    ]
    if impact is not None:
        rows.append(("servecheck's swap", _impact_message(impact)))
    return Section(
        "Swap under load",
        table(("", ""), rows) + f"<div class='plots'>{fig}</div>",
        [f"- {k}: {v}" for k, v in rows],
        None,
    )


def _agreement_section(agr: dict[str, Any], parts: dict[str, Any]) -> Section:
    """Greedy-output agreement: the share of identical answers and each prompt's pair."""
    from servecheck.report.html import Section, esc, table, verdict_badge

    agr_rows = [
        (
            esc(r["prompt"]),
            verdict_badge(r["identical"], "same" if r["identical"] else "differs"),
            esc("-" if r["distance"] is None else f"{r['distance']:.3f}"),
            esc((r["old"] or r["old_error"])[:300]),
            esc((r["new"] or r["new_error"])[:300]),
        )
        for r in agr.get("results") or []
    ]
    share = agr.get("identical_share")
    head = (
        f"<p>{esc(agr.get('old_model'))} vs {esc(agr.get('new_model'))}: identical answers "
        f"<b>{'-' if share is None else f'{share:.0%}'}</b> of {agr.get('compared')}, mean word edit distance "
        f"{esc('-' if agr.get('mean_distance') is None else round(agr['mean_distance'], 3))}</p>"
    )
    return Section(
        "Greedy-output agreement",
        head + table(("prompt", "same?", "distance", "OLD", "NEW"), agr_rows, raw=range(5)),
        [
            f"identical {'-' if share is None else f'{share:.0%}'}, mean distance {agr.get('mean_distance')}"
        ],
        (parts.get("agreement") or {}).get("ok"),
    )


def _load_section(run_dir: Path) -> Section:
    """NEW's load run against OLD's at the same load (or why they cannot be compared)."""
    from servecheck.analysis.compare import compare_runs
    from servecheck.report.compare import comparison_section
    from servecheck.report.html import Section, esc

    try:
        cmp = compare_runs(run_dir / "load-old", run_dir / "load-new")
        sec = comparison_section(cmp, ("OLD", "NEW"))
        sec.title = "Latency and throughput: NEW vs OLD at the same load"
        return sec
    except UsageError as exc:
        return Section(
            "Latency and throughput", f"<p class='flag'>{esc(exc)}</p>", [str(exc)], False
        )


__all__ = ["part_message", "write_cutover_html"]
