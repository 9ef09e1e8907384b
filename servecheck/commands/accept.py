"""``servecheck accept``: the post-deploy acceptance gate for one target.

Stages, in one run folder ``reports/<run-id>/``:

1. readiness: poll the health endpoint (bounded by ``--ready-timeout``);
2. conformance: the check catalogue (``servecheck check``) into ``conformance/``;
3. smoke load: a short closed-loop load with SLOs (``run_load``) into ``load/``.

Top level: ``accept.json`` (stages and verdict), ``junit.xml`` (the checks plus one case per
stage and per SLO), ``allure-results/`` (checks with their exchanges, plus the SLOs),
``report.html`` (one page) and ``summary.md``.

Exit codes: 0 when every stage held, 1 when one did not, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servecheck.commands import _coldstart
from servecheck.commands.check import SURFACE_FILES


def check_args(
    target: str,
    targets_file: str,
    out: Path,
    run_id: str,
    *,
    surface: Sequence[str] | None = None,
    keyword: str | None = None,
    workers: str = "auto",
    models: Sequence[str] | None = None,
) -> argparse.Namespace:
    """Arguments for ``servecheck.commands.check.run``, parsed by its own parser (so its defaults and
    any option it gains later are honoured)."""
    from servecheck.commands import check

    parser = argparse.ArgumentParser(prog="servecheck check")
    check.add_arguments(parser)
    argv = [
        "--target",
        target,
        "--targets-file",
        targets_file,
        "--out",
        str(out),
        "--run-id",
        run_id,
        "--no-embedded",
        "-n",
        str(workers),
    ]
    for s in surface or []:
        argv += ["--surface", s]
    for m in models or []:
        argv += ["--model", m]
    if keyword:
        argv += ["-k", keyword]
    return parser.parse_args(argv)


def run_conformance(
    target: str, targets_file: str, run_dir: Path, name: str = "conformance", **kw: Any
) -> int:
    """Run ``servecheck check`` for one target into ``run_dir/name``; returns its exit code."""
    from servecheck.commands import check

    return int(check.run(check_args(target, targets_file, run_dir, name, **kw)) or 0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck accept`` (defaults from SERVECHECK_* variables where noted)."""
    env = os.environ.get
    parser.add_argument(
        "--target",
        default=env("SERVECHECK_TARGET", "reference"),
        metavar="NAME",
        help="target in targets.yaml (default: %(default)s; env SERVECHECK_TARGET; 'reference' starts the embedded server)",
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
        help="SLO for the smoke load, e.g. ttft_p95<=500ms (repeatable; the target's slo list is added)",
    )
    parser.add_argument(
        "--smoke-duration",
        default=env("SERVECHECK_SMOKE_DURATION", "20s"),
        metavar="TIME",
        help="length of the smoke load (default: %(default)s)",
    )
    parser.add_argument(
        "--smoke-users",
        type=int,
        default=2,
        metavar="N",
        help="concurrent users of the smoke load (default: %(default)s)",
    )
    parser.add_argument(
        "--scenario", default="chat", metavar="NAME", help="load scenario (default: %(default)s)"
    )
    parser.add_argument(
        "--no-load", action="store_true", help="skip the smoke load (conformance only)"
    )
    parser.add_argument(
        "--allow-lag",
        action="store_true",
        help="report a lagging load generator as a warning instead of failing the smoke load",
    )
    parser.add_argument(
        "--ready-timeout",
        default="300s",
        metavar="TIME",
        help="how long to wait for readiness (default: %(default)s)",
    )
    parser.add_argument(
        "--surface",
        action="append",
        choices=sorted(SURFACE_FILES),
        metavar="NAME",
        help="run only these conformance surfaces (repeatable)",
    )
    parser.add_argument(
        "-k", dest="keyword", metavar="EXPR", help="pytest -k expression over check ids"
    )
    parser.add_argument(
        "-n",
        "--workers",
        default=env("SERVECHECK_WORKERS", "auto"),
        metavar="N",
        help="pytest-xdist workers for the catalogue (default: %(default)s)",
    )
    parser.add_argument(
        "--out",
        default=env("SERVECHECK_REPORTS", "reports"),
        metavar="DIR",
        help="reports folder (default: %(default)s)",
    )
    parser.add_argument(
        "--run-id", metavar="ID", help="run folder name (default: <time>-accept-<target>)"
    )
    _coldstart.add_arguments(parser)
    parser.add_argument(
        "--reference-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for the embedded reference server, e.g. --reference-arg=--fault=stream-no-done",
    )


