"""A comparison with a baseline as text, Markdown and HTML (the statistics that decide it:
:mod:`servecheck.analysis.compare`)."""

from __future__ import annotations

from typing import Any

from servecheck.analysis.compare import Comparison


def _num(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "fraction":
        return f"{v * 100:.2f}%"
    return f"{v:.2f}" if abs(v) < 100 else f"{v:.1f}"


# A metric's status as its row says it; INCONCLUSIVE: beyond the threshold the worse way without
# the evidence for it (the note says what would decide it), or a run doubted its measurement.
_STATUS_WORDS = {
    "regression": "REGRESSION",
    "improvement": "improved",
    "inconclusive": "INCONCLUSIVE",
    "ok": "ok",
}


def _ci(low: float | None, high: float | None) -> str:
    """The difference's interval; a side that the data leave open is "unbounded"."""
    if low is None and high is None:
        return "-"
    lo = "unbounded" if low is None else f"{low:+.2f}"
    hi = "unbounded" if high is None else f"{high:+.2f}"
    return f"[{lo}, {hi}]"


def verdict_line(cmp: Comparison) -> str:
    """The comparison's one verdict, as the console, the page and summary.md say it."""
    if cmp.verdict == "regression":
        return "REGRESSION (" + ", ".join(cmp.regressions) + ")"
    if cmp.verdict == "inconclusive":
        return "INCONCLUSIVE (" + "; ".join(cmp.doubts) + ")"
    thin = cmp.inconclusive
    return "no regression" + (
        f" ({len(thin)} metric(s) inconclusive for want of samples: {', '.join(thin)})"
        if thin
        else ""
    )


def metric_rows(cmp: Comparison) -> list[tuple[str, ...]]:
    """(metric, baseline, current, change, p, CI, threshold, verdict) rows for text, Markdown and HTML."""
    rows: list[tuple[str, ...]] = []
    for m in cmp.metrics:
        change = (
            "-"
            if m.change is None
            else (
                f"{m.change * 100:+.2f} pp"
                if m.unit == "fraction"
                else f"{m.change:+.2f} {m.unit}"
                + (f" ({m.change_pct:+.1f}%)" if m.change_pct is not None else "")
            )
        )
        ci = _ci(m.ci_low, m.ci_high)
        if ci == "-" and m.interval_current is not None:
            ci = "unbounded"  # both runs' intervals are open above: no evidence either way
        verdict = _STATUS_WORDS.get(m.status, m.status)
        rows.append(
            (
                m.name,
                _num(m.baseline, m.unit),
                _num(m.current, m.unit),
                change,
                "-" if m.p_value is None else f"{m.p_value:.3g}",
                ci,
                m.threshold or "-",
                verdict,
            )
        )
    return rows


HEADERS = ("metric", "baseline", "current", "change", "p", "CI of diff", "threshold", "verdict")


def format_text(cmp: Comparison) -> str:
    """A plain-text table of the comparison for the terminal."""
    rows = metric_rows(cmp)
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(HEADERS)
    ]
    lines = [f"baseline {cmp.baseline.path}  ->  current {cmp.current.path}"]
    lines += [f"note: {n}" for n in cmp.notes]
    if rows:
        lines.append("  ".join(h.ljust(w) for h, w in zip(HEADERS, widths, strict=True)))
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines += [f"note: {m.name}: {m.note}" for m in cmp.metrics if m.note]
    c = cmp.conformance
    if c is not None:
        lines.append(
            f"conformance: {len(c.newly_failing)} newly failing, {len(c.fixed)} fixed, "
            f"{len(c.new_checks)} new, {len(c.missing_checks)} missing"
        )
        lines += [
            f"  NEWLY FAILING {x['check']}: {x['baseline']} -> {x['current']}"
            for x in c.newly_failing
        ]
    lines.append("verdict: " + verdict_line(cmp))
    return "\n".join(lines)


def comparison_section(cmp: Comparison, labels: tuple[str, str] = ("baseline", "current")) -> Any:
    """The HTML/Markdown :class:`~servecheck.report.html.Section` of a comparison; ``labels``
    name the two runs in its pictures (cutover: OLD, NEW)."""
    from servecheck.report.compare_figures import comparison_figures_html
    from servecheck.report.html import Section, badge, esc, md_table, table, verdict_badge

    rows = metric_rows(cmp)
    ok = {"regression": False, "inconclusive": None}.get(cmp.verdict, True)
    word = {"regression": "REGRESSION", "inconclusive": "INCONCLUSIVE"}
    parts = [
        f"<p>{verdict_badge(ok, word.get(cmp.verdict, 'NO REGRESSION'))} "
        f"baseline <code>{esc(cmp.baseline.path)}</code> ({esc(cmp.baseline.version or 'version unknown')}) vs current "
        f"<code>{esc(cmp.current.path)}</code> ({esc(cmp.current.version or 'version unknown')}); alpha {cmp.alpha}, seed {cmp.seed}</p>"
    ]
    parts += [f"<p class='flag'>{esc(n)}</p>" for n in [*cmp.doubts, *cmp.notes]]
    notes = [*cmp.doubts, *cmp.notes, *(f"{m.name}: {m.note}" for m in cmp.metrics if m.note)]
    parts += [f"<p class='muted'>{esc(f'{m.name}: {m.note}')}</p>" for m in cmp.metrics if m.note]
    md = [f"Verdict: **{verdict_line(cmp)}**"] + [f"- note: {n}" for n in notes]
    if rows:
        kinds = {"REGRESSION": "fail", "improved": "pass", "ok": "passed", "INCONCLUSIVE": "warn"}
        parts.append(
            table(
                HEADERS,
                ((*(esc(c) for c in r[:-1]), badge(r[-1], kinds.get(r[-1], "warn"))) for r in rows),
                numeric=(1, 2, 3, 4),
                raw=tuple(range(8)),
            )
        )
        md += md_table(HEADERS, rows)
    if cmp.baseline.load is not None or cmp.current.load is not None:
        parts.append(comparison_figures_html(cmp, labels))  # bars, CDFs, series overlaid
    c = cmp.conformance
    if c is not None:
        parts.append(
            f"<h3>Conformance</h3><p>{len(c.newly_failing)} newly failing, {len(c.fixed)} fixed, "
            f"{len(c.new_checks)} new, {len(c.missing_checks)} missing checks.</p>"
        )
        if c.newly_failing:
            parts.append(
                table(
                    ("check", "baseline", "current", "message"),
                    (
                        (
                            x["check"],
                            x["baseline"] or "(absent)",
                            x["current"],
                            str(x.get("message") or "").splitlines()[:1]
                            and str(x.get("message")).splitlines()[0],
                        )
                        for x in c.newly_failing
                    ),
                )
            )
        md.append(f"Conformance: {len(c.newly_failing)} newly failing, {len(c.fixed)} fixed")
        md += [
            f"- NEWLY FAILING `{x['check']}`: {x['baseline']} -> {x['current']}"
            for x in c.newly_failing
        ]
    return Section("Comparison with the baseline", "".join(parts), md, ok)
