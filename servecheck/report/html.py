"""One self-contained HTML page per run, and a Markdown summary for CI logs.

The page has no external assets: CSS is inline and plots are inline ``<svg>`` elements drawn by
matplotlib (:mod:`servecheck.report.svg`). Every piece of text that came from a server or a
run file passes through :func:`esc` (redaction, then ``html.escape``), so neither a key nor a
``<script>`` in a model's answer can reach the page as markup.

A page is a list of :class:`Section` objects (each an HTML fragment plus its Markdown lines);
the conformance and load sections are reused by ``accept``, ``capacity`` and ``cutover``.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.analysis.verdict import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    RunVerdict,
    Status,
    as_status,
    compose,
)
from servecheck.records.results import BAD_OUTCOMES, not_run_phrase, read_json, read_jsonl
from servecheck.redact import redact

REPORT_NAME = "report.html"
SUMMARY_MD = "summary.md"
OUTCOME_ORDER = (
    "failed",
    "error",
    "xpassed",
    "nonstrict",
    "xfailed",
    "skipped",
    "notrun",
    "passed",
)
OUTCOME_COLOURS = {
    "passed": "#1a7f37",
    "failed": "#cf222e",
    "error": "#8b0000",
    "nonstrict": "#bf8700",
    "skipped": "#6e7781",
    "xfailed": "#8250df",
    "xpassed": "#e16f24",
    "notrun": "#6e7781",
}
CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1150px;padding:16px;color:#1f2328}
h1{font-size:22px;margin:4px 0}h2{font-size:18px;border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:28px}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;border-radius:10px;padding:1px 8px;color:#fff;font-size:12px;font-weight:600}
.verdict{font-size:16px;padding:3px 12px}
.pass{background:#1a7f37}.fail{background:#cf222e}.warn{background:#bf8700}.info{background:#0969da}
pre{background:#f6f8fa;border:1px solid #d0d7de;padding:6px 8px;white-space:pre-wrap;word-break:break-word;font-size:12px;margin:4px 0}
.plots{display:flex;flex-wrap:wrap;gap:8px}.plots svg{max-width:100%;height:auto;border:1px solid #eaeef2}
.muted{color:#6e7781}.flag{background:#fff8c5;border:1px solid #d4a72c;padding:6px 10px;border-radius:6px}
details summary{cursor:pointer;color:#0969da}
"""


def esc(value: Any) -> str:
    """Redact, then HTML-escape any value for the page."""
    return html.escape(redact("" if value is None else str(value)), quote=True)


# A "<" that would open raw HTML or an autolink in CommonMark (a tag, a closing tag, a comment,
# a declaration): only these are escaped, so "ttft_p95<=500ms" and "p99 690 ms > 25 ms" stay as
# they are in a CI log (issue 42: summary.md showed "&gt;").
_MD_HTML_OPEN = re.compile(r"<(?=[A-Za-z/!?])")


def md_esc(value: Any) -> str:
    """Redact and make a value safe inside a Markdown table cell: no pipe, no line break, no
    raw HTML; other characters as they are."""
    text = redact("" if value is None else str(value))
    return _MD_HTML_OPEN.sub("&lt;", text.replace("|", "\\|").replace("\n", " "))


def md_code(value: Any) -> str:
    """Redacted inline code for Markdown (backticks inside are replaced)."""
    return (
        "`" + redact("" if value is None else str(value)).replace("`", "'").replace("\n", " ") + "`"
    )


@dataclass(slots=True)
class Section:
    """A part of a page: an HTML fragment and the Markdown lines that summarise it.

    ``ok`` says pass or fail (None: informational); a section whose run has a verdict of its own
    (a load's, an accept's) gives it as ``status``, which then wins: an INCONCLUSIVE run's
    section is not a failed one."""

    title: str
    html: str
    markdown: list[str] = field(default_factory=list)
    ok: bool | None = None  # None: informational
    status: Status | None = None

    @property
    def verdict(self) -> Status | None:
        """The section's verdict word: its ``status``, else pass or fail from ``ok``."""
        if self.status is not None:
            return self.status
        return None if self.ok is None else PASS if self.ok else FAIL