def run(args: argparse.Namespace) -> int:
    """Readiness, conformance, smoke load; one report; exit 0 only if everything held."""
    from servecheck.load.schedule import parse_duration
    from servecheck.report.workflow import new_run_dir, reference_env, say

    smoke_s = parse_duration(args.smoke_duration)
    ready_s = parse_duration(args.ready_timeout)
    from servecheck.errors import UsageError

    if not 1 <= smoke_s <= 3600:
        raise UsageError(f"--smoke-duration {args.smoke_duration}: between 1s and 1h")
    if not 0 < ready_s <= 3 * 3600:
        raise UsageError(f"--ready-timeout {args.ready_timeout}: between 1s and 3h")
    run_dir = new_run_dir(args.out, "accept", args.target, args.run_id)
    say(f"servecheck accept: target {args.target}; report {run_dir}")
    with (
        reference_env(
            [args.target], extra_args=args.reference_arg, log_path=run_dir / "reference-server.log"
        ),
        _coldstart.launched(args, run_dir) as launch,
    ):
        return _accept(args, run_dir, smoke_s, ready_s, launch)


def _accept(
    args: argparse.Namespace,
    run_dir: Path,
    smoke_s: float,
    ready_s: float,
    launch: _coldstart.Launch | None = None,
) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from servecheck.checks.health import wait_ready
    from servecheck.client.http import ServeClient
    from servecheck.config import load_targets
    from servecheck.report.workflow import (
        Case,
        Suite,
        say,
        slo_cases,
        write_json,
        write_junit,
    )

    target = load_targets(args.targets_file).get(args.target)
    stages: dict[str, dict[str, Any]] = {}
    started = time.time()
    steps = 2 + (0 if args.no_load else 1)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        transient=True,
    ) as progress:
        task = progress.add_task("accept: readiness", total=steps)
        t0 = time.monotonic()
        if launch is not None and _coldstart.enabled(args):  # readiness, then the first requests
            stages["ready"], stages["cold_start"] = _coldstart.run_stage(
                args, target, launch, ready_s
            )
        else:
            with ServeClient.for_target(target) as client:
                state = wait_ready(client, target, timeout_s=ready_s)
            stages["ready"] = {
                "ok": state.state == "ready",
                "state": state.state,
                "detail": state.detail,
                "seconds": round(time.monotonic() - t0, 3),
            }
            say(f"readiness: {state.state}: {state.detail}")
        progress.advance(task)
        if stages["ready"]["ok"]:
            progress.update(task, description="accept: conformance")
            t0 = time.monotonic()
            code = run_conformance(
                args.target,
                args.targets_file,
                run_dir,
                surface=args.surface,
                keyword=args.keyword,
                workers=str(args.workers),
            )
            stages["conformance"] = {
                "ok": code == 0,
                "exit_code": code,
                "seconds": round(time.monotonic() - t0, 3),
                "folder": "conformance",
            }
            progress.advance(task)
            if not args.no_load:
                progress.update(task, description="accept: smoke load")
                stages["load"] = _smoke(args, target, run_dir, smoke_s)
                progress.advance(task)
    ok = bool(stages) and all(s.get("ok") for s in stages.values()) and "conformance" in stages
    verdict = {
        "kind": "accept",
        "target": args.target,
        "base_url": target.base_url,
        "engine": target.engine,
        "started": started,
        "finished": time.time(),
        "stages": stages,
        "ok": ok,
        "exit_code": 0 if ok else 1,
    }
    write_json(run_dir / "accept.json", verdict)
    cases = [
        Case(
            "readiness",
            stages["ready"]["ok"],
            stages["ready"]["detail"],
            "servecheck.accept",
            stages["ready"]["seconds"],
        )
    ]
    if "conformance" in stages:
        cases.append(
            Case(
                "conformance catalogue",
                stages["conformance"]["ok"],
                f"servecheck check exit code {stages['conformance']['exit_code']}",
                "servecheck.accept",
            )
        )
    load_summary = _load_summary(run_dir)
    suites = [Suite("servecheck.accept", cases)]
    if load_summary:
        suites.append(Suite("servecheck.load", slo_cases(load_summary)))
    write_junit(run_dir / "junit.xml", suites, include=[run_dir / "conformance" / "junit.xml"])
    _allure(run_dir, load_summary)
    page = write_accept_html(run_dir)
    say(
        f"servecheck accept: {'PASS' if ok else 'FAIL'}; "
        + ", ".join(f"{k} {'ok' if v.get('ok') else 'FAILED'}" for k, v in stages.items())
        + f"; report {page}"
    )
    return 0 if ok else 1


