"""Names of the local engines and the objects behind them (imported lazily)."""

from __future__ import annotations

from servecheck.engines.base import Engine
from servecheck.errors import UsageError, did_you_mean

# name -> default port; the order is the start order of ``engine up all`` (LiteLLM routes to
# llama.cpp, so it comes after it).
ENGINE_PORTS: dict[str, int] = {
    "vllm": 8011,
    "vllm-chunked": 8012,
    "llamacpp": 8021,
    "xinference": 8031,
    "litellm": 8041,
    # issue 16: pooling models and vLLM with prompt-cache usage (servecheck/engines/pooling.py)
    "vllm-embed": 8013,
    "vllm-cache": 8014,
    "llamacpp-embed": 8022,
    # the tiny reasoning model (models.reasoning_spec); litellm-reasoning routes to vllm-reasoning
    "vllm-reasoning": 8016,
    "llamacpp-reasoning": 8026,
    "litellm-reasoning": 8046,
    "xinference-reasoning": 8036,
    # issue 29: the tiny Qwen2-VL on vLLM CPU, for the IMAGE surface (servecheck/engines/vision.py)
    "vllm-vision": 8017,
    # issue 28: runtime LoRA adapters on vLLM CPU (servecheck/engines/lora.py)
    "vllm-lora": 8018,
}
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINE_PORTS)


def get_engine(name: str) -> Engine:
    """The engine called ``name``; a :class:`UsageError` with a suggestion for unknown names."""
    if name == "vllm":
        from servecheck.engines.vllm import Vllm

        return Vllm()
    if name == "vllm-chunked":
        from servecheck.engines.vllm import Vllm

        return Vllm(chunked=True)
    if name in (
        "vllm-reasoning",
        "llamacpp-reasoning",
        "litellm-reasoning",
        "xinference-reasoning",
    ):
        return _reasoning_engine(name)
    if name == "llamacpp":
        from servecheck.engines.llamacpp import LlamaCpp

        return LlamaCpp()
    if name == "xinference":
        from servecheck.engines.xinference import Xinference

        return Xinference()
    if name == "litellm":
        from servecheck.engines.litellm import LiteLlm

        return LiteLlm()
    if name == "vllm-vision":
        from servecheck.engines.vision import VllmVision

        return VllmVision()
    if name == "vllm-lora":
        from servecheck.engines.lora import VllmLora

        return VllmLora()
    if name in ("vllm-embed", "vllm-cache", "llamacpp-embed"):
        from servecheck.engines import pooling

        return {"vllm-embed": pooling.VllmEmbed, "vllm-cache": pooling.VllmCache}.get(
            name, pooling.LlamaCppEmbed
        )()
    raise UsageError(
        f"unknown engine {name!r}{did_you_mean(name, ENGINE_NAMES)}; "
        f"engines: {', '.join(ENGINE_NAMES)}"
    )


def _reasoning_engine(name: str) -> Engine:
    if name == "vllm-reasoning":
        from servecheck.engines.vllm import Vllm

        return Vllm(reasoning=True)
    if name == "llamacpp-reasoning":
        from servecheck.engines.llamacpp import LlamaCpp

        return LlamaCpp(reasoning=True)
    if name == "xinference-reasoning":
        from servecheck.engines.xinference import Xinference

        return Xinference(reasoning=True)
    from servecheck.engines.litellm import LiteLlm

    return LiteLlm(reasoning=True)
