"""``servecheck load --web`` in a real browser: headless Chromium reads the live charts page
(``/llm``) twice while a run goes and sees different values, and paints Locust's UI with its LLM
tab. Screenshots are kept under ``$SERVECHECK_ARTEFACTS`` (default ``reports/selftest/``).

Skipped when no ``chromium`` is installed (CI installs the Debian package ``chromium``).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.reference.inprocess import RunningServer
from tests.load.test_live_run import free_port
from tests.load.test_load_cli import ROOT, _cmd, _targets
from tests.report.test_browser import ARTEFACTS, CHROMIUM

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"
    ),
]

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def chromium(url: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One headless Chromium call; the page's script runs for a few seconds of virtual time
    (its first poll of /llm/live.json included) before the DOM or the picture is taken."""
    cmd = [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=4000"]
    return subprocess.run(
        [*cmd, *args, url], capture_output=True, text=True, timeout=120, check=False
    )


def read_totals(url: str, profile: Path) -> dict[str, str]:
    """The values the page wrote into its ``#totals`` element (data attributes and text)."""
    dom = chromium(url, profile, "--dump-dom").stdout
    m = re.search(r'<div class="sub" id="totals"([^>]*)>([^<]*)<', dom)
    assert m, f"no #totals in the page's DOM: {dom[:1500]}"
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', m.group(1)))
    return {**attrs, "text": m.group(2)}


def blue_pixels(png: Path) -> int:
    from matplotlib.image import imread

    rgb = imread(str(png))[..., :3]
    return int(
        (
            (abs(rgb[..., 0] - 0x1F / 255) < 0.08)
            & (abs(rgb[..., 1] - 0x77 / 255) < 0.08)
            & (abs(rgb[..., 2] - 0xB4 / 255) < 0.08)
        ).sum()
    )


def test_live_charts_move_in_chromium(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference(ttft_ms=20, itl_ms=2, api_key="sk-live-browser-1234")
    port = free_port()
    cmd = _cmd(
        _targets(tmp_path, server),
        tmp_path / "out",
        *("--users", "2", "--duration", "60s", "--slice-s", "1s", "--records", "none"),
        *("--web", f"127.0.0.1:{port}"),
    )
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    try:
        end = time.monotonic() + 90
        while time.monotonic() < end:  # until the view has a complete window
            assert proc.poll() is None, proc.communicate()[0][-2000:]
            try:
                with urllib.request.urlopen(base + "/llm/live.json", timeout=5) as r:  # noqa: S310
                    if json.load(r)["window"] is not None:
                        break
            except OSError:
                pass
            time.sleep(0.5)
        first = read_totals(base + "/llm", tmp_path / "p1")
        charts_dom = chromium(base + "/llm", tmp_path / "p0", "--dump-dom").stdout
        shot1 = ARTEFACTS / "live-web-charts-1.png"
        chromium(base + "/llm", tmp_path / "p2", f"--screenshot={shot1}", "--window-size=1200,1000")
        time.sleep(3)
        second = read_totals(base + "/llm", tmp_path / "p3")
        shot2 = ARTEFACTS / "live-web-charts-2.png"
        chromium(base + "/llm", tmp_path / "p4", f"--screenshot={shot2}", "--window-size=1200,1000")
        tab = ARTEFACTS / "live-web-locust-llm-tab.png"
        chromium(
            base + "/?tab=llm", tmp_path / "p5", f"--screenshot={tab}", "--window-size=1400,900"
        )
        tab_dom = chromium(base + "/?tab=llm", tmp_path / "p6", "--dump-dom").stdout
    finally:
        out, _ = proc.communicate(timeout=180)
    assert proc.returncode in (0, 1), out[-3000:]
    # Two reads at different times, different values: the requests counted and the last
    # complete window both moved on.
    assert int(second["requests"]) > int(first["requests"]) > 0, (first, second)
    assert float(second["window-end"]) > float(first["window-end"]), (first, second)
    assert first["text"] != second["text"]
    for png in (shot1, shot2):
        assert png.exists() and blue_pixels(png) > 500, f"{png.name}: no chart lines were painted"
    assert tab.exists() and tab.stat().st_size > 0
    for name in ("TTFT", "TTFA", "ITL", "E2E", "output tokens/s"):
        assert f">{name}<" in tab_dom, f"Locust's LLM tab has no {name} row"
    # requests/s and output tokens/s each on their own chart and axis (issue 41: on one axis
    # requests/s was a flat line under tokens/s), each with one painted line
    for chart in ("c-rps", "c-tps"):
        svg = re.search(rf'<svg id="{chart}"[^>]*>(.*?)</svg>', charts_dom, re.S)
        assert svg, f"no {chart} chart on /llm"
        lines = re.findall(r'class="line" data-n="(\d+)"', svg.group(1))
        assert len(lines) == 1 and int(lines[0]) > 0, (chart, lines)
