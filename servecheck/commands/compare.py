"""``servecheck compare BASELINE_RUN CURRENT_RUN``: nightly regression verdict between two runs.

Exit codes: 0 no regression, 1 regression (a metric significantly worse beyond its threshold, or
a newly failing check) or INCONCLUSIVE (a run doubted its own measurement), 2 usage error (a
missing run folder, a bad ``--threshold``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from servecheck.redact import redact

# Spec field -> option where the names differ beyond an option's dest (and dest + "_s"),
# for showing the library's SpecError (servecheck/cli.py).
FIELD_OPTIONS = {"thresholds": "--threshold"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck compare``."""
    env = os.environ.get
    parser.add_argument(
        "baseline",
        metavar="BASELINE_RUN",
        help="run folder of the baseline (reports/<run-id>), or rolling:N: the last N nights "
        "of the history (servecheck history)",
    )
    parser.add_argument("current", metavar="CURRENT_RUN", help="run folder to judge")
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="METRIC=CHANGE",
        help="allowed worsening, e.g. ttft_p95=+10%%, e2e=+50ms, error_rate=+1pp, throughput_rps=-10%% "
        "(repeatable; defaults: latency +10%%, throughput -10%%, error_rate +1pp, goodput -5pp)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=float(env("SERVECHECK_COMPARE_ALPHA", "0.01")),
        metavar="P",
        help="significance level for the tests and 1-alpha intervals (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="N",
        help="seed of throughput's bootstrap (default: %(default)s)",
    )
    parser.add_argument(
        "--bootstrap",
        type=int,
        default=1000,
        metavar="N",
        help="bootstrap resamples of throughput's interval (default: %(default)s)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the comparison as JSON instead of a table"
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="where compare.json, report.html and summary.md go (default: CURRENT_RUN/compare)",
    )
    parser.add_argument(
        "--history",
        metavar="URL",
        default=env("SERVECHECK_HISTORY"),
        help="with rolling:N: the history database, a SQLite file or postgresql://... "
        "(env SERVECHECK_HISTORY; default: reports/history.db)",
    )


def run(args: argparse.Namespace) -> int:
    """Compare, write compare.json + report.html + summary.md, print, exit 1 on regression."""
    from servecheck import api
    from servecheck.report.compare import format_text

    if args.baseline.startswith("rolling:"):
        return _rolling(args)
    result = api.compare(
        api.CompareSpec(
            baseline=Path(args.baseline),
            current=Path(args.current),
            thresholds=list(args.threshold),
            alpha=args.alpha,
            seed=args.seed,
            bootstrap=args.bootstrap,
            out=Path(args.out) if args.out else None,
        )
    )
    if args.json:
        print(redact(json.dumps(result.comparison.as_dict(), indent=2)))
    else:
        print(redact(format_text(result.comparison)))
        print(f"report: {result.page}", file=sys.stderr)
    return result.exit_code


def _rolling(args: argparse.Namespace) -> int:
    """``rolling:N``: tonight's run against the last N nights of the history."""
    from servecheck import api

    judged = api.history_compare(
        api.HistoryCompareSpec(
            baseline=args.baseline,
            current=Path(args.current),
            thresholds=list(args.threshold),
            alpha=args.alpha,
            history=args.history,
            out=Path(args.out) if args.out else None,
        )
    )
    j = judged.judgement
    print(redact(json.dumps(j.as_dict(), indent=2, default=str) if args.json else j.format_text()))
    return judged.exit_code
