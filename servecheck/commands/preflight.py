"""``servecheck preflight PATH``: check model files before an engine launch or a hot swap.

Exit codes: 0 no error-level finding, 1 at least one, 2 usage error (bad PATH or option).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from servecheck.errors import UsageError

if TYPE_CHECKING:
    from servecheck.preflight import PreflightReport

_ENV = "SERVECHECK_PREFLIGHT_"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck preflight``; most also read a SERVECHECK_PREFLIGHT_* variable."""
    env = os.environ.get
    parser.add_argument(
        "path",
        metavar="PATH",
        help="model folder, HF cache repo (models--org--name) or snapshot, or one .safetensors/.gguf file",
    )
    group = parser.add_argument_group("what the launch declares")
    group.add_argument(
        "--quantization",
        metavar="METHOD",
        default=env(_ENV + "QUANTIZATION"),
        help="declared method (awq, gptq, fp8, none ...); compared with config.json (env SERVECHECK_PREFLIGHT_QUANTIZATION)",
    )
    group.add_argument(
        "--context-length",
        metavar="N",
        default=env(_ENV + "CONTEXT_LENGTH"),
        help="declared max context; error when above the model's (env SERVECHECK_PREFLIGHT_CONTEXT_LENGTH)",
    )
    group.add_argument(
        "--gpu-memory-gib",
        metavar="GIB",
        default=env(_ENV + "GPU_MEMORY_GIB"),
        help="GPU memory budget for the weights; error when they need more (env SERVECHECK_PREFLIGHT_GPU_MEMORY_GIB)",
    )
    group.add_argument(
        "--chat",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the model serves chat: a missing chat template is an error, else a warning (default: %(default)s)",
    )
    group.add_argument(
        "--revision",
        metavar="REV",
        default=None,
        help="HF cache repo: branch or commit to check (default: refs/main)",
    )
    group.add_argument(
        "--as-user",
        metavar="USER",
        default=env(_ENV + "AS_USER"),
        help="check permissions for this user name or uid (the engine's), not the current one (env SERVECHECK_PREFLIGHT_AS_USER)",
    )
    integrity = parser.add_argument_group("integrity (reads every byte)")
    integrity.add_argument(
        "--verify-sha256",
        action="store_true",
        help="hash weight files against their HF blob names (LFS sha256)",
    )
    integrity.add_argument(
        "--manifest",
        metavar="FILE",
        default=None,
        help="sha256sum-format file; paths relative to the model folder",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the report as JSON (keys in docs/preflight.md)"
    )


def _positive(name: str, raw: str | None, kind: type[int] | type[float]) -> Any:
    if raw is None:
        return None
    try:
        value = kind(raw)
    except ValueError:
        raise UsageError(f"{name}: expected a positive {kind.__name__}, got {raw!r}") from None
    if value <= 0:
        raise UsageError(f"{name}: expected a positive {kind.__name__}, got {raw!r}")
    return value


def _user(raw: str | None) -> tuple[int | None, tuple[int, ...] | None]:
    """``--as-user`` -> (uid, gids); numbers need not exist in /etc/passwd (containers)."""
    if raw is None:
        return None, None
    import pwd

    from servecheck.errors import did_you_mean

    try:
        entry = pwd.getpwuid(int(raw)) if raw.isdigit() else pwd.getpwnam(raw)
    except KeyError:
        if raw.isdigit():
            return int(raw), ()
        names = [p.pw_name for p in pwd.getpwall()]
        raise UsageError(f"--as-user: no user {raw!r}{did_you_mean(raw, names)}") from None
    return entry.pw_uid, tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))


class _RichHashProgress:
    """A transient rich progress bar on stderr for --verify-sha256 / --manifest."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._progress = Progress(
            TextColumn("sha256 {task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._task: Any = None

    def start(self, total_bytes: int) -> None:
        self._progress.start()
        self._task = self._progress.add_task("", total=total_bytes)

    def file(self, name: str) -> None:
        self._progress.update(self._task, description=name)

    def advance(self, n_bytes: int) -> None:
        self._progress.advance(self._task, n_bytes)

    def finish(self) -> None:
        self._progress.stop()


def run(args: argparse.Namespace) -> int:
    """Run the preflight and print a table (or JSON); 1 when any finding is an error."""
    from pathlib import Path

    from servecheck import api
    from servecheck.preflight import PreflightOptions

    uid, gids = _user(args.as_user)
    options = PreflightOptions(
        quantization=args.quantization,
        context_length=_positive("--context-length", args.context_length, int),
        chat=args.chat,
        verify_sha256=args.verify_sha256,
        manifest=Path(args.manifest) if args.manifest else None,
        gpu_memory_gib=_positive("--gpu-memory-gib", args.gpu_memory_gib, float),
        revision=args.revision,
        uid=uid,
        gids=gids,
    )
    hashing = args.verify_sha256 or args.manifest
    progress = _RichHashProgress() if hashing and sys.stderr.isatty() and not args.json else None
    report = api.preflight(args.path, options, progress)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print_report(report)
    return report.exit_code


def print_report(report: PreflightReport) -> None:
    """A short rich table, errors first, then a one-line verdict."""
    from rich.console import Console
    from rich.table import Table

    from servecheck.preflight import Severity
    from servecheck.preflight.host_check import human_bytes

    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Logs and pipes are read in wide viewers; 80 columns would fold every path.
        console = Console(highlight=False, width=160)
    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
    style = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}
    findings = sorted(report.findings, key=lambda f: order[f.severity])
    if findings:
        table = Table(show_lines=False, box=None, pad_edge=False)
        table.add_column("severity")
        table.add_column("id", no_wrap=True)
        table.add_column("file", overflow="fold")
        table.add_column("problem -> fix", overflow="fold")
        for f in findings:
            table.add_row(
                f"[{style[f.severity]}]{f.severity.value}[/]",
                f.id,
                f.path,
                f"{f.message}\n-> {f.fix}",
            )
        console.print(table)
    n_err, n_warn = report.count(Severity.ERROR), report.count(Severity.WARNING)
    counts = (
        f"{n_err} error{'s' * (n_err != 1)}, {n_warn} warning{'s' * (n_warn != 1)}, "
        f"{report.count(Severity.INFO)} info"
    )
    verdict = "[green]PASS[/]" if report.ok else "[bold red]FAIL[/]"
    where = report.model_dir or report.path
    rev = f", revision {report.revision}" if report.revision else ""
    console.print(
        f"preflight {verdict}: {counts} | {report.layout}{rev} | {report.files_checked} files, "
        f"{human_bytes(report.weight_bytes)} weights | {where}",
        soft_wrap=True,
    )
