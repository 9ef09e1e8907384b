"""Traffic split across models by weight (a base model and its LoRA adapters): ``--model-mix``,
a plan's ``models:``, and the model each record names (through the Parquet records file)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.errors import UsageError
from servecheck.load.plan import load_plan
from servecheck.load.workload.mix import WeightedCycle, parse_model_mix
from servecheck.records.parquet import read_run_records
from servecheck.reference.inprocess import RunningServer
from tests.hostile.support import load_cmd

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "value,expected",
    [
        pytest.param("a=3,b=1", [("a", 3.0), ("b", 1.0)], id="text"),
        pytest.param("a, b=0.5", [("a", 1.0), ("b", 0.5)], id="bare-name-weighs-1"),
        pytest.param({"a": 2, "lora-b": 1}, [("a", 2.0), ("lora-b", 1.0)], id="mapping"),
        pytest.param(None, [], id="none"),
    ],
)
def test_parse_model_mix(value: object, expected: list[tuple[str, float]]) -> None:
    assert parse_model_mix(value) == expected


@pytest.mark.parametrize(
    "value,message",
    [
        pytest.param("a=0", "a weight > 0", id="zero"),
        pytest.param("a=x", "a weight > 0", id="not-a-number"),
        pytest.param("=2", "a model name", id="no-name"),
        pytest.param("a=1,a=2", "named twice", id="twice"),
        pytest.param(["a"], "a mapping of model -> weight", id="list"),
    ],
)
def test_parse_model_mix_errors(value: object, message: str) -> None:
    with pytest.raises(UsageError, match=f"--model-mix: .*{message}"):
        parse_model_mix(value, "--model-mix")


def test_weighted_cycle_splits_exactly() -> None:
    cycle = WeightedCycle([("base", 3.0), ("lora-a", 1.0)])
    assert Counter(cycle.next() for _ in range(16)) == {"base": 12, "lora-a": 4}


def test_a_plan_names_its_models(tmp_path: Path) -> None:
    plan = tmp_path / "mix.yaml"
    plan.write_text("users: 1\nmodels: {base: 3, lora-a: 1}\n")
    assert load_plan(str(plan)).values["models"] == [("base", 3.0), ("lora-a", 1.0)]
    plan.write_text("users: 1\nmodels: {base: -1}\n")
    with pytest.raises(UsageError, match="mix.yaml: models: base=-1"):
        load_plan(str(plan))


@pytest.mark.slow
def test_load_splits_traffic_and_records_carry_the_model(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference(models=["ref-tiny", "ref-lora-a"], ttft_ms=5, itl_ms=1)
    targets = tmp_path / "targets.yaml"
    targets.write_text(
        f"targets:\n  - name: ref\n    base_url: {server.base_url}\n    engine: reference\n"
    )
    out = tmp_path / "reports"
    cmd = load_cmd(targets, out, "--allow-lag", "--users", "1", "--max-requests", "16",
                   "--model-mix", "ref-tiny=3,ref-lora-a=1", target="ref", tokenize=True)  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    records = list(read_run_records(run_dir))
    assert len(records) == 16 and all(r.get("error") is None for r in records), records[:2]
    assert Counter(r["model"] for r in records) == {"ref-tiny": 12, "ref-lora-a": 4}


def test_a_bad_mix_is_a_usage_error_before_any_request(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "servecheck", "load", "--target", "reference", "--users", "1",
         "--max-requests", "1", "--model-mix", "a=0", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2 and "--model-mix: a=0: a model name and a weight > 0" in proc.stderr
