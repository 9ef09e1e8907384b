"""summary.json keeps its keys and types through the typed summary (issue 40 item 4): a short
load against the embedded reference server, its file held against the shape the untyped code
wrote (tests/load/data/summary_shape.json, captured before the change with these options)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from servecheck.analysis.sections import Summary, schema_text, shipped_schema_path
from tests.load.summary_shape import differences, shape

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
BASELINE = Path(__file__).parent / "data" / "summary_shape.json"
# What the baseline ran: open loop, a warm-up, shared prefixes, cancels, an error budget
# (every section a plain run writes, plus warmup, cancel and prefix_cache's groups).
OPTIONS = (
    "--rate", "20/s", "--duration", "2s", "--scenario", "shared_prefix", "--warmup", "1s",
    "--cancel", "20%@tokens:2", "--cancel-drain", "3s", "--error-budget", "5%",
)  # fmt: skip


@pytest.fixture(scope="module")
def summary_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("shape")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SERVECHECK_REF_URL", "SERVECHECK_TARGETS_FILE", "SERVECHECK_TARGET")
    }
    env["PYTHONPATH"] = str(ROOT)
    cmd = [sys.executable, "-m", "servecheck", "load", "--target", "reference", "--quiet"]
    proc = subprocess.run(
        [*cmd, "--allow-lag", *OPTIONS, "--out", "r"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp,  # no targets.yaml here: the built-in reference target
        env=env,
    )
    (run_dir,) = (tmp / "r").iterdir()
    assert (run_dir / "summary.json").is_file(), proc.stdout + proc.stderr
    return run_dir / "summary.json"


def test_summary_json_keeps_its_keys_and_types(summary_json: Path) -> None:
    baseline = {k: set(v) for k, v in json.loads(BASELINE.read_text()).items()}
    doc = json.loads(summary_json.read_text())
    got = shape(doc)
    top = {p for p in baseline if p.count(".") == 1 and "[" not in p}
    assert {p for p in got if p.count(".") == 1 and "[" not in p} == top
    diff = differences(baseline, got)
    assert not diff, "summary.json changed shape:\n" + "\n".join(diff)


def test_the_typed_summary_reads_back_the_file_it_wrote(summary_json: Path) -> None:
    doc = json.loads(summary_json.read_text())
    again = Summary.from_json(doc).to_json()
    assert again == doc and list(again) == list(doc)  # the same keys, values and order


def test_the_shipped_schema_is_the_one_the_types_generate() -> None:
    shipped = shipped_schema_path()
    assert shipped.read_text(encoding="utf-8") == schema_text(), (
        f"{shipped} is stale: regenerate it with python -m servecheck.analysis.sections"
    )
    jsonschema.Draft202012Validator.check_schema(json.loads(shipped.read_text(encoding="utf-8")))


def test_a_real_summary_validates_against_the_shipped_schema(summary_json: Path) -> None:
    schema = json.loads(shipped_schema_path().read_text(encoding="utf-8"))
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft202012Validator(schema).iter_errors(
            json.loads(summary_json.read_text())
        )
    ]
    assert not errors, "summary.json does not match its schema:\n" + "\n".join(errors)
