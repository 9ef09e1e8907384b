"""The load page's pictures of client latency beside the engine's own state (issue 26, part 6).

* **Client latency per time slice, engine state on the same time axis** (one figure, two
  panels sharing x): TTFT and ITL p50/p95 per slice (summary.json ``slices``, analysis/steady.py)
  above the engine's ``kv_usage``, ``requests_running``, ``requests_waiting`` and the rise of
  ``preemptions_total`` since the first sample (``telemetry/prometheus.jsonl``, read with
  telemetry/series.py). x is seconds since ``slices.t0``, the first request's send time, on the
  wall clock both files use. Without a series the engine panel is left out and the figure says
  why.
* **TTFT decomposition** (a stacked horizontal bar, mean ms): the client's phases (summary.json
  ``timings.phases_ms``, analysis/timings.py: connect, send, wait for headers, headers to body,
  body to first token) and, where the engine reported its histograms
  (``server.decomposition``), the engine's queue, prefill and rest of its TTFT with the
  network + gateway gap that makes up the client's mean TTFT.

Means, not percentiles, in the bar: means add up, percentiles do not. Figures are inline SVG
(report/svg.py), so the page stays one self-contained file. Renders only what the run holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servecheck.report import svg

TIMELINE_TITLE = "Client latency per time slice"
ENGINE_TITLE = "Engine state (its /metrics) on the same time axis"
DECOMP_TITLE = "TTFT decomposition (mean ms)"
ENGINE_GAUGES = (("requests_running", "running"), ("requests_waiting", "waiting"))
# Nine segments at most (five client phases, four engine-side): a palette of distinct colours.
_SEGMENT_COLOURS = (
    "#1f77b4",
    "#aec7e8",
    "#ff7f0e",
    "#ffbb78",
    "#2ca02c",
    "#9467bd",
    "#c5b0d5",
    "#8c564b",
    "#d62728",
)
CLIENT_PHASES = (
    ("connect", "connect"),
    ("send", "send"),
    ("wait_headers", "wait headers"),
    ("headers_to_body", "headers -> body"),
    ("body_to_token", "body -> first token"),
)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def slice_points(summary: Mapping[str, Any]) -> dict[str, tuple[list[float], list[float | None]]]:
    """``ttft p50`` -> (slice midpoints s, values ms) for TTFT and ITL p50/p95."""
    rows = (summary.get("slices") or {}).get("rows") or []
    out: dict[str, tuple[list[float], list[float | None]]] = {}
    for metric in ("ttft", "itl"):
        for p in ("p50", "p95"):
            xs: list[float] = []
            ys: list[float | None] = []
            for r in rows:
                a, b = _num(r.get("start_s")), _num(r.get("end_s"))
                if a is None or b is None:
                    continue
                xs.append((a + b) / 2)
                ys.append(_num((r.get(f"{metric}_ms") or {}).get(p)))
            if any(y is not None for y in ys):
                out[f"{metric} {p}"] = (xs, ys)
    return out


def engine_points(run_dir: Path, t0: float | None) -> dict[str, tuple[list[float], list[float]]]:
    """The engine series from the run's telemetry (x: s since ``t0``); preemptions as the rise
    since the first sample. Empty without a series or without ``t0``."""
    path = run_dir / "telemetry" / "prometheus.jsonl"
    if t0 is None or not path.exists():
        return {}
    from servecheck.telemetry.series import read_samples

    samples = [r for r in read_samples(path) if r[1] == "prometheus" and math.isfinite(r[3])]
    out: dict[str, tuple[list[float], list[float]]] = {}
    for metric in ("kv_usage", "requests_running", "requests_waiting", "preemptions_total"):
        pts = [(t - t0, v) for t, _, m, v, _ in samples if m == metric]
        if not pts:
            continue
        if metric == "preemptions_total":
            base = pts[0][1]
            pts = [(x, v - base) for x, v in pts]
        out[metric] = ([p[0] for p in pts], [p[1] for p in pts])
    return out


def _draw_client(ax: Any, points: Mapping[str, tuple[list[float], list[float | None]]]) -> None:
    right = ax.twinx()
    for i, (label, (xs, ys)) in enumerate(points.items()):
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        on = right if label.startswith("itl") else ax
        on.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker="o",
            ms=3,
            lw=1.3,
            ls="--" if label.endswith("p95") else "-",
            color=svg.PALETTE[i % len(svg.PALETTE)],
            label=f"{label} (ms)",
        )
    ax.set_title(TIMELINE_TITLE)
    ax.set_ylabel("TTFT ms")
    right.set_ylabel("ITL ms")
    _legend(ax, right)


def _legend(ax: Any, right: Any) -> None:
    """One legend for an axis and its twin (left and right y scales)."""
    handles, labels = ax.get_legend_handles_labels()
    more, more_labels = right.get_legend_handles_labels()
    ax.legend(
        handles + more, labels + more_labels, fontsize=7, loc="upper left", ncol=2, framealpha=0.75
    )


def _draw_engine(ax: Any, series: Mapping[str, tuple[list[float], list[float]]]) -> None:
    right = ax.twinx()
    for i, (metric, label) in enumerate(ENGINE_GAUGES):
        if metric in series:
            xs, ys = series[metric]
            ax.step(xs, ys, where="post", lw=1.3, color=svg.PALETTE[i], label=label)
    if "preemptions_total" in series:
        xs, ys = series["preemptions_total"]
        ax.step(xs, ys, where="post", lw=1.3, color=svg.PALETTE[4], label="preemptions (rise)")
    if "kv_usage" in series:
        xs, ys = series["kv_usage"]
        right.plot(xs, ys, lw=1.3, ls="--", color=svg.PALETTE[2], label="kv_usage")
        right.set_ylim(0, max(1.0, max(ys, default=0.0)))
    ax.set_title(ENGINE_TITLE)
    ax.set_ylabel("requests")
    right.set_ylabel("KV-cache usage (0-1)")
    ax.set_xlabel("run time (s since the first request)")
    _legend(ax, right)


def timeline_svg(summary: Mapping[str, Any], run_dir: Path) -> str | None:
    """Client latency per slice above the engine's state, one time axis; None: no slices."""
    points = slice_points(summary)
    if not points:
        return None
    t0 = _num((summary.get("slices") or {}).get("t0"))
    series = engine_points(run_dir, t0)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.6, 5.6 if series else 3.2), dpi=96)
    fig.subplots_adjust(left=0.1, right=0.88, bottom=0.1 if series else 0.16, top=0.93, hspace=0.35)
    top = fig.add_subplot(2 if series else 1, 1, 1)
    top.grid(True, alpha=0.3)
    _draw_client(top, points)
    if series:
        low = fig.add_subplot(2, 1, 2, sharex=top)
        low.grid(True, alpha=0.3)
        _draw_engine(low, series)
    else:
        top.set_xlabel("run time (s since the first request)")
        why = "no engine series: the target has no /metrics or sampling was off"
        top.annotate(why, (0.99, 0.02), xycoords="axes fraction", ha="right", fontsize=7)
    ends = [_num(r.get("end_s")) for r in (summary.get("slices") or {}).get("rows") or []]
    top.set_xlim(0, max([e for e in ends if e is not None] or [1.0]))
    return svg.to_svg(fig)


