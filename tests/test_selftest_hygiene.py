"""What a run leaves behind: nothing in the user's folder, nothing in the temp directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_reference_model_dir_is_removed_when_the_test_process_exits() -> None:
    """``make test`` left one servecheck-ref-model-* folder per xdist worker in the temp dir."""
    out = subprocess.run(
        [sys.executable, "-c", "from tests.support import reference_model_dir as d; print(d())"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    made = Path(out.stdout.strip())
    assert made.name.startswith("servecheck-ref-model-"), out.stdout
    assert not made.exists(), f"{made} outlived the process that made it"


@pytest.mark.slow
def test_check_writes_hypothesis_files_into_the_run_folder_only(tmp_path: Path) -> None:
    """hypothesis keeps a .hypothesis/ folder in the working directory even without an example
    database; ``servecheck check`` must not write into the user's folder."""
    out = subprocess.run(
        [sys.executable, "-m", "servecheck", "check", "--surface", "fuzz", "-n", "0"]
        + ["--run-id", "run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"], out.stdout
    assert (tmp_path / "reports" / "run" / ".hypothesis").is_dir()
