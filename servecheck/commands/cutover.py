"""``servecheck cutover``: checks before (and during) a hot model swap.

Before the swap, ``servecheck cutover --from OLD --to NEW``:

1. the conformance catalogue on NEW (``conformance/``);
2. greedy-output agreement between OLD and NEW on a prompt set (temperature 0): the share of
   identical answers and the word-level edit distance where they differ;
3. latency/throughput deltas at the same load (``load-old/``, ``load-new/``, judged like
   ``servecheck compare``).

During the swap, ``servecheck cutover --swap-under-load --via ALIAS --duration 60s``: a steady
load on the alias/gateway target while the operator swaps the model behind it; the report names
the failed requests, the longest time without a successful response and each change of the
served ``model`` field.

Exit codes: 0 when every part held, 1 when one did not, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from servecheck.commands import _coldstart
from servecheck.commands.check import SURFACE_FILES
from servecheck.errors import UsageError

COLD_READY_S = 900.0  # how long a launched candidate may take to become ready


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck cutover``."""
    env = os.environ.get
    parser.add_argument(
        "--from", dest="old", metavar="OLD", help="target serving the current model"
    )
    parser.add_argument(
        "--to", dest="new", metavar="NEW", help="target serving the candidate model"
    )
    parser.add_argument(
        "--targets-file",
        default=env("SERVECHECK_TARGETS_FILE", "targets.yaml"),
        metavar="PATH",
        help="targets file (default: %(default)s)",
    )
    g = parser.add_argument_group("pre-cutover")
    g.add_argument(
        "--prompts", metavar="FILE", help="prompt set, one per line (default: a built-in set of 12)"
    )
    g.add_argument(
        "--max-tokens",
        type=int,
        default=64,
        metavar="N",
        help="answer length for the agreement (default: %(default)s)",
    )
    g.add_argument(
        "--min-agreement",
        type=float,
        default=0.8,
        metavar="SHARE",
        help="fail when fewer answers than this share are identical (default: %(default)s)",
    )
    g.add_argument(
        "--skip-conformance", action="store_true", help="do not run the catalogue on NEW"
    )
    g.add_argument(
        "--surface",
        action="append",
        choices=sorted(SURFACE_FILES),
        metavar="NAME",
        help="catalogue surfaces (repeatable)",
    )
    g.add_argument("-k", dest="keyword", metavar="EXPR", help="pytest -k expression over check ids")
    g.add_argument(
        "-n",
        "--workers",
        default=env("SERVECHECK_WORKERS", "auto"),
        metavar="N",
        help="pytest-xdist workers (default: %(default)s)",
    )
    g.add_argument("--no-load", action="store_true", help="skip the latency/throughput comparison")
    g.add_argument(
        "--users",
        type=int,
        default=2,
        metavar="N",
        help="users of each comparison load (default: %(default)s)",
    )
    g.add_argument(
        "--load-duration",
        default="20s",
        metavar="TIME",
        help="length of each comparison load (default: %(default)s)",
    )
    g.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="METRIC=CHANGE",
        help="allowed worsening NEW vs OLD, as in servecheck compare (repeatable)",
    )
    s = parser.add_argument_group("swap under load")
    s.add_argument(
        "--swap-under-load",
        action="store_true",
        help="probe an alias target while the operator swaps the model",
    )
    s.add_argument("--via", metavar="ALIAS", help="the alias/gateway target the clients use")
    s.add_argument(
        "--duration", default="60s", metavar="TIME", help="how long to probe (default: %(default)s)"
    )
    s.add_argument(
        "--rate", default="10/s", metavar="R/s", help="probe request rate (default: %(default)s)"
    )
    s.add_argument(
        "--max-failed",
        type=int,
        default=0,
        metavar="N",
        help="failed requests allowed (default: %(default)s)",
    )
    s.add_argument(
        "--max-gap",
        default="2s",
        metavar="TIME",
        help="longest time without a success allowed (default: %(default)s)",
    )
    parser.add_argument(
        "--out",
        default=env("SERVECHECK_REPORTS", "reports"),
        metavar="DIR",
        help="reports folder (default: %(default)s)",
    )
    parser.add_argument(
        "--run-id", metavar="ID", help="run folder name (default: <time>-cutover-<names>)"
    )
    _coldstart.add_arguments(parser)  # --launch / --cold-start: the candidate (NEW) starts now
    parser.add_argument(
        "--reference-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for the embedded reference server",
    )


