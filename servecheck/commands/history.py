"""``servecheck history add | show | compare``: the nightly series in a database.

``add RUN_DIR...`` records load and check run folders (target, engine version, model, tag, every
metric and check outcome); ``show --target X --metric ttft_p95`` prints the series, names its
steps and writes an SVG and report.html; ``compare --baseline rolling:N`` judges tonight against
the last N nights. The database is ``reports/history.db`` (SQLite) unless ``--history`` (env
SERVECHECK_HISTORY) names another file or a ``postgresql://`` server.

Exit codes: 0 done (compare: no regression), 1 compare found a regression or could not judge
(INCONCLUSIVE), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from servecheck.redact import redact

# Spec field -> option, for showing the library's SpecError (servecheck/cli.py).
FIELD_OPTIONS = {
    "runs": "RUN_DIR",
    "thresholds": "--threshold",
    "current": "RUN_DIR",
    "started_at": "--night",
    "target": "--target",
    "metric": "--metric",
    "kind": "--checks",
    "last": "--last",
    "baseline": "--baseline",
    "alpha": "--alpha",
    "engine_version": "--engine-version",
}


def _db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--history",
        metavar="URL",
        default=os.environ.get("SERVECHECK_HISTORY"),
        help="history database: a SQLite file, sqlite:///PATH or postgresql://user@host/db "
        "(env SERVECHECK_HISTORY; default: reports/history.db)",
    )


def _add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("add", help="record load and check run folders")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders (reports/<run-id>)")
    p.add_argument(
        "--tag",
        metavar="TAG",
        default=os.environ.get("SERVECHECK_HISTORY_TAG"),
        help="git or image tag of what was tested (env SERVECHECK_HISTORY_TAG; default: none)",
    )
    p.add_argument(
        "--engine-version",
        metavar="VERSION",
        default=None,
        help="the engine's version, where the run did not see one (default: what discovery saw)",
    )
    p.add_argument(
        "--target",
        metavar="NAME",
        default=None,
        help="which target of a check run over several (default: the run's first)",
    )
    p.add_argument(
        "--night",
        metavar="YYYY-MM-DD",
        default=None,
        help="record the run under this night (default: when the run started)",
    )
    _db(p)


def _show(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("show", help="a target's series of one metric, its steps, a plot")
    p.add_argument("--target", metavar="NAME", required=True, help="target name as recorded")
    p.add_argument(
        "--metric",
        metavar="NAME",
        default="ttft_p95",
        help="metric, as servecheck compare names them (default: %(default)s)",
    )
    p.add_argument(
        "--checks",
        action="store_true",
        help="the conformance series instead: which check started failing on which night",
    )
    p.add_argument("--model", metavar="NAME", default=None, help="only this model's runs")
    p.add_argument("--last", type=int, metavar="N", default=None, help="only the last N nights")
    p.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="where the SVG and report.html go (default: reports/history)",
    )
    _db(p)


def _compare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="judge tonight against the last N nights")
    p.add_argument(
        "current",
        nargs="?",
        metavar="RUN_DIR",
        default=None,
        help="tonight's run folder (default: the target's last recorded run)",
    )
    p.add_argument(
        "--baseline",
        metavar="rolling:N",
        default="rolling:7",
        help="the nights to judge against (default: %(default)s)",
    )
    p.add_argument("--target", metavar="NAME", default=None, help="target name as recorded")
    p.add_argument(
        "--checks", action="store_true", help="judge the target's conformance runs instead"
    )
    p.add_argument("--model", metavar="NAME", default=None, help="only this model's runs")
    p.add_argument("--record", action="store_true", help="also record RUN_DIR in the history")
    p.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="METRIC=CHANGE",
        help="allowed worsening, as servecheck compare (repeatable; default: its thresholds)",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=0.01,
        metavar="P",
        help="1 - confidence of the nights' prediction interval (default: %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print the judgement as JSON")
    p.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="where history-compare.json goes (default: RUN_DIR, else nowhere)",
    )
    _db(p)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Subcommands of ``servecheck history``."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    _add(sub)
    _show(sub)
    _compare(sub)


def run(args: argparse.Namespace) -> int:
    """Dispatch to the action; print what it found."""
    from servecheck import api

    if args.action == "add":
        added = api.history_add(
            api.HistoryAddSpec(
                runs=[Path(p) for p in args.runs],
                history=args.history,
                tag=args.tag,
                engine_version=args.engine_version,
                target=args.target,
                started_at=args.night,
            )
        )
        for run_id in added.added:
            print(f"recorded {run_id}")
        for run_id in added.skipped:
            print(f"already recorded: {run_id}")
        print(f"history: {added.total} runs")
        return 0
    if args.action == "show":
        shown = api.history_show(
            api.HistoryShowSpec(
                target=args.target,
                metric=args.metric,
                kind="conformance" if args.checks else "load",
                model=args.model,
                last=args.last,
                history=args.history,
                out=Path(args.out) if args.out else None,
            )
        )
        print(redact(shown.table))
        for step in shown.steps:
            print(redact(step.line()))
        if shown.figure is not None:
            print(f"plot: {shown.figure}\nreport: {shown.page}", file=sys.stderr)
        return 0
    return _run_compare(args)


def _run_compare(args: argparse.Namespace) -> int:
    from servecheck import api

    result = api.history_compare(
        api.HistoryCompareSpec(
            target=args.target,
            baseline=args.baseline,
            current=Path(args.current) if args.current else None,
            record=args.record,
            thresholds=list(args.threshold),
            alpha=args.alpha,
            kind="conformance" if args.checks else "load",
            model=args.model,
            history=args.history,
            out=Path(args.out) if args.out else None,
        )
    )
    if args.json:
        print(redact(json.dumps(result.judgement.as_dict(), indent=2, default=str)))
    else:
        print(redact(result.judgement.format_text()))
    return result.exit_code