def _smoke(args: argparse.Namespace, target: Any, run_dir: Path, smoke_s: float) -> dict[str, Any]:
    from servecheck.load.run import LoadSpec, run_load
    from servecheck.report.html import write_load_html
    from servecheck.report.workflow import say

    t0 = time.monotonic()
    spec = LoadSpec(
        target=target,
        scenario=args.scenario,
        users=max(1, args.smoke_users),
        duration_s=smoke_s,
        slos=list(args.slo),
        out_dir=run_dir,
        run_id="load",
        progress=True,
        allow_lag=args.allow_lag,
    )
    result = run_load(spec, on_log=say)
    write_load_html(result.run_dir)
    reasons = list(result.summary.get("reasons") or [])
    failed_slos = [v.get("slo") for v in result.summary.get("slo") or [] if not v.get("passed")]
    detail = (
        f"{result.summary.get('verdict')}"
        + (f": SLO breached: {', '.join(map(str, failed_slos))}" if failed_slos else "")
        + (f" ({'; '.join(reasons)})" if reasons else "")
    )
    return {
        "ok": result.passed,
        "verdict": result.summary.get("verdict"),
        "reasons": reasons,
        "detail": detail,
        "slo": result.summary.get("slo"),
        "exit_code": result.exit_code,
        "seconds": round(time.monotonic() - t0, 3),
        "folder": "load",
    }


def _load_summary(run_dir: Path) -> dict[str, Any]:
    from servecheck.report.html import read_json

    s = read_json(run_dir / "load" / "summary.json")
    return s if "requests" in s else {}


def _allure(run_dir: Path, load_summary: dict[str, Any]) -> None:
    from servecheck.report.allure_glue import write_slo_results
    from servecheck.report.workflow import copy_allure

    dst = run_dir / "allure-results"
    copy_allure(run_dir / "conformance" / "allure-results", dst)
    if load_summary:
        text = (
            (run_dir / "load" / "summary.txt").read_text(encoding="utf-8")
            if (run_dir / "load" / "summary.txt").exists()
            else ""
        )
        write_slo_results(dst, load_summary.get("slo") or [], suite="smoke load", attachment=text)


def write_accept_html(run_dir: Path) -> Path:
    """The one-page acceptance report: readiness, conformance and smoke load sections."""
    from servecheck.report.html import (
        Section,
        conformance_section,
        esc,
        load_section,
        read_json,
        table,
        verdict_badge,
        write_page,
    )

    data = read_json(run_dir / "accept.json")
    stages = data.get("stages") or {}
    rows = [
        (
            esc(name),
            verdict_badge(s.get("ok")),
            esc(s.get("detail") or s.get("verdict") or f"exit code {s.get('exit_code')}"),
            esc(s.get("seconds")),
        )
        for name, s in stages.items()
    ]
    overview = Section(
        "Stages",
        f"<p>target <b>{esc(data.get('target'))}</b> ({esc(data.get('engine'))}) at "
        f"<code>{esc(data.get('base_url'))}</code></p>"
        + table(("stage", "verdict", "detail", "seconds"), rows, raw=(0, 1, 2, 3)),
        [f"- {name}: {'ok' if s.get('ok') else 'FAILED'}" for name, s in stages.items()],
        data.get("ok"),
    )
    sections = [overview]
    if "cold_start" in stages:
        sections.append(_coldstart.section(stages["cold_start"]))
    if (run_dir / "conformance").is_dir():
        sections.append(conformance_section(run_dir / "conformance"))
    if (run_dir / "load").is_dir():
        sections.append(load_section(run_dir / "load", "Smoke load"))
    return write_page(
        run_dir,
        f"servecheck accept: {data.get('target')}",
        sections,
        ok=data.get("ok"),
        subtitle=str(run_dir.name),
    )
