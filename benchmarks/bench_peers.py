"""Peer load tools against the same server with known timings: GuideLLM, AIPerf, inference-perf.

Each tool drives the calibration server (TTFT 100 ms, 10 ms per token, 64 tokens with
``ignore_eos``, pinned to CPU 1) at a fixed concurrency (16 and 256 streams) with 32-token prompts
and 64-token answers, pinned to CPU 0 with ``taskset -c 0`` like ``servecheck load`` in
``bench_load.py``. Truth per request: TTFT 100 ms, E2E 100 + 63 x 10 = 730 ms, ITL 10 ms.

Reported per tool and level, from the tool's own per-request export (exact values, not its rounded
summary): TTFT error p50/p99 and E2E error p50/p99 against the truth, in ms; ITL p50 as the tool
itself reports it (its summary; each tool defines ITL differently, see the notes it prints); the
tool's CPU seconds per 10,000 streamed tokens; requests ok; the 1-minute load average when the run
started. Each level runs ``--repeats`` times and the table quotes the median of the runs.

CPU is measured for the tool's whole process tree during the load window only, not its start-up
(imports, tokenizer load, dataset synthesis before the first request) or its report writing: a
sampler thread reads utime+stime of every process of the tool's session and its descendants from
``/proc/<pid>/stat`` every 50 ms, keeps each process's last value after it exits, and the
cumulative sum is interpolated at the first request start and the last request end that the tool
itself recorded (its wall-clock or monotonic stamps, matched to the sampler's clock). Tokens are
the server's ``usage`` counts where the tool records them, else 64 per completed request.
Processes that live less than one sample interval are missed (none of the three spawns such).

The server is ``benchmarks/_truth.py``'s ``start_truth_server`` when that file exists, else the
reference server as ``bench_load.py`` starts it. Tokenizer: the locally generated tiny Llama
(``servecheck engine model``), by path, with ``HF_HUB_OFFLINE=1``; nothing is downloaded.

The tools are installed by ``scripts/install-peers.sh`` into their own venvs under
``~/.cache/servecheck/peers/<tool>/``. A tool that is missing, times out or fails is reported as
such in the table with the reason; with none installed the bench prints that and exits 0 without
touching the docs.

    scripts/install-peers.sh
    python benchmarks/bench_peers.py                    # full: 16 and 256 streams, 3 runs each
    python benchmarks/bench_peers.py --quick            # short runs, docs untouched
    python benchmarks/bench_peers.py --tools aiperf --streams 16

Writes ``docs/benchmarks.md`` between the ``peers`` markers and the raw figures to
``docs/bench-peers.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from _docs import write_section  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- peers:start -->", "<!-- peers:end -->"
JSON_OUT = ROOT / "docs" / "bench-peers.json"
TTFT_S, ITL_S, TOKENS, PROMPT_TOKENS = 0.100, 0.010, 64, 32
E2E_S = TTFT_S + (TOKENS - 1) * ITL_S
CACHE = Path(os.environ.get("SERVECHECK_CACHE", Path.home() / ".cache" / "servecheck"))
PEERS = CACHE / "peers"
TOOL_CPU, SERVER_CPU = "0", "1"
SAMPLE_S = 0.05
CLK_TCK = os.sysconf("SC_CLK_TCK")


def tokenizer_dir() -> Path | None:
    """The locally generated tiny Llama's HF folder (never downloaded)."""
    fixed = CACHE / "models" / "tiny-llama-a452f0c7ee03" / "hf"
    if (fixed / "tokenizer.json").exists():
        return fixed
    found = sorted((CACHE / "models").glob("tiny-llama-*/hf/tokenizer.json"))
    return found[0].parent if found else None


# ---------------------------------------------------------------- the server


