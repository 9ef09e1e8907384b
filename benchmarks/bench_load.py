"""How accurate and how cheap is ``servecheck load``? Measured against a server with known timings.

The calibration server (``servecheck.reference.fast``, started by ``benchmarks/_truth.py``) streams
with TTFT 100 ms and one token every 10 ms on an absolute schedule, 64 tokens per answer; so every
request's true TTFT is 100 ms, its true E2E 100 + 63 x 10 = 730 ms and the true ITL 10 ms. It is
pinned to one core (``taskset -c 1``), the generator (Locust) to the other (``--cpus 0``), and it
reports its own lateness (how long after its due time each write left): where that is small, the
truth held and every error in the tables is the generator's.

Reported per level of concurrent streams: the error of each request's TTFT and E2E against the
truth (p50/p99), ITL p50/p99, output tokens/s, generator CPU seconds per 10k streamed tokens, the
generator's event-loop lag and "behind" flag, how the tokens were timed (kernel receive stamps or
the reader's clock) and the server's lateness. A sweep over more streams finds the highest
streamed-token rate one generator core sustains with ITL p50 within 20 % of the truth.

When ``docs/bench-peers.json`` exists (``benchmarks/bench_peers.py``: GuideLLM, AIPerf and
inference-perf against the same server, same pinning), their figures are put beside ours.

    python benchmarks/bench_load.py                 # full: 16 and 256 streams, sweep
    python benchmarks/bench_load.py --quick         # short runs (a smoke test of the bench)

Writes ``docs/benchmarks.md`` between the ``load`` markers; the rest of the file is left alone.
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
from servecheck.load.generator.reactor import ENV_READER  # noqa: E402
from servecheck.load.run import LoadSpec, run_load  # noqa: E402
from servecheck.records.parquet import read_run_records  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from _docs import write_section  # noqa: E402
from _truth import (  # noqa: E402
    SERVERS,
    add_server_option,
    server_requests,
    server_stats,
    start_truth_server,
    stop,
)

START, END = "<!-- load:start -->", "<!-- load:end -->"
TTFT_S, ITL_S, TOKENS = 0.100, 0.010, 64
E2E_S = TTFT_S + (TOKENS - 1) * ITL_S
SCENARIO = '''"""Benchmark scenario: 64-token answers to a short prompt."""
import locust  # noqa: F401,I001
from servecheck.load.generator.locust_user import LLMUser, scenario_shape
from servecheck.load.workload.prompts import PromptSpec


class BenchUser(LLMUser):
    scenario = "bench"
    mix = [PromptSpec(prompt_tokens=32, output_tokens=64)]


LoadShape = scenario_shape()
'''


ITL_TOLERANCE = 0.20


def bench_spec(
    target: Target,
    tmp: Path,
    scenario: Path,
    users: int,
    duration: float,
    processes: int | None = None,
    cpus: str = "0",
) -> LoadSpec:
    """The closed-loop run every calibration benchmark makes: generator pinned to CPU 0 (or to
    ``cpus``, with ``processes`` Locust workers)."""
    return LoadSpec(
        target=target,
        scenario=str(scenario),
        users=users,
        duration_s=duration,
        out_dir=tmp / "reports",
        use_tokenize=False,
        cpus=cpus,
        processes=processes,
        progress=False,
        allow_lag=True,
        drain_s=10.0,
    )


def one_level(
    tmp: Path,
    scenario: Path,
    users: int,
    duration: float,
    reader: str | None = None,
    processes: int | None = None,
    cpus: str = "0",
    server: str = "python",
) -> dict[str, Any]:
    """One closed-loop run of ``users`` streams against a fresh calibration server (``server``:
    ``python`` or ``c``, ``_truth.start_truth_server``'s ``impl``); ``reader`` forces the
    generator's reader (``loop``: the pure-Python one) through ``SERVECHECK_READER``;
    ``processes`` > 1 runs that many Locust worker processes, on ``cpus``."""
    proc, base = start_truth_server(tmp, TTFT_S, ITL_S, TOKENS, cpu="1", impl=server)
    saved = os.environ.get(ENV_READER)
    if reader:
        os.environ[ENV_READER] = reader
    try:
        target = Target(
            name="bench", base_url=base, engine="reference", models=["truth"], timeout_s=120
        )
        load_before = os.getloadavg()[0]
        res = run_load(bench_spec(target, tmp, scenario, users, duration, processes, cpus))
        stats = server_stats(base)
        per_request = server_requests(base)
    finally:
        stop(proc)
        if saved is None:
            os.environ.pop(ENV_READER, None)
        else:
            os.environ[ENV_READER] = saved
    recs = [r for r in read_run_records(res.records_path.parent) if not r.get("error")]
    s = res.summary
    row: dict[str, Any] = {
        "users": users,
        "ok": len(recs),
        "errors": s["requests"]["errors"],
        "loadavg": round(load_before, 2),
        "server": stats,
        "server_impl": server,
        "clock": s["generator"]["reader"]["clock"],
        "reader": "+".join(s["generator"]["reader"]["kinds"]),
    }
    if not recs:
        return row
    ttft_err = np.array([r["ttft"] - TTFT_S for r in recs]) * 1000
    e2e_err = np.array([r["e2e"] - E2E_S for r in recs]) * 1000
    itl = np.array([x for r in recs for x in r["itls"]]) * 1000
    # Net of the server's own lateness: each request's error against when the server actually sent
    # its first and last token (/stats/requests, keyed by the X-Request-Id the generator sends).
    net = [
        (
            r["ttft"] * 1000 - TTFT_S * 1000 - per_request[r["request_id"]][0],
            r["e2e"] * 1000 - E2E_S * 1000 - per_request[r["request_id"]][1],
        )
        for r in recs
        if r.get("request_id") in per_request
    ]
    ttft_net = np.array([a for a, _ in net])
    e2e_net = np.array([b for _, b in net])
    row.update(
        {
            "full_answers": sum(1 for r in recs if r.get("output_tokens") == TOKENS),
            "ttft_err_p50": float(np.percentile(ttft_err, 50)),
            "ttft_err_p99": float(np.percentile(ttft_err, 99)),
            "e2e_err_p50": float(np.percentile(e2e_err, 50)),
            "e2e_err_p99": float(np.percentile(e2e_err, 99)),
            "net_share": len(net) / len(recs),
            "ttft_net_p50": float(np.percentile(ttft_net, 50)) if len(net) else None,
            "ttft_net_p99": float(np.percentile(ttft_net, 99)) if len(net) else None,
            "e2e_net_p50": float(np.percentile(e2e_net, 50)) if len(net) else None,
            "e2e_net_p99": float(np.percentile(e2e_net, 99)) if len(net) else None,
            "itl_p50": float(np.percentile(itl, 50)) if len(itl) else None,
            "itl_p99": float(np.percentile(itl, 99)) if len(itl) else None,
            "itl_mean": float(itl.mean()) if len(itl) else None,
            "tokens_per_s": s["throughput"]["output_tokens_per_s"],
            # wrk's definition (bench_capacity.py): tokens of the responses completed within the
            # run's duration from the first send, over that duration (no ramp or drain in it).
            "steady_tokens_per_s": _steady(recs, duration),
            "cpu_per_10k": s["generator"]["cpu_s_per_10k_tokens"],
            "gen_cpu_util": (s["generator"]["cpu_s"] / s["window_s"])
            if s.get("window_s")
            else None,
            "loop_lag_p99": s["schedule"]["loop_lag_ms"].get("p99"),
            "behind": s["schedule"]["behind"],
            "thread_us_per_read": (s["generator"]["reader"].get("thread") or {}).get("us_per_read"),
        }
    )
    return row


def _steady(recs: list[dict[str, Any]], duration: float) -> float:
    t0 = min(r["t_sent"] for r in recs)
    done = [r for r in recs if r.get("t_done") is not None and r["t_done"] <= t0 + duration]
    return sum(int(r.get("output_tokens") or 0) for r in done) / duration


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row of per-key medians over repeated runs (this machine is noisy); ``ok`` is summed and
    ``runs``/``ttft_err_p99_range`` say how many runs and how far apart their TTFT p99 were."""
    if len(runs) == 1:
        return {**runs[0], "runs": 1}
    row: dict[str, Any] = dict(runs[len(runs) // 2])
    for key, value in runs[0].items():
        values = [r.get(key) for r in runs]
        if isinstance(value, float) and all(isinstance(v, float | int) for v in values):
            row[key] = float(np.median([float(v) for v in values if v is not None]))
    row["server"] = {
        k: float(np.median([r["server"][k] for r in runs]))
        for k in runs[0]["server"]
        if all(isinstance(r.get("server", {}).get(k), float | int) for r in runs)
    }
    row["ok"] = sum(int(r.get("ok") or 0) for r in runs)
    row["behind"] = any(r.get("behind") for r in runs)
    p99s = [r["ttft_err_p99"] for r in runs if r.get("ttft_err_p99") is not None]
    row["ttft_err_p99_range"] = (min(p99s), max(p99s)) if p99s else None
    row["runs"] = len(runs)
    return row


def itl_ok(r: dict[str, Any]) -> bool:
    truth = ITL_S * 1000
    return (
        r.get("itl_p50") is not None
        and abs(r["itl_p50"] - truth) <= ITL_TOLERANCE * truth
        and abs((r.get("itl_mean") or 0) - truth) <= ITL_TOLERANCE * truth
        and not r.get("errors")
    )


def fmt(x: Any, spec: str = ".1f") -> str:
    if x is None:
        return "-"
    return format(x, spec) if isinstance(x, float) else str(x)


def _range(r: dict[str, Any]) -> str:
    rng = r.get("ttft_err_p99_range")
    return f" ({rng[0]:.1f}-{rng[1]:.1f})" if rng else ""


def _late(r: dict[str, Any]) -> str:
    sv = r.get("server") or {}
    return f"{fmt(sv.get('late_p50_ms'), '.2f')} / {fmt(sv.get('late_p99_ms'), '.1f')}"


def peers_rows(streams: int) -> list[dict[str, Any]]:
    """Figures of the peer tools at this concurrency from ``docs/bench-peers.json``, if present."""
    path = ROOT / "docs" / "bench-peers.json"
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return []
    rows = data.get("summary", data) if isinstance(data, dict) else data
    return [r for r in rows if isinstance(r, dict) and r.get("streams") == streams]


def render(
    levels: list[dict[str, Any]],
    sweep: list[dict[str, Any]],
    best: dict[str, Any] | None,
    meta: dict[str, Any],
) -> str:
    lines = [
        START,
        "## Load generator (`servecheck load`)",
        "",
        f"`benchmarks/bench_load.py` on {meta['machine']}, Python {meta['python']}, {meta['cpus']} CPUs, {meta['date']}.",
        f"Calibration server ({SERVERS[meta.get('server', 'python')]}): TTFT 100 ms, ITL 10 ms, 64 tokens, pinned to CPU 1;"
        " Locust generator pinned to CPU 0 (`--cpus 0`), closed loop, one fresh server per run. Truth per request:"
        " TTFT 100 ms, E2E 730 ms, ITL 10 ms. Errors are measured minus truth, in ms; `server late` is the server's own"
        " lateness (p50 / p99 ms, how long after its due time each write left), so where it is small the truth held.",
        "Tokens are timed by the kernel's receive timestamps (`clock`); `reader` is who did the reads: `lane`"
        " (the native lane, the closed loop's default: a C thread that sends the requests and reads the"
        " exchanges, `load/generator/lane.py`), `thread` (the reactor's native reader thread) or `loop` (the"
        " pure-Python reader, used where the C extension is not built); measured here for comparison.",
        f"Load average (1 min) of the shared machine"
        f" when each run started is given ({meta['note']}).",
        "",
        "Each accuracy level is run several times (`runs`); the row shows per-column medians, and the range of"
        " the runs' TTFT p99 in brackets; `ok` is the total of successful requests.",
        "",
        "| streams | runs | ok | TTFT err p50 | TTFT err p99 | E2E err p50 | E2E err p99 | ITL p50 | ITL p99 | tokens/s"
        " | CPU-s / 10k tokens | gen. loop lag p99 | behind | reader / clock | server late | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in levels:
        lines.append(
            f"| {r['users']} | {r.get('runs', 1)} | {r['ok']} | {fmt(r.get('ttft_err_p50'), '.2f')} | {fmt(r.get('ttft_err_p99'))}{_range(r)}"
            f" | {fmt(r.get('e2e_err_p50'), '.2f')} | {fmt(r.get('e2e_err_p99'))} | {fmt(r.get('itl_p50'))} | {fmt(r.get('itl_p99'))}"
            f" | {fmt(r.get('tokens_per_s'), '.0f')} | {fmt(r.get('cpu_per_10k'), '.2f')} | {fmt(r.get('loop_lag_p99'))}"
            f" | {'yes' if r.get('behind') else 'no'} | {r.get('reader') or '-'} / {r.get('clock') or '-'} | {_late(r)}"
            f" | {fmt(r.get('loadavg'), '.1f')} |"
        )
    lines += [
        "",
        "The same runs net of the server's own lateness: each request's TTFT and E2E against when the server"
        " actually sent its first and last token (`GET /stats/requests`, matched by the `X-Request-Id` the"
        " generator sends), so what is left is the generator's error (and the loopback's):",
        "",
        "| streams | reader | requests matched | TTFT err p50 | TTFT err p99 | E2E err p50 | E2E err p99 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in levels:
        share = r.get("net_share")
        lines.append(
            f"| {r['users']} | {r.get('reader') or '-'} | {f'{share:.0%}' if share is not None else '-'}"
            f" | {fmt(r.get('ttft_net_p50'), '.2f')} | {fmt(r.get('ttft_net_p99'), '.2f')}"
            f" | {fmt(r.get('e2e_net_p50'), '.2f')} | {fmt(r.get('e2e_net_p99'), '.2f')} |"
        )

    def tool_row(name: str, users: int, d: dict[str, Any], p50: str, late: Any) -> str:
        return (
            f"| {name} | {users} | {fmt(d.get('ttft_err_p50'), p50)} | {fmt(d.get('ttft_err_p99'))}"
            f" | {fmt(d.get('e2e_err_p50'), p50)} | {fmt(d.get('e2e_err_p99'))} | {fmt(d.get('cpu_per_10k'), '.2f')}"
            f" | {fmt(late)} |"
        )

    peer_lines = []
    for r in (lv for lv in levels if lv.get("reader") != "loop"):
        for p in peers_rows(r["users"]):
            peer_lines.append(
                tool_row(
                    f"{p.get('tool')} {p.get('version') or ''}",
                    r["users"],
                    p,
                    ".1f",
                    p.get("server_late_p99"),
                )
            )
        if r.get("ttft_err_p50") is not None:
            peer_lines.append(
                tool_row(
                    "**servecheck load**",
                    r["users"],
                    r,
                    ".2f",
                    (r.get("server") or {}).get("late_p99_ms"),
                )
            )
    if any(not line.startswith("| **servecheck") for line in peer_lines):
        lines += [
            "",
            "Beside the peer tools, same pinning (their figures from `docs/bench-peers.json`, measured by"
            " `benchmarks/bench_peers.py` against the Python calibration server; how each was run is in"
            " the peers section; medians of its repeats):",
            "",
            "| tool | streams | TTFT err p50 | TTFT err p99 | E2E err p50 | E2E err p99 | CPU-s / 10k tokens | server late p99 |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
            *peer_lines,
            "",
            "Where `server late p99` is large the server's core was busy during that tool's runs, so part of that"
            " tool's error is the server's.",
        ]
    lines += [
        "",
        f"Sweep for the highest streamed-token rate with ITL p50 and mean within {ITL_TOLERANCE:.0%} of 10 ms:",
        "",
        "| streams | tokens/s | ITL p50 | ITL mean | ITL p99 | TTFT err p99 | CPU-s / 10k tokens | generator CPU"
        " | reader thread us/read | behind | server late |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in sweep:
        util = r.get("gen_cpu_util")
        lines.append(
            f"| {r['users']} | {fmt(r.get('tokens_per_s'), '.0f')} | {fmt(r.get('itl_p50'))} | {fmt(r.get('itl_mean'))}"
            f" | {fmt(r.get('itl_p99'))} | {fmt(r.get('ttft_err_p99'))} | {fmt(r.get('cpu_per_10k'), '.2f')}"
            f" | {f'{util:.0%}' if util is not None else '-'} | {fmt(r.get('thread_us_per_read'))}"
            f" | {'yes' if r.get('behind') else 'no'} | {_late(r)} |"
        )
    if best:
        lines += [
            "",
            f"Highest sustained: **{best['tokens_per_s']:.0f} streamed tokens/s** on one generator core"
            f" ({best['users']} streams, ITL p50 {best['itl_p50']:.1f} ms).",
        ]
    else:
        lines += ["", "No level kept ITL within 20 % of the truth."]
    lines += ["", *goals(levels, best), "", meta.get("reading", ""), END]
    return "\n".join(lines) + "\n"


def goals(levels: list[dict[str, Any]], best: dict[str, Any] | None) -> list[str]:
    """Issue 5's and issue 27's goals against this run's figures."""
    by = {r["users"]: r for r in levels if r.get("reader") != "loop"}
    rows = [
        "Goals (issue 5) against this run:",
        "",
        "| goal | measured | met |",
        "| --- | --- | --- |",
    ]

    def row(
        goal: str,
        value: float | None,
        bound: float,
        unit: str,
        higher: bool = False,
        note: str = "",
    ) -> None:
        ok = value is not None and (value >= bound if higher else value <= bound)
        rows.append(
            f"| {goal} | {fmt(value, '.2f') if value is not None else '-'} {unit}{note} | {'yes' if ok else '**no**'} |"
        )

    def worst(r: dict[str, Any], a: str, b: str) -> float | None:
        if r.get(a) is None or r.get(b) is None:
            return None
        return max(abs(r[a]), abs(r[b]))

    rows[0] = (
        "Goals (issues 5 and 27) against this run. The error goals are judged net of the calibration server's own"
        " lateness (the second accuracy table); the raw figure, which includes it, is in brackets:"
    )
    for n in (16, 256):
        r = by.get(n)
        if r is None:
            continue
        for q, bound in (("p50", 1.0), ("p99", 3.0)):
            raw = worst(r, f"ttft_err_{q}", f"e2e_err_{q}")
            net = worst(r, f"ttft_net_{q}", f"e2e_net_{q}")
            row(
                f"TTFT and E2E error {q} within {bound:g} ms at {n} streams (worse of the two)",
                net,
                bound,
                "ms",
                note=f" (raw {fmt(raw, '.2f')})",
            )
    if 256 in by:
        row(
            "at most 0.3 CPU-s per 10k streamed tokens (256 streams)",
            by[256].get("cpu_per_10k"),
            0.3,
            "CPU-s",
        )
    row(
        "one generator core sustains 100,000 streamed tokens/s with ITL within 20 %",
        best["tokens_per_s"] if best else None,
        100_000,
        "tokens/s",
        higher=True,
        note=f" ({best['users']} streams)" if best else "",
    )
    # Issue 27: that rate at 1024 or more streams, its TTFT and E2E error p99 within 1 ms (net).
    top = best if best and best["users"] >= 1024 else None
    row(
        "issue 27: at 1024+ streams, the best sustained level's TTFT and E2E error p99 within"
        " 1 ms (worse of the two)",
        worst(top, "ttft_net_p99", "e2e_net_p99") if top else None,
        1.0,
        "ms",
        note=(
            f" ({top['users']} streams; raw {fmt(worst(top, 'ttft_err_p99', 'e2e_err_p99'), '.2f')})"
            if top
            else " (no level of 1024+ streams sustained)"
        ),
    )
    row(
        "issue 27: one generator core sustains 100,000 streamed tokens/s at 1024+ streams",
        top["tokens_per_s"] if top else None,
        100_000,
        "tokens/s",
        higher=True,
    )
    return rows


READING = (
    "Reading: every read is timed by the kernel's receive timestamp (`SO_TIMESTAMPNS`), so the"
    " generator's own scheduling delay does not enter TTFT or ITL, and the p50 errors stay at tens of"
    " microseconds. What the stamps cannot undo is two tokens of one stream read together: they share the"
    " later stamp. So the reads are done by native code that holds no GIL and reads within about a"
    " millisecond of arrival however busy the Python side is: in the closed loop the lane (reader `lane`), a"
    " C thread that also sends each user's next request the moment its answer ends and hands each finished"
    " exchange to the reactor's parser in one piece; elsewhere the reactor's reader thread (reader"
    " `thread`), which also marks the common read (one chunk, one token event) so that the Python side"
    " counts it without parsing. The `loop` rows are"
    " the pure-Python reader (used where the C extension is not built) on the same machine: its pass over a"
    " few hundred ready sockets plus the parsing sometimes outlasts one ITL, and TTFT p99 rises to 11-20 ms,"
    " whole multiples of the ITL. The raw p99 errors left track the server's own lateness (`server late`): its"
    " core now and then stalls for a few ms (the VM's vCPU is descheduled), which is in the truth, not in the"
    " generator; the net table takes each request's own server lateness out and leaves well under a"
    " millisecond. Capacity: the reader thread's own cost (`reader thread us/read`: kernel TCP receive, ACK"
    " and wake-ups) is 5-8 us per read on this machine (7-11 on earlier ones), so at 100,000 tokens/s (one"
    " read each) the thread alone needs 50-80 % of the core before any Python runs; the Python side adds"
    " 4-5 us per token with the lane (the request's build, the exchange's replay, its record and Locust"
    " event, once a request). {server_limit} A level is flagged `behind` when the"
    " generator's event loop lagged (its closed-loop users then send late, which lowers the offered load)."
    " The sweep stops at the first level whose ITL leaves the band or that errors."
)
SERVER_LIMIT = {  # what the sweep's top level met, by calibration server (READING's {server_limit})
    "python": "The sweep's top level is near two limits at once: the generator core is ~90 % busy and"
    " the calibration server (Python, one write per token, on the other core) is late by a few hundred"
    " ms at p99.",
    "c": "The calibration server is the C one (one write per token, like the Python one, at a fraction"
    " of its CPU per write): where its `server late` stays small at the sweep's top, the limit there"
    " is the generator's.",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short runs; do not write docs")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--levels", default="16,256")
    ap.add_argument(
        "--loop-levels",
        default="256",
        help="levels also run with the pure-Python reader, for comparison",
    )
    ap.add_argument("--sweep", default="256,384,512,768,1024,1536")
    ap.add_argument(
        "--repeats", type=int, default=3, help="runs per accuracy level; the table shows medians"
    )
    add_server_option(ap)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    duration = 5.0 if args.quick else args.duration
    tmp = Path(tempfile.mkdtemp(prefix="bench-load-"))
    scenario = tmp / "bench_scenario.py"
    scenario.write_text(SCENARIO)

    def repeated(users: int, reader: str | None = None) -> dict[str, Any]:
        runs = []
        for _ in range(1 if args.quick else args.repeats):
            runs.append(
                one_level(tmp, scenario, users, duration, reader=reader, server=args.server)
            )
            print(json.dumps(runs[-1]), flush=True)
        return median_row(runs)

    levels = [repeated(int(x)) for x in args.levels.split(",")]
    if not args.quick:
        levels += [repeated(int(x), reader="loop") for x in args.loop_levels.split(",") if x]
    sweep: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    if not args.quick:
        for users in (int(x) for x in args.sweep.split(",")):
            known = [lv for lv in levels if lv["users"] == users and lv.get("reader") != "loop"]
            r = (
                known[0] if known else one_level(tmp, scenario, users, duration, server=args.server)
            )  # the median row, if measured
            if not known:
                print(json.dumps(r), flush=True)
            sweep.append(r)
            ok = itl_ok(r)
            if ok and (best is None or r["tokens_per_s"] > best["tokens_per_s"]):
                best = r
            if not ok:
                break
    meta = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
        "note": "last column; above ~2 other work shared the CPUs",
        "reading": READING.format(server_limit=SERVER_LIMIT[args.server]),
        "server": args.server,
    }
    block = render(levels, sweep, best, meta)
    print(block)
    if not args.quick and not args.no_docs:
        write_section(START, END, block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
