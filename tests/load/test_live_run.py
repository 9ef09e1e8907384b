"""``servecheck load --metrics-port`` end to end: Locust's processes feed the live view, the
master merges its workers' pieces, and a scrape mid-run sees the run move (reference server)."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from servecheck.reference.inprocess import RunningServer
from tests.load.test_load_cli import ROOT, _cmd, _run, _targets

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def wait_for(
    url: str, ready: Callable[[dict], bool], proc: subprocess.Popen[str], limit_s: float = 90
) -> dict:
    """Scrape until ``ready`` holds (bounded; the run's process must still be alive)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        assert proc.poll() is None, f"the run ended first: {proc.communicate()[0][-2000:]}"
        try:
            got = scrape(url)
            if ready(got):
                return got
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} never showed what was waited for")


@pytest.fixture(scope="module")
def live_server(make_reference: Callable[..., RunningServer]) -> RunningServer:
    return make_reference(ttft_ms=20, itl_ms=2, api_key="sk-live-selftest-1234")


def test_metrics_port_serves_the_merged_view_of_two_processes(
    live_server: RunningServer, tmp_path: Path
) -> None:
    port = free_port()
    cmd = _cmd(
        _targets(tmp_path, live_server),
        tmp_path / "out",
        *("--users", "4", "--duration", "40s", "--slice-s", "1s", "--processes", "2"),
        *("--metrics-port", str(port), "--records", "none"),
    )
    url = f"http://127.0.0.1:{port}/metrics"
    ok = ("servecheck_load_requests_total", (("outcome", "ok"),))
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        first = wait_for(
            url, lambda m: m.get(ok, 0) > 0 and m.get(("servecheck_load_workers", ())) == 2, proc
        )
        later = wait_for(url, lambda m: m.get(ok, 0) > first[ok] + 20, proc)
        assert later[("servecheck_load_window_seconds", ())] == 1.0
        p50 = later.get(("servecheck_load_window_ttft_seconds", (("quantile", "0.5"),)))
        assert p50 is not None and p50 > 0, "the last complete window has its TTFT quantiles"
        assert ("servecheck_load_info", ()) not in later  # labelled: run, target, model
        info = [k for k in later if k[0] == "servecheck_load_info"]
        assert info and dict(info[0][1])["target"] == "ref"
    finally:
        out, _ = proc.communicate(timeout=180)
    assert proc.returncode in (0, 1), out[-3000:]
    assert "live OpenMetrics: http://127.0.0.1:" in out


