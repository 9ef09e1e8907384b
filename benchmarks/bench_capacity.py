"""Generator capacity: the streamed-token rate ``servecheck load`` sustains beside a C client.

Same calibration server as ``bench_load.py`` (TTFT 100 ms, one token every 10 ms, 64 tokens,
pinned to core 1), the same closed-loop streams, three clients. The server is the C one by default
(``--server c``: ``benchmarks/truth_server.c``, built with gcc on first use), which keeps its
schedule at rates where the Python one (``--server python``: ``servecheck.reference.fast``) is
itself late; a level at which the server was late measures the server, not the client:

* ``wrk`` (C, from Debian; ``benchmarks/wrk_chat.lua`` posts the same streaming chat request),
  one thread pinned to core 0. It reads every stream to its end but times only whole responses,
  so a level counts as sustained when its mean latency is within 20 % of the true E2E (730 ms)
  with no errors or timeouts: a client that falls behind reads late and its latency grows.
* ``servecheck load``, one process pinned to core 0: sustained when ITL p50 and mean are within
  20 % of the true 10 ms and nothing failed (``bench_load.itl_ok``).
* ``servecheck load --processes 2``: two Locust workers (and their master); on a 2-core machine
  they share the cores with the server, which the table says, and the figure that carries over
  is their CPU per token against one process's (``--cpus-x2 2,3`` on a bigger machine).

Each level also measures the CPU that other work took meanwhile (``_others.py``: the machine's
busy time minus this benchmark's own processes'), and the text says quiet or loaded from that,
not from the load average, which this benchmark's own server and client keep near 1.5.

For each client the best sustained level's tokens/s is its capacity; the ratios servecheck / wrk
(one process) and two processes / one are the figures. CPU per 10k streamed tokens for every row
(wrk's from its own rusage). The rows at which the server itself fell behind (``server late``
p99 above a few ms) measure the server, not the client: say so rather than read them as a limit.

    python benchmarks/bench_capacity.py                  # 128..1024 streams, writes the docs
    python benchmarks/bench_capacity.py --quick          # 3 s levels, no docs
    python benchmarks/bench_capacity.py --server python  # against servecheck.reference.fast

Writes ``docs/benchmarks.md`` between the ``capacity`` markers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _docs import write_section  # noqa: E402
from _others import OtherCpu  # noqa: E402
from _truth import SERVERS, add_server_option, server_stats, start_truth_server, stop  # noqa: E402
from bench_load import (  # noqa: E402
    E2E_S,
    ITL_S,
    ITL_TOLERANCE,
    SCENARIO,
    TOKENS,
    TTFT_S,
    fmt,
    itl_ok,
    one_level,
)

START, END = "<!-- capacity:start -->", "<!-- capacity:end -->"
LUA = ROOT / "benchmarks" / "wrk_chat.lua"
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not m:
        raise ValueError(f"wrk latency {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def wrk_command(streams: int, duration: float, url: str) -> list[str]:
    """wrk's command line (no CPU pinning): one thread, ``streams`` connections, ``duration``
    seconds (wrk takes whole seconds only), ``wrk_chat.lua``'s streaming chat request to ``url``."""
    if duration != int(duration):
        raise ValueError(f"wrk runs whole seconds (-d), not {duration:g}")
    return [
        "wrk", "-t1", f"-c{streams}", f"-d{duration:g}s", "--timeout", "10s", "--latency",
        "-s", str(LUA), url,
    ]  # fmt: skip


def lua_max_tokens() -> int:
    """The ``max_tokens`` that ``wrk_chat.lua`` asks for: the calibration server streams exactly a
    request's ``max_tokens``, so this is how many tokens each complete response carries."""
    m = re.search(r'"max_tokens":(\d+)', LUA.read_text(encoding="utf-8"))
    if not m:
        raise ValueError(f"{LUA.name} names no max_tokens")
    return int(m.group(1))


