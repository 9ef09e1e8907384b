"""The llamacpp-agent engine's pieces that run without llama.cpp (issue 44): its registration
and port, its launch plan (one slot of 65536 tokens, and the GGUF's trained context raised to
match, since llama-server caps a slot at the trained length), and its target, which shares
local-llamacpp's known failures. The live run is tests/engines/test_catalogue.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from servecheck.config import load_targets
from servecheck.engines import llamacpp
from servecheck.engines.registry import ENGINE_PORTS, get_engine

ROOT = Path(__file__).resolve().parents[1]


def _fake_model(tmp_path: Path):  # noqa: ANN202
    class Model:
        gguf_path = tmp_path / "tiny-llama.gguf"

    return lambda *a, **k: Model()


def _argv(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[list[str], int]:
    monkeypatch.setattr(llamacpp, "ensure_tiny_model", _fake_model(tmp_path))
    plan = get_engine(name).plan(18727)
    return plan.argv, plan.context_length


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_llamacpp_agent_is_registered_on_its_port() -> None:
    engine = get_engine("llamacpp-agent")
    assert isinstance(engine, llamacpp.LlamaCpp)
    assert (engine.name, engine.default_port) == ("llamacpp-agent", 8027)
    assert ENGINE_PORTS["llamacpp-agent"] == 8027
    assert len(set(ENGINE_PORTS.values())) == len(ENGINE_PORTS)


def test_the_plan_is_one_slot_of_65536_tokens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    argv, context = _argv("llamacpp-agent", monkeypatch, tmp_path)
    assert (_flag(argv, "-c"), _flag(argv, "-np"), context) == ("65536", "1", 65536), argv
    # Without it llama-server logs "the slot context (65536) exceeds the training context of
    # the model (2048) - capping" and serves 2048 tokens a slot.
    assert _flag(argv, "--override-kv") == "llama.context_length=int:65536", argv
    # a request with no output limit stops at 1024 tokens, not at the context's end
    assert _flag(argv, "-n") == str(llamacpp.AGENT_DEFAULT_OUTPUT) == "1024", argv
    assert "--reasoning-format" not in argv  # the plain tiny model, as llamacpp


def test_the_other_llamacpp_set_ups_keep_their_context(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("llamacpp", "llamacpp-reasoning"):
        argv, context = _argv(name, monkeypatch, tmp_path)
        assert (_flag(argv, "-c"), _flag(argv, "-np"), context) == ("2048", "4", 512), argv
        assert "--override-kv" not in argv and "-n" not in argv, argv


def test_the_target_serves_the_agent_context_with_llamacpps_known_failures() -> None:
    targets = load_targets(ROOT / "targets.yaml")
    agent, plain = targets.get("local-llamacpp-agent"), targets.get("local-llamacpp")
    assert agent.base_url == "http://127.0.0.1:8027/v1" and agent.engine == "llamacpp"
    assert agent.context_length == 65536 and agent.capacity == 1
    assert agent.capabilities == plain.capabilities
    # the same build: every defect recorded on local-llamacpp is this target's too
    assert set(plain.known_failures) <= set(agent.known_failures)
    # a whole response may take a 56k-token prefill on one thread
    assert agent.timeout_s >= 600
