"""The pictures of issue 30 (part 2) on real run folders, painted by headless Chromium.

Real runs against the in-process reference server (a few seconds each): two load runs (one
clean, one slower whose admission control sheds some requests), their comparison, a cutover
with its load comparison, and a conformance run over two targets (one clean, one with a fault
and a failure its targets entry allows, which is non-strict). Each page's figures are found by their titles (each text is a ``<text>``
element), must hold drawn paths, and the screenshot must show them in
their colours. Screenshots go to ``$SERVECHECK_ARTEFACTS`` (default ``reports/selftest/``).

Skipped when no ``chromium`` is installed (CI installs the Debian package ``chromium``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servecheck.reference.inprocess import RunningServer
from servecheck.reference.server import ServerConfig
from servecheck.report import compare_figures as cf
from servecheck.report import slice_figures as sf
from servecheck.report.conformance_matrix import MATRIX_CLASS, STATE_COLOURS
from tests.report.conftest import write_targets
from tests.report.svgtext import has_text
from tests.report.test_browser import ARTEFACTS, CHROMIUM, ROOT, screenshot

pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"
    ),
    pytest.mark.slow,
]


def _svg_with(html: str, title: str) -> str:
    found = [s for s in re.findall(r"<svg\b.*?</svg>", html, re.S) if has_text(s, title)]
    assert len(found) == 1, f"{title!r}: {len(found)} figures"
    drawn = [d for d in re.findall(r'<path\b[^>]*\bd="([^"]+)"', found[0]) if len(d) > 20]
    assert len(drawn) > 10, f"{title!r}: the figure has no drawn paths"
    return found[0]


def _shot(page: Path, name: str, tmp_path: Path, size: str = "1200,9000") -> np.ndarray:
    """The page's screenshot (kept as an artefact) as RGB floats."""
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    png = ARTEFACTS / name
    png.unlink(missing_ok=True)
    proc = screenshot(page, png, tmp_path / f"profile-{name}", size=size)
    assert png.exists() and png.stat().st_size > 0, f"no screenshot: {proc.stderr[-2000:]}"
    from matplotlib.image import imread

    rgb: np.ndarray = imread(str(png))[..., :3]
    assert float((rgb.min(axis=2) < 0.9).mean()) > 0.02, f"{name}: nearly blank"
    return rgb


def _pixels(rgb: np.ndarray, colour: str, tol: float = 0.06) -> int:
    want = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    hit = np.ones(rgb.shape[:2], dtype=bool)
    for c in range(3):
        hit &= np.abs(rgb[..., c] - want[c]) < tol
    return int(hit.sum())


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, RunningServer]]:
    made = {
        "fast": RunningServer(ServerConfig(ttft_ms=20, itl_ms=2)).start(),
        # two slots for four users: the overflow is shed with 429 (errors over time)
        "slow": RunningServer(ServerConfig(ttft_ms=45, itl_ms=4, max_inflight=2)).start(),
    }
    yield made
    for s in made.values():
        s.stop()


def _load(tmp_path: Path, server: RunningServer, name: str) -> Path:
    from tests.load.test_load_cli import _cmd, _run, _targets

    out = tmp_path / name
    args = ("--users", "4", "--duration", "3s", "--slice-s", "500ms", "--run-id", name)
    proc = _run(_cmd(_targets(tmp_path / f"t-{name}", server), out, *args), timeout=120)
    run = out / name
    assert (run / "summary.json").exists(), proc.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, servers: dict[str, RunningServer]
) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    for name in servers:
        (base / f"t-{name}").mkdir()
    return {name: _load(base, s, name) for name, s in servers.items()}


def test_load_page_draws_every_slice_picture(runs: dict[str, Path], tmp_path: Path) -> None:
    run = runs["slow"]
    summary: dict[str, Any] = json.loads((run / "summary.json").read_text())
    rows = summary["slices"]["rows"]
    assert len(rows) >= 4 and sum(r["errors"] for r in rows) > 0, "the run shed requests"
    html = (run / "report.html").read_text()
    latency = _svg_with(html, sf.LATENCY_TITLE)
    for label in ("ttft p50", "ttft p99", "itl p95", "e2e p50", "e2e p99"):
        assert has_text(latency, label), label
    rates = _svg_with(html, sf.RATES_TITLE)
    for _, label in sf.RATE_PANELS:
        assert has_text(rates, label), label
    rgb = _shot(run / "report.html", "load-slice-figures.png", tmp_path)
    # the error-rate line is drawn in PALETTE[1] red, tokens/s in PALETTE[2] green
    assert _pixels(rgb, "#d62728") > 150 and _pixels(rgb, "#2ca02c") > 150


def test_compare_page_overlays_the_two_runs(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "servecheck",
            "compare",
            str(runs["fast"]),
            str(runs["slow"]),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    html = (out / "report.html").read_text()
    bars = _svg_with(html, cf.METRICS_TITLE.format(a="current", b="baseline"))
    assert has_text(bars, "TTFT ms") and has_text(bars, "rates (%)")
    cdfs = _svg_with(html, cf.CDF_TITLE.format(a="baseline", b="current"))
    for name in ("TTFT", "ITL", "E2E"):
        assert has_text(cdfs, name), name
    series = _svg_with(html, cf.SERIES_TITLE.format(a="baseline", b="current"))
    for _, name in cf.SERIES_PANELS:
        assert has_text(series, name), name
    rgb = _shot(out / "report.html", "compare-figures.png", tmp_path)
    assert _pixels(rgb, cf.COLOURS[0]) > 500 and _pixels(rgb, cf.COLOURS[1]) > 500


def test_cutover_page_sets_old_against_new(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    old = make_reference(models=["old-model"], ttft_ms=20)
    new = make_reference(models=["new-model"], ttft_ms=35)
    targets = write_targets(
        tmp_path / "targets.yaml",
        old=(old.base_url, ["old-model"]),
        new=(new.base_url, ["new-model"]),
    )
    from servecheck.cli import main

    main(
        [
            "cutover",
            "--from",
            "old",
            "--to",
            "new",
            "--skip-conformance",
            "--users",
            "2",
            "--load-duration",
            "3s",
            "--targets-file",
            str(targets),
            "--out",
            str(tmp_path),
            "--run-id",
            "cut",
        ]
    )
    page = tmp_path / "cut" / "report.html"
    html = page.read_text()
    bars = _svg_with(html, cf.METRICS_TITLE.format(a="NEW", b="OLD"))
    assert has_text(bars, "TTFT ms") and has_text(bars, "OLD") and has_text(bars, "NEW")
    _svg_with(html, cf.CDF_TITLE.format(a="OLD", b="NEW"))
    # a 3 s comparison load is cut into 0.5 s slices, so both series have points to overlay
    old_slices = json.loads((tmp_path / "cut" / "load-old" / "summary.json").read_text())["slices"]
    assert old_slices["slice_s"] == 0.5 and len(old_slices["rows"]) >= 4, old_slices["slice_s"]
    _svg_with(html, cf.SERIES_TITLE.format(a="OLD", b="NEW"))
    rgb = _shot(page, "cutover-figures.png", tmp_path)
    assert _pixels(rgb, cf.COLOURS[0]) > 500 and _pixels(rgb, cf.COLOURS[1]) > 500


def test_conformance_page_shows_the_surface_target_matrix(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    clean = make_reference()
    # MODELS-CONTEXT fails; STREAM-ROLE and STREAM-N fail too, but the target allows STREAM-*: non-strict
    faulty = make_reference("models-no-context", "stream-no-role")
    targets = write_targets(
        tmp_path / "targets.yaml",
        clean=(clean.base_url, clean.config.models),
        faulty=(faulty.base_url, faulty.config.models),
    )
    targets.write_text(targets.read_text() + "    allow: {STREAM-*: 'a gateway adds the role'}\n")
    from servecheck.cli import main

    main(
        [
            "check",
            "--target",
            "clean",
            "--target",
            "faulty",
            "--surface",
            "models",
            "--surface",
            "stream",
            "--targets-file",
            str(targets),
            "--out",
            str(tmp_path),
            "--run-id",
            "conf",
            "--no-embedded",
        ]
    )
    page = tmp_path / "conf" / "report.html"
    html = page.read_text()
    table = re.search(rf"<table class='{MATRIX_CLASS}'>.*?</table>", html, re.S)
    assert table, "the matrix is on the page"
    row = {
        m.group(1): m.group(2)
        for m in re.finditer(r"<tr><th>(\w+)</th>(.*?)</tr>", table.group(0), re.S)
        if m.group(1) != "surface"  # the header row
    }
    assert set(row) == {"MODELS", "STREAM"}
    # columns sort by target: clean first, faulty second
    cells = {s: re.findall(r"class='cell (\w+)'", r) for s, r in row.items()}
    assert cells["MODELS"] == ["pass", "fail"], cells
    assert cells["STREAM"] == ["pass", "nonstrict"], cells
    rgb = _shot(page, "conformance-matrix.png", tmp_path, size="1200,1400")
    for state in ("pass", "fail", "nonstrict"):
        assert _pixels(rgb, STATE_COLOURS[state], tol=0.04) > 300, state
