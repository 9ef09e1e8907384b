"""The pictures of a comparison of two load runs (``servecheck compare``, and cutover's NEW
against OLD at the same load; issue 30, part 2).

* **Each metric, one against the other**: the compared metrics (analysis/compare.py's
  ``MetricDelta``: TTFT / ITL / E2E percentiles, throughput, error rate, goodput) as paired bars,
  one panel a family or unit; a regression's bar is outlined red, an improvement's green.
* **Latency CDFs, overlaid**: TTFT, ITL and E2E of both runs from their reservoir samples
  (``samples.json``, analysis/aggregate.py), never from the records.
* **Over the run, overlaid**: TTFT / ITL / E2E p95, error rate, output tokens/s and in-flight
  per time slice of both runs (summary.json ``slices``), each run on its own clock (seconds
  since its first request).

A picture that one side cannot feed is left out with a line naming the side and the file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servecheck.analysis.aggregate import SAMPLES_NAME
from servecheck.report import svg
from servecheck.report.slice_figures import latency_series, rate_series

if TYPE_CHECKING:
    from servecheck.analysis.compare import Comparison, MetricDelta

METRICS_TITLE = "Each metric: {a} against {b}"
CDF_TITLE = "Latency CDFs: {a} and {b} overlaid"
SERIES_TITLE = "Over the run: {a} and {b} overlaid"
CDF_FAMILIES = (("ttft", "TTFT"), ("itl", "ITL"), ("e2e", "E2E"))
SERIES_PANELS = (
    ("ttft p95", "TTFT p95 ms"),
    ("itl p95", "ITL p95 ms"),
    ("e2e p95", "E2E p95 ms"),
    ("error_rate", "failed (%)"),
    ("output_tokens_per_s", "output tokens/s"),
    ("in_flight", "in flight (mean)"),
)
CDF_POINTS = 400
COLOURS = (svg.PALETTE[0], svg.PALETTE[3])
VERDICT_EDGE = {"regression": "#cf222e", "improvement": "#1a7f37"}

Bar = tuple[str, float, float, str]  # category, baseline, current, verdict


def metric_panels(metrics: Sequence[MetricDelta]) -> list[tuple[str, list[Bar]]]:
    """(panel title, bars): latency percentiles one panel a family (``TTFT ms``: p50, p90 ...),
    throughput one panel a unit, rates (error rate, goodput) in percent. A metric that one
    side did not measure is left out. Verdict: ``regression``, ``improvement`` or ``""``."""
    panels: dict[str, list[Bar]] = {}
    for m in metrics:
        if m.baseline is None or m.current is None:
            continue
        if not (math.isfinite(m.baseline) and math.isfinite(m.current)):
            continue
        verdict = "regression" if m.regression else "improvement" if m.improvement else ""
        if m.unit == "ms" and "_" in m.name:
            family, cat = m.name.split("_", 1)
            title, base, cur = f"{family.upper()} ms", m.baseline, m.current
        elif m.unit == "fraction":
            title, cat = "rates (%)", m.name.replace("_", " ")
            base, cur = 100.0 * m.baseline, 100.0 * m.current
        else:
            title, cat, base, cur = (
                m.unit,
                m.name.removeprefix("throughput_"),
                m.baseline,
                m.current,
            )
        panels.setdefault(title, []).append((cat, base, cur, verdict))
    return list(panels.items())


def cdf(values: Sequence[float], points: int = CDF_POINTS) -> tuple[list[float], list[float]]:
    """(value, share at or below it): every value of a small sample, else ``points`` quantiles
    (a reservoir of thousands need not be thousands of SVG vertices)."""
    vs = sorted(v for v in values if math.isfinite(v))
    n = len(vs)
    if n == 0:
        return [], []
    if n <= points:
        return vs, [(i + 1) / n for i in range(n)]
    idx = [round(k * (n - 1) / (points - 1)) for k in range(points)]
    return [vs[i] for i in idx], [(i + 1) / n for i in idx]


def read_samples(folder: Path | None) -> dict[str, list[float]]:
    """The run's reservoir samples in ms (``samples.json``), empty where there is none."""
    if folder is None:
        return {}
    try:
        doc = json.loads((folder / SAMPLES_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    samples = doc.get("samples") if isinstance(doc, dict) else None
    out: dict[str, list[float]] = {}
    for fam, d in (samples or {}).items():
        values = (d or {}).get("values") if isinstance(d, dict) else None
        if values:
            out[fam] = [float(v) * 1000.0 for v in values if isinstance(v, int | float)]
    return out


def read_summary(folder: Path | None) -> dict[str, Any]:
    if folder is None:
        return {}
    try:
        doc = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def series_of(summary: Mapping[str, Any]) -> dict[str, tuple[list[float], list[float | None]]]:
    """The overlaid time series of one run (keys of :data:`SERIES_PANELS`)."""
    return {**latency_series(summary), **rate_series(summary)}


def _grid(n: int, ncols: int, title: str, cell_h: float = 2.3) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    rows = math.ceil(n / ncols)
    height = cell_h * rows + 0.9
    fig = Figure(figsize=(7.6, height), dpi=96)
    # Margins in inches, not shares: the suptitle and the bottom line keep their room however
    # many rows the grid has.
    fig.subplots_adjust(
        left=0.09, right=0.98, bottom=0.5 / height, top=1 - 0.55 / height, wspace=0.32, hspace=0.6
    )
    axes = [fig.add_subplot(rows, ncols, i + 1) for i in range(n)]
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.suptitle(title, fontsize=11)
    return fig, axes


def metrics_svg(metrics: Sequence[MetricDelta], labels: tuple[str, str]) -> str | None:
    """Paired bars, one panel a family; None: no metric both sides measured."""
    panels = metric_panels(metrics)
    if not panels:
        return None
    fig, axes = _grid(
        len(panels), min(3, len(panels)), METRICS_TITLE.format(a=labels[1], b=labels[0])
    )
    for ax, (title, bars) in zip(axes, panels, strict=True):
        xs = range(len(bars))
        for side, (label, colour) in enumerate(zip(labels, COLOURS, strict=True)):
            heights = [b[1 + side] for b in bars]
            edges = [VERDICT_EDGE.get(b[3], colour) if side else colour for b in bars]
            ax.bar(
                [x + (side - 0.5) * 0.4 for x in xs],
                heights,
                width=0.4,
                color=colour,
                edgecolor=edges,
                linewidth=[2.2 if side and b[3] else 0.5 for b in bars],
                label=label,
            )
        ax.set_xticks(list(xs), [b[0] for b in bars], fontsize=8)
        ax.set_title(title, fontsize=9)
    from matplotlib.patches import Patch

    # Proxy handles: the bars' own would carry the first bar's outline into the key.
    keys = [Patch(facecolor=c, label=label) for label, c in zip(labels, COLOURS, strict=True)]
    axes[0].legend(handles=keys, fontsize=7, loc="upper left")
    fig.text(
        0.5,
        0.01,
        f"{labels[1]}'s bar outlined red: a regression; green: an improvement (analysis/compare.py)",
        ha="center",
        fontsize=7,
        color="#555",
    )
    return svg.to_svg(fig)


def cdf_svg(
    samples: tuple[Mapping[str, list[float]], Mapping[str, list[float]]], labels: tuple[str, str]
) -> str | None:
    """TTFT, ITL and E2E CDFs of both runs; a family only where both have samples."""
    fams = [(f, name) for f, name in CDF_FAMILIES if samples[0].get(f) and samples[1].get(f)]
    if not fams:
        return None
    fig, axes = _grid(len(fams), len(fams), CDF_TITLE.format(a=labels[0], b=labels[1]), 2.8)
    for ax, (fam, name) in zip(axes, fams, strict=True):
        for side in (0, 1):
            xs, ys = cdf(samples[side][fam])
            ax.step(
                xs,
                ys,
                where="post",
                lw=1.4,
                color=COLOURS[side],
                label=f"{labels[side]} (n={len(samples[side][fam])})",
            )
        lo = min(min(samples[0][fam]), min(samples[1][fam]))
        hi = max(max(samples[0][fam]), max(samples[1][fam]))
        if lo > 0 and hi / lo > 50:
            ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel(f"{name} ms", fontsize=8)
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=6, loc="lower right")
    axes[0].set_ylabel("share of requests / gaps")
    return svg.to_svg(fig)


def series_svg(
    summaries: tuple[Mapping[str, Any], Mapping[str, Any]], labels: tuple[str, str]
) -> str | None:
    """Per-slice series of both runs overlaid; a panel only where both have it."""
    runs = (series_of(summaries[0]), series_of(summaries[1]))
    panels = [(k, name) for k, name in SERIES_PANELS if k in runs[0] and k in runs[1]]
    if not panels:
        return None
    fig, axes = _grid(
        len(panels),
        3 if len(panels) > 4 else min(2, len(panels)),
        SERIES_TITLE.format(a=labels[0], b=labels[1]),
    )
    for ax, (key, name) in zip(axes, panels, strict=True):
        for side in (0, 1):
            xs, ys = runs[side][key]
            ax.plot(
                xs,
                [math.nan if y is None else y for y in ys],
                marker="o",
                ms=2.5,
                lw=1.3,
                color=COLOURS[side],
                label=labels[side],
            )
        ax.set_title(name, fontsize=9)
        ax.set_ylim(bottom=0)
        if key == "error_rate":  # two clean runs read as a flat 0 %, not as noise near it
            top = max((y for r in runs for y in r[key][1] if y is not None), default=0.0)
            ax.set_ylim(0, max(1.0, top * 1.15))
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=7, loc="lower left")
    fig.text(0.5, 0.01, "run time (s since each run's first request)", ha="center", fontsize=8)
    return svg.to_svg(fig)


