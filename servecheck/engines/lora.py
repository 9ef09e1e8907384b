"""Tiny LoRA adapters for the tiny chat model and the vLLM set-up that serves them (issue 28).

* The adapters: PEFT LoRA adapters (``adapter_config.json`` + ``adapter_model.safetensors``)
  for the shared tiny Llama (:func:`servecheck.engines.models.ensure_tiny_model`), rank 8 on
  every attention and MLP projection, drawn from a fixed seed by ``peft`` itself inside the vLLM
  venv (the one environment with torch, transformers and peft). ``init_lora_weights=False``
  keeps peft's random B matrices instead of zeros, so an adapter really changes the output:
  the LORA checks ask that its answers differ from the base model's. Two adapters, ``lora-a``
  and ``lora-b`` (their own seeds), so load plans can split traffic between them. They go to
  ``<cache>/models/tiny-lora-<hash>/<name>`` once, written to a temporary sibling and renamed.
* The engine ``vllm-lora`` (port 8018): the ``vllm`` install with ``--enable-lora``, ``lora-a``
  loaded at start (``--lora-modules``) and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``, so
  ``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter`` answer at run time.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from servecheck.engines import vllm
from servecheck.engines.base import EngineError, LaunchPlan, clean_env, run_logged
from servecheck.engines.models import SERVED_NAME, default_models_dir, ensure_tiny_model
from servecheck.engines.paths import logs_dir
from servecheck.engines.spec import EngineSpec
from servecheck.engines.vllm import MAX_MODEL_LEN, Vllm

PEFT_VERSION = "0.21.2"
LORA_GENERATOR_VERSION = 1
LORA_RANK = 8
# name -> seed; lora-a is loaded at start, lora-b is what a run loads at run time.
ADAPTERS: dict[str, int] = {"lora-a": 2801, "lora-b": 2802}
STARTUP_ADAPTER = "lora-a"
RUNTIME_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"


@dataclass(slots=True, frozen=True)
class LoraSpec:
    """What an adapter is drawn from: the base model's key, rank, alpha and target layers."""

    base_key: str
    rank: int = LORA_RANK
    alpha: int = 32
    targets: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )

    def key(self) -> str:
        blob = json.dumps(
            {"spec": asdict(self), "adapters": ADAPTERS, "gen": LORA_GENERATOR_VERSION},
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


# Runs in the vLLM venv (torch, transformers, peft). argv: spec JSON, base dir, seed, output dir.
_BUILD_SCRIPT = """\
import json, sys
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

spec, base, seed, out = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
torch.manual_seed(seed)
model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
config = LoraConfig(
    r=spec["rank"], lora_alpha=spec["alpha"], target_modules=list(spec["targets"]),
    lora_dropout=0.0, bias="none", task_type="CAUSAL_LM", init_lora_weights=False,
)
peft_model = get_peft_model(model, config)
peft_model.save_pretrained(out, safe_serialization=True)
b = [p for n, p in peft_model.named_parameters() if "lora_B" in n]
print(len(b), float(sum(x.detach().abs().sum() for x in b)))
"""


def lora_root() -> Path:
    """Where the adapters of the current tiny model live (one folder per adapter name)."""
    base = ensure_tiny_model()
    return default_models_dir() / f"tiny-lora-{LoraSpec(base.spec.key()).key()}"


def ensure_lora_adapters(python: Path) -> dict[str, Path]:
    """The adapters' folders by name, generated first if missing; ``python`` is the vLLM venv's
    interpreter, which needs ``peft`` (:func:`ensure_peft` installs it)."""
    base = ensure_tiny_model()
    spec = LoraSpec(base.spec.key())
    root = lora_root()
    if not (root / "DONE").is_file():
        ensure_peft(python)
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tiny-lora-", dir=root.parent))
        os.chmod(tmp, 0o755)
        try:
            for name, seed in ADAPTERS.items():
                out = tmp / name
                run_logged(
                    [str(python), "-c", _BUILD_SCRIPT, json.dumps(asdict(spec)), str(base.hf_dir)]
                    + [str(seed), str(out)],
                    logs_dir() / "model-tiny-lora.log",
                    timeout_s=300,
                    env=clean_env({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}),
                    what=f"vllm-lora: draw the {name} adapter with peft",
                )
                os.chmod(out, 0o755)
                for f in out.iterdir():
                    os.chmod(f, 0o644)
            (tmp / "DONE").write_text(json.dumps(asdict(spec), sort_keys=True) + "\n")
            try:
                os.rename(tmp, root)
            except OSError:
                if not (root / "DONE").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return {name: root / name for name in ADAPTERS}


def ensure_peft(python: Path) -> None:
    """``peft`` in the vLLM venv (its deps torch, transformers, safetensors are there already)."""
    if not python.is_file():
        raise EngineError(f"vllm-lora: {python} is missing; run `servecheck engine install vllm`")
    marker = python.parent.parent / ".servecheck-peft"
    if marker.is_file() and marker.read_text() == PEFT_VERSION:
        return
    run_logged(
        [str(python), "-m", "pip", "install", f"peft=={PEFT_VERSION}"],
        logs_dir() / "install-peft.log",
        timeout_s=600,
        env=clean_env({"PIP_DISABLE_PIP_VERSION_CHECK": "1"}),
        what="vllm-lora: install peft",
    )
    marker.write_text(PEFT_VERSION)


class VllmLora(Vllm):
    """vLLM CPU serving the tiny chat model with runtime LoRA adapters."""

    def __init__(self) -> None:
        super().__init__()
        self.name = "vllm-lora"
        self.default_port = 8018

    def plan(self, port: int) -> LaunchPlan:
        model = ensure_tiny_model()
        adapters = ensure_lora_adapters(self.python)
        argv = self.serve_argv(model.hf_dir, port, SERVED_NAME, MAX_MODEL_LEN, blocks=64)
        argv += [
            "--no-enable-chunked-prefill",
            "--enable-lora",
            "--max-lora-rank",
            str(LORA_RANK),
            "--max-loras",
            str(len(ADAPTERS)),
            "--lora-modules",
            f"{STARTUP_ADAPTER}={adapters[STARTUP_ADAPTER]}",
        ]
        env = self.serve_env()
        env[RUNTIME_ENV] = "True"
        return LaunchPlan(
            argv=argv, env=env, served_model=SERVED_NAME, context_length=MAX_MODEL_LEN
        )

    # probe: Vllm's (the base model's name in /v1/models)


VLLM_LORA = EngineSpec("vllm-lora", vllm.PROFILE, 8018, VllmLora)  # vLLM's profile

__all__ = [
    "ADAPTERS",
    "STARTUP_ADAPTER",
    "VLLM_LORA",
    "VllmLora",
    "ensure_lora_adapters",
    "lora_root",
]
