"""The live view against a real engine (issue 30): ``servecheck load --metrics-port --web`` on
llama.cpp server. A scrape of the OpenMetrics endpoint mid-run and the web UI's ``/llm/live.json``
both see the run move: more requests done on the second read than on the first, with the
window's TTFT quantiles measured from the engine's streams. The engine must be up
(``servecheck engine up llamacpp``); CI lists it in SERVECHECK_REQUIRE_ENGINES, so a dead one
fails here instead of skipping."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.engines.test_catalogue import ROOT, _reachable
from tests.load.test_live_run import free_port, wait_for

pytestmark = pytest.mark.slow

OK = ("servecheck_load_requests_total", (("outcome", "ok"),))


def _live_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback
        return dict(json.load(resp))


@pytest.mark.engine("llamacpp")
def test_metrics_port_and_web_follow_a_run_on_llamacpp(tmp_path: Path) -> None:
    _reachable("local-llamacpp", "llamacpp")
    mport, wport = free_port(), free_port()
    cmd = [sys.executable, "-m", "servecheck", "load", "--target", "local-llamacpp"]
    cmd += ["--targets-file", str(ROOT / "targets.yaml"), "--out", str(tmp_path / "out")]
    cmd += ["--users", "2", "--duration", "40s", "--slice-s", "1s", "--output-tokens", "16"]
    cmd += ["--records", "none", "--allow-lag", "--quiet"]
    cmd += ["--metrics-port", str(mport), "--web", str(wport)]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    metrics = f"http://127.0.0.1:{mport}/metrics"
    web = f"http://127.0.0.1:{wport}/llm/live.json"
    try:
        first = wait_for(metrics, lambda m: m.get(OK, 0) > 0, proc, limit_s=120)
        first_web = _live_json(web)
        later = wait_for(metrics, lambda m: m.get(OK, 0) >= first[OK] + 10, proc, limit_s=120)
        p95 = later.get(("servecheck_load_window_ttft_seconds", (("quantile", "0.95"),)))
        assert p95 is not None and p95 > 0, "the last complete window has the engine's TTFT"
        info = [dict(k[1]) for k in later if k[0] == "servecheck_load_info"]
        assert info and info[0]["target"] == "local-llamacpp", info
        time.sleep(2)
        later_web = _live_json(web)
        assert later_web["totals"]["ok"] > first_web["totals"]["ok"], (first_web, later_web)
        assert later_web["window"] is not None, later_web
    finally:
        proc.terminate()  # SIGTERM: the run stops as partial; its summary is still written
        out, _ = proc.communicate(timeout=180)
    assert proc.returncode in (0, 1, 130, 143) and "Traceback" not in out, out[-3000:]
