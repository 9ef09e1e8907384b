"""What does sampling the engine's /metrics cost ``servecheck load``? Off, every 1 s, every 0.1 s.

Every load run reads the target's ``/metrics`` beside the records (``load/server_watch.py``: a
scrape before, the telemetry recorder during, settled scrapes after, the reconciliation in the
summary). That work runs in the ``servecheck load`` process, not in Locust, so the generator's own
``cpu_s_per_10k_tokens`` cannot see it. This benchmark runs the whole command line as a child,
pinned with its Locust child to core 0 (``taskset -c 0``, ``--cpus 0``), and takes the CPU of the
whole process tree from the kernel (``os.wait4``'s rusage: the command and the Locust process it
waited for, imports and summary included), per 10k streamed tokens.

One calibration server for the whole benchmark (``servecheck.reference.fast`` on core 1, with its
``/metrics`` under vLLM's names, ``reference/fast_metrics.py``), so every variant hits the same
server; the variants are interleaved round by round (off, 1 s, 0.1 s; then again), so that they
share the machine's noise, and the table gives per-variant medians and their ratio to ``off``.
Truth per request: TTFT 100 ms, E2E 730 ms; each request's error is also given net of how late
the server sent its first and last token (``GET /stats/requests``, by ``X-Request-Id``).

    python benchmarks/bench_server_metrics.py                  # 3 rounds x 3 variants, 10 s each
    python benchmarks/bench_server_metrics.py --quick          # 1 round, 2 s runs, no docs
    python benchmarks/bench_server_metrics.py --from-log LOG   # the section from a run's output

Writes ``docs/benchmarks.md`` between the ``server-metrics`` markers; the rest is left alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _docs import write_section  # noqa: E402
from _truth import server_requests, server_stats, start_truth_server, stop, truth_targets  # noqa: E402
from bench_load import E2E_S, ITL_S, SCENARIO, TOKENS, TTFT_S, fmt  # noqa: E402

START, END = "<!-- server-metrics:start -->", "<!-- server-metrics:end -->"
READING = (
    "Reading: the sampler's work (one GET of a 55-line page and its parse per interval, in a thread"
    " of the `servecheck load` process) is paid per scrape, not per token: the split under the table"
    " is what carries over to other token rates, and `tree CPU-s / 10k tokens` divides it, with the start-up"
    " of both processes (several CPU-s, the bulk of `outside Locust`), by the tokens a run streamed, so"
    " a run that streamed fewer tokens (the machine took its core) shows a higher figure for that"
    " reason alone. The Locust column is the check that the sampler does not slow the generator"
    " itself: it runs in another process. What the default interval adds is the pre-run scrape, the"
    " settled scrapes after the run and the reconciliation, plus one scrape a second."
)
# (label, the --server-metrics option or None for the default, which is 1 s for this target)
VARIANTS: tuple[tuple[str, str | None], ...] = (
    ("off", "off"),
    ("1 s (default)", None),
    ("0.1 s", "100ms"),
)
KEYS = (
    "tree_cpu_per_10k",
    "locust_cpu_per_10k",
    "outside_cpu_s",
    "tree_cpu_s",
    "tokens_per_s",
    "ttft_err_p50",
    "ttft_err_p99",
    "e2e_err_p99",
    "ttft_net_p99",
    "e2e_net_p99",
)


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values), q)) if values else None


def one_run(
    tmp: Path, base: str, variant: str | None, users: int, duration: float, run_id: str
) -> dict[str, Any]:
    """``servecheck load`` as a child process; its process tree's CPU from ``os.wait4``."""
    out = tmp / "reports"
    cmd = [
        sys.executable, "-m", "servecheck", "load", "--targets-file", str(truth_targets(tmp, base)),
        "--target", "bench", "--out", str(out), "--run-id", run_id,
        "--scenario", str(tmp / "bench_scenario.py"), "--users", str(users),
        "--duration", f"{duration:g}s", "--no-tokenize", "--cpus", "0", "--allow-lag", "--quiet",
    ]  # fmt: skip
    if variant is not None:
        cmd += ["--server-metrics", variant]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    text = child.stdout.read().decode(errors="replace") if child.stdout else ""
    _, status, ru = os.wait4(child.pid, 0)
    wall = time.monotonic() - t0
    rc = os.waitstatus_to_exitcode(status)
    summary_path = out / run_id / "summary.json"
    if not summary_path.exists():
        raise RuntimeError(f"servecheck load exited {rc} without a summary: {text[-800:]}")
    s = json.loads(summary_path.read_text(encoding="utf-8"))
    recs = [
        json.loads(line)
        for line in (out / run_id / "records.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    ok = [r for r in recs if not r.get("error") and r.get("ttft") is not None]
    late = server_requests(base)
    tokens = sum(int(r.get("output_tokens") or 0) for r in ok)
    tree_cpu = ru.ru_utime + ru.ru_stime
    gen = s.get("generator") or {}
    ms = 1000.0
    net = [
        (
            (r["ttft"] - TTFT_S) * ms - late[r["request_id"]][0],
            (r["e2e"] - E2E_S) * ms - late[r["request_id"]][1],
        )
        for r in ok
        if r.get("request_id") in late and r.get("e2e") is not None
    ]
    server = s.get("server") or {}
    sampled = server.get("sampled") or []
    return {
        "variant": variant or "default",
        "users": users,
        "duration": duration,
        "rc": rc,
        "verdict": s.get("verdict"),
        "ok": len(ok),
        "errors": (s.get("requests") or {}).get("errors"),
        "tokens": tokens,
        "wall_s": round(wall, 2),
        "loadavg": round(load_before, 2),
        "tree_cpu_s": round(tree_cpu, 3),
        "locust_cpu_s": gen.get("cpu_s"),
        "outside_cpu_s": round(tree_cpu - float(gen.get("cpu_s") or 0.0), 3),
        "tree_cpu_per_10k": tree_cpu / tokens * 10_000 if tokens else None,
        "locust_cpu_per_10k": gen.get("cpu_s_per_10k_tokens"),
        "tokens_per_s": (s.get("throughput") or {}).get("output_tokens_per_s"),
        "ttft_err_p50": _pct([(r["ttft"] - TTFT_S) * ms for r in ok], 50),
        "ttft_err_p99": _pct([(r["ttft"] - TTFT_S) * ms for r in ok], 99),
        "e2e_err_p99": _pct([(r["e2e"] - E2E_S) * ms for r in ok if r.get("e2e") is not None], 99),
        "ttft_net_p99": _pct([a for a, _ in net], 99),
        "e2e_net_p99": _pct([b for _, b in net], 99),
        "server_available": server.get("available"),
        "scrapes": sum(
            int(x.get("ticks") or 0)
            for x in sampled
            if isinstance(x, dict) and x.get("source") == "prometheus"
        ),
        "reconciled": [
            f"{row.get('quantity')}: {row.get('engine')} / {row.get('client')}"
            for row in server.get("reconciliation") or []
            if isinstance(row, dict)
        ],
    }


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {"runs": len(runs), "ok": sum(r["ok"] for r in runs)}
    for key in (*KEYS, "scrapes", "wall_s", "loadavg"):
        values = [float(r[key]) for r in runs if isinstance(r.get(key), int | float)]
        row[key] = statistics.median(values) if values else None
    row["errors"] = sum(int(r.get("errors") or 0) for r in runs)
    row["server_available"] = all(r.get("server_available") for r in runs)
    return row


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def _extra(r: dict[str, Any], off: dict[str, Any]) -> float | None:
    """The tree's CPU-s beyond ``off``'s (medians; off's row: 0 by definition)."""
    a, b = r.get("tree_cpu_s"), off.get("tree_cpu_s")
    return a - b if a is not None and b is not None else None


def split(rows: dict[str, dict[str, Any]]) -> tuple[float | None, float | None]:
    """(CPU-s per scrape, fixed CPU-s per run) from the two sampled rows' extra CPU over off:
    the extra grows with the scrapes (per scrape = slope), the rest is paid once a run (the
    scrapes before and after, the recorder's start, the reconciliation)."""
    off, one, fast = (rows[label] for label, _ in VARIANTS)
    e1, e2 = _extra(one, off), _extra(fast, off)
    n1, n2 = one.get("scrapes"), fast.get("scrapes")
    if e1 is None or e2 is None or not n1 or not n2 or n2 <= n1:
        return None, None
    per = (e2 - e1) / (n2 - n1)
    return per, e1 - per * n1


def render(rows: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    off = rows["off"]
    lines = [
        START,
        "## Cost of sampling the engine's /metrics (`benchmarks/bench_server_metrics.py`)",
        "",
        f"`python benchmarks/bench_server_metrics.py` on {meta['machine']}, Python {meta['python']},"
        f" {meta['cpus']} CPUs, {meta['date']}. `servecheck load` (the command line, {meta['users']}"
        f" closed-loop streams, {meta['duration']:g} s each) with `--server-metrics off`, the default"
        " (1 s) and `--server-metrics 100ms`, against **one** calibration server for all runs"
        " (`servecheck.reference.fast` on core 1, TTFT 100 ms, ITL 10 ms, 64 tokens, with its"
        " `/metrics` under vLLM's names); the command and its Locust child pinned to core 0."
        f" Variants interleaved, {meta['rounds']} rounds; medians per variant and their ratio to `off`.",
        "`tree CPU`: the whole process tree's CPU (`os.wait4` rusage of the command, which includes"
        " the Locust child it waited for: imports, the pre- and post-run scrapes, the sampler"
        " thread, the summary and reconciliation); `Locust CPU`: the generator's own figure"
        " (`generator.cpu_s_per_10k_tokens`, since its first request), which the sampler, running in"
        " the parent, does not touch; `outside Locust`: tree CPU - Locust CPU, per run (mostly the two"
        " processes' start-up); `beside off`: the tree's median CPU-s minus off's (noise can make"
        " it negative); `scrapes`: the sampler's scrapes per run. Errors in ms"
        " against the truth (TTFT 100 ms, E2E 730 ms); `net`: less the server's own lateness per request.",
        "",
        "| --server-metrics | runs | ok | scrapes | tree CPU-s / 10k tokens | ratio | Locust CPU-s / 10k tokens"
        " | ratio | outside Locust CPU-s | ratio | tree CPU-s beside off | tokens/s | ratio | TTFT err p50 | TTFT err p99"
        " | E2E err p99 | TTFT net p99 | E2E net p99 | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, r in rows.items():
        lines.append(
            f"| {label} | {r['runs']} | {r['ok']} | {fmt(r.get('scrapes'), '.0f')}"
            f" | {fmt(r.get('tree_cpu_per_10k'), '.3f')} | {_ratio(r.get('tree_cpu_per_10k'), off.get('tree_cpu_per_10k'))}"
            f" | {fmt(r.get('locust_cpu_per_10k'), '.3f')} | {_ratio(r.get('locust_cpu_per_10k'), off.get('locust_cpu_per_10k'))}"
            f" | {fmt(r.get('outside_cpu_s'), '.2f')} | {_ratio(r.get('outside_cpu_s'), off.get('outside_cpu_s'))}"
            f" | {fmt(_extra(r, off), '+.2f')}"
            f" | {fmt(r.get('tokens_per_s'), '.0f')} | {_ratio(r.get('tokens_per_s'), off.get('tokens_per_s'))}"
            f" | {fmt(r.get('ttft_err_p50'), '.2f')} | {fmt(r.get('ttft_err_p99'), '.2f')}"
            f" | {fmt(r.get('e2e_err_p99'), '.2f')} | {fmt(r.get('ttft_net_p99'), '.2f')}"
            f" | {fmt(r.get('e2e_net_p99'), '.2f')} | {fmt(r.get('loadavg'), '.1f')} |"
        )
    per, fixed = split(rows)
    if per is not None and fixed is not None:
        rate = off.get("tokens_per_s") or 0.0
        lines += [
            "",
            f"Split of the extra CPU: **{per * 1000:.1f} CPU-ms per scrape** (the slope between the"
            f" 1 s and 0.1 s rows) and {fixed:.2f} CPU-s once per run (the default's extra less its"
            " scrapes: the scrapes before and after, the recorder's start, the reconciliation)."
            + (
                f" At this run's {rate:.0f} tokens/s that is {per / 1.0 / rate * 10_000:.4f} CPU-s"
                f" per 10k tokens at 1 s and {per / 0.1 / rate * 10_000:.4f} at 0.1 s, beside the"
                f" generator's {off.get('locust_cpu_per_10k') or 0:.3f}."
                if rate
                else ""
            ),
        ]
    busy = max(float(r.get("loadavg") or 0) for r in rows.values())
    if busy > 2:
        lines += [
            "",
            f"Taken on a shared machine at load average up to {busy:.0f} (other sessions' work on"
            " its 2 cores; median load average per variant in the last column): the absolute figures"
            " carry that load, so read the ratios and differences between variants of the same run,"
            " whose rounds were interleaved so as to share it.",
        ]
    lines += ["", meta.get("reading", ""), END, ""]
    return "\n".join(lines)


def _meta(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    first = next(iter(runs.values()))[0]
    return {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
        "users": first["users"],
        "duration": first["duration"],
        "rounds": min(len(r) for r in runs.values()),
        "reading": READING,
    }


def rerender(log: Path) -> int:
    """The section from a saved run's output (its one JSON line per run)."""
    label_of = {variant or "default": label for label, variant in VARIANTS}
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in VARIANTS}
    for line in log.read_text(encoding="utf-8").splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            runs[label_of[row["variant"]]].append(row)
    block = render({label: medians(r) for label, r in runs.items()}, _meta(runs))
    print(block)
    write_section(START, END, block)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one round of 2 s runs; no docs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--users", type=int, default=256)
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument(
        "--from-log", type=Path, help="write the section from the JSON lines a run printed"
    )
    args = ap.parse_args()
    if args.from_log:
        return rerender(args.from_log)
    rounds, duration = (1, 2.0) if args.quick else (args.rounds, args.duration)
    tmp = Path(tempfile.mkdtemp(prefix="bench-server-metrics-"))
    (tmp / "bench_scenario.py").write_text(SCENARIO)
    proc, base = start_truth_server(tmp, TTFT_S, ITL_S, TOKENS, cpu="1")
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in VARIANTS}
    t0 = time.monotonic()
    try:
        for i in range(rounds):
            for j, (label, variant) in enumerate(VARIANTS):
                row = one_run(tmp, base, variant, args.users, duration, f"r{i}-v{j}")
                runs[label].append(row)
                print(json.dumps(row), flush=True)
        late = server_stats(base)
    finally:
        stop(proc)
    print(
        f"server lateness over all runs: {json.dumps(late)}; {time.monotonic() - t0:.0f} s in all"
    )
    block = render({label: medians(r) for label, r in runs.items()}, _meta(runs))
    print(block)
    if not args.quick and not args.no_docs:
        write_section(START, END, block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