def start_server(tmp: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """(process, base URL ending in /v1, which server). The calibration server when it exists."""
    truth = ROOT / "benchmarks" / "_truth.py"
    if truth.exists():
        spec = importlib.util.spec_from_file_location("_truth", truth)
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        proc, base = mod.start_truth_server(tmp, TTFT_S, ITL_S, TOKENS, cpu=SERVER_CPU)
        return proc, base.rstrip("/"), "calibration server (`benchmarks/_truth.py`)"
    ready = tmp / "port"
    cmd = [
        sys.executable,
        "-m",
        "servecheck",
        "reference-server",
        "--port",
        "0",
        "--ready-file",
        str(ready),
        "--ttft-ms",
        str(TTFT_S * 1000),
        "--itl-ms",
        str(ITL_S * 1000),
        "--default-max-tokens",
        str(TOKENS),
        "--max-model-len",
        "4096",
        "--kv-blocks",
        "100000",
        "--max-num-seqs",
        "4096",
    ]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", SERVER_CPU, *cmd]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    for _ in range(300):
        if ready.exists() and ready.read_text().strip():
            return (
                proc,
                f"http://127.0.0.1:{int(ready.read_text())}/v1",
                "reference server (aiohttp)",
            )
        time.sleep(0.1)
    stop_group(proc)
    raise RuntimeError("reference server did not start within 30 s")


def server_lateness(base: str) -> dict[str, Any] | None:
    """The calibration server's own lateness since it started (``_truth.server_stats``), or None."""
    try:
        with urllib.request.urlopen(base.removesuffix("/v1") + "/stats", timeout=10) as r:  # noqa: S310 - loopback
            return dict(json.load(r))
    except Exception:  # noqa: BLE001 - the reference server has no /stats
        return None


def model_id(base: str) -> str:
    with urllib.request.urlopen(f"{base}/models", timeout=10) as r:
        return str(json.load(r)["data"][0]["id"])


def stop_group(proc: subprocess.Popen[Any], grace: float = 5.0) -> None:
    """SIGTERM the process group we started (also after a clean exit: multi-process tools can leave
    children behind), SIGKILL what is left after the grace period. A process that leads no group of
    its own is terminated alone."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and (proc.poll() is None or group_alive(proc.pid)):
        time.sleep(0.1)
    if group_alive(proc.pid):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


# ---------------------------------------------------------------- CPU of a process tree


def _read_stats() -> dict[int, tuple[int, int, float]]:
    """pid -> (ppid, session, utime+stime seconds) for every process."""
    out: dict[int, tuple[int, int, float]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read().decode(errors="replace")
        except OSError:
            continue
        rest = raw[raw.rfind(")") + 2 :].split()
        # fields after "(comm)": state ppid pgrp session ... utime(14) stime(15), 1-based in stat(5)
        out[int(name)] = (int(rest[1]), int(rest[3]), (int(rest[11]) + int(rest[12])) / CLK_TCK)
    return out


class TreeCPU:
    """Samples the cumulative CPU seconds of a process tree (the root's session and every descendant),
    keeping each process's last value after it exits."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.last: dict[int, float] = {}
        self.samples: list[tuple[float, float, float]] = []  # (time.time, time.monotonic, cpu)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(SAMPLE_S)
        self.sample()

    def sample(self) -> None:
        stats = _read_stats()
        tree = {self.root} | {p for p in self.last if p in stats}
        tree |= {p for p, (_, sid, _) in stats.items() if sid == self.root}
        changed = True
        while changed:  # descendants that left the session
            new = {p for p, (pp, _, _) in stats.items() if pp in tree and p not in tree}
            tree |= new
            changed = bool(new)
        for p in tree:
            if p in stats:
                self.last[p] = stats[p][2]
        self.samples.append((time.time(), time.monotonic(), sum(self.last.values())))

    def between(self, t0: float, t1: float, clock: str) -> float | None:
        """CPU seconds between t0 and t1 on the given clock ('wall' or 'mono'), interpolated."""
        if len(self.samples) < 2 or t1 <= t0:
            return None
        col = 0 if clock == "wall" else 1
        xs = np.array([s[col] for s in self.samples])
        ys = np.array([s[2] for s in self.samples])
        if t0 < xs[0] - 1 or t1 > xs[-1] + 1:
            return None
        return float(np.interp(t1, xs, ys) - np.interp(t0, xs, ys))


# ---------------------------------------------------------------- the tools


@dataclass
class Parsed:
    ttft: list[float]  # seconds, one per completed request
    e2e: list[float]
    tokens: int
    window: tuple[float, float]
    clock: str  # "wall" or "mono"
    errors: int = 0
    itl_p50_ms: float | None = None
    itl_def: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class Tool:
    name: str
    package: str
    venv: str
    build: Callable[
        [Path, Path, str, str, int, int], list[str]
    ]  # (venv, out, root_url, model, streams, requests)
    parse: Callable[[Path], Parsed]
    api: str


def _guidellm_cmd(
    venv: Path, out: Path, root_url: str, model: str, streams: int, requests: int
) -> list[str]:
    scenario = {
        "metadata": {"name": "servecheck-peers"},
        "spec": {
            "backend": {
                "kind": "openai_http",
                "target": root_url,
                "model": model,
                "request_format": "/v1/chat/completions",
                "max_tokens": TOKENS,
                "timeout": 120,
                "extras": {"body": {"ignore_eos": True}},
            },
            "profile": {"kind": "concurrent", "streams": streams},
            "constraints": [
                {"kind": "max_requests", "count": requests},
                {"kind": "max_duration", "seconds": 180},
            ],
            "tokenizer": {"kind": "huggingface_auto", "model": str(tokenizer_dir())},
            "data": [
                {"kind": "synthetic_text", "prompt_tokens": PROMPT_TOKENS, "output_tokens": TOKENS}
            ],
            "outputs": [{"kind": "json", "path": str(out / "benchmarks.json")}],
        },
    }
    (out / "scenario.json").write_text(json.dumps(scenario))
    return [
        str(venv / "bin" / "guidellm"),
        "run",
        "--scenario",
        str(out / "scenario.json"),
        "--disable-progress",
    ]


def _guidellm_parse(out: Path) -> Parsed:
    bench = json.loads((out / "benchmarks.json").read_text())["benchmarks"][0]
    reqs = bench["requests"]
    ok = reqs["successful"]
    ttft, e2e, first_iter, tokens = [], [], [], 0
    starts, ends = [], []
    for r in ok:
        t = r["info"]["timings"]
        ttft.append(t["first_token_iteration"] - t["request_start"])
        e2e.append(t["request_end"] - t["request_start"])
        first_iter.append(t["first_request_iteration"] - t["request_start"])
        tokens += int((r.get("output_metrics") or {}).get("text_tokens") or TOKENS)
        starts.append(t["request_start"])
        ends.append(t["request_end"])
    itl = bench["metrics"]["inter_token_latency_ms"]["successful"]
    notes = []
    if first_iter:
        notes.append(
            f"first SSE event (the role-only chunk) at {np.median(first_iter) * 1000:.1f} ms p50; its TTFT"
            f" ({np.median(ttft) * 1000:.1f} ms p50) waits for the first content delta"
        )
    return Parsed(
        ttft,
        e2e,
        tokens,
        (min(starts), max(ends)) if starts else (0, 0),
        "wall",
        errors=len(reqs.get("errored") or []) + len(reqs.get("incomplete") or []),
        itl_p50_ms=itl.get("median"),
        itl_def="mean gap per request ((last - first token) / (tokens - 1)), p50 over requests",
        notes=notes,
    )


def _aiperf_cmd(
    venv: Path, out: Path, root_url: str, model: str, streams: int, requests: int
) -> list[str]:
    return [
        str(venv / "bin" / "aiperf"),
        "profile",
        "--model",
        model,
        "--url",
        root_url,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--concurrency",
        str(streams),
        "--request-count",
        str(requests),
        "--isl",
        str(PROMPT_TOKENS),
        "--isl-stddev",
        "0",
        "--osl",
        str(TOKENS),
        "--extra-inputs",
        "ignore_eos:true",
        "--tokenizer",
        HUB_NAME,
        "--use-server-token-count",
        "--artifact-dir",
        str(out / "artifacts"),
        "--ui",
        "none",
        "--no-server-metrics",
        "--no-gpu-telemetry",
    ]


def _aiperf_parse(out: Path) -> Parsed:
    art = out / "artifacts"
    ttft, e2e, tokens, errors = [], [], 0, 0
    starts, ends = [], []
    with open(art / "profile_export.jsonl", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            md, m = rec.get("metadata", {}), rec.get("metrics", {})
            if md.get("benchmark_phase", "profiling") != "profiling":
                continue
            if rec.get("error") or md.get("was_cancelled") or "time_to_first_token" not in m:
                errors += 1
                continue
            ttft.append(m["time_to_first_token"]["value"] / 1000)
            e2e.append(m["request_latency"]["value"] / 1000)
            n = (m.get("usage_completion_tokens") or m.get("output_token_count") or {}).get("value")
            tokens += int(n or TOKENS)
            starts.append(md["request_start_ns"] / 1e9)
            ends.append(md["request_end_ns"] / 1e9)
    summary = json.loads((art / "profile_export_aiperf.json").read_text())
    itl = (summary.get("inter_token_latency") or {}).get("p50")
    return Parsed(
        ttft,
        e2e,
        tokens,
        (min(starts), max(ends)) if starts else (0, 0),
        "wall",
        errors=errors,
        itl_p50_ms=itl,
        itl_def="(E2E - TTFT) / (tokens - 1) per request, p50 over requests",
    )


def _ip_cmd(
    venv: Path, out: Path, root_url: str, model: str, streams: int, requests: int
) -> list[str]:
    import yaml  # the project's own dependency

    cfg = {
        "api": {"type": "completion", "streaming": True},
        "data": {
            "type": "random",
            "input_distribution": {
                "type": "fixed",
                "mean": PROMPT_TOKENS,
                "min": PROMPT_TOKENS,
                "max": PROMPT_TOKENS,
                "total_count": requests,
            },
            "output_distribution": {
                "type": "fixed",
                "mean": TOKENS,
                "min": TOKENS,
                "max": TOKENS,
                "total_count": requests,
            },
        },
        "load": {
            "type": "concurrent",
            "stages": [{"num_requests": requests, "concurrency_level": streams}],
            "worker_max_concurrency": max(256, streams),
            "request_timeout": 120,
        },
        "server": {"type": "vllm", "model_name": model, "base_url": root_url, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(tokenizer_dir())},
        "report": {"request_lifecycle": {"summary": True, "per_stage": True, "per_request": True}},
        "storage": {"local_storage": {"path": str(out / "reports")}},
    }
    (out / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return [str(venv / "bin" / "inference-perf"), "-c", str(out / "config.yaml")]


def _ip_parse(out: Path) -> Parsed:
    rows = json.loads((out / "reports" / "per_request_lifecycle_metrics.json").read_text())
    ttft, e2e, tokens, errors = [], [], 0, 0
    starts, ends = [], []
    for r in rows:
        resp = (r.get("info") or {}).get("response_metrics") or {}
        chunks = resp.get("chunk_times") or []
        if r.get("error") or not chunks:
            errors += 1
            continue
        ttft.append(chunks[0] - r["start_time"])
        e2e.append(r["end_time"] - r["start_time"])
        tokens += int((resp.get("server_usage") or {}).get("completion_tokens") or TOKENS)
        starts.append(r["start_time"])
        ends.append(r["end_time"])
    summary = json.loads((out / "reports" / "summary_lifecycle_metrics.json").read_text())
    itl = ((summary.get("successes") or {}).get("latency") or {}).get("inter_token_latency") or {}
    med = itl.get("median")
    return Parsed(
        ttft,
        e2e,
        tokens,
        (min(starts), max(ends)) if starts else (0, 0),
        "mono",
        errors=errors,
        itl_p50_ms=med * 1000 if med is not None else None,
        itl_def="gaps between client re-tokenised output tokens (all tokens of one chunk share its time), p50",
    )


HUB_NAME = (
    "servecheck/tiny-llama"  # AIPerf offline mode only finds tokenizers in an HF hub cache layout
)

TOOLS = {
    "guidellm": Tool(
        "guidellm",
        "guidellm",
        "guidellm",
        _guidellm_cmd,
        _guidellm_parse,
        "chat (`/v1/chat/completions`)",
    ),
    "aiperf": Tool(
        "aiperf", "aiperf", "aiperf", _aiperf_cmd, _aiperf_parse, "chat (`/v1/chat/completions`)"
    ),
    "inference-perf": Tool(
        "inference-perf",
        "inference-perf",
        "inference-perf",
        _ip_cmd,
        _ip_parse,
        "completions (`/v1/completions`): its fixed-length random data only supports completions",
    ),
}


def hub_cache(tmp: Path) -> Path:
    """A throw-away HF hub cache holding the tiny tokenizer as ``servecheck/tiny-llama``: AIPerf with
    HF_HUB_OFFLINE=1 resolves every tokenizer name through ``snapshot_download(local_files_only=True)``,
    which rejects a plain folder path."""
    hub = tmp / "hf-hub"
    rev = "0" * 40
    snap = hub / "models--servecheck--tiny-llama" / "snapshots" / rev
    if not snap.exists():
        snap.mkdir(parents=True)
        (snap.parents[1] / "refs").mkdir()
        (snap.parents[1] / "refs" / "main").write_text(rev)
        src = tokenizer_dir()
        assert src is not None
        for f in src.iterdir():
            if f.suffix == ".json":
                shutil.copy(f, snap / f.name)
    return hub


def tool_version(tool: Tool) -> str | None:
    py = PEERS / tool.venv / "bin" / "python"
    if not py.exists():
        return None
    try:
        r = subprocess.run(
            [str(py), "-c", f"import importlib.metadata as m; print(m.version({tool.package!r}))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        return None
    return r.stdout.strip() or None


# ---------------------------------------------------------------- one run


def pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(np.array(xs), q)) if xs else None


def run_tool(
    tool: Tool,
    version: str | None,
    tmp: Path,
    base: str,
    model: str,
    streams: int,
    requests: int,
    timeout_s: float,
    run_no: int,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "tool": tool.name,
        "version": version,
        "streams": streams,
        "requests": requests,
        "run": run_no,
        "loadavg": round(os.getloadavg()[0], 2),
        "status": "ok",
    }
    if version is None:
        row.update(
            status="not installed",
            reason=f"no venv at {PEERS / tool.venv} (scripts/install-peers.sh)",
        )
        return row
    if tokenizer_dir() is None:
        row.update(status="failed", reason="tiny tokenizer missing (servecheck engine model)")
        return row
    out = tmp / f"{tool.name}-{streams}-{run_no}"
    out.mkdir(parents=True)
    root_url = base.removesuffix("/v1")
    try:
        cmd = tool.build(PEERS / tool.venv, out, root_url, model, streams, requests)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        row.update(status="failed", reason=f"could not prepare the run: {exc}")
        return row
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", TOOL_CPU, *cmd]
    row["command"] = cmd
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_CACHE=str(hub_cache(tmp)),
        TOKENIZERS_PARALLELISM="false",
        NO_COLOR="1",
        COLUMNS="200",
        PYTHONUNBUFFERED="1",
    )
    env.pop("VIRTUAL_ENV", None)
    log = out / "tool.log"
    t0 = time.monotonic()
    with open(log, "wb") as lf:
        proc = subprocess.Popen(
            cmd,
            cwd=out,
            stdout=lf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        cpu = TreeCPU(proc.pid)
        cpu.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            cpu.stop()
            stop_group(proc)
    row["wall_s"] = round(time.monotonic() - t0, 1)
    if timed_out:
        row.update(status="timed out", reason=f"killed after {timeout_s:.0f} s")
    elif proc.returncode != 0:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1:] or [
            "(no output)"
        ]
        row.update(status="failed", reason=f"exit {proc.returncode}: {tail[0].strip()[:200]}")
    try:
        p = tool.parse(out)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        if row["status"] == "ok":
            row.update(
                status="failed", reason=f"no per-request results: {type(exc).__name__}: {exc}"[:300]
            )
        return row
    if not p.ttft:
        if row["status"] == "ok":
            row.update(status="failed", reason=f"no completed request ({p.errors} errors)")
        return row
    ttft_err = [(x - TTFT_S) * 1000 for x in p.ttft]
    e2e_err = [(x - E2E_S) * 1000 for x in p.e2e]
    used = cpu.between(p.window[0], p.window[1], p.clock)
    row.update(
        ok=len(p.ttft),
        errors=p.errors,
        tokens=p.tokens,
        window_s=round(p.window[1] - p.window[0], 2),
        ttft_err_p50=pct(ttft_err, 50),
        ttft_err_p99=pct(ttft_err, 99),
        e2e_err_p50=pct(e2e_err, 50),
        e2e_err_p99=pct(e2e_err, 99),
        itl_p50=p.itl_p50_ms,
        itl_def=p.itl_def,
        cpu_s=used,
        cpu_per_10k=used / p.tokens * 1e4 if used is not None and p.tokens else None,
        tokens_per_s=p.tokens / (p.window[1] - p.window[0]) if p.window[1] > p.window[0] else None,
        notes=p.notes,
    )
    return row


# ---------------------------------------------------------------- report

METRICS = [
    "ok",
    "ttft_err_p50",
    "ttft_err_p99",
    "e2e_err_p50",
    "e2e_err_p99",
    "itl_p50",
    "cpu_per_10k",
    "tokens_per_s",
    "loadavg",
    "server_late_p99",
]


def combine(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median of the runs per (tool, streams); a level with no good run keeps the first reason."""
    out = []
    keys: list[tuple[str, int]] = []
    for r in rows:
        if (r["tool"], r["streams"]) not in keys:
            keys.append((r["tool"], r["streams"]))
    for tool, streams in keys:
        runs = [r for r in rows if r["tool"] == tool and r["streams"] == streams]
        good = [r for r in runs if r["status"] == "ok" and r.get("ok")]
        s: dict[str, Any] = {
            "tool": tool,
            "version": runs[0]["version"],
            "streams": streams,
            "runs": len(runs),
            "good_runs": len(good),
        }
        if not good:
            s.update(status=runs[0]["status"], reason=runs[0].get("reason", ""))
        else:
            s["status"] = "ok"
            for m in METRICS:
                vals = [r[m] for r in good if r.get(m) is not None]
                s[m] = float(np.median(vals)) if vals else None
            s["loadavgs"] = [r["loadavg"] for r in runs]
            bad = [r for r in runs if r not in good]
            if bad:
                s["reason"] = "; ".join(
                    f"run {r['run']}: {r['status']} ({r.get('reason', '')})" for r in bad
                )
            s["itl_def"] = good[0].get("itl_def", "")
            s["notes"] = good[0].get("notes", [])
        out.append(s)
    return out


def fmt(x: Any, spec: str = ".1f") -> str:
    if x is None:
        return "-"
    return format(x, spec) if isinstance(x, float) else str(x)


def shorten(cmd: list[str], tmp: Path, base: str) -> str:
    text = shlex.join(cmd)
    root_url = base.removesuffix("/v1")
    for a, b in (
        (str(tmp), "$TMP"),
        (str(PEERS), "~/.cache/servecheck/peers"),
        (str(CACHE), "~/.cache/servecheck"),
        (root_url, "http://127.0.0.1:$PORT"),
        (str(Path.home()), "~"),
    ):
        text = text.replace(a, b)
    return text


def config_text(tool: str, run_dir: Path, tmp: Path, base: str) -> str:
    path = {"guidellm": run_dir / "scenario.json", "inference-perf": run_dir / "config.yaml"}.get(
        tool
    )
    if path is None or not path.exists():
        return ""
    if path.suffix == ".json":
        text = json.dumps(json.loads(path.read_text())["spec"], separators=(",", ":"))
    else:
        import yaml

        text = json.dumps(yaml.safe_load(path.read_text()), separators=(",", ":"))
    return shorten([text], tmp, base).strip("'")


def describe(tool: Tool, version: str | None, tmp: Path, base: str, model: str) -> dict[str, str]:
    """The exact command line and config of a run, with streams and requests as {S} and {N}."""
    out = tmp / tool.name
    out.mkdir(exist_ok=True)
    cmd = tool.build(PEERS / tool.venv, out, base.removesuffix("/v1"), model, 77777, 88888)
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", TOOL_CPU, *cmd]
    text, cfg = shorten(cmd, tmp, base), config_text(tool.name, out, tmp, base)
    for a, b in (("77777", "{S}"), ("88888", "{N}")):
        text, cfg = text.replace(a, b), cfg.replace(a, b)
    return {"command": text, "config": cfg, "api": tool.api, "version": version or "not installed"}


def render(
    summary: list[dict[str, Any]], how: dict[str, dict[str, Any]], meta: dict[str, Any]
) -> str:
    lines = [
        START,
        "## Peer load tools beside `servecheck load`",
        "",
        f"`benchmarks/bench_peers.py` on {meta['machine']}, Python {meta['python']}, {meta['cpus']} CPUs, {meta['date']}."
        f" Server: {meta['server']}, TTFT 100 ms, 10 ms per token, 64 tokens (`ignore_eos`), pinned to CPU 1; each tool"
        " pinned to CPU 0 (`taskset -c 0`), fixed concurrency, 32-token prompts, 64-token answers. Truth per request:"
        " TTFT 100 ms, E2E 730 ms, ITL 10 ms.",
        f"Errors are the tool's measured value minus the truth, in ms, from its per-request export. Median of"
        f" {meta['repeats']} runs per row; load avg is the 1-minute load average of the shared 2-core machine at the start"
        " of each run (it includes this bench's own previous run: tool + server keep both cores busy). CPU-s / 10k tokens: the tool's whole process tree, load window only (first request start to last"
        " request end), start-up and report writing excluded. ITL p50 is each tool's own ITL figure (definitions below),"
        " not an error. Server late p99: how late the server's own writes left against their due time (ms, its"
        " `/stats`, a fresh server per run); when it is small the truth held and the errors are the tool's.",
        "",
        "| tool | version | streams | requests ok | TTFT err p50 | TTFT err p99 | E2E err p50 | E2E err p99 | ITL p50 (tool's) | tokens/s | CPU-s / 10k tokens | server late p99 | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in summary:
        if s["status"] != "ok":
            lines.append(
                f"| {s['tool']} | {fmt(s['version'])} | {s['streams']} | {s['status']}: {s.get('reason', '')}"
                " | | | | | | | | | |"
            )
            continue
        la = "/".join(f"{x:.1f}" for x in s.get("loadavgs", []))
        lines.append(
            f"| {s['tool']} | {s['version']} | {s['streams']} | {fmt(s['ok'], '.0f')} | {fmt(s['ttft_err_p50'])}"
            f" | {fmt(s['ttft_err_p99'])} | {fmt(s['e2e_err_p50'])} | {fmt(s['e2e_err_p99'])} | {fmt(s['itl_p50'])}"
            f" | {fmt(s['tokens_per_s'], '.0f')} | {fmt(s['cpu_per_10k'], '.2f')} | {fmt(s.get('server_late_p99'))} | {la} |"
        )
    failures = [s for s in summary if s["status"] == "ok" and s.get("reason")]
    if failures:
        lines += [
            "",
            "Runs left out of the medians: "
            + "; ".join(f"{s['tool']} @ {s['streams']}: {s['reason']}" for s in failures)
            + ".",
        ]
    lines += [
        "",
        "How each tool was run (`$TMP` is the bench's temporary folder, `$PORT` the server's port; `{S}`"
        " streams, `{N}` requests: 25 per stream at 16 streams, 8 per stream at 256; every run is also bounded by a"
        f" {meta['timeout']:.0f} s timeout that kills its process group):",
        "",
    ]
    for tool, h in how.items():
        item = f"- **{tool}** {h.get('version', '')}: {h['api']}. `{h['command']}`"
        if h.get("config"):
            item += f" with `{h['config']}`"
        lines.append(item + ".")
        if h.get("itl_def"):
            lines.append(f"  ITL: {h['itl_def']}.")
        for n in h.get("notes", []):
            lines.append(f"  TTFT: {n} (first run).")
    lines += [
        "",
        "Notes: AIPerf is given the tokenizer as `servecheck/tiny-llama` in a throw-away HF hub cache (`HF_HUB_CACHE`)"
        " because with `HF_HUB_OFFLINE=1` it resolves every tokenizer name through the hub cache and rejects a folder"
        " path; it counts tokens from the server's `usage` (`--use-server-token-count`). inference-perf runs the"
        " completions API: its fixed-length `random` data generator supports no other, and with `num_workers` at its"
        " default (the CPU count) `worker_max_concurrency` is raised so 256 streams fit. GuideLLM's and AIPerf's TTFT"
        " waits for the first content delta, not the role-only chunk.",
        END,
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--streams", default="16,256")
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="requests per stream (default 25 at 16 streams, 8 at 256)",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--timeout", type=float, default=300.0, help="seconds per tool run, start-up included"
    )
    ap.add_argument(
        "--quick", action="store_true", help="one short run per level; do not write docs"
    )
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    names = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = [n for n in names if n not in TOOLS]
    if unknown:
        print(f"unknown tools: {', '.join(unknown)} (known: {', '.join(TOOLS)})", file=sys.stderr)
        return 2
    levels = [int(x) for x in args.streams.split(",")]
    repeats = 1 if args.quick else args.repeats
    versions = {n: tool_version(TOOLS[n]) for n in names}
    if not any(versions.values()):
        print(
            f"bench_peers: no peer tool installed under {PEERS} (scripts/install-peers.sh); skipped"
        )
        return 0
    signal.signal(
        signal.SIGTERM, lambda *_: sys.exit(143)
    )  # run the finally blocks: stop what we started
    tmp = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    rows: list[dict[str, Any]] = []
    how: dict[str, dict[str, Any]] = {}
    server_name, base, model = "", "", ""
    for rep in range(repeats):
        for streams in levels:
            rounds = args.rounds or (2 if args.quick else (25 if streams <= 32 else 8))
            for n in names:
                # a fresh server per run: its lateness figures then belong to this run alone
                server, base, server_name = start_server(tmp)
                try:
                    model = model_id(base)
                    r = run_tool(
                        TOOLS[n],
                        versions[n],
                        tmp,
                        base,
                        model,
                        streams,
                        streams * rounds,
                        args.timeout,
                        rep,
                    )
                    stats = server_lateness(base)
                    if stats:
                        r["server"] = {
                            k: stats.get(k)
                            for k in (
                                "writes",
                                "late_p50_ms",
                                "late_p99_ms",
                                "late_max_ms",
                                "cpu_s",
                            )
                        }
                        r["server_late_p99"] = stats.get("late_p99_ms")
                finally:
                    stop_group(server)
                if "command" in r:
                    r["command"] = shorten(r["command"], tmp, base)
                print(json.dumps({k: v for k, v in r.items() if k != "command"}), flush=True)
                rows.append(r)
    summary = combine(rows)
    for n in names:
        how[n] = describe(TOOLS[n], versions[n], tmp, base, model)
        first = next((r for r in rows if r["tool"] == n and r.get("itl_def")), {})
        how[n].update(itl_def=first.get("itl_def", ""), notes=first.get("notes", []))
    meta = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
        "server": server_name,
        "repeats": repeats,
        "timeout": args.timeout,
    }
    block = render(summary, how, meta)
    print(block)
    if not args.quick and not args.no_docs:
        write_section(START, END, block)
        JSON_OUT.write_text(
            json.dumps(
                {
                    "meta": meta,
                    "truth_ms": {"ttft": TTFT_S * 1000, "e2e": E2E_S * 1000, "itl": ITL_S * 1000},
                    "summary": summary,
                    "runs": rows,
                    "how": how,
                },
                indent=1,
                default=str,
            )
            + "\n"
        )
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
