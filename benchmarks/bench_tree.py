"""What does a whole ``servecheck load`` cost, start to exit? Fixed and marginal CPU of the process tree.

``servecheck load`` runs Locust as a child; the figure issue 27 judges is the whole tree (the
command and its Locust child, imports, summary, report and records compaction included), taken
from the kernel (``os.wait4``'s rusage of the command). Each tree (a checkout: by default ``main``
in a detached worktree, the baseline, and this checkout) runs the calibration server's closed loop
(``benchmarks/_truth.py``: TTFT 100 ms, a token every 10 ms, 64 tokens; server on core 1, the
command and Locust on core 0, as in ``bench_load``) for two durations, so that the run's cost
splits into

* MARGINAL: (CPU(long) - CPU(short)) / (tokens(long) - tokens(short)), per 10k streamed tokens,
  what each further token costs (Locust's loop, the reader, the streaming summary, the records);
* FIXED: CPU(short) - marginal x tokens(short): start-up, the post-run summary and report.

Beside them, in the same run: the current tree with ``--records none`` (no per-request lines), and
a peer, a plain Locust ``FastHttpUser`` streaming the same requests from the same server at the
same concurrency for the same durations (its tree measured alike), i.e. what Locust alone costs;
and a C peer, ``wrk`` (``-t 1 -c N -d S``, ``benchmarks/wrk_chat.lua``'s streaming chat request, the
command line and output parsing of ``bench_capacity``), on the same core against the same server,
for the same durations and streams: its CPU is the wrk process's rusage, its tokens its complete
200 responses times the tokens each streams, so ``after / wrk`` and ``before / wrk`` say what the
whole tree costs per token beside a client that only reads the bytes (wrk takes whole seconds).
Issue 46's figures come from the same runs: each variant's tokens/s within the run (the answers
completed within the longer duration; wrk's own count of its completed responses) against what
the streams ask for, whether that is within schedule, the generator's saturation flag, and the
TTFT / E2E errors of every answer net of the server's own lateness (``/stats/requests``, read once
a level by ``X-Request-Id``). ``--server c`` (the default) is the C calibration server, which keeps
its schedule at 1024 streams where the Python one is late.
``post-run s`` is the wall time from Locust's end (the newest mtime of its log, stdout and CSVs)
to the command's exit, at the longer duration: the summary, the report and the compaction.

    python benchmarks/bench_tree.py                       # 256 and 1024 streams, 10 s and 30 s, 3 runs
    python benchmarks/bench_tree.py --quick               # 256 streams, 4 s and 10 s, 1 run, no docs
    python benchmarks/bench_tree.py --no-wrk --no-peer    # the two trees alone, no peers
    python benchmarks/bench_tree.py --before B --after A  # other checkouts
    python benchmarks/bench_tree.py --from-log LOG        # the section from a run's JSONL log
    python benchmarks/bench_tree.py --profile             # where the after tree's Locust child spends

``--profile`` runs the after tree's Locust child alone (the command line ``load/run.py`` builds,
with a short run's load-config.json) under a SIGPROF sampler (process CPU every 2 ms; the native
reader thread's time lands on whatever the main thread runs) and prints the functions by own and
by inclusive share; nothing is written to docs/.

Writes ``docs/benchmarks.md`` between the ``tree-cost`` markers; the rest is left alone.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _docs import write_section  # noqa: E402
from _truth import (  # noqa: E402
    SERVERS,
    add_server_option,
    server_requests,
    server_stats,
    start_truth_server,
    stop,
    truth_targets,
)
from bench_capacity import lua_max_tokens, parse_wrk, wrk_command  # noqa: E402
from bench_load import E2E_S, ITL_S, SCENARIO, TOKENS, TTFT_S, fmt  # noqa: E402

from servecheck.records.parquet import read_run_records  # noqa: E402

START, END = "<!-- tree-cost:start -->", "<!-- tree-cost:end -->"
GOAL = 0.15  # issue 27: whole tree CPU-s per 10k streamed tokens at 256 streams
# issue 46: a level is read within schedule when the run read at least this share of what its
# streams ask for at the true E2E, with its mean E2E within this tolerance of the truth (wrk's and
# ours alike: bench_capacity's rule, with the E2E mean for both)
OFFERED_SHARE, E2E_TOLERANCE = 0.80, 0.20
PEER_LOCUST, PEER_WRK = "peer: Locust FastHttpUser", "peer: wrk (C)"
MOVED = {  # issue 40's rooms: where a tree from before them keeps the scenario's imports
    "servecheck.load.generator.": "servecheck.load.",
    "servecheck.load.workload.": "servecheck.load.",
}
PEER = '''"""Plain Locust FastHttpUser: the calibration server's streamed chat completion, read to its end."""
import json, os, time
from locust import FastHttpUser, events, task

