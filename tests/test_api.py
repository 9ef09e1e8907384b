"""servecheck.api: one typed entry point per command, and the commands go through it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servecheck import api
from servecheck.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("check", "load", "soak", "accept", "compare", "capacity", "cutover", "preflight")


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_calls_its_api_function(name: str) -> None:
    assert callable(getattr(api, name)), f"servecheck.api.{name} is missing"
    path = ROOT / "servecheck" / "commands" / name
    text = (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text()
    assert re.search(rf"\bapi\.{name}\(", text), f"servecheck {name} does not call api.{name}"


def test_check_runs_the_catalogue_on_the_embedded_reference(tmp_path: Path) -> None:
    result = api.check(
        api.CheckSpec(surfaces=["health", "models"], workers="0", out=tmp_path, run_id="r"),
        say=lambda _line: None,
    )
    assert result.passed, result
    assert result.counts.get("passed", 0) >= 3 and not result.counts.get("failed")
    assert (tmp_path / "r" / "summary.json").is_file() and result.page is not None


def test_bad_specs_are_usage_errors_naming_the_spec_field(tmp_path: Path) -> None:
    """An api caller sees the field it passed (the CLI shows its option instead)."""
    with pytest.raises(UsageError, match="^knee_metric "):
        api.capacity(api.CapacitySpec(knee_metric="ttft_p42", out=tmp_path))
    with pytest.raises(UsageError, match="^smoke_duration_s "):
        api.accept(api.AcceptSpec(smoke_duration_s=0, out=tmp_path))
    with pytest.raises(UsageError, match="^alpha "):
        api.compare(api.CompareSpec(tmp_path, tmp_path, alpha=0.9))


def test_the_package_names_the_public_entry_points() -> None:
    import subprocess
    import sys

    import servecheck

    exported = set(servecheck.__all__) - {"__version__"}
    assert exported == {
        n if n[:1].isupper() or n in ("target", "records_frame") else f"run_{n}"
        for n in api.__all__
    }
    for name in exported:
        assert getattr(servecheck, name) is getattr(api, name.removeprefix("run_")), name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = servecheck.nope
    # ...and loads them on first use: `import servecheck` (and so `servecheck --help`) stays light
    code = "import sys, servecheck; print('servecheck.api' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", "import servecheck pulled in servecheck.api"
