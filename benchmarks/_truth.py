"""Start the calibration server for a benchmark, pinned to a core: ``servecheck.reference.fast``
(``impl="python"``) or its C twin ``benchmarks/truth_server.c`` (``impl="c"``, built here with gcc
on first use), which speaks the same protocol at a fraction of the CPU per streamed chunk, so it
keeps its schedule at rates where the Python one is itself late.

Every request it answers has a known truth: TTFT ``ttft_s`` after the request arrived, one token
every ``itl_s`` on an absolute schedule, ``tokens`` tokens (or the request's ``max_tokens``), so
E2E = TTFT + (n - 1) x ITL. ``server_stats`` reads its own lateness (how long after the due time
each write left), which a benchmark prints beside the generator's errors: when the server was
late, the truth did not hold and the generator must not be blamed for it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servecheck.embedded import stop_process  # noqa: E402

TRUTH_C = ROOT / "benchmarks" / "truth_server.c"
SERVERS = {  # --server: which calibration server (start_truth_server's ``impl``), as the docs name it
    "c": "`benchmarks/truth_server.c`, the C twin of `servecheck.reference.fast`",
    "python": "`servecheck.reference.fast`, Python",
}
IMPLS = tuple(sorted(SERVERS))


def add_server_option(ap: argparse.ArgumentParser) -> None:
    """A benchmark's ``--server c|python`` (default ``c``): the ``impl`` it starts."""
    ap.add_argument(
        "--server",
        choices=IMPLS,
        default="c",
        help="calibration server: c (benchmarks/truth_server.c, built with gcc) or python"
        " (servecheck.reference.fast); default c",
    )


def build_truth_server(cache: Path | None = None) -> Path:
    """The C truth server's binary, compiled with ``gcc -O2`` into ``cache`` (default
    ``~/.cache/servecheck/bench``) once per version of the source (its hash is in the name)."""
    digest = hashlib.sha256(TRUTH_C.read_bytes()).hexdigest()[:16]
    if cache is None:
        home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        cache = Path(home) / "servecheck" / "bench"
    binary = cache / f"truth_server-{digest}"
    if binary.exists():
        return binary
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError(
            f"the C truth server ({TRUTH_C.relative_to(ROOT)}) needs gcc to build it and none is on"
            " PATH: install it (apt-get install gcc) or use the Python server (--server python)"
        )
    cache.mkdir(parents=True, exist_ok=True)
    part = binary.with_name(f"{binary.name}.{os.getpid()}.part")  # renamed: never half-written
    cmd = [gcc, "-O2", "-std=gnu11", "-Wall", "-o", str(part), str(TRUTH_C), "-lm"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        part.unlink(missing_ok=True)
        raise RuntimeError(f"gcc could not build {TRUTH_C}:\n{done.stderr[-3000:]}")
    os.replace(part, binary)
    return binary


def start_truth_server(
    tmp: Path,
    ttft_s: float,
    itl_s: float,
    tokens: int,
    cpu: str = "1",
    reasoning_tokens: int = 0,
    impl: str = "python",
) -> tuple[subprocess.Popen[bytes], str]:
    """Start it on a free loopback port, pinned to ``cpu`` (when ``taskset`` exists); return the
    process and its base URL (``http://127.0.0.1:PORT/v1``). Stop it with :func:`stop`.
    ``impl``: ``"python"`` (``servecheck.reference.fast``) or ``"c"`` (``truth_server.c``)."""
    if impl not in IMPLS:
        raise ValueError(f"truth server impl {impl!r}: expected one of {', '.join(IMPLS)}")
    ready = Path(tmp) / f"truth-port-{time.monotonic_ns()}"
    program = (
        [str(build_truth_server())]
        if impl == "c"
        else [sys.executable, "-m", "servecheck.commands.fast_server"]
    )
    cmd = [
        *program,
        "--port",
        "0",
        "--ready-file",
        str(ready),
        "--ttft-ms",
        str(ttft_s * 1000),
        "--itl-ms",
        str(itl_s * 1000),
        "--tokens",
        str(tokens),
        "--reasoning-tokens",
        str(reasoning_tokens),
    ]
    if cpu and shutil.which("taskset"):
        cmd = ["taskset", "-c", cpu, *cmd]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    for _ in range(300):
        if ready.exists():
            return proc, f"http://127.0.0.1:{int(ready.read_text())}/v1"
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the calibration server did not start within 15 s")


def server_stats(base_url: str) -> dict[str, Any]:
    """The server's lateness summary since it started (writes, late_p50/p99/p999/max_ms, cpu_s)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    with urllib.request.urlopen(root + "/stats", timeout=10) as r:  # noqa: S310 - loopback
        return dict(json.loads(r.read()))


def server_requests(base_url: str) -> dict[str, list[float]]:
    """Per X-Request-Id: how late (ms) the server sent that request's first and last token."""
    root = base_url.rstrip("/").removesuffix("/v1")
    with urllib.request.urlopen(root + "/stats/requests", timeout=30) as r:  # noqa: S310 - loopback
        return dict(json.loads(r.read())["requests"])


stop = stop_process  # SIGTERM, then SIGKILL after 10 s


def truth_targets(tmp: Path, base: str) -> Path:
    """A targets.yaml naming the calibration server at ``base`` as target ``bench``."""
    path = tmp / "targets.yaml"
    path.write_text(
        "targets:\n  - name: bench\n"
        f"    base_url: {base}\n    engine: reference\n    models: [truth]\n    timeout_s: 120\n",
        encoding="utf-8",
    )
    return path
