"""How accurate are the reasoning phases of ``servecheck load``? Against a server with known timings.

The calibration server (``servecheck.reference.fast --reasoning-tokens 24``) streams 64 tokens per
answer, TTFT 100 ms, one token every 10 ms on an absolute schedule; the first 24 are reasoning
(``delta.reasoning_content``), the other 40 answer. So every request's truth is: TTFT = TTFR =
100 ms, TTFA = 100 + 24 x 10 = 340 ms, E2E 730 ms, ITL 10 ms in both phases, 24 reasoning and 40
answer tokens. Same pinning as ``bench_load.py`` (server on CPU 1, generator on CPU 0); the
server reports how late it sent each request's first token and its first answer token, so the
errors are also given net of the server's own lateness.

The goal: TTFA within the accuracy of today's TTFT (``bench_load.py``'s rows), and TTFT unchanged
when the first token is a reasoning one.

    python benchmarks/bench_reasoning.py            # 16 and 256 streams, 3 runs each, 20 s
    python benchmarks/bench_reasoning.py --quick    # one short run per level, no docs

Writes ``docs/benchmarks.md`` between the ``reasoning`` markers; the rest is left alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servecheck.config.model import Target  # noqa: E402
from servecheck.load.run import run_load  # noqa: E402
from servecheck.records.parquet import read_run_records  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from _docs import write_section  # noqa: E402
from _truth import server_requests, server_stats, start_truth_server, stop  # noqa: E402
from bench_load import SCENARIO, bench_spec, fmt  # noqa: E402

START, END = "<!-- reasoning:start -->", "<!-- reasoning:end -->"
TTFT_S, ITL_S, TOKENS, THINK = 0.100, 0.010, 64, 24
TTFA_S = TTFT_S + THINK * ITL_S


def _pcts(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    arr = np.asarray(values)
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 99))


def one_level(tmp: Path, scenario: Path, users: int, duration: float) -> dict[str, Any]:
    """One closed-loop run of ``users`` streams against a fresh reasoning calibration server."""
    proc, base = start_truth_server(tmp, TTFT_S, ITL_S, TOKENS, cpu="1", reasoning_tokens=THINK)
    try:
        target = Target(
            name="bench",
            base_url=base,
            engine="reference",
            models=["truth"],
            timeout_s=120,
            reasoning="auto",
        )
        load_before = os.getloadavg()[0]
        res = run_load(bench_spec(target, tmp, scenario, users, duration))
        server = server_stats(base)
        late = server_requests(base)
    finally:
        stop(proc)
    recs = [r for r in read_run_records(res.records_path.parent) if not r.get("error")]
    row: dict[str, Any] = {"users": users, "ok": len(recs), "loadavg": round(load_before, 2)}
    row["server_late_p99"] = server.get("late_p99_ms")
    if not recs:
        return row
    ms = 1000.0
    ttft = [(r["ttft"] - TTFT_S) * ms for r in recs]
    ttfa = [(r["ttfa"] - TTFA_S) * ms for r in recs if r.get("ttfa") is not None]
    matched = [r for r in recs if len(late.get(r.get("request_id", ""), [])) == 3]
    ttft_net = [(r["ttft"] - TTFT_S) * ms - late[r["request_id"]][0] for r in matched]
    ttfa_net = [(r["ttfa"] - TTFA_S) * ms - late[r["request_id"]][2] for r in matched]
    itl_r = [x * ms for r in recs for x in r.get("itls_reasoning") or ()]
    itl_a = [x * ms for r in recs for x in r.get("itls_answer") or ()]
    row.update(
        {
            "ttfr_is_ttft": all(r.get("ttfr") == r["ttft"] for r in recs),
            "reasoning_ok": sum(
                1
                for r in recs
                if r.get("reasoning_tokens") == THINK and r.get("reasoning_tokens_client") == THINK
            ),
            "matched": len(matched) / len(recs),
        }
    )
    for name, values in (
        ("ttft_err", ttft),
        ("ttfa_err", ttfa),
        ("ttft_net", ttft_net),
        ("ttfa_net", ttfa_net),
        ("itl_reasoning", itl_r),
        ("itl_answer", itl_a),
    ):
        row[f"{name}_p50"], row[f"{name}_p99"] = _pcts(values)
    return row


def median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    row = dict(runs[len(runs) // 2])
    for key, value in runs[0].items():
        values = [r.get(key) for r in runs]
        if isinstance(value, float) and all(isinstance(v, float | int) for v in values):
            row[key] = float(np.median(values))
    row["ok"] = sum(int(r.get("ok") or 0) for r in runs)
    row["reasoning_ok"] = sum(int(r.get("reasoning_ok") or 0) for r in runs)
    row["ttfr_is_ttft"] = all(r.get("ttfr_is_ttft") for r in runs)
    row["runs"] = len(runs)
    return row


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        START,
        "## Reasoning phases (`servecheck load` on a reasoning stream)",
        "",
        f"`benchmarks/bench_reasoning.py` on {meta['machine']}, Python {meta['python']}, "
        f"{meta['cpus']} CPUs, {meta['date']}.",
        f"Calibration server with `--reasoning-tokens {THINK}`: TTFT {TTFT_S * 1000:g} ms, ITL "
        f"{ITL_S * 1000:g} ms, {TOKENS} tokens of which the first {THINK} are `reasoning_content`; "
        f"truth per request: TTFT = TTFR = {TTFT_S * 1000:g} ms, TTFA = {TTFA_S * 1000:g} ms, "
        f"{THINK} reasoning and {TOKENS - THINK} answer tokens. Same pinning and closed loop as the "
        "load section above; medians of the runs; errors in ms (measured minus truth); `net` takes "
        "out how late the server sent that request's first token and its first answer token "
        "(`GET /stats/requests`).",
        "",
        "| streams | runs | ok | counts right | TTFR = TTFT | TTFT err p50 | TTFT err p99 "
        "| TTFA err p50 | TTFA err p99 | TTFT net p99 | TTFA net p99 | ITL reasoning p50 "
        "| ITL answer p50 | server late p99 | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['users']} | {r.get('runs', 1)} | {r['ok']} | {r.get('reasoning_ok', 0)} "
            f"| {'yes' if r.get('ttfr_is_ttft') else 'no'} | {fmt(r.get('ttft_err_p50'), '.2f')} "
            f"| {fmt(r.get('ttft_err_p99'))} | {fmt(r.get('ttfa_err_p50'), '.2f')} "
            f"| {fmt(r.get('ttfa_err_p99'))} | {fmt(r.get('ttft_net_p99'), '.2f')} "
            f"| {fmt(r.get('ttfa_net_p99'), '.2f')} | {fmt(r.get('itl_reasoning_p50'))} "
            f"| {fmt(r.get('itl_answer_p50'))} | {fmt(r.get('server_late_p99'))} | {r['loadavg']} |"
        )
    busy = max(float(r["loadavg"]) for r in rows)
    lines += [
        "",
        f"Taken with the shared machine at load average up to {busy:g} (other sessions running); "
        "where that is above ~2 both cores were contended and the p99 columns show it (the "
        "server's own lateness too), so compare TTFA with TTFT of the same row rather than with "
        "the load section's rows taken on a quiet machine."
        if busy > 2
        else "",
        "",
        "`counts right`: requests whose reasoning tokens were 24 both in usage and by the client's "
        "count of reasoning chunks. TTFA is the same kind of measurement as TTFT (one arrival "
        "stamp, taken by the same reader), so its error is bounded the same way; compare the TTFA "
        "columns with the TTFT columns of the same run.",
        END,
        "",
    ]
    return "\n".join(lines)


def _meta() -> dict[str, Any]:
    return {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }


def rerender(log: Path) -> int:
    """Write the section from a saved run log (its per-run JSON lines), grouped by level."""
    runs: dict[int, list[dict[str, Any]]] = {}
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            runs.setdefault(int(row["users"]), []).append(row)
    block = render([median(r) for r in runs.values()], _meta())
    print(block)
    write_section(START, END, block)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one short run per level; no docs")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--levels", default="16,256")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--from-log",
        type=Path,
        help="re-render from the JSON lines (one per run) a previous run printed, in level order",
    )
    args = ap.parse_args()
    if args.from_log:
        return rerender(args.from_log)
    duration = 5.0 if args.quick else args.duration
    tmp = Path(tempfile.mkdtemp(prefix="bench-reasoning-"))
    scenario = tmp / "bench_scenario.py"
    scenario.write_text(SCENARIO)
    rows = []
    for users in (int(x) for x in args.levels.split(",")):
        runs = []
        for _ in range(1 if args.quick else args.repeats):
            runs.append(one_level(tmp, scenario, users, duration))
            print(json.dumps(runs[-1]), flush=True)
        rows.append(median(runs))
    block = render(rows, _meta())
    print(block)
    if not args.quick:
        write_section(START, END, block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
