"""The vllm-lora engine's pieces that run without vLLM: its registration and port, its target
(whose adapter path must follow the adapters' hashed folder), and its launch plan's LoRA flags
and runtime-updating switch (the adapters themselves need peft in the vLLM venv: the live tests
in tests/engines/test_lora_live.py use them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servecheck.config import load_targets
from servecheck.engines import lora
from servecheck.engines.registry import ENGINE_PORTS, get_engine

ROOT = Path(__file__).resolve().parents[1]


def test_vllm_lora_is_registered_on_its_port() -> None:
    engine = get_engine("vllm-lora")
    assert isinstance(engine, lora.VllmLora)
    assert engine.default_port == ENGINE_PORTS["vllm-lora"] == 8018
    assert len(set(ENGINE_PORTS.values())) == len(ENGINE_PORTS)


def test_the_target_names_the_runtime_adapter_under_this_spec() -> None:
    target = load_targets(ROOT / "targets.yaml").get("local-vllm-lora")
    assert target.capabilities.lora is True
    assert target.base_url == "http://127.0.0.1:8018/v1"
    assert target.lora_adapter is not None and target.lora_adapter.name == "lora-b"
    assert target.lora_adapter.name in lora.ADAPTERS and lora.STARTUP_ADAPTER != "lora-b"
    # the folder hashes the base model and the adapter spec: a change must update targets.yaml
    assert target.lora_adapter.path.endswith(f"/{lora_root_name()}/lora-b")


def lora_root_name() -> str:
    from servecheck.engines.models import default_spec

    return f"tiny-lora-{lora.LoraSpec(default_spec().key()).key()}"


def test_the_plan_enables_runtime_lora(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    engine = lora.VllmLora()
    adapters = {name: tmp_path / name for name in lora.ADAPTERS}
    monkeypatch.setattr(lora, "ensure_lora_adapters", lambda python: adapters)
    monkeypatch.setattr(lora, "ensure_tiny_model", _fake_model(tmp_path))
    plan = engine.plan(8618)
    argv = " ".join(plan.argv)
    assert "--enable-lora" in plan.argv and "--max-lora-rank 8" in argv
    assert f"--lora-modules lora-a={tmp_path / 'lora-a'}" in argv
    assert plan.env[lora.RUNTIME_ENV] == "True"


def _fake_model(tmp_path: Path):  # noqa: ANN202
    class Model:
        hf_dir = tmp_path / "hf"

    return lambda *a, **k: Model()
