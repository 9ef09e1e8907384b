"""``config.json`` checks: required keys, remote code, quantization and context length."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servecheck.preflight.context import Context

# Keys engines read for the maximum sequence length (vLLM takes the smallest present).
CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)

# Methods an engine applies at load time to unquantized weights, so a checkpoint without
# quantization_config is the expected input for them.
ONLINE_QUANTIZATION = {"fp8", "bitsandbytes", "experts_int8", "fbgemm_fp8", "torchao"}

# Kernel variants engines accept for a checkpoint of the base method.
_ALIASES = {"awq_marlin": "awq", "gptq_marlin": "gptq", "gptq_marlin_24": "gptq", "marlin": "gptq"}


def normalize_quantization(method: str | None) -> str:
    """``AWQ``/``awq-marlin``/``awq_marlin`` -> ``awq``; ``None``/``""``/``none`` -> ``none``."""
    if method is None:
        return "none"
    name = method.strip().lower().replace("-", "_")
    return _ALIASES.get(name, name) or "none"


def load_config(ctx: Context, model_dir: Path, required: bool) -> dict[str, Any] | None:
    """Parse config.json and report missing or broken required keys; None when unusable."""
    path = model_dir / "config.json"
    if path in ctx.broken:
        return None
    if not path.exists():
        if required:
            ctx.add(
                "PF-CONFIG-MISSING",
                path,
                "no config.json next to the safetensors weights; engines cannot tell the architecture",
                "download config.json from the same revision as the weights",
            )
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        ctx.add("PF-CONFIG-JSON", path, f"does not parse: {exc}", "re-download config.json")
        return None
    if not isinstance(config, dict):
        ctx.add(
            "PF-CONFIG-JSON",
            path,
            f"is a JSON {type(config).__name__}, expected an object",
            "re-download config.json",
        )
        return None
    if not isinstance(config.get("model_type"), str):
        ctx.add(
            "PF-CONFIG-NO-MODEL-TYPE",
            path,
            "no model_type: transformers' AutoConfig cannot pick a config class",
            're-download config.json; a hand-written config needs model_type (e.g. "llama")',
        )
    archs = config.get("architectures")
    if not (isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs)):
        ctx.add(
            "PF-CONFIG-NO-ARCHITECTURES",
            path,
            "no architectures list: vLLM cannot pick a model class",
            'add e.g. "architectures": ["LlamaForCausalLM"] matching the weights',
        )
    if not any(k in config or k in _text_config(config) for k in ("torch_dtype", "dtype")):
        ctx.add(
            "PF-CONFIG-NO-DTYPE",
            path,
            "neither torch_dtype nor dtype: engines fall back to a default dtype (often float32 or float16)",
            "pass --dtype to the engine explicitly, or add torch_dtype to config.json",
        )
    _check_remote_code(ctx, model_dir, path, config)
    _check_quantization(ctx, path, config)
    _check_context(ctx, path, config)
    return config


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    # Multimodal configs keep the language model's keys under text_config / llm_config.
    for key in ("text_config", "llm_config"):
        sub = config.get(key)
        if isinstance(sub, dict):
            return sub
    return {}


def config_value(config: dict[str, Any], key: str) -> Any:
    """A key from the top level, falling back to the language model's nested config."""
    return config[key] if key in config else _text_config(config).get(key)


def _check_remote_code(ctx: Context, model_dir: Path, path: Path, config: dict[str, Any]) -> None:
    auto_map = config.get("auto_map")
    if not isinstance(auto_map, dict) or not auto_map:
        return
    refs: list[str] = []
    for value in auto_map.values():
        refs.extend(
            v for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)
        )
    local: dict[str, bool] = {}
    remote: list[str] = []
    for ref in refs:
        if "--" in ref:  # "org/repo--module.Class": code lives in another repo
            remote.append(ref.split("--", 1)[0])
            continue
        module = ref.rsplit(".", 1)[0]
        filename = module.replace(".", "/") + ".py"
        local[filename] = (model_dir / filename).is_file()
    parts = [f"{name} ({'present' if ok else 'MISSING'})" for name, ok in sorted(local.items())]
    if remote:
        parts.append("code from other repos: " + ", ".join(sorted(set(remote))))
    ctx.add(
        "PF-CONFIG-REMOTE-CODE",
        path,
        "auto_map needs remote code: " + "; ".join(parts),
        "launch with --trust-remote-code after reviewing those files, or use an engine-native architecture",
    )
    for name, ok in sorted(local.items()):
        if not ok:
            ctx.add(
                "PF-CONFIG-REMOTE-CODE-MISSING",
                model_dir / name,
                f"auto_map refers to {name}, which is not in the model folder",
                f"download {name} from the same revision",
            )


def _check_quantization(ctx: Context, path: Path, config: dict[str, Any]) -> None:
    declared_raw = ctx.options.quantization
    if declared_raw is None:
        return
    declared = normalize_quantization(declared_raw)
    qc = config_value(config, "quantization_config") or config.get("compression_config")
    in_config = "none"
    if isinstance(qc, dict):
        in_config = normalize_quantization(qc.get("quant_method") or "compressed-tensors")
    if declared == in_config:
        return
    if in_config == "none" and declared in ONLINE_QUANTIZATION:
        return  # quantized at load time from unquantized weights
    if in_config == "none":
        message = (
            f"declared quantization {declared_raw} but config.json has no quantization_config: "
            "these are unquantized weights"
        )
        fix = "use the quantized checkpoint, or launch without quantization"
    elif declared == "none":
        message = (
            f"declared no quantization but config.json has quantization_config.quant_method "
            f"{in_config}: the engine will load {in_config} kernels and memory planning is off"
        )
        fix = f"declare the quantization {in_config}, or use the unquantized checkpoint"
    else:
        message = (
            f"declared quantization {declared_raw} but config.json says {in_config}; "
            "vLLM refuses to start on this mismatch"
        )
        fix = f"declare the quantization {in_config} (or omit it to follow config.json)"
    ctx.add("PF-CONFIG-QUANT-MISMATCH", path, message, fix)


def max_context(config: dict[str, Any]) -> tuple[int, str] | None:
    """The model's maximum positions and how it was derived, or None when no key is present."""
    found = [(config_value(config, k), k) for k in CONTEXT_KEYS]
    found = [(v, k) for v, k in found if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    if not found:
        return None
    value, key = min(found)
    rope = config_value(config, "rope_scaling")
    if isinstance(rope, dict):
        kind = rope.get("rope_type") or rope.get("type")
        factor = rope.get("factor")
        # llama3/longrope/su already state the extended length in max_position_embeddings.
        if kind in ("linear", "dynamic", "yarn") and isinstance(factor, int | float) and factor > 1:
            return int(value * factor), f"{key} {value} x rope_scaling.factor {factor}"
    return value, f"{key} {value}"


def _check_context(ctx: Context, path: Path, config: dict[str, Any]) -> None:
    declared = ctx.options.context_length
    if declared is None:
        return
    limit = max_context(config)
    if limit is None:
        ctx.add(
            "PF-CONFIG-NO-CONTEXT",
            path,
            f"context length {declared} declared but config.json has none of {', '.join(CONTEXT_KEYS)}",
            "check the model card for its context length",
        )
        return
    value, how = limit
    if declared > value:
        ctx.add(
            "PF-CONFIG-CONTEXT-TOO-LONG",
            path,
            f"declared context length {declared} exceeds the model's {value} ({how}); vLLM refuses "
            "to start, other engines produce garbage past it",
            f"declare a context length of {value} or less (or add rope scaling deliberately)",
        )