BODY = json.dumps({"model": "truth", "stream": True, "max_tokens": 64,
                   "messages": [{"role": "user", "content": "a short prompt " * 8}]})
TOKENS = [0]


class Peer(FastHttpUser):
    connection_timeout = 120.0
    network_timeout = 120.0
    concurrency = 1

    @task
    def chat(self):
        with self.client.post("/v1/chat/completions", data=BODY, stream=True, catch_response=True,
                              headers={"Content-Type": "application/json"}) as resp:
            n, tail = 0, b""
            while True:
                chunk = resp.stream.read(65536)
                if not chunk:
                    break
                buf = tail + chunk
                n += buf.count(b'"content":"') - buf.count(b'"content":""')
                tail = buf[-10:]  # shorter than the pattern: no match is counted twice
            TOKENS[0] += n


@events.quitting.add_listener
def _write(environment, **kw):
    with open(os.environ["PEER_TOKENS"], "w") as f:
        f.write(str(TOKENS[0]))
'''


SAMPLER = """
import collections, json, os, runpy, signal, sys
own, incl = collections.Counter(), collections.Counter()
def key(f):
    c = f.f_code
    path = c.co_filename.rsplit('site-packages/', 1)[-1].replace(os.getcwd() + '/', '')
    return f"{path}:{c.co_firstlineno}({c.co_name})"
def tick(sig, frame):
    if frame is not None:
        own[key(frame)] += 1
        seen = set()
        while frame is not None:
            seen.add(key(frame))
            frame = frame.f_back
        incl.update(seen)
signal.signal(signal.SIGPROF, tick)
signal.setitimer(signal.ITIMER_PROF, 0.002, 0.002)
sys.argv = sys.argv[1:]
try:
    runpy.run_module("locust", run_name="__main__", alter_sys=True)
finally:
    signal.setitimer(signal.ITIMER_PROF, 0, 0)
    with open(os.environ["SAMPLES"], "w") as f:
        json.dump({"own": own.most_common(30), "incl": incl.most_common(40), "n": sum(own.values())}, f)
"""


def any_layout(scenario: str) -> str:
    """``scenario`` importing from whichever layout the tree has: the before tree may predate
    issue 40's rooms (``load/locust_user.py``, not ``load/generator/locust_user.py``), and one
    scenario file serves both trees."""
    lines = scenario.splitlines()
    new = [x for x in lines if x.startswith("from servecheck.load.")]
    old = list(new)
    for a, b in MOVED.items():
        old = [x.replace(a, b) for x in old]
    block = "\n".join(new)
    if not new or block not in scenario:
        raise ValueError("the scenario's servecheck.load imports are not one block")
    both = (
        "try:\n    "
        + "\n    ".join(new)
        + "\nexcept ModuleNotFoundError:  # before issue 40\n    "
        + "\n    ".join(old)
    )
    return scenario.replace(block, both)


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, float, float, str]:
    """Run ``cmd`` on core 0; its whole tree's CPU (user + sys, waited-for children included),
    its wall time and its output (all of it: wrk's summary is parsed from it)."""
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    t0 = time.monotonic()
    child = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    text = child.stdout.read().decode(errors="replace") if child.stdout else ""
    _, status, ru = os.wait4(child.pid, 0)
    return (
        os.waitstatus_to_exitcode(status),
        ru.ru_utime + ru.ru_stime,
        time.monotonic() - t0,
        text,
    )


def run_servecheck(
    tree: Path, tmp: Path, base: str, users: int, duration: float, records: str | None
) -> dict[str, Any]:
    """One ``servecheck load`` of ``tree`` (its own code on PYTHONPATH, this interpreter)."""
    out = tmp / "reports"
    run_id = f"t{time.monotonic_ns()}"
    cmd = [
        sys.executable, "-m", "servecheck", "load", "--targets-file", str(truth_targets(tmp, base)),
        "--target", "bench", "--out", str(out), "--run-id", run_id,
        "--scenario", str(tmp / "bench_scenario.py"), "--users", str(users),
        "--duration", f"{duration:g}s", "--no-tokenize", "--cpus", "0", "--allow-lag", "--quiet",
    ]  # fmt: skip
    if records:
        cmd += ["--records", records]
    rc, cpu, wall, tail = _timed(cmd, tree, {**os.environ, "PYTHONPATH": str(tree)})
    exited = time.time()
    run_dir = out / run_id
    summary = run_dir / "summary.json"
    if not summary.exists():
        raise RuntimeError(f"servecheck load ({tree}) exited {rc} without a summary: {tail[-800:]}")
    s = json.loads(summary.read_text(encoding="utf-8"))
    gen = s.get("generator") or {}
    locust_end = max(p.stat().st_mtime for p in run_dir.glob("locust*") if p.is_file())
    row = {
        "rc": rc,
        "tokens": int(gen.get("tokens_streamed") or 0),
        "cpu_s": cpu,
        "locust_cpu_s": gen.get("cpu_s"),
        "wall_s": wall,
        "post_run_s": exited - locust_end,
        "errors": (s.get("requests") or {}).get("errors"),
        "behind": bool((s.get("schedule") or {}).get("behind")),
        **(rate_and_timings(run_dir, duration) if records != "none" else {}),
    }
    shutil.rmtree(run_dir, ignore_errors=True)
    if not row["tokens"]:  # a tree that cannot run the scenario writes a summary all the same
        raise RuntimeError(
            f"servecheck load ({tree}) exited {rc} and streamed nothing: {tail[-800:]}"
        )
    return row


def rate_and_timings(run_dir: Path, duration: float) -> dict[str, Any]:
    """From a run's records: the tokens/s of the answers completed within ``duration`` of the
    first send (wrk's count: no ramp or drain in it), their mean E2E, and each answer's
    ``(request id, TTFT, E2E)`` under ``_truth``, to be set against the server's own send times
    at the level's end (:func:`accuracy`)."""
    cols = ["request_id", "t_sent", "t_done", "ttft", "e2e", "output_tokens", "error"]
    recs = [r for r in read_run_records(run_dir, cols) if not r.get("error")]
    if not recs:
        return {}
    t0 = min(float(r["t_sent"]) for r in recs)
    done = [r for r in recs if r.get("t_done") is not None and r["t_done"] <= t0 + duration]
    e2e = [float(r["e2e"]) for r in recs if r.get("e2e") is not None]
    return {
        "tokens_per_s": sum(int(r.get("output_tokens") or 0) for r in done) / duration,
        "e2e_mean_ms": statistics.fmean(e2e) * 1000 if e2e else None,
        "_truth": [
            (r["request_id"], float(r["ttft"]), float(r["e2e"]))
            for r in recs
            if r.get("ttft") is not None and r.get("e2e") is not None
        ],
    }


def accuracy(truth: list[tuple[str, float, float]], sent: dict[str, list[float]]) -> dict[str, Any]:
    """TTFT and E2E errors (ms, p50 / p99) of one run's answers net of the server's lateness:
    each against when the server actually sent that request's first and last token
    (``/stats/requests`` by ``X-Request-Id``), so what is left is the generator's error."""
    net = [
        (ttft * 1000 - TTFT_S * 1000 - sent[rid][0], e2e * 1000 - E2E_S * 1000 - sent[rid][1])
        for rid, ttft, e2e in truth
        if rid in sent
    ]
    if not net:
        return {"matched": 0.0}
    ttft_err = sorted(a for a, _ in net)
    e2e_err = sorted(b for _, b in net)
    return {
        "matched": len(net) / len(truth),
        "ttft_err_p50": _pct(ttft_err, 50),
        "ttft_err_p99": _pct(ttft_err, 99),
        "e2e_err_p50": _pct(e2e_err, 50),
        "e2e_err_p99": _pct(e2e_err, 99),
    }


def _pct(ordered: list[float], q: float) -> float:
    """The ``q``-th percentile of sorted values (linear between the two nearest, as numpy)."""
    k = (len(ordered) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def run_peer(tmp: Path, base: str, users: int, duration: float) -> dict[str, Any]:
    """The plain Locust peer: same server, same users, same duration, same core."""
    locustfile = tmp / "peer_locustfile.py"
    locustfile.write_text(PEER, encoding="utf-8")
    tokens = tmp / f"peer-tokens-{time.monotonic_ns()}"
    host = base.removesuffix("/v1")
    cmd = [
        sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "--only-summary",
        "--host", host, "-u", str(users), "-r", str(users), "-t", f"{duration:g}s",
        "--stop-timeout", "10", "--exit-code-on-error", "0", "--loglevel", "WARNING",
    ]  # fmt: skip
    rc, cpu, wall, tail = _timed(cmd, tmp, {**os.environ, "PEER_TOKENS": str(tokens)})
    if not tokens.exists():
        raise RuntimeError(f"the Locust peer exited {rc} without its token count: {tail[-800:]}")
    return {
        "rc": rc,
        "tokens": int(tokens.read_text()),
        "cpu_s": cpu,
        "wall_s": wall,
        "post_run_s": None,
    }


def run_wrk(tmp: Path, base: str, users: int, duration: float) -> dict[str, Any]:
    """The C peer: wrk, one thread, ``users`` connections for ``duration`` s, same server, same
    core. Its tokens are its complete 200 responses (wrk's own count: a stream the run's end cut
    is none) times the tokens each streams (the lua script's ``max_tokens``, which the calibration
    server streams exactly); its CPU is the wrk process's, from the kernel."""
    cmd = wrk_command(users, duration, base + "/chat/completions")
    rc, cpu, wall, out = _timed(cmd, tmp, dict(os.environ))
    w = parse_wrk(out, rc)
    return {
        "rc": rc,
        "tokens": w.ok_responses * lua_max_tokens(),
        # wrk counts the responses completed within its duration: its rate within the run
        "tokens_per_s": w.ok_responses * lua_max_tokens() / duration,
        "e2e_mean_ms": w.e2e_mean,
        "responses": w.responses,
        "cpu_s": cpu,
        "wall_s": wall,
        "post_run_s": None,
        "errors": w.errors,
    }


def profile(tree: Path, users: int, duration: float) -> None:
    """Sample the Locust child of ``tree`` at ``users`` streams for ``duration`` s; print the top."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-tree-prof-"))
    scenario = tmp / "bench_scenario.py"
    scenario.write_text(SCENARIO, encoding="utf-8")
    proc, base = start_truth_server(tmp, TTFT_S, ITL_S, TOKENS, cpu="1")
    try:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        cmd = [
            sys.executable, "-m", "servecheck", "load", "--targets-file", str(truth_targets(tmp, base)),
            "--target", "bench", "--out", str(tmp / "reports"), "--run-id", "config",
            "--scenario", str(scenario), "--users", str(users), "--duration", "2s",
            "--no-tokenize", "--cpus", "0", "--allow-lag", "--quiet",
        ]  # fmt: skip
        subprocess.run(cmd, cwd=tree, env=env, check=True, capture_output=True)
        cfg = json.loads((tmp / "reports" / "config" / "load-config.json").read_text())
        run = tmp / "profiled"
        run.mkdir()
        cfg.update(duration_s=duration, records_dir=str(run))
        (tmp / "cfg.json").write_text(json.dumps(cfg), encoding="utf-8")
        env.update(SERVECHECK_LOAD_CONFIG=str(tmp / "cfg.json"), SAMPLES=str(tmp / "samples.json"))
        cmd = [
            sys.executable, "-c", SAMPLER, "locust", "-f", str(scenario), "--headless",
            "--host", base, "--csv", str(run / "locust"), "--logfile", str(run / "locust.log"),
            "--exit-code-on-error", "0", "--only-summary", "-t", f"{int(duration + 20)}s",
            "--stop-timeout", "10", "-u", str(users), "-r", str(users),
        ]  # fmt: skip
        _timed(cmd, tree, env)
    finally:
        stop(proc)
    d = json.loads((tmp / "samples.json").read_text())
    print(f"{d['n']} samples (2 ms of process CPU each)")
    for kind in ("own", "incl"):
        for name, count in d[kind][:25]:
            print(f"{kind:4} {count / d['n']:6.1%} {name}")


def split(short: dict[str, Any], long: dict[str, Any]) -> dict[str, Any]:
    """Marginal CPU-s per 10k tokens and fixed CPU-s from one short and one long run."""
    dt = long["tokens"] - short["tokens"]
    marginal = (long["cpu_s"] - short["cpu_s"]) / dt * 10_000 if dt > 0 else None
    fixed = short["cpu_s"] - marginal * short["tokens"] / 10_000 if marginal is not None else None
    return {"marginal": marginal, "fixed": fixed}


def _med(values: list[Any]) -> float | None:
    got = [float(v) for v in values if v is not None]
    return statistics.median(got) if got else None


def cell_medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per cell (variant, streams): each run pair's split, then medians over the pairs."""
    pairs: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        pairs.setdefault(r["round"], {})["short" if r["short"] else "long"] = r
    splits = [
        {**split(p["short"], p["long"]), "long": p["long"], "locust": _locust_split(p)}
        for p in pairs.values()
        if len(p) == 2
    ]
    return {
        "runs": len(splits),
        "fixed": _med([s["fixed"] for s in splits]),
        "marginal": _med([s["marginal"] for s in splits]),
        "marginal_range": [s["marginal"] for s in splits if s["marginal"] is not None],
        "long_per_10k": _med(
            [s["long"]["cpu_s"] / s["long"]["tokens"] * 1e4 for s in splits if s["long"]["tokens"]]
        ),
        "long_tokens": _med([s["long"]["tokens"] for s in splits]),
        "long_cpu_s": _med([s["long"]["cpu_s"] for s in splits]),
        "post_run_s": _med([s["long"].get("post_run_s") for s in splits]),
        "errors": sum(int(s["long"].get("errors") or 0) for s in splits),
        "locust_fixed": _med([s["locust"]["fixed"] for s in splits]),
        "locust_marginal": _med([s["locust"]["marginal"] for s in splits]),
        **{k: _med([s["long"].get(k) for s in splits]) for k in (*RATE, *ACCURACY)},
        "behind": sum(bool(s["long"].get("behind")) for s in splits),
    }


RATE = ("tokens_per_s", "e2e_mean_ms")


def _schedule(c: dict[str, Any], users: int) -> tuple[str, str]:
    """(share of the offered rate, within schedule?) of a cell's median long run: the offered rate
    is what ``users`` streams ask for when every answer takes the true E2E."""
    rate, e2e = c.get("tokens_per_s"), c.get("e2e_mean_ms")
    if rate is None or e2e is None:
        return "-", "-"
    share = rate / (users * TOKENS / E2E_S)
    ok = share >= OFFERED_SHARE and abs(e2e / (E2E_S * 1000) - 1) <= E2E_TOLERANCE
    return f"{share:.0%}", "yes" if ok else "**no**"


def rate_lines(
    cells: dict[tuple[str, int], dict[str, Any]],
    variants: list[str],
    levels: list[int],
    long: float,
) -> list[str]:
    """Issue 46's figures beside the CPU: each variant's rate within the run and its schedule, the
    generator's saturation flag, and its TTFT / E2E errors net of the server's lateness."""
    lines = [
        "",
        f"Rate and accuracy of the {long:g} s runs (medians over the runs). `tokens/s`: tokens of the"
        f" answers completed within the {long:g} s (wrk's own count of its completed responses);"
        f" `of offered`: that over what the streams ask for at the true E2E ({E2E_S * 1000:.0f} ms);"
        f" `in schedule`: at least {OFFERED_SHARE:.0%} of offered with the mean E2E within"
        f" {E2E_TOLERANCE:.0%} of the truth; `behind`: runs whose summary set the generator's"
        " saturation flag (`schedule.behind`); errors in ms, net of the calibration server's own"
        " lateness (each answer against when the server sent its first and last token,"
        " `/stats/requests` by `X-Request-Id`), `matched` the answers found there.",
        "",
        "| tree | streams | tokens/s | of offered | in schedule | E2E mean ms | behind"
        " | TTFT err p50 / p99 | E2E err p50 / p99 | matched |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n in levels:
        for v in variants:
            c = cells[(v, n)]
            share, ok = _schedule(c, n)
            behind = "-" if v.startswith("peer") else f"{c['behind']} of {c['runs']}"
            lines.append(
                f"| {v} | {n} | {fmt(c.get('tokens_per_s'), ',.0f')} | {share} | {ok}"
                f" | {fmt(c.get('e2e_mean_ms'), '.1f')} | {behind}"
                f" | {fmt(c.get('ttft_err_p50'), '.2f')} / {fmt(c.get('ttft_err_p99'), '.2f')}"
                f" | {fmt(c.get('e2e_err_p50'), '.2f')} / {fmt(c.get('e2e_err_p99'), '.2f')}"
                f" | {fmt(c.get('matched'), '.0%')} |"
            )
    if PEER_WRK in variants:
        lines += ["", "Tokens/s within the run, ours over wrk's in the same run:", ""]
        lines += ["| streams | compared | tokens/s |", "| --- | --- | --- |"]
        for n in levels:
            w = cells[(PEER_WRK, n)].get("tokens_per_s")
            for v in (x for x in variants if not x.startswith("peer")):
                lines.append(
                    f"| {n} | {v} / wrk | {_ratio(cells[(v, n)].get('tokens_per_s'), w)} |"
                )
    return lines


def _locust_split(pair: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The same split of the Locust child's own CPU (summary.json's ``generator.cpu_s``), so the
    rest of the tree (the command: start-up, summary, report, compaction) shows as the difference."""
    if any(pair[k].get("locust_cpu_s") is None for k in ("short", "long")):
        return {"fixed": None, "marginal": None}
    short, long = ({**pair[k], "cpu_s": pair[k]["locust_cpu_s"]} for k in ("short", "long"))
    return split(short, long)


def _span(values: list[float]) -> str:
    return f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else ""


def _ratio(a: float | None, b: float | None) -> str:
    # a base at or below zero (wrk's fixed cost is about nil, so noise can make it negative) has
    # no ratio worth printing
    return f"{a / b:.2f}" if a is not None and b is not None and b > 0 else "-"


def _ratio_rows(
    cells: dict[tuple[str, int], dict[str, Any]], variants: list[str], n: int
) -> list[str]:
    """At ``n`` streams: each of our variants over the first (the baseline), the after tree over
    the Locust peer, and both trees over wrk (what the whole tree costs beside a C client)."""
    rows: list[str] = []
    ours = [v for v in variants if not v.startswith("peer")]

    def row(a: dict[str, Any], b: dict[str, Any], label: str, base: str) -> str:
        # post-run time only between our trees; no fixed ratio to wrk, whose fixed cost is its
        # start alone (about nil, so noise makes any ratio to it meaningless)
        post = _ratio(a["post_run_s"], b["post_run_s"]) if base == "ours" else "-"
        fixed = _ratio(a["fixed"], b["fixed"]) if base != "wrk" else "-"
        return f"| {n} | {label} | {fixed} | {_ratio(a['marginal'], b['marginal'])} | {post} |"

    for v in ours[1:]:
        rows.append(row(cells[(v, n)], cells[(ours[0], n)], f"{v} / {ours[0]}", "ours"))
    # the peers' ratios name the trees as before/after: the first two of ours
    pairs = {PEER_LOCUST: ("peer", ours[1:2]), PEER_WRK: ("wrk", ours[1::-1])}
    for peer, (short, trees) in pairs.items():
        if peer in variants:
            rows += [row(cells[(t, n)], cells[(peer, n)], f"{t} / {short}", short) for t in trees]
    return rows


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    levels = sorted({r["users"] for r in rows})
    cells = {
        (v, n): cell_medians([r for r in rows if r["variant"] == v and r["users"] == n])
        for v in variants
        for n in levels
    }
    short, long = meta["durations"]
    lines = [
        START,
        "## The whole process tree (`servecheck load` and its Locust child, issue 27)",
        "",
        f"`benchmarks/bench_tree.py` on {meta['machine']}, Python {meta['python']}, {meta['cpus']} CPUs,"
        f" {meta['date']}. Calibration server ({meta.get('server', 'the Python one')}: TTFT {TTFT_S * 1000:.0f} ms, a token every"
        f" {ITL_S * 1000:.0f} ms, {TOKENS} tokens) on CPU 1, one fresh server per level; the command and"
        " its Locust child on CPU 0 (`taskset -c 0`, `--cpus 0`), closed loop (`--users N`). CPU is the"
        " whole tree's user + sys from the kernel (`os.wait4` rusage: the command, Locust, imports,"
        f" summary, report, records compaction). Each run pair is {short:g} s and {long:g} s;"
        " `marginal` = delta CPU / delta streamed tokens x 10k, `fixed` = CPU(short) - marginal x"
        " tokens(short) / 10k; medians over the pairs (`runs`; the pairs' range of the marginal in brackets), the variants interleaved round by round.",
        f"`before` (the baseline): {meta['before']}; `after`: {meta['after']}. `post-run s`: wall seconds from Locust's"
        f" end (newest mtime of its log, stdout and CSVs) to the command's exit, at {long:g} s.",
        "The peer is a plain Locust `FastHttpUser` (`PEER` in the benchmark): the same streamed chat"
        " completion (64 tokens) read to its end from geventhttpclient's response stream (64 KiB reads),"
        " counting the non-empty `content` deltas, no timing per token and no records; it is what Locust alone costs.",
        "The C peer is `wrk` (`-t 1 -c N -d` seconds, `benchmarks/wrk_chat.lua`'s streaming chat request, the"
        " same as `bench_capacity`'s): one thread on the same core, the same server and durations; its CPU is"
        " the wrk process's rusage, its tokens its complete 200 responses (wrk's count, less its non-2xx)"
        " times the 64 tokens each streams. It reads each stream to its end and parses nothing inside it,"
        " so its cost is near the floor any client pays (the kernel's socket reads and the HTTP framing).",
        "`of which Locust` splits the Locust child's own CPU from its first request to its last"
        " (`generator.cpu_s` in summary.json, so without its imports and exit) the same way; the rest of"
        " the tree is the command's start-up, summary, report and compaction, and Locust's imports.",
        "",
        "| tree | streams | runs | fixed CPU-s | marginal CPU-s / 10k tokens | CPU-s / 10k tokens over"
        f" the {long:g} s run | of which Locust, first to last request: fixed / marginal | tokens ({long:g} s) | post-run s"
        " | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n in levels:
        for v in variants:
            c = cells[(v, n)]
            lines.append(
                f"| {v} | {n} | {c['runs']} | {fmt(c['fixed'], '.2f')} | {fmt(c['marginal'], '.3f')}{_span(c['marginal_range'])}"
                f" | {fmt(c['long_per_10k'], '.3f')}"
                f" | {fmt(c['locust_fixed'], '.2f')} / {fmt(c['locust_marginal'], '.3f')}"
                f" | {fmt(c['long_tokens'], '.0f')}"
                f" | {fmt(c['post_run_s'], '.2f')} | {c['errors']} |"
            )
    lines += ["", "Ratios after / before (and after / peer, after and before / wrk):", ""]
    lines += [
        "| streams | compared | fixed | marginal | post-run s |",
        "| --- | --- | --- | --- | --- |",
    ]
    for n in levels:
        lines += _ratio_rows(cells, variants, n)
    lines += rate_lines(cells, variants, levels, long)
    late = meta.get("server_late") or {}
    if late:
        lines += [
            "",
            "Calibration server's own lateness per level (p99 ms over all that level's runs): "
            + ", ".join(
                f"{n} streams {fmt(v, '.1f')}"
                for n, v in sorted(late.items(), key=lambda kv: int(kv[0]))
            ),
        ]
    loads = [float(r["loadavg"]) for r in rows if r.get("loadavg") is not None]
    if loads:
        lines += [
            "",
            f"Load average (1 min) of the shared machine when the runs started: median"
            f" {statistics.median(loads):.1f} ({min(loads):.1f}-{max(loads):.1f}) on {meta['cpus']} CPUs.",
        ]
    lines += ["", meta.get("reading") or "", END]
    return "\n".join(lines) + "\n"


def _meta(args: argparse.Namespace, durations: tuple[float, float]) -> dict[str, Any]:
    def label(tree: Path) -> str:
        head = subprocess.run(
            ["git", "-C", str(tree), "log", "-1", "--format=%h %s"], capture_output=True, text=True
        ).stdout.strip()
        return f"`{head[:60]}`" if head else str(tree)

    return {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
        "durations": durations,
        "before": label(args.before),
        "after": label(args.after),
        "server": SERVERS[args.server],
    }


def _baseline() -> Path:
    path = Path("/tmp/bt-main")
    if not path.exists():
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), "main"], check=True
        )
        copy_extensions(ROOT, path)
    return path


def copy_extensions(src: Path, dest: Path) -> None:
    """Put ``src``'s built C extensions into ``dest`` beside the same-named C source, wherever
    ``dest`` keeps it (issue 40 moved ``_rxthread`` and ``_hdrfast`` out of ``load/``): both trees
    then run alike, neither on the pure-Python fallback."""
    for so in (src / "servecheck").rglob("_*.so"):
        stem = so.name.split(".", 1)[0]
        for c in (dest / "servecheck").rglob(f"{stem}.c"):
            shutil.copy(so, c.parent)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--before",
        type=Path,
        default=None,
        help="baseline checkout (default: main in /tmp/bt-main)",
    )
    ap.add_argument("--after", type=Path, default=ROOT)
    ap.add_argument("--levels", default="256,1024")
    ap.add_argument("--durations", default="10,30")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--quick", action="store_true", help="256 streams, 4 s and 10 s, 1 run, no docs"
    )
    ap.add_argument("--no-peer", action="store_true", help="leave out the Locust peer")
    ap.add_argument("--no-wrk", action="store_true", help="leave out the C peer (the wrk on PATH)")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--from-log", type=Path, help="render the section from a run's JSONL log")
    ap.add_argument("--profile", action="store_true", help="sample the after tree's Locust child")
    ap.add_argument("--reading", type=Path, help="a file with the reading paragraph for the doc")
    add_server_option(ap)
    args = ap.parse_args()
    args.before = (args.before or _baseline()).resolve()
    args.after = args.after.resolve()
    if args.quick:
        args.levels, args.durations, args.runs, args.no_docs = "256", "4,10", 1, True
    d = [float(x) for x in args.durations.split(",")]
    durations = (d[0], d[1])
    if not args.no_wrk and not args.from_log and not args.profile:
        if shutil.which("wrk") is None:  # as bench_capacity: a missing wrk skips, never fails
            print("bench_tree: no wrk on PATH, so no C peer (apt-get install wrk; or --no-wrk)")
            args.no_wrk = True
        elif any(x != int(x) for x in durations):
            ap.error(f"--durations {args.durations}: wrk runs whole seconds (or pass --no-wrk)")
    meta = _meta(args, durations)
    if args.reading:
        meta["reading"] = args.reading.read_text(encoding="utf-8").strip()
    if args.profile:
        profile(args.after, int(args.levels.split(",")[0]), 20.0)
        return 0
    if args.from_log:
        lines = [json.loads(x) for x in args.from_log.read_text().splitlines() if x.startswith("{")]
        meta["server_late"] = {
            str(r["users"]): r["late_p99_ms"] for r in lines if "late_p99_ms" in r
        }
        rows = [r for r in lines if "variant" in r]
        for u in (r for r in lines if "update" in r):  # the accuracy, added at a level's end
            rows[u.pop("update")].update(u)
    else:
        rows = measure(args, durations, meta)
    block = render(rows, meta)
    print(block)
    if not args.no_docs:
        write_section(START, END, block)
    return 0


Run = Callable[[str, int, float], dict[str, Any]]  # (server base URL, streams, seconds) -> row


def measure(
    args: argparse.Namespace, durations: tuple[float, float], meta: dict[str, Any]
) -> list[dict[str, Any]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-tree-"))
    (tmp / "bench_scenario.py").write_text(any_layout(SCENARIO), encoding="utf-8")
    log = tmp / "bench-tree.jsonl"
    print(f"log: {log}", flush=True)
    variants: list[tuple[str, Run]] = [
        ("before", lambda base, n, d: run_servecheck(args.before, tmp, base, n, d, None)),
        ("after", lambda base, n, d: run_servecheck(args.after, tmp, base, n, d, None)),
        ("after --records none", lambda b, n, d: run_servecheck(args.after, tmp, b, n, d, "none")),
    ]
    if not args.no_peer:
        variants.append((PEER_LOCUST, lambda base, n, d: run_peer(tmp, base, n, d)))
    if not args.no_wrk:
        variants.append((PEER_WRK, lambda base, n, d: run_wrk(tmp, base, n, d)))
    rows: list[dict[str, Any]] = []
    meta["server_late"] = {}
    for users in (int(x) for x in args.levels.split(",")):
        proc, base = start_truth_server(tmp, TTFT_S, ITL_S, TOKENS, cpu="1", impl=args.server)
        level: list[dict[str, Any]] = []
        try:
            for rnd in range(args.runs):
                for duration in durations:
                    for name, run in variants:
                        load = os.getloadavg()[0]  # the machine is shared: say how busy it was
                        r = run(base, users, duration)
                        r.update(variant=name, users=users, round=rnd, duration=duration,
                                 short=duration == durations[0], loadavg=load)  # fmt: skip
                        level.append(r)
                        _log(log, r)
            late = server_stats(base).get("late_p99_ms")
            sent = server_requests(base)  # once a level: every run's requests, by their ids
        finally:
            stop(proc)
        for i, r in enumerate(level):
            truth = r.pop("_truth", None)
            if truth is not None:
                r.update(accuracy(truth, sent))
                _log(log, {"update": len(rows) + i, **{k: r[k] for k in ACCURACY if k in r}})
        rows += level
        meta["server_late"][str(users)] = late
        _log(log, {"users": users, "late_p99_ms": late})
    return rows


ACCURACY = ("matched", "ttft_err_p50", "ttft_err_p99", "e2e_err_p50", "e2e_err_p99")


def _log(log: Path, row: dict[str, Any]) -> None:
    line = json.dumps({k: v for k, v in row.items() if k != "_truth"})
    with log.open("a") as f:
        f.write(line + "\n")
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