def test_web_beyond_loopback_without_auth_is_a_usage_error(
    live_server: RunningServer, tmp_path: Path
) -> None:
    cmd = _cmd(
        _targets(tmp_path, live_server),
        tmp_path / "out",
        *("--users", "1", "--duration", "2s", "--web", f"0.0.0.0:{free_port()}"),
    )
    res = _run(cmd, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--web 0.0.0.0" in res.stderr and "--web-auth USER:PASS" in res.stderr, res.stderr


def test_metrics_port_in_use_is_a_usage_error(live_server: RunningServer, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        cmd = _cmd(
            _targets(tmp_path, live_server),
            tmp_path / "out",
            *("--users", "1", "--duration", "2s", "--metrics-port", str(s.getsockname()[1])),
        )
        res = _run(cmd, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--metrics-port 127.0.0.1:" in res.stderr and "cannot listen there" in res.stderr


def test_a_master_serves_the_merged_view_of_workers_on_other_hosts(
    live_server: RunningServer, tmp_path: Path
) -> None:
    """``--master --metrics-port`` with two ``--worker`` processes started on their own (as on
    other machines): each worker sends its pieces unasked, and the master merges them."""
    import threading

    from tests.load.test_load_cli import _free_port, run_distributed

    port, mport = str(_free_port()), free_port()
    common = ["--run-id", "live-dist", "--expect-workers", "2", "--master-port", port]
    common += ["--duration", "30s", "--slice-s", "1s", "--no-tokenize", "--allow-lag"]
    result: list[tuple[int, str]] = []
    runner = threading.Thread(
        target=lambda: result.append(
            run_distributed(
                _targets(tmp_path, live_server),
                tmp_path / "out",
                ["--users", "4", "--metrics-port", str(mport)],
                common,
            )
        )
    )
    runner.start()
    url = f"http://127.0.0.1:{mport}/metrics"
    ok = ("servecheck_load_requests_total", (("outcome", "ok"),))
    workers = ("servecheck_load_workers", ())
    got: dict = {}
    end = time.monotonic() + 100
    while time.monotonic() < end and runner.is_alive():
        try:
            got = scrape(url)
            if got.get(workers) == 2 and got.get(ok, 0) > 0:
                break
        except OSError:
            pass
        time.sleep(0.5)
    runner.join(timeout=200)
    assert result and result[0][0] in (0, 1), result
    assert got.get(workers) == 2 and got.get(ok, 0) > 0, got


def test_web_auth_guards_locust_ui_and_stays_out_of_the_run_folder(
    live_server: RunningServer, tmp_path: Path
) -> None:
    import base64
    import urllib.error

    secret = "pw-live-7f3a9c"
    port = free_port()
    cmd = _cmd(
        _targets(tmp_path, live_server),
        tmp_path / "out",
        *("--users", "1", "--duration", "20s", "--web", f"127.0.0.1:{port}"),
        *("--web-auth", f"admin:{secret}"),
    )
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    base = f"http://127.0.0.1:{port}"
    good = {"Authorization": "Basic " + base64.b64encode(f"admin:{secret}".encode()).decode()}
    codes: dict[str, int] = {}
    try:
        end = time.monotonic() + 90
        while time.monotonic() < end and "with" not in codes:
            assert proc.poll() is None, proc.communicate()[0][-2000:]
            for name, headers in (("without", {}), ("with", good)):
                req = urllib.request.Request(base + "/llm/live.json", headers=headers)
                try:
                    with urllib.request.urlopen(req, timeout=5) as r:  # noqa: S310 - loopback
                        codes[name] = r.status
                except urllib.error.HTTPError as exc:
                    codes[name] = exc.code
                except OSError:
                    break
            time.sleep(0.5)
        index = urllib.request.Request(base + "/", headers={})
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(index, timeout=5)  # noqa: S310 - loopback
    finally:
        out, _ = proc.communicate(timeout=180)
    assert codes == {"without": 401, "with": 200}, codes
    assert denied.value.code == 401, "Locust's own page is guarded too"
    assert proc.returncode in (0, 1), out[-3000:]
    leaked = [
        p
        for p in (tmp_path / "out").rglob("*")
        if p.is_file() and secret.encode() in p.read_bytes()
    ]
    assert not leaked and secret not in out, f"the password is in {leaked}"
    summary = next((tmp_path / "out").rglob("summary.json")).read_text()
    assert '"partial": false' in summary, "a --web run that reached its bound is whole"


def test_stop_in_locust_ui_ends_the_run_as_partial(
    live_server: RunningServer, tmp_path: Path
) -> None:
    """Locust's Stop button ends a --web run early; its summary is partial, never a pass."""
    import json

    port = free_port()
    out_dir = tmp_path / "out"
    cmd = _cmd(
        _targets(tmp_path, live_server),
        out_dir,
        *("--users", "1", "--duration", "120s", "--web", f"127.0.0.1:{port}"),
    )
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 90
        while time.monotonic() < end:
            assert proc.poll() is None, proc.communicate()[0][-2000:]
            try:
                with urllib.request.urlopen(base + "/llm/live.json", timeout=5) as r:  # noqa: S310
                    if json.load(r)["totals"]["ok"] > 0:
                        break
            except OSError:
                pass
            time.sleep(0.5)
        stop = urllib.request.Request(base + "/stop", method="POST")
        with urllib.request.urlopen(stop, timeout=10) as r:  # noqa: S310 - loopback
            assert json.load(r)["success"] is True
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, out[-3000:]
    (run_dir,) = [p for p in out_dir.iterdir() if p.is_dir()]
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["partial"] is True and s["requests"]["total"] > 0
    assert "web UI's Stop" in json.dumps(s), "the summary says why the run ended early"
