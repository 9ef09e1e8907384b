"""An engine is one registry entry (servecheck/engines/registry.py): its profile and, for the
engines servecheck starts, its port and launcher. The names elsewhere (targets.yaml's
``engine:`` literal, the engine objects' own name and port) must agree with it."""

from __future__ import annotations

import pytest

from servecheck.config.model import ENGINES as TARGET_ENGINES
from servecheck.engines.registry import (
    ENGINE_NAMES,
    ENGINE_PORTS,
    ENGINES,
    PROFILES,
    get_engine,
)
from servecheck.errors import UsageError


def test_every_target_engine_has_a_profile_and_no_other() -> None:
    assert set(PROFILES) == set(TARGET_ENGINES)
    assert all(name == profile.name for name, profile in PROFILES.items())


def test_the_start_order_and_ports_are_kept() -> None:
    assert ENGINE_NAMES[:5] == ("vllm", "vllm-chunked", "llamacpp", "xinference", "litellm")
    assert ENGINE_PORTS["llamacpp"] == 8021 and ENGINE_PORTS["vllm-lora"] == 8018
    assert len(set(ENGINE_PORTS.values())) == len(ENGINE_PORTS)


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in ENGINE_NAMES])
def test_a_local_engine_is_built_from_its_entry(name: str) -> None:
    spec = ENGINES[name]
    engine = get_engine(name)
    assert (engine.name, engine.default_port) == (name, spec.port)
    assert spec.health_path == spec.profile.health_path == PROFILES[spec.profile.name].health_path


def test_an_engine_servecheck_only_checks_cannot_be_started() -> None:
    assert ENGINES["openai"].launcher is None and "openai" not in ENGINE_NAMES
    with pytest.raises(UsageError, match="unknown engine 'openai'"):
        get_engine("openai")
    with pytest.raises(UsageError, match='did you mean "vllm"'):
        get_engine("vlm")
