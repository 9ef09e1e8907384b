"""Helpers for the soak self-tests: a tiny plan, a targets file, one ``servecheck soak`` run."""

from __future__ import annotations

from pathlib import Path

from servecheck.cli import main
from servecheck.reference.inprocess import RunningServer

# 5 cycles of 1.5 s load and 1 s idle, sampled every 0.1 s: the smallest plan the soak accepts.
TINY = [
    "--cycles",
    "5",
    "--cycle",
    "1.5s",
    "--idle",
    "1s",
    "--settle",
    "0.4s",
    "--interval",
    "0.1s",
    "--concurrency",
    "3",
    "--max-tokens",
    "40",
    "--no-progress",
]
# A small abandoned-stream probe: 4 streams dropped once, their slots freed within 1.5 s.
PROBE = ["--probe-streams", "4", "--probe-rounds", "1", "--drain-bound", "1.5s"]


def write_targets(tmp_path: Path, base_url: str, root: str, more: str = "") -> Path:
    """A targets.yaml in ``tmp_path`` with one target, ``ref``, at ``base_url`` (metrics at
    ``root``); ``more``: further lines of its entry (indented 4)."""
    path = tmp_path / "targets.yaml"
    path.write_text(
        "targets:\n"
        "  - name: ref\n"
        f"    base_url: {base_url}\n"
        "    engine: reference\n"
        "    models: [ref-tiny]\n"
        f"    metrics_url: {root}/metrics\n"
        "    timeout_s: 20\n"
        "    telemetry: {nvml: false}\n" + more
    )
    return path


def soak(targets: Path, *args: str, target: str = "ref") -> int:
    """The exit code of ``servecheck soak --target TARGET --targets-file TARGETS ARGS``."""
    return main(["soak", "--target", target, "--targets-file", str(targets), *args])


def run_soak(
    server: RunningServer, tmp_path: Path, run_id: str, *args: str, more: str = ""
) -> tuple[int, Path]:
    """``servecheck soak --target ref ARGS`` against ``server``: its exit code and run folder.

    The run writes into ``tmp_path/reports/<run_id>``; the plan is all in ``args``; ``more``
    adds lines to the target's entry (:func:`write_targets`).
    """
    targets = write_targets(tmp_path, server.base_url, server.root, more)
    code = soak(targets, *args, "--out", str(tmp_path / "reports"), "--run-id", run_id)
    return code, tmp_path / "reports" / run_id
