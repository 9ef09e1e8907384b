"""``servecheck check``: run the conformance catalogue (pytest + xdist) and write a report.

With no ``--target`` it checks the embedded default target: the reference server, started on a
free port for the duration of the run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import servecheck
from servecheck.config import load_targets
from servecheck.errors import UsageError
from servecheck.redact import redact

SURFACE_FILES = {
    "health": "test_health.py",
    "models": "test_models.py",
    "chat": "test_chat.py",
    "stream": "test_stream.py",
    "json": "test_json.py",
    "tools": "test_tools.py",
    "ctx": "test_ctx.py",
    "err": "test_err.py",
    "auth": "test_auth.py",
    "conc": "test_conc.py",
    "fuzz": "test_fuzz.py",
    "client": "test_client.py",
    "responses": "test_responses.py",
    "overload": "test_overload.py",
}


def suites_dir() -> Path:
    for candidate in (
        Path.cwd() / "suites",
        Path(servecheck.__file__).resolve().parent.parent / "suites",
    ):
        if (candidate / "test_health.py").exists():
            return candidate
    raise UsageError("cannot find the suites/ folder: run servecheck from the project checkout")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument(
        "--target",
        action="append",
        metavar="NAME",
        help="target from targets.yaml; repeatable; 'all' (default: env SERVECHECK_TARGET, else the embedded reference)",
    )
    parser.add_argument(
        "--targets-file",
        default=env("SERVECHECK_TARGETS_FILE", "targets.yaml"),
        metavar="PATH",
        help="targets file (default: %(default)s, env SERVECHECK_TARGETS_FILE)",
    )
    parser.add_argument(
        "--model", action="append", metavar="NAME", help="check only this served model; repeatable"
    )
    parser.add_argument(
        "--surface",
        action="append",
        choices=sorted(SURFACE_FILES),
        metavar="NAME",
        help=f"run only these surfaces; repeatable ({', '.join(SURFACE_FILES)})",
    )
    parser.add_argument(
        "-k",
        dest="keyword",
        metavar="EXPR",
        help="pytest -k expression over case ids, e.g. 'STREAM-DONE or CHAT-'",
    )
    parser.add_argument(
        "-n",
        "--workers",
        default=env("SERVECHECK_WORKERS", "auto"),
        metavar="N",
        help="pytest-xdist workers, 'auto' or a number; 0 runs in-process (default: %(default)s)",
    )
    parser.add_argument(
        "--out",
        default=env("SERVECHECK_REPORTS", "reports"),
        metavar="DIR",
        help="where the run folder goes (default: %(default)s, env SERVECHECK_REPORTS)",
    )
    parser.add_argument(
        "--run-id", metavar="ID", help="name of the run folder (default: <time>-check-<targets>)"
    )
    parser.add_argument(
        "--no-embedded", action="store_true", help="do not start the embedded reference server"
    )
    parser.add_argument(
        "--reference-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for the embedded reference server, e.g. --reference-arg=--fault=stream-no-done"
        " (it always runs with --itl-ms 2, so that streaming checks can see tokens arrive over time)",
    )
    parser.add_argument(
        "pytest_args", nargs=argparse.REMAINDER, help="after --: passed to pytest as they are"
    )


def _run_id(targets: list[str]) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    label = "-".join(targets)[:40] if targets else "reference"
    return f"{stamp}-check-{label}"


def build_pytest_command(args: argparse.Namespace, run_dir: Path, targets: list[str]) -> list[str]:
    root = suites_dir()
    files = [str(root / SURFACE_FILES[s]) for s in args.surface] if args.surface else [str(root)]
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *files,
        "-q",
        "-p",
        "no:randomly",
        "--sc-report-dir",
        str(run_dir),
        "--targets-file",
        args.targets_file,
        f"--junitxml={run_dir / 'junit.xml'}",
        "-o",
        "junit_family=xunit2",
        "--rootdir",
        str(root.parent),
    ]
    try:
        import allure_pytest  # noqa: F401

        cmd.append(f"--alluredir={run_dir / 'allure-results'}")
    except ImportError:
        pass
    for target in targets:
        cmd += ["--target", target]
    for model in args.model or []:
        cmd += ["--model", model]
    if args.keyword:
        cmd += ["-k", args.keyword]
    if str(args.workers) not in ("0", ""):
        cmd += ["-n", str(args.workers)]
    extra = list(args.pytest_args or [])
    if extra[:1] == ["--"]:
        extra = extra[1:]
    return cmd + extra


def run(args: argparse.Namespace) -> int:
    targets = (
        args.target
        or [t for t in os.environ.get("SERVECHECK_TARGET", "").split(",") if t]
        or ["reference"]
    )
    loaded = load_targets(args.targets_file)
    needs_embedded = (
        ("reference" in targets or "all" in targets)
        and not args.no_embedded
        and "SERVECHECK_REF_URL" not in os.environ
    )
    if "reference" in targets and "reference" not in loaded.names:
        raise UsageError(f"{loaded.path}: no 'reference' target; name one with --target")
    run_id = args.run_id or _run_id(targets)
    run_dir = Path(args.out) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = build_pytest_command(args, run_dir, targets)
    env = dict(os.environ)
    print(f"servecheck check: targets {', '.join(targets)}; report {run_dir}", flush=True)
    if needs_embedded:
        from servecheck.embedded import embedded_reference

        with embedded_reference(
            ["--itl-ms", "2", *args.reference_arg], log_path=run_dir / "reference-server.log"
        ) as ref_env:
            env.update(ref_env)
            code = subprocess.call(cmd, env=env)
    else:
        code = subprocess.call(cmd, env=env)
    summary = run_dir / "summary.json"
    if summary.exists():
        data = json.loads(summary.read_text())
        counts = data.get("counts", {})
        line = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        print(f"servecheck check: {line or 'no checks ran'} -> {run_dir}")
        try:
            from servecheck.report.html import write_conformance_html

            page = write_conformance_html(run_dir)
            print(f"servecheck check: HTML summary {page}")
        except ImportError:
            pass
    if code == 5:
        print(redact("servecheck check: no checks were selected (pytest exit 5)"), file=sys.stderr)
        return 3
    return code