def _missing(what: str, sides: Sequence[tuple[str, bool]]) -> str:
    lacking = [label for label, has in sides if not has]
    return f"No {what}: {' and '.join(lacking)} {'has' if len(lacking) == 1 else 'have'} none."


def comparison_figures_html(
    cmp: Comparison, labels: tuple[str, str] = ("baseline", "current")
) -> str:
    """The three pictures under one heading, each absent one replaced by the line that says why."""
    head = "<h3>Pictures</h3>"
    folders = (cmp.baseline.load, cmp.current.load)
    if folders[0] is None or folders[1] is None:
        return (
            head
            + "<p class='muted'>No load pictures: the two runs do not both have a load part.</p>"
        )
    figs: list[str] = []
    notes: list[str] = []
    bars = metrics_svg(cmp.metrics, labels)
    if bars:
        figs.append(bars)
    else:
        notes.append("No metric bars: no metric was measured on both sides.")
    samples = (read_samples(folders[0]), read_samples(folders[1]))
    cdfs = cdf_svg(samples, labels)
    if cdfs:
        figs.append(cdfs)
    else:
        sides = [(f"{labels[i]} ({folders[i]}/{SAMPLES_NAME})", bool(samples[i])) for i in (0, 1)]
        notes.append(
            _missing("latency CDFs (reservoir samples)", sides)
            if not all(s[1] for s in sides)
            else "No latency CDFs: no latency family was sampled on both sides."
        )
    summaries = (read_summary(folders[0]), read_summary(folders[1]))
    over = series_svg(summaries, labels)
    if over:
        figs.append(over)
    else:
        has = [bool(series_of(s)) for s in summaries]
        sides = [(f"{labels[i]} (summary.json slices)", has[i]) for i in (0, 1)]
        notes.append(
            _missing("time series (time slices)", sides)
            if not all(has)
            else "No time series: no per-slice figure was measured on both sides."
        )
    from servecheck.report.html import esc

    out = head + "".join(f"<p class='muted'>{esc(n)}</p>" for n in notes)
    return out + ("<div class='plots'>" + "".join(figs) + "</div>" if figs else "")


__all__ = [
    "CDF_TITLE",
    "METRICS_TITLE",
    "SERIES_TITLE",
    "cdf",
    "cdf_svg",
    "comparison_figures_html",
    "metric_panels",
    "metrics_svg",
    "read_samples",
    "series_svg",
]