def run(args: argparse.Namespace) -> int:
    """Pre-cutover checks, or the swap-under-load probe; one report; exit 0 only if all held."""
    from servecheck.report.workflow import new_run_dir, reference_env, say

    if args.swap_under_load:
        if not args.via:
            raise UsageError("--swap-under-load needs --via ALIAS (the target the clients use)")
        names = [args.via]
        label = f"swap-{args.via}"
    else:
        if not args.old or not args.new:
            raise UsageError("give --from OLD and --to NEW (or --swap-under-load --via ALIAS)")
        if args.old == args.new:
            raise UsageError(f"--from and --to are both {args.old!r}")
        names = [args.old, args.new]
        label = f"{args.old}-to-{args.new}"
    run_dir = new_run_dir(args.out, "cutover", label, args.run_id)
    say(f"servecheck cutover: {label}; report {run_dir}")
    with (
        reference_env(
            names, extra_args=args.reference_arg, log_path=run_dir / "reference-server.log"
        ),
        _coldstart.launched(args, run_dir) as launch,
    ):
        return _swap(args, run_dir) if args.swap_under_load else _pre(args, run_dir, launch)


def _pre(args: argparse.Namespace, run_dir: Path, launch: _coldstart.Launch | None = None) -> int:
    from servecheck.commands.accept import run_conformance
    from servecheck.config import load_targets
    from servecheck.load.run import LoadSpec, run_load
    from servecheck.load.schedule import parse_duration
    from servecheck.report.compare import compare_runs
    from servecheck.report.cutover import agreement, read_prompts
    from servecheck.report.html import write_load_html
    from servecheck.report.workflow import (
        Case,
        Suite,
        say,
        write_json,
        write_junit,
    )

    loaded = load_targets(args.targets_file)
    old, new = loaded.get(args.old), loaded.get(args.new)
    prompts = read_prompts(args.prompts)
    if not prompts:
        raise UsageError(f"--prompts {args.prompts}: no prompts in the file")
    if not 0 <= args.min_agreement <= 1:
        raise UsageError(f"--min-agreement {args.min_agreement}: a share between 0 and 1")
    load_s = parse_duration(args.load_duration)
    parts: dict[str, dict[str, Any]] = {}
    if launch is not None and _coldstart.enabled(args):  # NEW just started: its cold start first
        _, parts["cold_start"] = _coldstart.run_stage(args, new, launch, COLD_READY_S)
    if not args.skip_conformance:
        say(f"conformance catalogue on {new.name}")
        code = run_conformance(
            new.name,
            args.targets_file,
            run_dir,
            surface=args.surface,
            keyword=args.keyword,
            workers=str(args.workers),
        )
        parts["conformance"] = {"ok": code == 0, "exit_code": code, "folder": "conformance"}
    say(f"greedy agreement on {len(prompts)} prompts")
    agr = agreement(old, new, prompts, args.max_tokens)
    share = agr.identical_share
    parts["agreement"] = {
        "ok": share is not None and share >= args.min_agreement and agr.errors == 0,
        "identical_share": share,
        "mean_distance": agr.mean_distance,
        "errors": agr.errors,
        "min_agreement": args.min_agreement,
    }
    write_json(run_dir / "agreement.json", agr.as_dict())
    if not args.no_load:
        for name, tgt in (("load-old", old), ("load-new", new)):
            say(f"comparison load on {tgt.name}: {args.users} users for {load_s:g} s")
            res = run_load(
                LoadSpec(
                    target=tgt,
                    users=args.users,
                    duration_s=load_s,
                    out_dir=run_dir,
                    run_id=name,
                    seed=0,
                    progress=True,
                ),
                on_log=say,
            )
            write_load_html(res.run_dir)
        cmp = compare_runs(
            run_dir / "load-old", run_dir / "load-new", threshold_overrides=args.threshold
        )
        write_json(run_dir / "load-compare.json", cmp.as_dict())
        parts["load"] = {
            "ok": not cmp.regressed,
            "regressions": cmp.regressions,
            "notes": cmp.notes,
        }
    ok = all(p["ok"] for p in parts.values())
    data = {
        "kind": "cutover",
        "mode": "pre",
        "from": old.name,
        "to": new.name,
        "parts": parts,
        "ok": ok,
        "finished": time.time(),
    }
    write_json(run_dir / "cutover.json", data)
    cases = [
        Case(name, p["ok"], _part_message(name, p), "servecheck.cutover")
        for name, p in parts.items()
    ]
    write_junit(
        run_dir / "junit.xml",
        [Suite("servecheck.cutover", cases)],
        include=[run_dir / "conformance" / "junit.xml"],
    )
    page = write_cutover_html(run_dir)
    for name, p in parts.items():
        say(f"{name}: {'ok' if p['ok'] else 'FAILED'}  {_part_message(name, p)}")
    say(f"servecheck cutover: {'PASS' if ok else 'FAIL'}; report {page}")
    return 0 if ok else 1


