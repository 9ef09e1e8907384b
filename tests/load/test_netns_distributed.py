"""Distributed load across separate hosts with no shared path: the reference server, a Locust
master and two workers, each in its own network namespace with its own working folder, meeting
only over the network (tests/load/netns.py). The workers' records reach the master over Locust's
channel; the master's report is compared with each worker's local copy, and one worker is killed
mid-run. Skips, saying why, only where namespaces cannot be made (not root, no iproute2).

No timed assertions: the waits are for events (a ready file, records arriving), each bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from servecheck.records.parquet import read_run_records
from tests.load.netns import Lan, unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
ROOT = Path(__file__).resolve().parents[2]
PORT = 8000  # the same port on every host is fine: each has its own network stack
RUN_ID = "netns"
_WHY = unavailable()


@pytest.fixture
def lan(tmp_path: Path) -> Iterator[tuple[Lan, dict[str, Path]]]:
    if _WHY:
        pytest.skip(f"no test hosts: {_WHY}")
    hosts = ["srv", "m", "w1", "w2"]
    dirs = {h: tmp_path / h for h in hosts}
    for d in dirs.values():
        d.mkdir()
    with Lan(hosts) as net:
        ready = dirs["srv"] / "port"
        server = subprocess.Popen(
            [
                *net.exec("srv"),
                sys.executable,
                "-m",
                "servecheck",
                "reference-server",
                "--host",
                net.addr["srv"],
                "--port",
                str(PORT),
                "--ttft-ms",
                "10",
                "--itl-ms",
                "2",
                "--ready-file",
                str(ready),
            ],
            cwd=dirs["srv"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait(lambda: ready.is_file() or server.poll() is not None, 30, "server ready")
            assert server.poll() is None, "the reference server did not start"
            for h in ("m", "w1", "w2"):  # each host its own copy of the targets file
                (dirs[h] / "targets.yaml").write_text(
                    "targets:\n  - name: ref\n"
                    f"    base_url: http://{net.addr['srv']}:{PORT}/v1\n"
                    "    engine: reference\n    timeout_s: 20\n"
                )
            yield net, dirs
        finally:
            server.kill()
            server.wait(timeout=10)


def _wait(cond: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _load(net: Lan, host: str, cwd: Path, *args: str, workers: int = 2) -> subprocess.Popen[str]:
    cmd = [
        *net.exec(host),
        sys.executable,
        "-m",
        "servecheck",
        "load",
        "--target",
        "ref",
        "--targets-file",
        "targets.yaml",
        "--out",
        "reports",
        "--quiet",
        "--run-id",
        RUN_ID,
        "--expect-workers",
        str(workers),
        "--no-tokenize",
        # About distribution and transport: a loaded CI core's loop lag would make a run
        # honestly INCONCLUSIVE for a reason these tests do not judge.
        "--allow-lag",
        *args,
    ]
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _start(
    net: Lan, dirs: dict[str, Path], *args: str
) -> tuple[subprocess.Popen[str], list[subprocess.Popen[str]]]:
    master = _load(net, "m", dirs["m"], "--master", *args)
    workers = [
        _load(net, w, dirs[w], "--worker", "--master-host", net.addr["m"], *args)
        for w in ("w1", "w2")
    ]
    return master, workers


def _finish(master: subprocess.Popen[str], workers: list[subprocess.Popen[str]]) -> tuple[int, str]:
    try:
        out, _ = master.communicate(timeout=120)
    finally:
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait(timeout=10)
    return master.returncode, out


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.is_file() else []


def _keys(records: list[dict]) -> list[tuple]:
    """What identifies each record and its figures, to the microsecond the records keep."""
    return sorted(
        (r["seq"], r["request_id"], round(r["t_sent"], 6), r["output_tokens"], r["error"])
        for r in records
    )


def _master_has(run: Path, local: Path) -> list[tuple]:
    """The master's records of the worker whose local copy is ``local`` (in records.parquet)."""
    name = local.name.removeprefix("records-").removesuffix(".jsonl")
    return _keys([r for r in read_run_records(run) if r["worker"] == name])


def _local_has(local: Path, n: int | None = None) -> list[tuple]:
    lines = _lines(local)[:n]
    return _keys([json.loads(x) for x in lines])


def _local_copy(dirs: dict[str, Path], host: str) -> Path:
    (path,) = (dirs[host] / "reports" / RUN_ID / "local").glob("records-*.jsonl")
    return path


def _no_shared_path(dirs: dict[str, Path]) -> None:
    """The master's folder holds only what it wrote; no worker wrote outside its own folder."""
    assert not (dirs["m"] / "reports" / RUN_ID / "local").exists()
    for w in ("w1", "w2"):
        assert not (dirs[w] / "reports" / RUN_ID / "summary.json").exists()
        assert not list((dirs[w] / "reports" / RUN_ID).glob("records-*.jsonl"))