# How a page marks a section's verdict beside its name (nav, HTML) and in summary.md.
_NAV_MARK = {PASS: " ✔", FAIL: " ✘", INCONCLUSIVE: " ?"}
_MD_MARK = {PASS: " ✅", FAIL: " ❌", INCONCLUSIVE: " ⚠️"}


def page_verdict(
    sections: Sequence[Section], ok: bool | None = None, verdict: RunVerdict | None = None
) -> Status | None:
    """The page's one verdict: the run's own (``verdict``), else ``ok`` (pass or fail), else
    the sections' folded by the verdict model's one rule (a failed section fails the page, an
    inconclusive one makes it inconclusive); None (no badge) while a section is informational."""
    if verdict is not None:
        return verdict.status
    if ok is not None:
        return PASS if ok else FAIL
    words = [s.verdict for s in sections]
    if not words or any(w is None for w in words):
        return None
    return compose(RunVerdict(w) for w in words if w is not None).status


def badge(text: str, kind: str) -> str:
    """A coloured pill; ``kind`` is pass | fail | warn | info, or an outcome name."""
    colour = OUTCOME_COLOURS.get(kind)
    style = f' style="background:{colour}"' if colour else ""
    cls = "" if colour else f" {kind}"
    return f'<span class="badge{cls}"{style}>{esc(text)}</span>'


def verdict_badge(ok: bool | None, text: str | None = None) -> str:
    kind = "info" if ok is None else "pass" if ok else "fail"
    return badge(text or ("PASS" if ok else "FAIL" if ok is not None else "INFO"), kind).replace(
        'class="badge', 'class="badge verdict', 1
    )


_GOOD_STATUSES = frozenset({"ok", "pass", "passed"})
_BAD_STATUSES = frozenset({"fail", "failed", "leak", "not_drained", "regression"})