def _part_message(name: str, p: dict[str, Any]) -> str:
    if name == "agreement":
        share = p.get("identical_share")
        dist = p.get("mean_distance")
        return (
            f"identical {'-' if share is None else f'{share:.0%}'} (minimum {p['min_agreement']:.0%}), mean word edit distance "
            f"{'-' if dist is None else f'{dist:.3f}'}, {p['errors']} failed requests"
        )
    if name == "load":
        return "regressions: " + (", ".join(p["regressions"]) or "none")
    if name == "conformance":
        return f"servecheck check exit code {p['exit_code']}"
    if name == "cold_start":
        return str(p.get("detail") or "")
    if name == "swap":
        return (
            f"{p['failed']} failed requests (allowed {p['max_failed']}), longest gap {p['longest_gap_s']:.2f} s "
            f"(allowed {p['max_gap_s']:g} s), model changes: "
            + (
                ", ".join(f"{c['old']} -> {c['new']} at {c['t']:.2f} s" for c in p["model_changes"])
                or "none"
            )
        )
    return ""


def _swap(args: argparse.Namespace, run_dir: Path) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from servecheck.config import load_targets
    from servecheck.load.schedule import parse_duration, parse_rate
    from servecheck.report.cutover import analyse_swap, model_of, run_swap_probe
    from servecheck.report.workflow import Case, Suite, say, write_json, write_junit

    loaded = load_targets(args.targets_file)
    via = loaded.get(args.via)
    duration = parse_duration(args.duration)
    rate = parse_rate(args.rate)
    max_gap = parse_duration(args.max_gap)
    if not 1 <= duration <= 4 * 3600:
        raise UsageError(f"--duration {args.duration}: between 1s and 4h")
    if not 0 < rate <= 1000:
        raise UsageError(f"--rate {args.rate}: between 0 and 1000/s")
    model = model_of(via)
    say(
        f"probing {via.name} ({via.base_url}) at {rate:g} req/s for {duration:g} s with model {model!r}: swap the model now"
    )
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), transient=True
    ) as progress:
        task = progress.add_task("swap probe", total=duration)

        def tick(t: float, done: int, failed: int) -> None:
            progress.update(
                task,
                completed=min(t, duration),
                description=f"swap probe: {done} done, {failed} failed",
            )

        records, length = run_swap_probe(via, model, duration_s=duration, rate=rate, on_tick=tick)
    rep = analyse_swap(records, length)
    expected = {}
    if args.old or args.new:
        for key, name in (("from", args.old), ("to", args.new)):
            if name:
                try:
                    expected[key] = model_of(loaded.get(name))
                except UsageError as exc:
                    expected[key] = f"(unknown: {exc})"
    part = {
        "ok": rep.failed <= args.max_failed and rep.longest_gap_s <= max_gap,
        "failed": rep.failed,
        "max_failed": args.max_failed,
        "longest_gap_s": rep.longest_gap_s,
        "max_gap_s": max_gap,
        "model_changes": [{"t": c.t, "old": c.old, "new": c.new} for c in rep.model_changes],
    }
    data = {
        "kind": "cutover",
        "mode": "swap",
        "via": via.name,
        "model": model,
        "rate": rate,
        "report": rep.as_dict(),
        "expected_models": expected,
        "parts": {"swap": part},
        "ok": part["ok"],
        "finished": time.time(),
    }
    notes = []
    if expected.get("to") and rep.models_seen and rep.models_seen[-1] != expected["to"]:
        notes.append(
            f"the last served model is {rep.models_seen[-1]!r}, not NEW's {expected['to']!r}: was the swap done?"
        )
    if rep.probe_lag_max_s > 0.25:
        notes.append(
            f"the probe sent up to {rep.probe_lag_max_s:.2f} s late (a starved CPU?): gaps may be overstated"
        )
    if notes:
        data["note"] = "; ".join(notes)
    write_json(run_dir / "cutover.json", data)
    write_json(
        run_dir / "probe.json",
        [
            {
                "t_sent": round(r.t_sent, 4),
                "t_done": round(r.t_done, 4),
                "ok": r.ok,
                "status": r.status,
                "error": r.error,
                "model": r.model,
                "lag": round(r.lag, 4),
            }
            for r in records
        ],
    )
    write_junit(
        run_dir / "junit.xml",
        [
            Suite(
                "servecheck.cutover",
                [
                    Case(
                        "swap under load",
                        part["ok"],
                        _part_message("swap", part),
                        "servecheck.cutover",
                    )
                ],
            )
        ],
    )
    page = write_cutover_html(run_dir)
    say(f"swap: {_part_message('swap', part)}")
    if data.get("note"):
        say(f"note: {data['note']}")
    say(f"servecheck cutover: {'PASS' if part['ok'] else 'FAIL'}; report {page}")
    return 0 if part["ok"] else 1


