"""The load page's pictures over the run's time slices (issue 30, part 2).

Drawn from summary.json's ``slices`` (analysis/steady.py: per-slice counts, errors, output tokens/s,
mean in flight and p50/p95/p99 read off each slice's mergeable HDR histograms), never from the
records, so a run of ten million requests costs the same as one of ten:

* **Latency percentiles per time slice**: TTFT, ITL and E2E, each p50 / p95 / p99, three panels
  on one time axis.
* **Errors, throughput and in-flight per time slice**: the error rate (failed / finished in the
  slice), output tokens/s and the mean number of requests in flight, three panels on the same
  axis.

x is each slice's midpoint in seconds since ``slices.t0`` (the first send). A slice in which
nothing finished has no percentile and no error rate: the line has a gap there, not a zero.
With no slices there is no picture and the page says why (:func:`slice_figures_html`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from servecheck.report import svg

LATENCY_TITLE = "Latency percentiles per time slice"
RATES_TITLE = "Errors, throughput and in-flight per time slice"
LATENCY_PANELS = (("ttft", "TTFT ms"), ("itl", "ITL ms"), ("e2e", "E2E ms"))
PERCENTILES = ("p50", "p95", "p99")
RATE_PANELS = (
    ("error_rate", "failed"),
    ("output_tokens_per_s", "output tokens/s"),
    ("in_flight", "in flight (mean)"),
)
SHED_LABEL = "rate-limited (shed)"
NO_SLICES = (
    "No per-slice pictures: summary.json has no time slices (no request was measured, or the "
    "run folder predates slices)."
)
NO_LATENCY = "No latency per slice: no request in any slice succeeded."

Series = tuple[list[float], list[float | None]]


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def slice_rows(summary: Mapping[str, Any]) -> list[tuple[float, Mapping[str, Any]]]:
    """(midpoint s, row) of each slice whose bounds are numbers."""
    slices = summary.get("slices")
    rows = (slices.get("rows") if isinstance(slices, Mapping) else None) or []
    out: list[tuple[float, Mapping[str, Any]]] = []
    for r in rows:
        if not isinstance(r, Mapping):
            continue
        a, b = _num(r.get("start_s")), _num(r.get("end_s"))
        if a is not None and b is not None:
            out.append(((a + b) / 2, r))
    return out


def latency_series(summary: Mapping[str, Any]) -> dict[str, Series]:
    """``ttft p95`` -> (midpoints s, ms or None) for TTFT, ITL and E2E p50/p95/p99; a metric no
    slice measured is left out."""
    rows = slice_rows(summary)
    out: dict[str, Series] = {}
    for metric, _ in LATENCY_PANELS:
        for p in PERCENTILES:
            ys = [_num((r.get(f"{metric}_ms") or {}).get(p)) for _, r in rows]
            if any(y is not None for y in ys):
                out[f"{metric} {p}"] = ([x for x, _ in rows], ys)
    return out


def rate_series(summary: Mapping[str, Any]) -> dict[str, Series]:
    """``error_rate``: percent of the slice's finished requests that failed, the ones the server
    shed left out as in the run's error rate; ``rate_limited``: percent shed (429, 503 +
    Retry-After; only where a slice says, summary.json from before it has errors alone); None
    where nothing finished. ``output_tokens_per_s`` and ``in_flight`` per slice."""
    rows = slice_rows(summary)
    if not rows:
        return {}
    xs = [x for x, _ in rows]
    errors: list[float | None] = []
    shed: list[float | None] = []
    for _, r in rows:
        count, bad = _num(r.get("count")), _num(r.get("errors"))
        limited = _num(r.get("rate_limited"))
        if not count or bad is None:
            errors.append(None)
            shed.append(None)
            continue
        errors.append(100.0 * (bad - (limited or 0.0)) / count)
        shed.append(None if limited is None else 100.0 * limited / count)
    out: dict[str, Series] = {}
    if any(e is not None for e in errors):
        out["error_rate"] = (xs, errors)
    if any(e is not None for e in shed):
        out["rate_limited"] = (xs, shed)
    for key in ("output_tokens_per_s", "in_flight"):
        ys = [_num(r.get(key)) for _, r in rows]
        if any(y is not None for y in ys):
            out[key] = (xs, ys)
    return out


def _panels(title: str, n: int) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    height = 1.9 * n + 0.8
    fig = Figure(figsize=(7.6, height), dpi=96)
    fig.subplots_adjust(
        left=0.11, right=0.97, bottom=0.45 / height, top=1 - 0.4 / height, hspace=0.45
    )
    axes: list[Any] = []
    for i in range(n):
        ax = fig.add_subplot(n, 1, i + 1, sharex=axes[0] if axes else None)
        ax.grid(True, alpha=0.3)
        axes.append(ax)
    fig.suptitle(title, fontsize=11)
    axes[-1].set_xlabel("run time (s since the first request)")
    return fig, axes


def _line(ax: Any, series: Series, label: str, colour: str, style: str = "-") -> None:
    xs, ys = series
    # A None stays a gap: matplotlib breaks a line at NaN.
    ax.plot(
        xs,
        [math.nan if y is None else y for y in ys],
        marker="o",
        ms=3,
        lw=1.3,
        ls=style,
        color=colour,
        label=label,
    )


def _xlim(ax: Any, summary: Mapping[str, Any]) -> None:
    ends = [_num(r.get("end_s")) for _, r in slice_rows(summary)]
    ax.set_xlim(0, max([e for e in ends if e is not None] or [1.0]))


def latency_svg(summary: Mapping[str, Any]) -> str | None:
    """TTFT, ITL and E2E p50/p95/p99 per slice, one panel a metric; None: nothing measured."""
    series = latency_series(summary)
    metrics = [
        (m, label) for m, label in LATENCY_PANELS if any(k.startswith(m + " ") for k in series)
    ]
    if not metrics:
        return None
    fig, axes = _panels(LATENCY_TITLE, len(metrics))
    styles = {"p50": "-", "p95": "--", "p99": ":"}
    for ax, (metric, label) in zip(axes, metrics, strict=True):
        for i, p in enumerate(PERCENTILES):
            if f"{metric} {p}" in series:
                _line(ax, series[f"{metric} {p}"], f"{metric} {p}", svg.PALETTE[i], styles[p])
        ax.set_ylabel(label)
        ax.legend(fontsize=7, loc="upper left", ncol=3, framealpha=0.75)
    _xlim(axes[0], summary)
    return svg.to_svg(fig)


def rates_svg(summary: Mapping[str, Any]) -> str | None:
    """Error rate, output tokens/s and in-flight per slice; None: no slices."""
    series = rate_series(summary)
    panels = [(k, label) for k, label in RATE_PANELS if k in series]
    if not panels:
        return None
    fig, axes = _panels(RATES_TITLE, len(panels))
    colours = {"error_rate": svg.PALETTE[1], "output_tokens_per_s": svg.PALETTE[2]}
    for ax, (key, label) in zip(axes, panels, strict=True):
        _line(ax, series[key], label, colours.get(key, svg.PALETTE[4]))
        ax.set_ylabel(label, fontsize=8)
        if key == "error_rate":
            ys = [y for y in series[key][1] if y is not None]
            if "rate_limited" in series:
                _line(ax, series["rate_limited"], SHED_LABEL, svg.PALETTE[3], "--")
                ys += [y for y in series["rate_limited"][1] if y is not None]
            ax.legend(fontsize=7, loc="upper left", framealpha=0.75)
            ax.set_ylabel("% of finished", fontsize=8)
            ax.set_ylim(0, max(1.0, max(ys, default=0.0) * 1.15))  # clean: a flat 0, not noise
        else:
            ax.set_ylim(bottom=0)
    _xlim(axes[0], summary)
    return svg.to_svg(fig)


def slice_figures_html(summary: Mapping[str, Any]) -> str:
    """The two pictures under one heading, or the line that says why there are none."""
    latency, rates = latency_svg(summary), rates_svg(summary)
    head = "<h3>Over the run, per time slice</h3>"
    if rates is None:
        return head + f"<p class='muted'>{NO_SLICES}</p>"
    slices = summary.get("slices")
    width = _num(slices.get("slice_s")) if isinstance(slices, Mapping) else None
    note = (
        f"{width:g} s slices by completion time (summary.json <code>slices</code>); "
        if width
        else ""
    ) + "a slice where nothing finished is a gap."
    if latency is None:
        note += f" {NO_LATENCY}"
    figs = "".join(f for f in (latency, rates) if f)
    return head + f"<p class='muted'>{note}</p><div class='plots'>{figs}</div>"


__all__ = [
    "LATENCY_TITLE",
    "NO_LATENCY",
    "NO_SLICES",
    "SHED_LABEL",
    "RATES_TITLE",
    "latency_series",
    "latency_svg",
    "rate_series",
    "rates_svg",
    "slice_figures_html",
]