@dataclass(frozen=True, slots=True)
class WrkOutput:
    """What wrk printed: its complete responses (any status), those with a status above 399, its
    socket errors, and its rate and latencies (ms)."""

    responses: int
    non2xx: int
    socket_errors: int
    requests_per_s: float
    e2e_mean: float
    e2e_p50: float | None
    e2e_p99: float | None

    @property
    def errors(self) -> int:
        return self.socket_errors + self.non2xx

    @property
    def ok_responses(self) -> int:
        """Complete responses with a 2xx/3xx status: the calibration server answers 200 or an
        error, so these are its complete 200 responses (a stream cut by the run's end or a
        socket error is not a response at all)."""
        return self.responses - self.non2xx


def parse_wrk(out: str, returncode: int) -> WrkOutput:
    """wrk's printed summary (run with ``--latency``); RuntimeError when it failed."""
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    lat = re.search(r"Latency\s+(\S+)\s+(\S+)\s+(\S+)", out)
    p50 = re.search(r"\n\s+50%\s+(\S+)", out)
    p99 = re.search(r"\n\s+99%\s+(\S+)", out)
    done = re.search(r"(\d+) requests in", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if returncode != 0 or not rps or not lat or not done:
        raise RuntimeError(f"wrk failed ({returncode}): {out[-500:]}")
    return WrkOutput(
        responses=int(done.group(1)),
        non2xx=int(non2xx.group(1)) if non2xx else 0,
        socket_errors=sum(int(x) for x in errors.groups()) if errors else 0,
        requests_per_s=float(rps.group(1)),
        e2e_mean=_ms(lat.group(1)),
        e2e_p50=_ms(p50.group(1)) if p50 else None,
        e2e_p99=_ms(p99.group(1)) if p99 else None,
    )


def wrk_level(tmp: Path, streams: int, duration: float, server: str = "c") -> dict[str, Any]:
    """One wrk run of ``streams`` connections against a fresh calibration server (``server``:
    ``c`` or ``python``)."""
    proc, base = start_truth_server(tmp, TTFT_S, ITL_S, TOKENS, cpu="1", impl=server)
    load_before = os.getloadavg()[0]
    try:
        cmd = ["taskset", "-c", "0", *wrk_command(streams, duration, base + "/chat/completions")]
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out = child.stdout.read() if child.stdout else ""
        _, status, ru = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        stats = server_stats(base)
    finally:
        stop(proc)
    w = parse_wrk(out, child.returncode)
    tokens_per_s = w.requests_per_s * TOKENS
    cpu = ru.ru_utime + ru.ru_stime
    tokens = w.responses * TOKENS
    return {
        "client": "wrk",
        "users": streams,
        "tokens_per_s": tokens_per_s,
        "e2e_mean": w.e2e_mean,
        "e2e_p50": w.e2e_p50,
        "e2e_p99": w.e2e_p99,
        "errors": w.errors,
        "cpu_per_10k": cpu / tokens * 10_000 if tokens else None,
        "gen_cpu_util": cpu / duration,
        "server": stats,
        "server_impl": server,
        "loadavg": round(load_before, 2),
    }


def wrk_ok(r: dict[str, Any]) -> bool:
    truth = E2E_S * 1000
    return not r.get("errors") and abs(r["e2e_mean"] - truth) <= ITL_TOLERANCE * truth


def rate(r: dict[str, Any]) -> float:
    """Streamed tokens/s by wrk's definition (responses completed within the run)."""
    return float(r["tokens_per_s"] if r["client"] == "wrk" else r.get("steady_tokens_per_s") or 0)


def offered(r: dict[str, Any]) -> float:
    """What ``streams`` closed-loop streams ask for when every answer takes the true E2E."""
    return r["users"] * TOKENS / E2E_S


def sustained(r: dict[str, Any]) -> bool:
    """Timing within 20 % of the truth, and at least 80 % of the offered rate read (a client that
    falls behind in a closed loop sends late, which keeps its ITL right but its rate low)."""
    timing = wrk_ok(r) if r["client"] == "wrk" else itl_ok(r)
    return timing and rate(r) >= (1 - ITL_TOLERANCE) * offered(r)


def best(rows: list[dict[str, Any]], client: str) -> dict[str, Any] | None:
    ok = [r for r in rows if r["client"] == client and sustained(r)]
    return max(ok, key=rate) if ok else None


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        START,
        "## Generator capacity beside a C client (`benchmarks/bench_capacity.py`)",
        "",
        f"{meta['date']}, {meta['cpus']} CPUs ({meta['machine']}), Python {meta['python']}, wrk"
        f" {meta['wrk']}. Calibration server ({SERVERS[meta['server']]}): TTFT {TTFT_S * 1000:.0f} ms, ITL {ITL_S * 1000:.0f}"
        f" ms, {TOKENS} tokens, pinned to core 1; wrk and one servecheck process pinned to core 0;"
        " two servecheck processes on cores 0-1 (shared with the server: this machine has two)."
        f" {meta['duration']:g} s per level, one run each. {machine_sentence(rows, meta)}"
        " Nothing here is asserted anywhere.",
        "",
        "| client | streams | tokens/s | of offered | sustained | ITL p50 / mean ms | E2E ms (wrk mean, servecheck p50) |"
        " CPU-s / 10k tokens | client CPU util | server late p99 ms | other work, cores | load avg |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        itl = (
            "-"
            if r["client"] == "wrk"
            else f"{fmt(r.get('itl_p50'), '.2f')} / {fmt(r.get('itl_mean'), '.2f')}"
        )
        e2e = r.get("e2e_mean")
        if e2e is None and r.get("e2e_err_p50") is not None:
            e2e = E2E_S * 1000 + r["e2e_err_p50"]
        lines.append(
            f"| {r['client']} | {r['users']} | {rate(r):,.0f} | {rate(r) / offered(r):.0%} |"
            f" {'yes' if sustained(r) else '**no**'} | {itl} | {fmt(e2e, '.1f')} |"
            f" {fmt(r.get('cpu_per_10k'), '.3f')} | {fmt(r.get('gen_cpu_util'), '.2f')} |"
            f" {fmt((r.get('server') or {}).get('late_p99_ms'), '.1f')} |"
            f" {fmt(r.get('others_cores'), '.2f')} | {r.get('loadavg')} |"
        )
    b = {c: best(rows, c) for c in ("wrk", "servecheck", "servecheck x2")}

    def best_rate(c: str) -> str:
        return f"{rate(b[c]):,.0f} tokens/s at {b[c]['users']} streams" if b[c] else "-"

    def ratio(a: str, c: str) -> float | None:
        return rate(b[a]) / rate(b[c]) if b[a] and b[c] else None

    r1, r2 = ratio("servecheck", "wrk"), ratio("servecheck x2", "servecheck")
    at256 = next((r for r in rows if r["client"] == "servecheck" and r["users"] == 256), None)
    wrk256 = next((r for r in rows if r["client"] == "wrk" and r["users"] == 256), None)
    cost = (
        at256["cpu_per_10k"] / wrk256["cpu_per_10k"]
        if at256 and wrk256 and at256.get("cpu_per_10k") and wrk256.get("cpu_per_10k")
        else None
    )
    x1 = {r["users"]: r for r in rows if r["client"] == "servecheck" and r.get("cpu_per_10k")}
    x2 = {r["users"]: r for r in rows if r["client"] == "servecheck x2" and r.get("cpu_per_10k")}
    both = [u for u in sorted(x1) if u in x2]  # CPU per token means something unsustained too
    split = both[-1] if both else None
    per_process = x2[split]["cpu_per_10k"] / x1[split]["cpu_per_10k"] if split else None
    # Where wrk's best level left its core mostly idle, the server (not wrk) set that level, and
    # the rate ratio is one of the two clients at the same ceiling. The ratio of CPU per token at
    # the highest level both sustained says what the rates would be if each ran a core flat out.
    common = [
        u
        for u in sorted(x1)
        if sustained(x1[u])
        and any(r["client"] == "wrk" and r["users"] == u and sustained(r) for r in rows)
    ]
    top = common[-1] if common else None
    wrk_top = next((r for r in rows if r["client"] == "wrk" and r["users"] == top), None)
    flat_out = (
        wrk_top["cpu_per_10k"] / x1[top]["cpu_per_10k"]
        if top and wrk_top and wrk_top.get("cpu_per_10k")
        else None
    )
    wrk_util = b["wrk"].get("gen_cpu_util") if b["wrk"] else None
    limit = (
        f" (wrk's core {wrk_util:.0%} busy there: the server's limit, not wrk's)"
        if wrk_util is not None and wrk_util < 0.9
        else ""
    )
    lines += [
        "",
        "| figure | value | goal |",
        "| --- | --- | --- |",
        f"| wrk (C), one core, best sustained | {best_rate('wrk')}{limit} | |",
        f"| servecheck, one process, best sustained | {best_rate('servecheck')} | |",
        f"| servecheck / wrk, one core | {fmt(r1, '.2f')} | >= 0.80 |",
        f"| servecheck / wrk, one core each flat out (wrk's CPU per token over ours, {top or '-'}"
        f" streams) | {fmt(flat_out, '.2f')} | - |",
        f"| servecheck, two processes, best sustained | {best_rate('servecheck x2')} | |",
        f"| two processes / one | {fmt(r2, '.2f')} | ~2 with a core each |",
        f"| CPU per streamed token, two processes / one, {split or '-'} streams |"
        f" {fmt(per_process, '.2f')} | ~1 |",
        f"| CPU-s per 10k streamed tokens, 256 streams, one process |"
        f" {fmt(at256.get('cpu_per_10k') if at256 else None, '.3f')} | <= 0.15 |",
        f"| CPU per streamed token, servecheck / wrk, 256 streams | {fmt(cost, '.1f')}x | - |",
        "",
        meta["reading"],
        END,
    ]
    return "\n".join(lines) + "\n"


QUIET_CORES = 0.25  # other work below this (cores, mean over a level) leaves the figures alone


def machine_sentence(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """What the machine was doing besides this benchmark, from each level's ``others_cores``
    (``_others.OtherCpu``: CPU outside the benchmark's own server and client processes)."""
    seen = [float(r["others_cores"]) for r in rows if r.get("others_cores") is not None]
    what = (
        "`other work` is the CPU that processes outside this benchmark (not its server, not its"
        f" client) used during each level, in cores of the machine's {meta['cpus']}, from /proc;"
        " `load avg` is the 1-minute load average as each level started, which counts the"
        " benchmark's own server and client too (about 1.5 at the top levels) and the levels"
        " before it, so it is no measure of other work."
    )
    if not seen:
        return what
    top = max(seen)
    if top <= QUIET_CORES:
        return f"The machine was quiet: other work used at most {top:.2f} cores during any level. {what}"
    return (
        f"**The machine was loaded**: other work used up to {top:.2f} cores during a level, so"
        f" the rows where it was high are lower bounds and noisy. {what}"
    )


READING = (
    "Reading: where a servecheck row is not sustained while its `client CPU util` is far below 1,"
    " other work on the machine held the core: that row measures the machine's load, not the"
    " generator, and the rate ratio with it; the CPU cost per token (CPU-s / 10k tokens, and the"
    " servecheck / wrk ratio of it) depends far less on what else runs, though a starved reader"
    " batches more reads per wake-up and so reads a little cheaper. A level is only a client's limit when the server kept its schedule (`server late`"
    " small); where the server is late by tens or hundreds of ms, every client's rate is the"
    " server's, and the ratio there says nothing about the clients. {server_limit} So `servecheck /"
    " wrk, one core` compares the two at the highest rate this"
    " server offers; where wrk's core was far from busy there, a faster server would let wrk go"
    " further, and `one core each flat out` (wrk's CPU per token over servecheck's at the highest"
    " level both sustained) is what the ratio would be with both clients' cores saturated: the"
    " lower of the two is the honest bound. Two servecheck processes here share two cores with the"
    " server (which itself needs most of a core at the top levels), so this machine cannot show"
    " their rate scaling to two free cores. What it does show is the condition for it: the CPU"
    " per streamed token of two processes against one at the same streams (`two processes /"
    " one` in the figures, at the highest level both ran): near 1 means splitting the"
    " streams over processes costs nothing per token, so N processes on N free cores read N"
    " times one's rate until the server or the network is the limit. To see the rate itself on"
    " a machine with 4 or more cores: `python benchmarks/bench_capacity.py --clients"
    " 'servecheck,servecheck x2' --cpus-x2 2,3` (the server stays on core 1, one process on"
    " core 0, the two on cores 2 and 3). Definitions: tokens/s is, for both, the tokens of the responses completed within the"
    " run's duration over that duration (wrk's requests/s times 64); `of offered` is that over"
    " what the streams ask for when every answer takes the true 730 ms; a level is sustained"
    " when its timing is within 20 % of the truth (wrk: mean latency against E2E; servecheck: ITL"
    " p50 and mean) and it read at least 80 % of the offered rate. The two-process rows'"
    " CPU is the two workers' (the master, which only writes what arrives, is left out)."
)


SERVER_LIMIT = {  # READING's {server_limit}, by calibration server
    "python": "The calibration server is one Python process making one write per token, so on this"
    " machine it, not wrk, sets wrk's top (its lateness grows past 512 streams): the C client's"
    " figure is a lower bound on what a C client reads.",
    "c": "The calibration server is the C one (`benchmarks/truth_server.c`: one write per token, like"
    " the Python one, at a fraction of its CPU per write); where its `server late` stays small a"
    " level's limit is the client's, and where it grows the server set it: then the C client's"
    " figure there is a lower bound on what a C client reads.",
}


def rerender(path: Path) -> str:
    """The section again from a saved run's printed rows (``--from FILE``: its JSON lines)."""
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.startswith("{")]
    server = str(rows[0].get("server_impl") or "python") if rows else "python"
    return render(rows, _meta(float(rows[0].get("duration") or 8.0) if rows else 8.0, server))


def _meta(duration: float, server: str) -> dict[str, Any]:
    wrk_version = (
        subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split()
        if shutil.which("wrk")
        else []
    )
    return {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
        "duration": duration,
        "wrk": wrk_version[1] if len(wrk_version) > 1 else "?",
        "reading": READING.format(server_limit=SERVER_LIMIT[server]),
        "server": server,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 s levels; do not write docs")
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--levels", default="128,256,384,512,768,1024")
    ap.add_argument("--clients", default="wrk,servecheck,servecheck x2")
    ap.add_argument("--cpus-x2", default="0,1", help="CPUs for the two-process runs")
    add_server_option(ap)
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--from", dest="saved", type=Path, help="re-render a saved run's output")
    args = ap.parse_args()
    if args.saved:
        block = rerender(args.saved)
        print(block)
        if not args.no_docs:
            write_section(START, END, block)
        return 0
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    needs = ["taskset", *(["wrk"] if "wrk" in clients else [])]  # servecheck alone needs no wrk
    if any(shutil.which(tool) is None for tool in needs):
        print(
            f"bench_capacity: skipped: needs {' and '.join(needs)} (apt-get install wrk util-linux)"
        )
        return 0
    duration = 3.0 if args.quick else args.duration
    tmp = Path(tempfile.mkdtemp(prefix="bench-capacity-"))
    scenario = tmp / "bench_scenario.py"
    scenario.write_text(SCENARIO)
    rows: list[dict[str, Any]] = []
    for client in clients:
        for streams in (int(x) for x in args.levels.split(",")):
            with OtherCpu() as other:
                if client == "wrk":
                    r = wrk_level(tmp, streams, duration, args.server)
                else:
                    two = client == "servecheck x2"
                    r = one_level(
                        tmp,
                        scenario,
                        streams,
                        duration,
                        processes=2 if two else None,
                        cpus=args.cpus_x2 if two else "0",
                        server=args.server,
                    )
                    r["client"] = client
            r["others_cores"] = other.cores
            r["duration"] = duration
            rows.append(r)
            print(json.dumps(r), flush=True)
            if not sustained(r):
                break  # higher levels only fall further behind
    block = render(rows, _meta(duration, args.server))
    print(block)
    if not args.quick and not args.no_docs:
        write_section(START, END, block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
