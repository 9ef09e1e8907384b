"""Matplotlib figures rendered to inline SVG strings (Agg-free SVG canvas, no pyplot, no files).

Why inline SVG: a report must be one self-contained file that opens from a CI artifact, an
e-mail or a browser with no network; an ``<svg>`` element in the page needs nothing else.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_XML_HEAD = re.compile(r"^.*?(?=<svg)", re.S)
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")


def new_figure(
    width: float = 7.0, height: float = 3.2, ncols: int = 1
) -> tuple[Figure, list[Axes]]:
    """A figure with ``ncols`` axes side by side, drawn on its own canvas (no global state)."""
    from matplotlib.figure import Figure

    # Fixed margins instead of a layout engine: constrained/tight layout draw the figure an extra
    # time, which doubles the cost of every plot in a report.
    fig = Figure(figsize=(width, height), dpi=96)
    fig.subplots_adjust(left=0.12, right=0.97, bottom=0.16, top=0.9, wspace=0.25)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, axes


def to_svg(fig: Figure) -> str:
    """The figure as an ``<svg>`` element string (the XML prolog and DOCTYPE stripped)."""
    import matplotlib
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    FigureCanvasSVG(fig)
    buf = io.StringIO()
    # A fixed hash salt keeps element ids stable, so two reports of one run are byte-identical.
    # Text stays text (fonttype "none"): a fifth cheaper to draw than glyph outlines, a fifth
    # smaller, and the labels can be found and copied in the browser.
    with matplotlib.rc_context({"svg.hashsalt": "servecheck", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg")
    text = _XML_HEAD.sub("", buf.getvalue(), count=1)
    return text.replace("<svg ", '<svg class="plot" role="img" ', 1)


def line_plot(
    title: str,
    xlabel: str,
    ylabel: str,
    series: Sequence[tuple[str, Sequence[float], Sequence[float | None]]],
    *,
    logy: bool = False,
    hline: float | None = None,
    hline_label: str = "",
) -> str:
    """One line chart; ``series`` is (label, xs, ys) with None gaps allowed."""
    fig, (ax,) = new_figure(width=5.6, height=3.2)
    for i, (label, xs, ys) in enumerate(series):
        pts = [(x, y) for x, y in zip(xs, ys, strict=False) if y is not None]
        if not pts:
            continue
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker="o",
            ms=3,
            label=label,
            color=PALETTE[i % len(PALETTE)],
        )
    if hline is not None:
        ax.axhline(hline, color="#444", ls="--", lw=1, label=hline_label or None)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return to_svg(fig)


def histogram(
    title: str,
    xlabel: str,
    values_ms: Sequence[float],
    *,
    bins: int = 40,
    marks: dict[str, float] | None = None,
    ylabel: str = "requests",
) -> str:
    """A histogram of millisecond values with optional vertical marks (p50, p95 ...); ``ylabel``
    says what is counted (requests for TTFT, token gaps for ITL)."""
    fig, (ax,) = new_figure(width=5.6, height=3.0)
    values = sorted(values_ms)
    if values:
        # A few outliers would squash the bulk into one bar: draw up to p99.5 and say what was cut.
        hi = values[min(len(values) - 1, int(0.995 * len(values)))]
        shown = [v for v in values if v <= hi] if values[-1] > 1.5 * hi > 0 else values
        ax.hist(shown, bins=bins, color=PALETTE[0], alpha=0.85)
        if len(shown) < len(values):
            ax.annotate(
                f"{len(values) - len(shown)} above {hi:.1f} not shown (max {values[-1]:.1f})",
                (0.99, 0.8),
                xycoords="axes fraction",
                ha="right",
                fontsize=7,
                color="#555",
            )
    for i, (label, x) in enumerate((marks or {}).items()):
        ax.axvline(
            x, color=PALETTE[(i + 1) % len(PALETTE)], ls="--", lw=1, label=f"{label} {x:.1f}"
        )
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if marks:
        ax.legend(fontsize=8)
    return to_svg(fig)


def bar_chart(title: str, ylabel: str, groups: dict[str, dict[str, float | None]]) -> str:
    """Grouped bars: ``groups`` maps a series (ttft) to {category (p50): value}."""
    fig, (ax,) = new_figure()
    cats: list[str] = []
    for d in groups.values():
        cats += [c for c in d if c not in cats]
    width = 0.8 / max(1, len(groups))
    for i, (name, d) in enumerate(groups.items()):
        xs = [j + i * width for j in range(len(cats))]
        ax.bar(
            xs,
            [d.get(c) or 0.0 for c in cats],
            width=width,
            label=name,
            color=PALETTE[i % len(PALETTE)],
        )
    ax.set_xticks([j + width * (len(groups) - 1) / 2 for j in range(len(cats))], cats)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    return to_svg(fig)


def timeline(
    title: str,
    ylabel: str,
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    spans: Sequence[tuple[float, float, str]] = (),
    events: Sequence[tuple[float, str]] = (),
) -> str:
    """Values over run time (s) with shaded spans (gaps) and labelled vertical events."""
    fig, (ax,) = new_figure(height=3.0)
    for i, (label, xs, ys) in enumerate(series):
        ax.plot(list(xs), list(ys), label=label, color=PALETTE[i % len(PALETTE)], lw=1.2)
    for a, b, label in spans:
        ax.axvspan(a, b, color="#d62728", alpha=0.15, label=label)
    for x, label in events:
        ax.axvline(x, color="#9467bd", ls=":", lw=1.2)
        ax.annotate(
            label,
            (x, 1),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            rotation=90,
            va="top",
            ha="right",
        )
    ax.set_title(title)
    ax.set_xlabel("run time (s)")
    ax.set_ylabel(ylabel)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return to_svg(fig)