def test_three_hosts_report_equals_the_sum_of_the_workers(
    lan: tuple[Lan, dict[str, Path]],
) -> None:
    net, dirs = lan
    master, workers = _start(net, dirs, "--users", "4", "--max-requests", "40")
    rc, out = _finish(master, workers)
    run = dirs["m"] / "reports" / RUN_ID
    assert rc == 0, out + (run / "locust.log").read_text()[-3000:]
    s = json.loads((run / "summary.json").read_text())
    assert s["verdict"] == "pass" and s["reasons"] == []
    transport = s["records"]["transport"]
    assert transport["verified"] is True and transport["lost_workers"] == []
    per_worker = s["records"]["per_worker"]
    assert len(per_worker) == 2
    assert s["requests"]["total"] == s["records"]["merged"] == sum(per_worker.values()) == 40
    for host in ("w1", "w2"):
        local = _local_copy(dirs, host)
        name = local.name.removeprefix("records-").removesuffix(".jsonl")
        # The master kept exactly this worker's own records (compacted into records.parquet).
        assert _master_has(run, local) == _local_has(local)
        w = transport["workers"][name]
        assert w["state"] == "done" and w["records"] == len(_lines(local)) == 20
        assert per_worker[local.name] == 20
    _no_shared_path(dirs)


def test_a_worker_killed_mid_run_shows_in_the_verdict(lan: tuple[Lan, dict[str, Path]]) -> None:
    net, dirs = lan
    master, workers = _start(net, dirs, "--users", "4", "--duration", "8s")
    run = dirs["m"] / "reports" / RUN_ID
    try:
        # Wait until the master has records from both workers, then kill w2's Locust process
        # (no goodbye: SIGKILL), as a lost machine would.
        _wait(
            lambda: (
                len(list(run.glob("records-*.jsonl"))) == 2
                and all(len(_lines(p)) >= 5 for p in run.glob("records-*.jsonl"))
            ),
            60,
            "records from both workers at the master",
        )
        victim = workers[1]
        children = psutil.Process(victim.pid).children(recursive=True)
        assert children, "worker w2 has no Locust process"
        for child in children:
            child.send_signal(signal.SIGKILL)
    finally:
        rc, out = _finish(master, workers)
    assert rc == 1, out
    s = json.loads((run / "summary.json").read_text())
    killed_local = _local_copy(dirs, "w2")
    killed = killed_local.name.removeprefix("records-").removesuffix(".jsonl")
    transport = s["records"]["transport"]
    assert transport["lost_workers"] == [killed]
    assert s["verdict"] == "inconclusive", s["reasons"]
    assert any(r.startswith(f"worker {killed} disconnected mid-run") for r in s["reasons"])
    assert f"worker {killed} disconnected mid-run" in out  # the printed verdict says it too
    # What the master kept of the killed worker is what that worker had sent: a prefix of its
    # local copy, which may hold more (the records after its last batch).
    kept, local = _master_has(run, killed_local), _lines(killed_local)
    assert 5 <= len(kept) <= len(local) and _local_has(killed_local, len(kept)) == kept
    lost = transport["workers"][killed]
    assert lost["state"] == "lost" and lost["records"] == len(kept)
    # The survivor's records are all there.
    alive = _local_copy(dirs, "w1")
    assert _master_has(run, alive) == _local_has(alive)
    assert (
        s["records"]["merged"]
        == sum(s["records"]["per_worker"].values())
        == len(kept) + len(_lines(alive))
    )
    _no_shared_path(dirs)


def test_a_late_worker_is_counted_from_its_first_request(
    lan: tuple[Lan, dict[str, Path]],
) -> None:
    net, dirs = lan
    # The first worker runs 15 s, the late one 4 s from when it starts (a worker's bounds are its
    # own), so it joins and finishes inside the first one's run even on a slow machine.
    args = ("--users", "4", "--duration", "15s")
    master = _load(net, "m", dirs["m"], "--master", *args, workers=1)
    first = _load(
        net, "w1", dirs["w1"], "--worker", "--master-host", net.addr["m"], *args, workers=1
    )
    run = dirs["m"] / "reports" / RUN_ID
    workers = [first]
    try:
        _wait(
            lambda: any(len(_lines(p)) >= 5 for p in run.glob("records-*.jsonl")),
            60,
            "the first worker's records at the master",
        )
        started_late = time.time()
        workers.append(
            _load(
                net,
                "w2",
                dirs["w2"],
                "--worker",
                "--master-host",
                net.addr["m"],
                "--users",
                "4",
                "--duration",
                "4s",
                workers=1,
            )  # fmt: skip
        )
    finally:
        rc, out = _finish(master, workers)
    assert rc == 0, out + (run / "locust.log").read_text()[-3000:]
    s = json.loads((run / "summary.json").read_text())
    transport = s["records"]["transport"]
    assert transport["verified"] is True and len(transport["workers"]) == 2
    late_local, early_local = _local_copy(dirs, "w2"), _local_copy(dirs, "w1")
    late = transport["workers"][late_local.name.removeprefix("records-").removesuffix(".jsonl")]
    early = transport["workers"][early_local.name.removeprefix("records-").removesuffix(".jsonl")]
    # Counted from its own first request, which went out after it was started.
    assert late["first_request_at"] >= started_late > early["first_request_at"]
    assert late["records"] == len(_lines(late_local)) > 0
    for local in (early_local, late_local):
        assert _master_has(run, local) == _local_has(local)
    assert s["records"]["merged"] == early["records"] + late["records"] == s["requests"]["total"]
