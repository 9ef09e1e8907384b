"""The report renders in a real browser: headless Chromium screenshots of a load page.

Skipped when no ``chromium`` is installed (CI installs the Debian package ``chromium``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from servecheck.report.html import write_load_html
from tests.report.synth import synth_records, write_load_run

CHROMIUM = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"
)


def screenshot(page: Path, png: Path, profile: Path) -> subprocess.CompletedProcess[str]:
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
        "--window-size=1200,2000",
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
