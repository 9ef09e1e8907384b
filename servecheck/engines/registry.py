"""Every engine servecheck knows, one :class:`~servecheck.engines.spec.EngineSpec` each: the
engines it starts (``engine up``: launcher and port) and the ones it only checks, all with
their profiles. A new engine is its module (declaring its spec) and one line in ``ENGINES``.
"""

from __future__ import annotations

from servecheck.config.model import Target
from servecheck.engines import hosted, litellm, llamacpp, lora, pooling, vision, vllm, xinference
from servecheck.engines.base import Engine
from servecheck.engines.spec import EngineProfile, EngineSpec
from servecheck.errors import UsageError, did_you_mean

# The order of the local engines is the start order of ``engine up all`` (LiteLLM routes to
# llama.cpp, so it comes after it; litellm-reasoning routes to vllm-reasoning).
ENGINES: dict[str, EngineSpec] = {
    spec.name: spec
    for spec in (
        hosted.REFERENCE,
        hosted.GENERIC,
        hosted.OPENAI,
        vllm.VLLM,
        vllm.VLLM_CHUNKED,
        llamacpp.LLAMACPP,
        xinference.XINFERENCE,
        litellm.LITELLM,
        # issue 16: pooling models and vLLM with prompt-cache usage (engines/pooling.py)
        pooling.VLLM_EMBED,
        pooling.VLLM_CACHE,
        pooling.LLAMACPP_EMBED,
        # the tiny reasoning model (models.reasoning_spec)
        vllm.VLLM_REASONING,
        llamacpp.LLAMACPP_REASONING,
        litellm.LITELLM_REASONING,
        xinference.XINFERENCE_REASONING,
        # issue 29: the tiny Qwen2-VL on vLLM CPU, for the IMAGE surface (engines/vision.py)
        vision.VLLM_VISION,
        # issue 28: runtime LoRA adapters on vLLM CPU (engines/lora.py)
        lora.VLLM_LORA,
        # issue 44: one llama.cpp slot with a 65536-token context, for agent-sized requests
        llamacpp.LLAMACPP_AGENT,
        hosted.SGLANG,
        hosted.TGI,
        hosted.OLLAMA,
    )
}

# name -> default port of the engines servecheck starts, in start order.
ENGINE_PORTS: dict[str, int] = {
    name: spec.port for name, spec in ENGINES.items() if spec.local and spec.port is not None
}
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINE_PORTS)

# Profile name (a target's ``engine:``) -> profile; several local engines share one.
PROFILES: dict[str, EngineProfile] = {spec.profile.name: spec.profile for spec in ENGINES.values()}


def get_engine(name: str) -> Engine:
    """The local engine called ``name``; a :class:`UsageError` with a suggestion for unknown
    names (and for the engines servecheck only checks)."""
    spec = ENGINES.get(name)
    if spec is None or spec.launcher is None:
        raise UsageError(
            f"unknown engine {name!r}{did_you_mean(name, ENGINE_NAMES)}; "
            f"engines: {', '.join(ENGINE_NAMES)}"
        )
    return spec.launcher()


def profile_for(target: Target) -> EngineProfile:
    return PROFILES[target.engine]


def resolve_capabilities(target: Target) -> dict[str, bool]:
    """Declared capability values, with ``auto`` filled from the engine profile."""
    profile = profile_for(target)
    declared = target.capabilities.model_dump()
    caps = {
        name: (profile.capabilities.get(name, False) if value == "auto" else bool(value))
        for name, value in declared.items()
    }
    if not target.metrics_url and profile.name != "reference" and declared.get("metrics") == "auto":
        caps["metrics"] = False
    return caps


def context_policy(target: Target) -> str:
    return (
        profile_for(target).context_policy
        if target.context_policy == "auto"
        else target.context_policy
    )
