"""With no target asked for, ``check`` and ``soak`` use the embedded reference server, also where
./targets.yaml exists but has no ``reference`` target (issue 24.15: they refused to run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTE = "targets.yaml has no 'reference' target: using the embedded reference server"


def _servecheck(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SERVECHECK_REF_URL", "SERVECHECK_TARGETS_FILE", "SERVECHECK_TARGET")
    }
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "servecheck", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
        env=env,
    )


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """A folder whose targets.yaml names only the user's own target."""
    (tmp_path / "targets.yaml").write_text(
        "targets:\n  - name: mine\n    base_url: http://127.0.0.1:9/v1\n    engine: vllm\n"
    )
    return tmp_path


@pytest.mark.slow
def test_plain_check_uses_the_embedded_reference(foreign: Path) -> None:
    proc = _servecheck(foreign, "check", "--workers", "0", "-k", "MODELS", "--out", "r")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert NOTE in proc.stderr
    assert "passed" in proc.stdout and "no 'reference' target; name one" not in proc.stdout


@pytest.mark.slow
def test_plain_soak_uses_the_embedded_reference(foreign: Path) -> None:
    # Without a schedule soak stops at its first usage error, which comes after the target.
    proc = _servecheck(foreign, "soak", "--out", "r")
    assert proc.returncode == 2
    assert NOTE in proc.stderr and "give --cycles, --cycle, --idle" in proc.stderr, proc.stderr


def test_a_named_target_or_file_is_kept(foreign: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from servecheck.commands.options import reference_targets_file
    from servecheck.config.loader import BUILTIN_FILE

    monkeypatch.chdir(foreign)
    monkeypatch.delenv("SERVECHECK_TARGETS_FILE", raising=False)
    plain = argparse.Namespace(targets_file=None)
    assert reference_targets_file(plain, asked=False) == str(BUILTIN_FILE)
    assert reference_targets_file(plain, asked=True) is None  # --target mine: ./targets.yaml
    given = argparse.Namespace(targets_file="other.yaml")
    assert reference_targets_file(given, asked=False) == "other.yaml"
    (foreign / "targets.yaml").write_text(
        "targets:\n  - name: reference\n    base_url: http://127.0.0.1:9/v1\n    engine: reference\n"
    )
    assert reference_targets_file(plain, asked=False) is None
