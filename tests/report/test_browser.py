"""The report renders in a real browser: headless Chromium screenshots of a load page.

Skipped when no ``chromium`` is installed (CI installs the Debian package ``chromium``). The
screenshot of the load page with engine metrics is kept under ``$SERVECHECK_ARTEFACTS``
(default ``reports/selftest/``) for a person to look at.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.reference.inprocess import RunningServer
from servecheck.report.html import write_load_html
from servecheck.report.load_figures import DECOMP_TITLE, ENGINE_TITLE, TIMELINE_TITLE
from tests.report.svgtext import has_text
from tests.report.synth import synth_records, write_load_run

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"
)


def screenshot(
    page: Path, png: Path, profile: Path, size: str = "1200,2000"
) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        f"--screenshot={png}",
        f"--window-size={size}",
        page.resolve().as_uri(),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_load_report_plots_render_in_chromium(tmp_path: Path) -> None:
    run = write_load_run(tmp_path / "run", synth_records(200, seed=4))
    page = write_load_html(run)
    html = page.read_text()
    svgs = re.findall(r"<svg\b.*?</svg>", html, re.S)
    assert len(svgs) == 4 and all(len(re.findall(r"<path\b", s)) > 10 for s in svgs), (
        "every plot has drawn paths"
    )
    png = tmp_path / "shot.png"
    proc = screenshot(page, png, tmp_path / "profile")
    assert png.exists() and png.stat().st_size > 0, (
        f"no screenshot; chromium said: {proc.stderr[-2000:]}"
    )

    from matplotlib.image import imread

    img = imread(str(png))  # float RGB(A) in 0..1
    rgb = img[..., :3]
    non_white = float((rgb.min(axis=2) < 0.9).mean())
    assert non_white > 0.03, f"the screenshot is nearly blank ({non_white:.2%} non-white pixels)"
    # The plots' default blue (#1f77b4) must appear in quantity: the SVG bars and histograms were painted.
    blue = (
        (abs(rgb[..., 0] - 0x1F / 255) < 0.08)
        & (abs(rgb[..., 1] - 0x77 / 255) < 0.08)
        & (abs(rgb[..., 2] - 0xB4 / 255) < 0.08)
    )
    assert int(blue.sum()) > 2000, (
        f"only {int(blue.sum())} plot-blue pixels: the SVG plots did not render"
    )


ARTEFACTS = Path(os.environ.get("SERVECHECK_ARTEFACTS") or ROOT / "reports" / "selftest")
FIGURE_TITLES = (TIMELINE_TITLE, ENGINE_TITLE, DECOMP_TITLE)


def _svg_with(html: str, title: str) -> str:
    """The inline ``<svg>`` one of whose ``<text>`` elements is ``title``."""
    found = [s for s in re.findall(r"<svg\b.*?</svg>", html, re.S) if has_text(s, title)]
    assert len(found) == 1, f"{title!r}: {len(found)} figures"
    return found[0]


@pytest.mark.slow
def test_load_page_with_engine_metrics_renders_its_figures(
    tmp_path: Path, make_reference: Callable[..., RunningServer]
) -> None:
    """A short load against the embedded reference (its /metrics sampled every 0.25 s): the page
    draws client latency per slice above the engine's gauges on one time axis, and the TTFT
    decomposition with the engine's side; Chromium paints them (a screenshot is kept)."""
    from tests.load.test_load_cli import _cmd, _run, _targets

    server = make_reference(ttft_ms=30, itl_ms=3)
    out = tmp_path / "reports"
    args = ("--users", "3", "--duration", "4s", "--slice-s", "1s", "--server-metrics", "250ms")
    proc = _run(_cmd(_targets(tmp_path, server), out, *args), timeout=120)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["server"]["available"], proc.stderr[-2000:]
    assert summary["server"]["gauges"]["requests_running"]["max"] >= 1, summary["server"]
    html = (run_dir / "report.html").read_text()
    timeline = _svg_with(html, TIMELINE_TITLE)
    assert has_text(timeline, ENGINE_TITLE), "the engine panel shares the figure"
    for label in ("ttft p50 (ms)", "itl p95 (ms)", "running", "waiting", "kv_usage"):
        assert has_text(timeline, label), label
    decomposition = _svg_with(html, DECOMP_TITLE)
    for label in ("wait headers", "engine queue", "engine prefill", "network + gateway"):
        assert has_text(decomposition, label), label
    for fig in (timeline, decomposition):
        drawn = [d for d in re.findall(r'<path\b[^>]*\bd="([^"]+)"', fig) if len(d) > 20]
        assert len(drawn) > 10, "the figure has drawn paths"
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    png = ARTEFACTS / "load-engine-figures.png"
    png.unlink(missing_ok=True)
    proc = screenshot(run_dir / "report.html", png, tmp_path / "profile", size="1200,6000")
    assert png.exists() and png.stat().st_size > 0, f"no screenshot: {proc.stderr[-2000:]}"
    from matplotlib.image import imread

    rgb = imread(str(png))[..., :3]
    assert float((rgb.min(axis=2) < 0.9).mean()) > 0.03, "the screenshot is nearly blank"
