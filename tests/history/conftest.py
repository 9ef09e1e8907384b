"""Fixtures for the history tests: synthetic run folders, and a real PostgreSQL server.

PostgreSQL: ``SERVECHECK_TEST_POSTGRES_URL`` when set (``.ci/run`` starts one), else a private
cluster of this machine's PostgreSQL (``initdb`` / ``pg_ctl``, Debian's ``postgresql``
package) in a temporary folder on a free port, as the ``postgres`` user when we run as root.
Without either: where ``SERVECHECK_REQUIRE_POSTGRES=1`` (``.ci/run`` sets it) or ``CI=true``
the tests fail, so a missing server is never a green run; elsewhere they skip with the reason.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


def _missing(reason: str) -> None:
    if os.environ.get("SERVECHECK_REQUIRE_POSTGRES") == "1" or os.environ.get("CI") == "true":
        pytest.fail(f"PostgreSQL is required in CI: {reason}")
    pytest.skip(f"no PostgreSQL: {reason} (set SERVECHECK_TEST_POSTGRES_URL or install postgresql)")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A URL of an empty-able PostgreSQL database (each test takes its own schema-free db)."""
    given = os.environ.get("SERVECHECK_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        _missing("initdb / pg_ctl not found")
    assert initdb and pg_ctl
    root = Path(tempfile.mkdtemp(prefix="servecheck-pg-"))
    data, port = root / "data", _free_port()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    run = {"check": True, "capture_output": True, "text": True, "timeout": 120}
    try:
        subprocess.run(
            _as_postgres([initdb, "-D", str(data), "-A", "trust", "-U", "postgres"]), **run
        )
        opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            _as_postgres(
                [pg_ctl, "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "start"]
            ),
            **run,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        out = getattr(exc, "stderr", "") or ""
        _missing(f"could not start a private cluster: {exc} {out[-400:]}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_postgres([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"]), **run)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_db(postgres_url: str) -> str:
    """A fresh database on the server, for one test (dropped by the next run's name reuse)."""
    import uuid

    import sqlalchemy as sa

    from servecheck.history.store import engine_url

    name = "sc_" + uuid.uuid4().hex[:12]
    admin = sa.create_engine(engine_url(postgres_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return postgres_url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(params=["sqlite", "postgresql"])
def history_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The history database of one test, on each backend."""
    if request.param == "sqlite":
        return str(tmp_path / "history.db")
    return str(request.getfixturevalue("pg_db"))


def write_load_summary(
    folder: Path,
    *,
    night: str,
    ttft_p95: float,
    version: str = "0.7.0",
    target: str = "nightly",
    throughput: float = 20.0,
    error_rate: float = 0.0,
) -> Path:
    """A run folder whose summary.json has the fields of a ``servecheck load`` summary that
    history reads (the real writer is exercised by test_real_runs_are_recorded)."""
    folder.mkdir(parents=True, exist_ok=True)
    lat = {
        "ttft": {"p50": ttft_p95 / 2, "p90": ttft_p95 * 0.9, "p95": ttft_p95, "p99": ttft_p95 * 1.2}
    }
    summary: dict[str, Any] = {
        "schema_version": 1,
        "run_id": folder.name,
        "target": target,
        "model": "m",
        "started_at": f"{night}T02:00:00Z",
        "requests": {"total": 200, "ok": 200, "failed": 0, "error_rate": error_rate},
        "throughput": {"requests_per_s": throughput, "output_tokens_per_s": throughput * 16},
        "latency_ms": lat,
        "goodput": 1.0,
        "verdict": "pass",
        "server": {"engine": "vllm", "version": version},
    }
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return folder


def write_check_run(
    folder: Path, *, night: str, outcomes: dict[str, str], version: str = "0.7.0"
) -> Path:
    """A ``servecheck check`` run folder: summary.json and results.jsonl as the plugin writes."""
    import calendar
    import time

    folder.mkdir(parents=True, exist_ok=True)
    started = calendar.timegm(time.strptime(night + " 03:00", "%Y-%m-%d %H:%M"))
    rows = [
        {"check": c, "target": "nightly", "model": "m", "outcome": o, "nodeid": f"x::{c}"}
        for c, o in outcomes.items()
    ]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    summary = {
        "kind": "conformance",
        "started": started,
        "counts": counts,
        "partial": False,
        "targets": {"nightly": {"engine": "vllm", "version": version, "models": ["m"]}},
    }
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder
