"""``servecheck capacity``: a bounded load sweep to find the highest load that meets the SLOs.

Each step is one ``run_load`` (its own folder ``steps/<nn>-<level>/``) at the next level of
``--users`` (closed loop) or ``--rates`` (open loop). The sweep stops early past saturation
(two SLO breaches, or throughput falling more than ``--throughput-drop`` below the best), and
never runs more than ``--max-steps`` steps. The report gives the highest passing level, the knee
of latency vs throughput, and with ``--target-rate`` the replicas needed (see
:mod:`servecheck.report.capacity` and docs/workflows.md).

Exit codes: 0 when at least one level met the SLOs (and, with ``--target-rate``, a replica count
could be computed), 1 when none did, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from servecheck.errors import UsageError


def _levels(text: str, rates: bool) -> list[float]:
    from servecheck.load.schedule import parse_rate

    try:
        vals = [parse_rate(p) if rates else float(int(p)) for p in text.split(",") if p.strip()]
    except (ValueError, UsageError) as exc:
        raise UsageError(
            f"{'--rates' if rates else '--users'} {text!r}: a comma-separated list "
            f"({'1/s,2/s,5/s' if rates else '1,2,4,8'}): {exc}"
        ) from None
    if not vals or any(v <= 0 for v in vals):
        raise UsageError(f"{'--rates' if rates else '--users'} {text!r}: give positive levels")
    if vals != sorted(vals):
        raise UsageError(f"{'--rates' if rates else '--users'} {text!r}: levels must increase")
    return vals


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck capacity``."""
    env = os.environ.get
    parser.add_argument(
        "--target",
        default=env("SERVECHECK_TARGET", "reference"),
        metavar="NAME",
        help="target (default: %(default)s)",
    )
    parser.add_argument(
        "--targets-file",
        default=env("SERVECHECK_TARGETS_FILE", "targets.yaml"),
        metavar="PATH",
        help="targets file (default: %(default)s)",
    )
    parser.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="EXPR",
        help="SLO each step must meet (repeatable; the target's are added)",
    )
    g = parser.add_mutually_exclusive_group()
    g.add_argument(
        "--users",
        default=None,
        metavar="LIST",
        help="closed-loop levels, e.g. 1,2,4,8,16 (default)",
    )
    g.add_argument(
        "--rates",
        default=None,
        metavar="LIST",
        help="open-loop levels in requests/s, e.g. 1,2,5,10",
    )
    parser.add_argument(
        "--step-duration",
        default="20s",
        metavar="TIME",
        help="length of each step (default: %(default)s)",
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=8,
        metavar="N",
        help="never run more than N steps (default: %(default)s)",
    )
    parser.add_argument(
        "--throughput-drop",
        type=float,
        default=10.0,
        metavar="PCT",
        help="stop when throughput falls this many %% below the best step (default: %(default)s)",
    )
    parser.add_argument(
        "--target-rate",
        default=None,
        metavar="R/s",
        help="request rate to plan replicas for, e.g. 50/s",
    )
    parser.add_argument(
        "--headroom",
        type=float,
        default=1.0,
        metavar="F",
        help="use this fraction of a replica's sustained rate when planning (default: %(default)s)",
    )
    parser.add_argument(
        "--knee-metric",
        default="e2e_p95",
        metavar="NAME",
        help="latency for the knee (default: %(default)s)",
    )
    parser.add_argument(
        "--scenario", default="chat", metavar="NAME", help="load scenario (default: %(default)s)"
    )
    parser.add_argument(
        "--max-error-rate",
        default="1%",
        metavar="PCT",
        help="adds the SLO error_rate<=PCT unless an error_rate SLO is given (default: %(default)s; 'none' to drop it)",
    )
    parser.add_argument(
        "--allow-lag",
        action="store_true",
        help="count a step whose load generator lagged as judged by its SLOs (default: such a step does not pass)",
    )
    parser.add_argument(
        "--ready-timeout",
        default="60s",
        metavar="TIME",
        help="wait this long for readiness first (default: %(default)s)",
    )
    parser.add_argument(
        "--out",
        default=env("SERVECHECK_REPORTS", "reports"),
        metavar="DIR",
        help="reports folder (default: %(default)s)",
    )
    parser.add_argument(
        "--run-id", metavar="ID", help="run folder name (default: <time>-capacity-<target>)"
    )
    parser.add_argument(
        "--reference-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for the embedded reference server",
    )


def run(args: argparse.Namespace) -> int:
    """Sweep, write capacity.json + report.html + summary.md, print the findings."""
    from servecheck.load.schedule import parse_duration, parse_rate
    from servecheck.report.workflow import new_run_dir, reference_env, say

    rates = args.rates is not None
    levels = _levels(args.rates if rates else (args.users or "1,2,4,8,16"), rates)
    step_s = parse_duration(args.step_duration)
    if not 1 <= step_s <= 3600:
        raise UsageError(f"--step-duration {args.step_duration}: between 1s and 1h")
    if not 1 <= args.max_steps <= 50:
        raise UsageError(f"--max-steps {args.max_steps}: between 1 and 50")
    if not 0 < args.headroom <= 1:
        raise UsageError(f"--headroom {args.headroom}: between 0 (exclusive) and 1")
    fam, _, stat = args.knee_metric.partition("_")
    if fam not in ("ttft", "itl", "e2e", "tpot") or stat not in ("p50", "p90", "p95", "p99"):
        raise UsageError(
            f"--knee-metric {args.knee_metric!r}: one of ttft|itl|e2e|tpot _ p50|p90|p95|p99, e.g. e2e_p95"
        )
    from servecheck.load.slo import parse_slos

    parse_slos(
        [
            *args.slo,
            *(
                [f"error_rate<={args.max_error_rate}"]
                if args.max_error_rate.lower() != "none"
                else []
            ),
        ]
    )
    target_rate = parse_rate(args.target_rate) if args.target_rate else None
    run_dir = new_run_dir(args.out, "capacity", args.target, args.run_id)
    say(
        f"servecheck capacity: target {args.target}; {len(levels[: args.max_steps])} steps of {step_s:g} s at most; report {run_dir}"
    )
    with reference_env(
        [args.target], extra_args=args.reference_arg, log_path=run_dir / "reference-server.log"
    ):
        return _sweep(args, run_dir, levels[: args.max_steps], rates, step_s, target_rate)


def _sweep(
    args: argparse.Namespace,
    run_dir: Path,
    levels: list[float],
    rates: bool,
    step_s: float,
    target_rate: float | None,
) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from servecheck.checks.health import wait_ready
    from servecheck.client.http import ServeClient
    from servecheck.config import load_targets
    from servecheck.load.run import LoadSpec, run_load
    from servecheck.load.schedule import parse_duration
    from servecheck.report.capacity import Step, best_step, replicas_for, should_stop, sweep_knee
    from servecheck.report.html import write_load_html
    from servecheck.report.workflow import Case, Suite, say, write_json, write_junit

    target = load_targets(args.targets_file).get(args.target)
    with ServeClient.for_target(target) as client:
        state = wait_ready(client, target, timeout_s=parse_duration(args.ready_timeout))
    if state.state != "ready":
        say(
            f"servecheck capacity: {target.name} is not ready ({state.state}: {state.detail}); no load was sent"
        )
        write_json(
            run_dir / "capacity.json",
            {
                "kind": "capacity",
                "target": args.target,
                "ok": False,
                "steps": [],
                "stop_reason": f"not ready: {state.detail}",
                "best": None,
                "knee": None,
            },
        )
        write_capacity_html(run_dir)
        return 1
    mode = "rate" if rates else "users"
    slos = list(args.slo)
    if args.max_error_rate.lower() != "none" and not any(
        x.strip().startswith("error_rate") for x in [*slos, *target.slo]
    ):
        # A level that answers fast by failing a third of the requests has not "met the SLOs".
        slos.append(f"error_rate<={args.max_error_rate}")
    steps: list[Step] = []
    stop_reason = "all levels run"
    (run_dir / "steps").mkdir(exist_ok=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} steps"),
        TimeElapsedColumn(),
        transient=True,
    ) as progress:
        task = progress.add_task("capacity", total=len(levels))
        for i, level in enumerate(levels):
            label = f"{level:g}{'rps' if rates else 'u'}"
            progress.update(task, description=f"capacity: step {i + 1} at {label}")
            spec = LoadSpec(
                target=target,
                scenario=args.scenario,
                users=None if rates else int(level),
                rate=level if rates else None,
                duration_s=step_s,
                slos=slos,
                out_dir=run_dir / "steps",
                run_id=f"{i + 1:02d}-{label}",
                progress=False,
                seed=i,
                allow_lag=args.allow_lag,
            )
            result = run_load(spec)
            try:
                write_load_html(result.run_dir)
            except Exception as exc:  # noqa: BLE001 - a step's page is a nicety; the sweep goes on
                say(f"  (no page for step {i + 1}: {type(exc).__name__}: {exc})")
            step = Step.from_summary(level, mode, result.summary, result.passed)
            steps.append(step)
            progress.advance(task)
            say(
                f"step {i + 1} {label}: {'PASS' if step.passed else 'FAIL'}  {step.requests_per_s:.2f} req/s  "
                f"{args.knee_metric} {step.metric(args.knee_metric) or 0:.1f} ms  errors {step.error_rate:.2%}"
            )
            reason = should_stop(steps, args.throughput_drop / 100.0)
            if reason:
                stop_reason = reason
                break
        else:
            if len(levels) == args.max_steps:
                stop_reason = f"--max-steps {args.max_steps} reached"
    best = best_step(steps)
    kn = sweep_knee(steps, args.knee_metric)
    replicas = (
        replicas_for(target_rate, best.requests_per_s, args.headroom)
        if target_rate and best
        else None
    )
    data: dict[str, Any] = {
        "kind": "capacity",
        "target": args.target,
        "mode": mode,
        "step_duration_s": step_s,
        "slo": slos + list(target.slo),
        "steps": [s.as_dict() for s in steps],
        "stop_reason": stop_reason,
        "best": None
        if best is None
        else {
            "level": best.level,
            "requests_per_s": best.requests_per_s,
            "tokens_per_s": best.tokens_per_s,
            "run_id": best.run_id,
        },
        "knee": None
        if kn is None
        else {
            "level": kn.level,
            "requests_per_s": kn.throughput,
            "latency_ms": kn.latency_ms,
            "metric": kn.metric,
            "distance": kn.distance,
        },
        "target_rate": target_rate,
        "headroom": args.headroom,
        "replicas": replicas,
    }
    ok = best is not None and (target_rate is None or replicas is not None)
    data["ok"] = ok
    write_json(run_dir / "capacity.json", data)
    write_junit(
        run_dir / "junit.xml",
        [
            Suite(
                "servecheck.capacity",
                [
                    Case(
                        f"step {i + 1}: {s.level:g} {mode}",
                        s.passed,
                        "; ".join(
                            [
                                f"{v.get('slo')} observed {v.get('observed')}"
                                for v in s.slo
                                if not v.get("passed")
                            ]
                            + s.reasons
                        ),
                        "servecheck.capacity",
                    )
                    for i, s in enumerate(steps)
                ],
            )
        ],
    )
    page = write_capacity_html(run_dir)
    unit = "users" if mode == "users" else "req/s"
    say(f"stopped: {stop_reason}")
    say(
        f"highest load meeting the SLOs: {best.level:g} {unit} ({best.requests_per_s:.2f} req/s)"
        if best
        else "no load level met the SLOs"
    )
    if kn:
        say(
            f"knee: {kn.level:g} {unit} ({kn.throughput:.2f} req/s, {kn.metric} {kn.latency_ms:.1f} ms)"
        )
    if target_rate:
        say(
            f"replicas for {target_rate:g} req/s: {replicas if replicas is not None else 'unknown (no passing level)'}"
        )
    say(f"report: {page}")
    return 0 if ok else 1


