"""plot_timeseries renders files (content is for people; here: it renders, and handles edges)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from servecheck.telemetry import load_series, plot_timeseries, timeseries_figure


def test_plot_with_phases_gaps_and_latency(tmp_path, make_soak):
    frame, phases = make_soak(lambda i: 0.05 * i, noise=0.01, cycles=5)
    running, _ = make_soak(lambda i: 0.0, metric="requests_running", peak=12, cycles=5)
    rss, _ = make_soak(
        lambda i: 2**28 * i, metric="rss_tree_bytes", baseline=2**31, peak=2**29, cycles=5
    )
    gaps = frame.iloc[40:44].copy()
    gaps[["kind", "metric", "value", "error_class"]] = ["gap", "gap", np.nan, "ConnectError"]
    all_rows = pd.concat([frame, running, rss, gaps], ignore_index=True)
    t = frame["t"].to_numpy()
    records = pd.DataFrame({"t_sent": t[::3], "e2e": np.linspace(0.2, 0.9, len(t[::3]))})
    records.loc[0, "e2e"] = np.nan  # a failed request has no latency
    out = plot_timeseries(
        all_rows, tmp_path / "soak.png", phases=phases, records=records, title="soak"
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 20_000


def test_plot_empty_frame_still_writes_a_figure_as_svg(tmp_path):
    out = plot_timeseries(load_series(tmp_path / "missing"), tmp_path / "sub" / "empty.svg")
    text = out.read_text()
    assert text.lstrip().startswith("<?xml") and "no telemetry samples" in text


def test_figure_for_the_report_layer_has_one_axis_per_panel(make_soak):
    frame, phases = make_soak(lambda i: 0.0, cycles=2)
    fig = timeseries_figure(frame, phases=phases)
    assert [ax.get_title(loc="left") for ax in fig.axes] == ["KV-cache usage"]


def test_a_small_byte_panel_is_drawn_in_mib_not_as_a_fraction_of_a_gib():
    """Issue 14: a soak RSS of ~40 MB was drawn as 0.04 GiB; under 1 GiB the panel says MiB."""
    from servecheck.telemetry.plot import _byte_unit

    small = pd.Series([40 * 2**20, 45 * 2**20])
    assert _byte_unit(small, 2**30, "GiB") == (2**20, "MiB")
    big = pd.Series([3 * 2**30])
    assert _byte_unit(big, 2**30, "GiB") == (2**30, "GiB")
    assert _byte_unit(pd.Series([0.5]), 1.0, "fraction") == (1.0, "fraction")