def decomposition_bars(summary: Mapping[str, Any]) -> list[tuple[str, list[tuple[str, float]]]]:
    """(bar label, [(segment, mean ms)]): the client's phases, then the engine's side."""
    timings = summary.get("timings") or {}
    phases = timings.get("phases_ms") or {}
    stamped = max((_num((phases.get(k) or {}).get("count")) or 0.0 for k, _ in CLIENT_PHASES))
    client: list[tuple[str, float]] = []
    for key, label in CLIENT_PHASES:
        p = phases.get(key) or {}
        mean, count = _num(p.get("mean")), _num(p.get("count"))
        if mean is None or not count or not stamped:
            continue
        # connect happens on new connections only: its share of the mean request.
        client.append((label, mean * count / stamped))
    bars: list[tuple[str, list[tuple[str, float]]]] = []
    if client:
        bars.append(("client TTFT phases", client))
    # The engine's own numbers, per request, where its answers carried them (server_timings.py).
    per_request = [
        (label, mean)
        for key, label in (("server_queue", "engine queue"), ("server_prefill", "engine prefill"))
        if (mean := _num((phases.get(key) or {}).get("mean"))) is not None
    ]
    if per_request:
        bars.append(("engine, per request", per_request))
    dec = (summary.get("server") or {}).get("decomposition") or {}
    eng = dec.get("engine") or {}
    ttft = _num((eng.get("ttft_seconds") or {}).get("mean_ms"))
    gap = _num(dec.get("network_gateway_ms"))
    if ttft is not None:
        queue = _num((eng.get("queue_seconds") or {}).get("mean_ms")) or 0.0
        prefill = _num((eng.get("prefill_seconds") or {}).get("mean_ms")) or 0.0
        side = [("engine queue", queue), ("engine prefill", prefill)]
        side.append(("engine TTFT rest", max(0.0, ttft - queue - prefill)))
        if gap is not None:
            side.append(("network + gateway", max(0.0, gap)))
        bars.append(("engine + gap", side))
    return bars


def decomposition_svg(summary: Mapping[str, Any]) -> str | None:
    """The stacked bar; None when the run stamped no phases and the engine reported none."""
    bars = decomposition_bars(summary)
    if not bars:
        return None
    fig, (ax,) = svg.new_figure(width=7.6, height=2.4 + 0.5 * len(bars))
    fig.subplots_adjust(left=0.19, right=0.97, bottom=0.42, top=0.88)
    colours: dict[str, str] = {}
    for row, (_, segments) in enumerate(bars):
        left = 0.0
        for name, ms in segments:
            first = name not in colours
            colour = colours.setdefault(
                name, _SEGMENT_COLOURS[len(colours) % len(_SEGMENT_COLOURS)]
            )
            ax.barh(row, ms, left=left, color=colour, height=0.55, label=name if first else None)
            left += ms
    ax.set_yticks(range(len(bars)), [b[0] for b in bars])
    ax.invert_yaxis()
    client_mean = _num(
        ((summary.get("server") or {}).get("decomposition") or {})
        .get("client_ttft_ms", {})
        .get("mean")
    )
    if client_mean is not None:
        ax.axvline(
            client_mean, color="#444", ls=":", lw=1.2, label=f"client TTFT {client_mean:.1f}"
        )
    ax.set_title(DECOMP_TITLE)
    ax.set_xlabel("ms")
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.3))
    if len(bars) == 1:
        ax.annotate(
            "the engine reported no phase histograms",
            (0.99, 0.05),
            xycoords="axes fraction",
            ha="right",
            fontsize=7,
            color="#555",
        )
    return svg.to_svg(fig)


def load_figures_html(summary: Mapping[str, Any], run_dir: Path) -> str:
    """The pictures as one ``<div class='plots'>`` (empty string when there is nothing)."""
    figs: Sequence[str | None] = (timeline_svg(summary, run_dir), decomposition_svg(summary))
    drawn = [f for f in figs if f]
    if not drawn:
        return ""
    return (
        "<h3>Client latency beside the engine</h3><div class='plots'>" + "".join(drawn) + "</div>"
    )