def write_capacity_html(run_dir: Path) -> Path:
    """The capacity page: findings, a step table and plots vs load (latency, throughput, goodput)."""
    from servecheck.report import svg
    from servecheck.report.html import (
        Section,
        esc,
        fmt,
        md_table,
        pct,
        read_json,
        table,
        verdict_badge,
        write_page,
    )

    data = read_json(run_dir / "capacity.json")
    steps = data.get("steps") or []
    unit = "users" if data.get("mode") == "users" else "req/s"
    best, kn = data.get("best"), data.get("knee")
    lines = [
        f"Stopped: {data.get('stop_reason')}.",
        f"Highest load meeting the SLOs: {best['level']:g} {unit} ({best['requests_per_s']:.2f} req/s)."
        if best
        else "No load level met the SLOs.",
        (
            f"Knee ({kn['metric']} vs throughput): {kn['level']:g} {unit}, {kn['requests_per_s']:.2f} req/s, "
            f"{kn['latency_ms']:.1f} ms."
            if kn
            else "No knee found (fewer than three points, or no bend)."
        ),
    ]
    if data.get("target_rate"):
        lines.append(
            f"Replicas for {data['target_rate']:g} req/s (headroom {data.get('headroom')}): {data.get('replicas') or 'unknown'}."
        )
    head = (
        f"<p>{verdict_badge(data.get('ok'))} SLOs: {esc(', '.join(data.get('slo') or []) or '(none)')}</p><ul>"
        + "".join(f"<li>{esc(x)}</li>" for x in lines)
        + "</ul>"
    )
    headers = (
        "step",
        f"load ({unit})",
        "verdict",
        "req/s",
        "tok/s",
        "errors",
        "goodput",
        "TTFT p95",
        "E2E p50",
        "E2E p95",
        "E2E p99",
    )
    rows = [
        (
            str(i + 1),
            f"{s['level']:g}",
            "PASS" if s["passed"] else "FAIL",
            fmt(s["requests_per_s"], digits=2),
            fmt(s["tokens_per_s"]),
            pct(s["error_rate"]),
            pct(s.get("goodput"), 1),
            fmt(s["latency_ms"]["ttft"]["p95"]),
            fmt(s["latency_ms"]["e2e"]["p50"]),
            fmt(s["latency_ms"]["e2e"]["p95"]),
            fmt(s["latency_ms"]["e2e"]["p99"]),
        )
        for i, s in enumerate(steps)
    ]
    html_rows = [
        (esc(r[0]), esc(r[1]), verdict_badge(r[2] == "PASS"), *(esc(c) for c in r[3:]))
        for r in rows
    ]
    parts = [head, table(headers, html_rows, numeric=range(3, 11), raw=range(11))]
    if steps:
        xs = [s["level"] for s in steps]
        lat = [
            (f"{fam.upper()} {p}", xs, [s["latency_ms"][fam][p] for s in steps])
            for fam, p in (
                ("ttft", "p50"),
                ("ttft", "p95"),
                ("e2e", "p50"),
                ("e2e", "p95"),
                ("e2e", "p99"),
            )
        ]
        figs = [
            svg.line_plot("Latency vs load", f"load ({unit})", "ms", lat),
            svg.line_plot(
                "Throughput vs load",
                f"load ({unit})",
                "req/s",
                [("requests/s", xs, [s["requests_per_s"] for s in steps])],
            ),
            svg.line_plot(
                "Goodput and error rate vs load",
                f"load ({unit})",
                "share",
                [
                    ("goodput", xs, [s.get("goodput") for s in steps]),
                    ("error rate", xs, [s["error_rate"] for s in steps]),
                ],
            ),
        ]
        metric = (kn or {}).get("metric") or "e2e_p95"
        fam, _, stat = metric.partition("_")
        figs.append(
            svg.line_plot(
                f"{metric} vs throughput" + (" (knee dashed)" if kn else ""),
                "req/s",
                "ms",
                [
                    (
                        metric,
                        [s["requests_per_s"] for s in steps],
                        [s["latency_ms"][fam][stat] for s in steps],
                    )
                ],
                hline=kn["latency_ms"] if kn else None,
                hline_label="knee latency" if kn else "",
            )
        )
        parts.append("<div class='plots'>" + "".join(figs) + "</div>")
    parts.append(
        "<p class='muted'>Each step's own report: steps/&lt;nn&gt;-&lt;level&gt;/report.html</p>"
    )
    md = [f"- {x}" for x in lines] + [""] + md_table(headers, rows)
    return write_page(
        run_dir,
        f"servecheck capacity: {data.get('target')}",
        [Section("Capacity", "".join(parts), md, data.get("ok"))],
        ok=data.get("ok"),
        subtitle=run_dir.name,
    )