def write_cutover_html(run_dir: Path) -> Path:
    """The cutover page: parts and verdicts, agreement table, load deltas or the swap timeline."""
    from servecheck.report import svg
    from servecheck.report.compare import compare_runs, comparison_section
    from servecheck.report.cutover import ProbeRecord, swap_timeline
    from servecheck.report.html import (
        Section,
        conformance_section,
        esc,
        read_json,
        table,
        verdict_badge,
        write_page,
    )

    data = read_json(run_dir / "cutover.json")
    parts = data.get("parts") or {}
    sections = [
        Section(
            "Verdict",
            table(
                ("part", "verdict", "detail"),
                (
                    (esc(n), verdict_badge(p.get("ok")), esc(_part_message(n, p)))
                    for n, p in parts.items()
                ),
                raw=(0, 1, 2),
            )
            + (f"<p class='flag'>{esc(data['note'])}</p>" if data.get("note") else ""),
            [
                f"- {n}: {'ok' if p.get('ok') else 'FAILED'}: {_part_message(n, p)}"
                for n, p in parts.items()
            ],
            data.get("ok"),
        )
    ]
    if "cold_start" in parts:
        sections.append(_coldstart.section(parts["cold_start"]))
    if data.get("mode") == "swap":
        rep = data.get("report") or {}
        import json

        try:
            raw = json.loads((run_dir / "probe.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raw = []
        recs = [
            ProbeRecord(
                r["t_sent"],
                r["t_done"],
                r["ok"],
                r["status"],
                r["error"],
                r["model"],
                r.get("lag", 0.0),
            )
            for r in raw
        ]
        ts, okr, badr = swap_timeline(recs)
        fig = svg.timeline(
            f"Requests to {data.get('via')} during the swap",
            "per second",
            [("ok/s", ts, okr), ("failed/s", ts, badr)],
            spans=[
                (
                    rep.get("gap_start_s", 0),
                    rep.get("gap_end_s", 0),
                    f"longest gap {rep.get('longest_gap_s', 0):.2f} s",
                )
            ],
            events=[(c["t"], f"{c['old']} -> {c['new']}") for c in rep.get("model_changes") or []],
        )
        rows: list[tuple[str, Any]] = [
            ("requests", rep.get("requests")),
            ("ok", rep.get("ok")),
            ("failed", rep.get("failed")),
            ("errors", ", ".join(f"{k}: {v}" for k, v in (rep.get("errors") or {}).items()) or "-"),
            (
                "longest gap without a success",
                f"{rep.get('longest_gap_s')} s ({rep.get('gap_start_s')} s to {rep.get('gap_end_s')} s)",
            ),
            ("models seen", ", ".join(rep.get("models_seen") or []) or "-"),
            ("probe sent late by up to", f"{rep.get('probe_lag_max_s', 0)} s"),
            (
                "model changes",
                "; ".join(
                    f"{c['old']} -> {c['new']} at {c['t']} s"
                    for c in rep.get("model_changes") or []
                )
                or "none",
            ),
        ]
        sections.append(
            Section(
                "Swap under load",
                table(("", ""), rows) + f"<div class='plots'>{fig}</div>",
                [f"- {k}: {v}" for k, v in rows],
                None,
            )
        )
        return write_page(
            run_dir,
            f"servecheck cutover (swap via {data.get('via')})",
            sections,
            ok=data.get("ok"),
            subtitle=run_dir.name,
        )
    if (run_dir / "conformance").is_dir():
        sections.append(
            conformance_section(run_dir / "conformance", f"Conformance of {data.get('to')}")
        )
    agr = read_json(run_dir / "agreement.json")
    if agr:
        agr_rows = [
            (
                esc(r["prompt"]),
                verdict_badge(r["identical"], "same" if r["identical"] else "differs"),
                esc("-" if r["distance"] is None else f"{r['distance']:.3f}"),
                esc((r["old"] or r["old_error"])[:300]),
                esc((r["new"] or r["new_error"])[:300]),
            )
            for r in agr.get("results") or []
        ]
        share = agr.get("identical_share")
        head = (
            f"<p>{esc(agr.get('old_model'))} vs {esc(agr.get('new_model'))}: identical answers "
            f"<b>{'-' if share is None else f'{share:.0%}'}</b> of {agr.get('compared')}, mean word edit distance "
            f"{esc('-' if agr.get('mean_distance') is None else round(agr['mean_distance'], 3))}</p>"
        )
        sections.append(
            Section(
                "Greedy-output agreement",
                head + table(("prompt", "same?", "distance", "OLD", "NEW"), agr_rows, raw=range(5)),
                [
                    f"identical {'-' if share is None else f'{share:.0%}'}, mean distance {agr.get('mean_distance')}"
                ],
                (parts.get("agreement") or {}).get("ok"),
            )
        )
    if (run_dir / "load-old").is_dir() and (run_dir / "load-new").is_dir():
        try:
            cmp = compare_runs(run_dir / "load-old", run_dir / "load-new")
            sec = comparison_section(cmp)
            sec.title = "Latency and throughput: NEW vs OLD at the same load"
            sections.append(sec)
        except UsageError as exc:
            sections.append(
                Section(
                    "Latency and throughput", f"<p class='flag'>{esc(exc)}</p>", [str(exc)], False
                )
            )
    return write_page(
        run_dir,
        f"servecheck cutover: {data.get('from')} -> {data.get('to')}",
        sections,
        ok=data.get("ok"),
        subtitle=run_dir.name,
    )
