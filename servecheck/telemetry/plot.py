"""Time-series plots with load phases shaded (for the soak report).

Uses matplotlib's object API with the Agg canvas directly, never ``pyplot``: no global
backend switch, no GUI, safe from worker threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from servecheck.telemetry.leak import Phases

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# (panel title, metrics drawn in it, unit scale, unit label)
PANELS: list[tuple[str, tuple[str, ...], float, str]] = [
    ("KV-cache usage", ("kv_usage",), 1.0, "fraction"),
    ("Requests", ("requests_running", "requests_waiting"), 1.0, "count"),
    ("GPU memory used", ("gpu_mem_used_bytes",), 2**30, "GiB"),
    ("Engine RSS (process tree)", ("rss_tree_bytes",), 2**30, "GiB"),
]
_SERIES_LABELS = ("gpu", "pid")


def _label(metric: str, labels: object) -> str:
    if isinstance(labels, dict):
        extra = [f"{k}={labels[k]}" for k in _SERIES_LABELS if k in labels]
        if extra:
            return f"{metric} ({', '.join(extra)})"
    return metric


def _byte_unit(values: pd.Series, scale: float, unit: str) -> tuple[float, str]:
    """A byte panel in GiB whose values stay under 1 GiB (an engine RSS of 40 MB reads as
    0.04) is drawn in MiB instead; other panels keep their unit."""
    if unit == "GiB" and not values.empty and float(values.max()) < 2**30:
        return 2**20, "MiB"
    return scale, unit


def _shade(ax: Axes, phases: Phases | None, t0: float) -> None:
    if phases is None:
        return
    b0, b1 = phases.baseline
    ax.axvspan(b0 - t0, b1 - t0, color="0.85", alpha=0.5, lw=0)
    for cycle in phases.cycles:
        ax.axvspan(cycle.start - t0, cycle.end - t0, color="tab:orange", alpha=0.15, lw=0)
        ax.axvspan(
            cycle.measure_start - t0, cycle.drain_end - t0, color="tab:blue", alpha=0.08, lw=0
        )


def plot_timeseries(
    frame: pd.DataFrame,
    path: Path | str,
    *,
    phases: Phases | None = None,
    panels: Sequence[tuple[str, tuple[str, ...], float, str]] | None = None,
    records: pd.DataFrame | None = None,
    latency_col: str = "e2e",
    records_time_col: str = "t_sent",
    title: str | None = None,
    time_col: str = "t",
) -> Path:
    """Render :func:`timeseries_figure` to ``path`` (format from its suffix: .png, .svg, .pdf).

    Returns the path written; parent folders are created.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig = timeseries_figure(
        frame,
        phases=phases,
        panels=panels,
        records=records,
        latency_col=latency_col,
        records_time_col=records_time_col,
        title=title,
        time_col=time_col,
    )
    FigureCanvasAgg(fig)
    fig.savefig(out)
    return out


def timeseries_figure(
    frame: pd.DataFrame,
    *,
    phases: Phases | None = None,
    panels: Sequence[tuple[str, tuple[str, ...], float, str]] | None = None,
    records: pd.DataFrame | None = None,
    latency_col: str = "e2e",
    records_time_col: str = "t_sent",
    title: str | None = None,
    time_col: str = "t",
) -> Figure:
    """Telemetry against time as a matplotlib ``Figure`` with no canvas attached (the report
    layer turns it into inline SVG; :func:`plot_timeseries` writes it to a file).

    One panel per entry of ``panels`` (default :data:`PANELS`: KV usage, running/waiting
    requests, GPU memory, engine RSS) that has data, plus a latency panel when ``records``
    (one row per request, with ``records_time_col`` and ``latency_col``; the defaults fit
    ``servecheck.records.record``: ``t_sent`` and ``e2e``) is given; rows without a latency
    (failed requests) are left out. Series with a ``gpu`` or ``pid`` label are drawn one line
    per label. Gap records are red ticks on the x axis. ``phases`` shades the baseline (grey),
    each load (orange) and each measured drain window (blue). The x axis is seconds since the
    first sample or the baseline start. A frame with no data gives a figure saying so.
    """
    # matplotlib is imported here, not at module import: samplers should start fast.
    from matplotlib.figure import Figure

    chosen = list(panels) if panels is not None else PANELS
    samples = (
        frame[frame["kind"].fillna("sample") == "sample"] if "kind" in frame.columns else frame
    )
    gaps = frame[frame["kind"] == "gap"] if "kind" in frame.columns else frame.iloc[0:0]
    present = [p for p in chosen if samples["metric"].isin(p[1]).any()] if len(samples) else []
    has_latency = (
        records is not None
        and len(records) > 0
        and latency_col in records.columns
        and records_time_col in records.columns
    )
    starts = [float(frame[time_col].min())] if len(frame) else []
    if phases is not None:
        starts.append(phases.baseline[0])
    if has_latency:
        assert records is not None
        starts.append(float(records[records_time_col].min()))
    t0 = min(starts) if starts else 0.0

    n = max(1, len(present) + (1 if has_latency else 0))
    fig = Figure(figsize=(10, 2.2 * n + 0.6), layout="constrained")
    axes = fig.subplots(n, 1, sharex=True, squeeze=False)[:, 0]
    if title:
        fig.suptitle(title)
    if not present and not has_latency:
        axes[0].text(
            0.5, 0.5, "no telemetry samples", ha="center", va="center", transform=axes[0].transAxes
        )
    for ax, (panel_title, metrics, scale, unit) in zip(axes, present, strict=False):
        scale, unit = _byte_unit(samples[samples["metric"].isin(metrics)]["value"], scale, unit)
        for metric in metrics:
            rows = samples[samples["metric"] == metric]
            if rows.empty:
                continue
            keys = (
                [_label(metric, lab) for lab in rows["labels"]]
                if "labels" in rows
                else [metric] * len(rows)
            )
            for key, group in rows.groupby(pd.Series(keys, index=rows.index), sort=True):
                group = group.groupby(time_col)["value"].sum()
                ax.plot(
                    group.index.to_numpy() - t0, group.to_numpy() / scale, lw=1.2, label=str(key)
                )
        ax.set_title(panel_title, fontsize=9, loc="left")
        ax.set_ylabel(unit)
        ax.legend(fontsize=7, loc="upper right")
    if has_latency:
        assert records is not None
        ax = axes[len(present)]
        done = records[[records_time_col, latency_col]].dropna()
        ax.scatter(
            done[records_time_col].to_numpy(dtype=float) - t0,
            done[latency_col].to_numpy(dtype=float),
            s=4,
            alpha=0.6,
        )
        ax.set_title(f"Request {latency_col}", fontsize=9, loc="left")
        ax.set_ylabel("s")
    for ax in axes:
        _shade(ax, phases, t0)
        if len(gaps):
            ax.plot(
                gaps[time_col].to_numpy(dtype=float) - t0,
                [0.0] * len(gaps),
                "|",
                color="tab:red",
                ms=8,
                transform=ax.get_xaxis_transform(),
                label="_gap",
            )
        ax.grid(alpha=0.3)
    if phases is not None:
        from matplotlib.patches import Patch

        fig.legend(
            handles=[
                Patch(color="0.85", label="idle baseline"),
                Patch(color="tab:orange", alpha=0.3, label="load"),
                Patch(color="tab:blue", alpha=0.2, label="drain (measured)"),
            ],
            loc="outside lower center",
            ncols=3,
            fontsize=8,
            frameon=False,
        )
    axes[-1].set_xlabel("seconds")
    return fig