def status_badge(status: str) -> str:
    """A verdict pill for a status word: green for ok/pass, red for fail/leak/not drained,
    amber for what could not be judged (inconclusive, insufficient data, retention)."""
    kind = "pass" if status in _GOOD_STATUSES else "fail" if status in _BAD_STATUSES else "warn"
    text = status.replace("_", " ").upper()
    return badge(text, kind).replace('class="badge', 'class="badge verdict', 1)


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    numeric: Sequence[int] = (),
    raw: Sequence[int] = (),
) -> str:
    """An HTML table; cells are escaped unless their column index is in ``raw`` (pre-built HTML)."""
    out = ["<table>"]
    if any(headers):
        out += ["<thead><tr>", *(f"<th>{esc(h)}</th>" for h in headers), "</tr></thead>"]
    out.append("<tbody>")
    for row in rows:
        out.append("<tr>")
        for i, cell in enumerate(row):
            cls = ' class="num"' if i in numeric else ""
            out.append(f"<td{cls}>{cell if i in raw else esc(cell)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(md_esc(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(md_esc(c) for c in row) + " |" for row in rows]
    return lines


def fmt(value: Any, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


def pct(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value * 100:.{digits}f}%"


# ------------------------------------------------------------------ conformance


def _descriptions() -> dict[str, str]:
    try:
        import servecheck.checks.surfaces  # noqa: F401  (registers every check)
        from servecheck.checks.registry import REGISTRY
    except Exception:  # noqa: BLE001 - descriptions are a nicety; the report must still render
        return {}
    return {cid: c.description for cid, c in REGISTRY.items()}


def trials_table(items: list[dict[str, Any]]) -> str:
    """``--trials K``: a table of the model-dependent checks' k/K and thresholds ('' if none)."""
    rows = [r for r in items if isinstance(r.get("trials"), dict)]
    if not rows:
        return ""
    return "<h4>Repeated trials (model-dependent checks)</h4>" + table(
        ("check", "passed", "threshold", "outcome", "first failure"),
        (
            (
                esc(r["check"]),
                esc(f"{r['trials'].get('passed')}/{r['trials'].get('runs')}"),
                esc(f"{r['trials'].get('threshold')}/{r['trials'].get('runs')}"),
                badge(r["outcome"], r["outcome"]),
                esc(str(r["trials"].get("first_failure") or "")[:300]),
            )
            for r in rows
        ),
        raw=(0, 1, 2, 3, 4),
    )


def conformance_section(run_dir: Path, title: str = "Conformance") -> Section:
    """Per target/model: outcome counts, failures with messages, non-strict and skip reasons, all checks."""
    rows = [r for r in read_jsonl(run_dir / "results.jsonl") if r.get("check")]
    summary = read_json(run_dir / "summary.json")
    descriptions = _descriptions()
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((str(r.get("target")), str(r.get("model"))), []).append(r)
    bad_total = sum(1 for r in rows if r.get("outcome") in BAD_OUTCOMES)
    partial = bool(summary.get("partial"))
    ok = (
        bool(rows)
        and bad_total == 0
        and not partial
        and int(summary.get("exit_status", 0) or 0) in (0,)
    )
    parts: list[str] = []
    md: list[str] = []
    if not rows:
        parts.append(
            '<p class="flag">No check results were recorded (results.jsonl is missing or empty).</p>'
        )
        md.append("No conformance results recorded.")
    targets = summary.get("targets") or {}
    for (target, model), items in sorted(groups.items()):
        counts: dict[str, int] = {}
        for r in items:
            counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        info = targets.get(target) or {}
        version = info.get("version") or info.get("engine_version")
        parts.append(
            f"<h3>{esc(target)} / {esc(model)}"
            + (f' <span class="muted">version {esc(version)}</span>' if version else "")
            + "</h3><p>"
            + " ".join(badge(f"{counts[o]} {o}", o) for o in OUTCOME_ORDER if counts.get(o))
            + "</p>"
        )
        md.append(
            f"**{md_esc(target)} / {md_esc(model)}**: "
            + ", ".join(f"{counts[o]} {o}" for o in OUTCOME_ORDER if counts.get(o))
        )
        items.sort(
            key=lambda r: (
                OUTCOME_ORDER.index(r["outcome"]) if r["outcome"] in OUTCOME_ORDER else 99,
                r["check"],
            )
        )
        bad = [r for r in items if r["outcome"] in BAD_OUTCOMES]
        if bad:
            parts.append("<h4>Failures</h4>")
            for r in bad:
                parts.append(
                    f"<p>{badge(r['outcome'], r['outcome'])} <b>{esc(r['check'])}</b> "
                    f"<span class='muted'>{esc(descriptions.get(r['check'], ''))}</span></p>"
                    f"<pre>{esc(r.get('message') or '(no message)')}</pre>"
                )
                first = (str(r.get("message") or "").splitlines() or [""])[0]
                md.append(f"- FAIL {md_code(r['check'])} ({r['outcome']}): {md_esc(first[:200])}")
        trials = trials_table(items)
        if trials:
            parts.append(trials)
            md += [
                f"- trials {md_code(r['check'])}: {r['trials']['passed']}/{r['trials']['runs']}"
                f" (threshold {r['trials']['threshold']}/{r['trials']['runs']}), {r['outcome']}"
                for r in items
                if isinstance(r.get("trials"), dict)
            ]
        for outcome, label in (
            ("nonstrict", "Non-strict (legal engine differences; schema findings)"),
            ("xfailed", "Known failures"),
            ("skipped", "Skipped"),
        ):
            sel = [r for r in items if r["outcome"] == outcome]
            if sel:
                parts.append(
                    f"<h4>{esc(label)}</h4>"
                    + table(
                        ("check", "reason"),
                        (
                            (r["check"], (str(r.get("message") or "").splitlines() or [""])[0])
                            for r in sel
                        ),
                    )
                )
        parts.append(
            "<details><summary>All checks</summary>"
            + table(
                ("check", "outcome", "description", "duration (s)", "message"),
                (
                    (
                        esc(r["check"]),
                        badge(r["outcome"], r["outcome"]),
                        esc(descriptions.get(r["check"], "")),
                        esc(fmt(r.get("duration_s"), digits=3)),
                        esc((str(r.get("message") or "").splitlines() or [""])[0][:300]),
                    )
                    for r in items
                ),
                numeric=(3,),
                raw=(0, 1, 2, 3, 4),
            )
            + "</details>"
        )
    # One verdict: an interrupted run is PARTIAL here as on the console, not a bare FAIL.
    badge_text = "PARTIAL" if partial else None
    head = f"<p>{verdict_badge(ok, badge_text)} {len(rows)} checks, {bad_total} failing.</p>"
    if partial:
        # An interrupted run is not green, however clean what finished was.
        note = f"PARTIAL: the run was interrupted; {not_run_phrase(summary.get('not_run'))}."
        head += f'<p class="flag">{esc(note)}</p>'
        md.insert(0, f"**{note}**")
    from servecheck.report.conformance_matrix import matrix_html

    head += matrix_html(rows)  # surface x target at a glance
    return Section(title, head + "".join(parts), md, ok)


# ------------------------------------------------------------------ load


def _load_samples(
    run_dir: Path,
) -> tuple[dict[str, list[float]], list[float], list[float], list[float], list[float]]:
    """The run's reservoir samples (ms) and its completions per second (t from the first
    second, ok/s, failed/s, tokens/s), from ``samples.json`` (analysis/aggregate.py): the pictures
    cost the same however many requests the run had."""
    doc = read_json(run_dir / "samples.json")
    if not doc:  # a run folder from before samples.json: made from its records once
        from servecheck.analysis.aggregate import Rule, aggregate_of
        from servecheck.records.parquet import read_run_records

        doc = aggregate_of(read_run_records(run_dir), Rule()).samples_doc()
    samples = {
        m: [float(v) * 1000.0 for v in (d.get("values") or [])]
        for m, d in (doc.get("samples") or {}).items()
    }
    per_s = doc.get("per_second") or {}
    ok = [float(x) for x in per_s.get("ok") or []]
    ts = [i + 0.5 for i in range(len(ok))]
    bad = [float(x) for x in per_s.get("failed") or []]
    tok = [float(x) for x in per_s.get("tokens") or []]
    return samples, ts, ok, bad, tok


LATENCY_KEYS = (("ttft", "TTFT"), ("itl", "ITL"), ("tpot", "TPOT"), ("e2e", "E2E"))
# Shown when the run's streams carried reasoning (docs/metrics.md: reasoning phases).
PHASE_KEYS = (
    ("ttfr", "TTFR (first reasoning token)"),
    ("ttfa", "TTFA (first answer token)"),
    ("itl_reasoning", "ITL reasoning"),
    ("itl_answer", "ITL answer"),
)
PCTS = ("p50", "p90", "p95", "p99", "p99.9", "max")


def load_section(run_dir: Path, title: str = "Load", plots: bool = True) -> Section:
    """SLO verdicts, generator-lag flag, throughput/goodput, latency percentiles and distributions."""
    s = read_json(run_dir / "summary.json")
    if not s or "requests" not in s:
        return Section(
            title,
            '<p class="flag">No load summary (summary.json) in this run.</p>',
            ["No load summary."],
            False,
        )
    verdict = str(s.get("verdict", "?"))
    req, thr, lat = s.get("requests", {}), s.get("throughput", {}), s.get("latency_ms", {})
    sched = s.get("schedule", {})
    parts = _load_head(s, verdict, sched)
    parts.append(table(("", "", "", ""), _load_key_rows(s, req, thr, sched)))
    slos = s.get("slo") or []
    if slos:
        parts.append("<h3>SLOs</h3>" + _slo_table(slos))
    reasoned = bool((s.get("tokens") or {}).get("reasoning_requests"))
    keys = LATENCY_KEYS + (PHASE_KEYS if reasoned else ())
    lat_rows = [
        (label, *(fmt((lat.get(k) or {}).get(p)) for p in PCTS), (lat.get(k) or {}).get("count", 0))
        for k, label in keys
        if (lat.get(k) or {}).get("count")
    ]
    parts.append(
        "<h3>Latency (ms)</h3>" + table(("metric", *PCTS, "samples"), lat_rows, numeric=range(1, 8))
    )
    from servecheck.analysis.sections import Summary
    from servecheck.report.load_sections import LOAD_SECTIONS
    from servecheck.report.timings_html import Tables

    # The sections read the typed summary; the head above keeps its .get()s, since the page also
    # reads partial files (a killed run's, a test's few keys) that have no schedule or tokens.
    typed, tables = Summary.from_json(s), Tables(table, md_table)
    parts += [section.html(typed, tables) for section in LOAD_SECTIONS]  # summary.txt's order
    if plots:
        parts.append("<div class='plots'>" + "".join(_load_plots(run_dir, lat, keys)) + "</div>")
        from servecheck.report.load_figures import load_figures_html

        parts.append(load_figures_html(s, run_dir))  # slices beside the engine, TTFT split
        from servecheck.report.slice_figures import slice_figures_html

        parts.append(slice_figures_html(s))  # latency, errors, tokens/s, in-flight per slice
    md = _load_markdown(s, verdict, req, thr, sched, slos, lat_rows)
    for section in LOAD_SECTIONS:
        md += section.markdown(typed, tables)
    return Section(title, "".join(parts), md, verdict == "pass", as_status(verdict))


def _load_head(s: dict[str, Any], verdict: str, sched: dict[str, Any]) -> list[str]:
    """The run line (verdict, target, model, scenario, mode, window), its reasons and the lag flag."""
    parts = [
        f"<p>{status_badge(verdict)} target <b>{esc(s.get('target'))}</b>, model {esc(s.get('model'))}, "
        f"scenario {esc(s.get('scenario'))}, mode {esc(s.get('mode'))}"
        + (f", {esc(s.get('users'))} users" if s.get("users") else "")
        + (f", {esc(s.get('rate'))} req/s" if s.get("rate") else "")
        + f", window {fmt(s.get('window_s'), ' s')}</p>"
    ]
    if s.get("reasons"):
        parts.append("<p class='flag'>" + "<br>".join(esc(r) for r in s["reasons"]) + "</p>")
    if sched.get("behind"):
        parts.append(
            "<p class='flag'><b>Generator lag:</b> the load generator fell behind its schedule, so latencies "
            "may be understated: " + esc("; ".join(sched.get("reasons") or [])) + "</p>"
        )
    if sched.get("notes"):
        parts.append("<p class='muted'><b>Note:</b> " + esc("; ".join(sched["notes"])) + "</p>")
    return parts


def _load_key_rows(
    s: dict[str, Any], req: dict[str, Any], thr: dict[str, Any], sched: dict[str, Any]
) -> list[tuple[Any, ...]]:
    """Requests, failures, rate-limited, throughput and goodput: the key figures, two per row."""
    return [
        ("requests", req.get("total"), "ok", req.get("ok")),
        (
            "failed",
            f"{req.get('failed')} ({pct(req.get('error_rate'))})",
            "errors",
            ", ".join(f"{k}: {v}" for k, v in (req.get("errors") or {}).items()) or "-",
        ),
        (
            "rate-limited",
            f"{req.get('rate_limited') or 0} ({pct(req.get('rate_limited_rate') or 0)})",
            "",
            "shed by the server (429, 503 + Retry-After): not counted as failed",
        ),
        (
            "throughput",
            f"{fmt(thr.get('requests_per_s'), ' req/s', 2)}",
            "output tokens/s",
            fmt(thr.get("output_tokens_per_s")),
        ),
        (
            "goodput",
            pct(s.get("goodput"), 1),
            "schedule lag p99 (sends late)",
            fmt((sched.get("lag_ms") or {}).get("p99"), " ms", 2),
        ),
    ]


def _slo_table(slos: list[dict[str, Any]]) -> str:
    return table(
        ("verdict", "SLO", "observed", "source", "note"),
        (
            (
                verdict_badge(v.get("passed")),
                esc(v.get("slo")),
                esc(_observed(v)),
                esc(v.get("source")),
                esc(v.get("note")),
            )
            for v in slos
        ),
        raw=(0, 1, 2, 3, 4),
    )


def _marks(stat: dict[str, Any], names: tuple[str, str]) -> dict[str, Any]:
    """The percentile lines drawn on a histogram, those that were measured."""
    return {k: v for k, v in ((n, stat.get(n)) for n in names) if v is not None}


def _load_plots(run_dir: Path, lat: dict[str, Any], keys: tuple[tuple[str, str], ...]) -> list[str]:
    """Latency percentiles, TTFT and ITL distributions, throughput over the run (SVG)."""
    from servecheck.report import svg

    samples, ts, okr, badr, tok = _load_samples(run_dir)
    figs: list[str] = []
    groups = {
        label.split(" (")[0]: {p: (lat.get(k) or {}).get(p) for p in PCTS[:-1]}
        for k, label in keys
        if (lat.get(k) or {}).get("count")
    }
    if groups:
        figs.append(svg.bar_chart("Latency percentiles", "ms", groups))
    ttft = samples.get("ttft", [])
    if ttft:
        marks = _marks(lat.get("ttft") or {}, ("p50", "p95"))
        figs.append(svg.histogram("TTFT distribution", "ms", ttft, marks=marks))
    itl = samples.get("itl", [])
    if itl:
        marks = _marks(lat.get("itl") or {}, ("p50", "p99"))
        figs.append(
            svg.histogram("ITL distribution", "ms", itl, ylabel="inter-token gaps", marks=marks)
        )
    if ts:
        figs.append(
            svg.timeline(
                "Throughput over the run",
                "per second",
                [
                    ("ok req/s", ts, okr),
                    ("failed req/s", ts, badr),
                    ("tokens/s / 10", ts, [t / 10 for t in tok]),
                ],
            )
        )
    return figs


def _load_markdown(
    s: dict[str, Any],
    verdict: str,
    req: dict[str, Any],
    thr: dict[str, Any],
    sched: dict[str, Any],
    slos: list[dict[str, Any]],
    lat_rows: list[tuple[Any, ...]],
) -> list[str]:
    """The summary.md lines of a load run."""
    md = [
        f"**Load** {md_esc(s.get('target'))}: {verdict.upper()}, {req.get('total')} requests, "
        f"error rate {pct(req.get('error_rate'))}, {fmt(thr.get('requests_per_s'), ' req/s', 2)}, goodput {pct(s.get('goodput'), 1)}"
    ]
    # Why the verdict is what it is (a target down, a partial run, an unmeasured figure).
    md += [f"- {md_esc(r)}" for r in s.get("reasons") or []]
    if lat_rows:
        md += md_table(("ms", *PCTS, "n"), lat_rows)
    for v in slos:
        md.append(
            f"- {'PASS' if v.get('passed') else 'FAIL'} {md_code(v.get('slo'))} observed {md_esc(_observed(v))}"
        )
    if sched.get("behind"):
        md.append("- WARNING: generator lag: " + md_esc("; ".join(sched.get("reasons") or [])))
    if sched.get("notes"):
        md.append("- note: " + md_esc("; ".join(sched["notes"])))
    return md


def _observed(v: dict[str, Any]) -> str:
    obs = v.get("observed")
    if obs is None:
        return "no data"
    if v.get("unit") == "ms":
        return f"{obs:.1f} ms"
    if v.get("unit") == "fraction":
        return f"{obs * 100:.2f}%"
    return f"{obs:g}"


# ------------------------------------------------------------------ pages


def render_page(
    title: str, sections: Sequence[Section], subtitle: str = "", status: Status | None = None
) -> str:
    """The whole HTML document (no external references); ``status``: the page's one verdict
    (:func:`page_verdict`), its title's badge."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    nav = " · ".join(
        f"<a href='#s{i}'>{esc(s.title)}</a>" + _NAV_MARK.get(s.verdict or "", "")
        for i, s in enumerate(sections)
    )
    body = "".join(
        f"<section id='s{i}'><h2>{esc(s.title)}</h2>{s.html}</section>"
        for i, s in enumerate(sections)
    )
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{CSS}</style></head><body>"
        f"<h1>{esc(title)} {'' if status is None else status_badge(status)}</h1>"
        f"<p class='muted'>{esc(subtitle)}{' · ' if subtitle else ''}generated {esc(stamp)}</p><p>{nav}</p>{body}</body></html>"
    )


def render_markdown(title: str, sections: Sequence[Section], status: Status | None = None) -> str:
    """summary.md's text; ``status``: the page's one verdict (:func:`page_verdict`)."""
    lines = [f"## {md_esc(title)}: {'report' if status is None else status.upper()}", ""]
    for s in sections:
        lines += [f"### {md_esc(s.title)}{_MD_MARK.get(s.verdict or '', '')}", "", *s.markdown, ""]
    return "\n".join(lines)


def write_page(
    run_dir: Path,
    title: str,
    sections: Sequence[Section],
    *,
    subtitle: str = "",
    ok: bool | None = None,
    verdict: RunVerdict | None = None,
    name: str = REPORT_NAME,
) -> Path:
    """Write ``report.html`` and ``summary.md`` into ``run_dir``; return the HTML path. The
    page's title and summary.md's heading carry ONE verdict (:func:`page_verdict`): a run's
    own ``verdict`` where it has one (what its JSON and its console say), else ``ok``, else
    the sections'."""
    run_dir = Path(run_dir)
    status = page_verdict(sections, ok, verdict)
    page = run_dir / name
    page.write_text(render_page(title, sections, subtitle, status), encoding="utf-8")
    write_summary_md(run_dir, title, sections, status)
    return page


def write_summary_md(
    run_dir: Path, title: str, sections: Sequence[Section], status: Status | None = None
) -> Path:
    """``summary.md``: the page's verdicts and key numbers for a CI log or job summary."""
    path = Path(run_dir) / SUMMARY_MD
    path.write_text(render_markdown(title, sections, status), encoding="utf-8")
    return path


def write_conformance_html(run_dir: Path) -> Path:
    """The one-page report of a ``servecheck check`` run folder (results.jsonl + summary.json)."""
    run_dir = Path(run_dir)
    return write_page(
        run_dir, f"servecheck conformance: {run_dir.name}", [conformance_section(run_dir)]
    )


def write_load_html(run_dir: Path) -> Path:
    """The one-page report of a ``servecheck load`` run folder (summary.json + records.jsonl)."""
    run_dir = Path(run_dir)
    return write_page(run_dir, f"servecheck load: {run_dir.name}", [load_section(run_dir)])


__all__ = [
    "Section",
    "conformance_section",
    "esc",
    "load_section",
    "page_verdict",
    "render_page",
    "write_conformance_html",
    "write_load_html",
    "write_page",
    "write_summary_md",
]
