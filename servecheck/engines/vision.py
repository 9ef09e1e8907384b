"""A tiny vision-language model and the vLLM engine that serves it (issue 29, IMAGE surface).

* The model: a random-weight **Qwen2-VL** (``Qwen2VLForConditionalGeneration``, a family vLLM's
  CPU build runs), two text layers of width 128 and a two-block vision tower of width 64. Its
  image processor resizes to a multiple of 28 pixels within ``[min_pixels, max_pixels]`` and
  gives one token per 28x28 block, so ``prompt_tokens`` grows with the image (dynamic
  resolution), which the IMAGE checks measure. Nothing is downloaded: the tokenizer is
  :func:`servecheck.engines.models.train_tokenizer`'s byte-level BPE plus Qwen2-VL's vision
  tokens, and the weights are drawn (seeded) by transformers inside the vLLM venv, the only
  environment that has torch and a transformers that knows the architecture. The files go to
  ``<cache>/models/tiny-qwen2vl-<hash>/hf`` once, written to a temporary sibling and renamed.
* The engine ``vllm-vision`` (port 8017): the ``vllm`` install serving that model with
  ``--limit-mm-per-prompt`` allowing a few images and a bounded image size.

The weights are random, so the answers are gibberish; what the checks measure is that images
are accepted, counted into ``prompt_tokens`` and malformed ones refused.
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
from servecheck.engines.models import (
    CONTROL_TOKENS,
    TinyModelSpec,
    default_models_dir,
    require_tokenizers,
    train_tokenizer,
)
from servecheck.engines.paths import logs_dir
from servecheck.engines.spec import EngineSpec
from servecheck.engines.vllm import Vllm

VISION_SERVED_NAME = "servecheck-tiny-vision"
VISION_CONTEXT = 2048
VISION_GENERATOR_VERSION = 1
# Qwen2-VL's vision markers: the chat template wraps each image in start/end around one pad
# token, which the processor expands to one pad per 28x28 block of the resized image.
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")

# ChatML with OpenAI content parts: text parts as text, each image part as Qwen2-VL's marker
# triple. vLLM turns image_url parts into {"type": "image"} before rendering.
VISION_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or part['type'] == 'image_url' %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(slots=True, frozen=True)
class VisionSpec:
    """Shape of the tiny Qwen2-VL. Text head size 64 (a size vLLM's CPU attention takes); the
    M-RoPE sections (temporal, height, width) add up to half of it."""

    name: str = "tiny-qwen2vl"
    seed: int = 2929
    vocab_size: int = 2048
    hidden_size: int = 128
    num_heads: int = 2
    num_kv_heads: int = 2
    num_layers: int = 2
    intermediate_size: int = 256
    mrope_section: tuple[int, int, int] = (8, 12, 12)
    vision_depth: int = 2
    vision_embed_dim: int = 64
    vision_heads: int = 2
    vision_mlp_ratio: int = 2
    # 4..256 image tokens: a 56x56 image is 4, anything over ~448x448 is scaled down to 256.
    min_pixels: int = 28 * 28 * 4
    max_pixels: int = 28 * 28 * 256

    def key(self) -> str:
        blob = json.dumps({"spec": asdict(self), "gen": VISION_GENERATOR_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


# Runs in the vLLM venv (torch, transformers). argv: spec JSON, token ids JSON, output dir.
_BUILD_SCRIPT = """\
import json, sys
import torch
from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

spec, ids, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
torch.manual_seed(spec["seed"])
head_dim = spec["hidden_size"] // spec["num_heads"]
text = dict(
    vocab_size=ids["vocab_size"], hidden_size=spec["hidden_size"],
    intermediate_size=spec["intermediate_size"], num_hidden_layers=spec["num_layers"],
    num_attention_heads=spec["num_heads"], num_key_value_heads=spec["num_kv_heads"],
    max_position_embeddings=4096, rms_norm_eps=1e-6, hidden_act="silu",
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                     "mrope_section": list(spec["mrope_section"])},
    bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["pad"],
)
vision = dict(
    depth=spec["vision_depth"], embed_dim=spec["vision_embed_dim"],
    hidden_size=spec["hidden_size"], num_heads=spec["vision_heads"],
    mlp_ratio=spec["vision_mlp_ratio"], patch_size=14, spatial_merge_size=2,
    temporal_patch_size=2, in_channels=3,
)
config = Qwen2VLConfig(
    text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
    video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
    vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=False,
    bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["pad"],
)
config.torch_dtype = "float32"
model = Qwen2VLForConditionalGeneration(config).to(torch.float32).eval()
model.save_pretrained(out, safe_serialization=True)
print(head_dim, sum(p.numel() for p in model.parameters()))
"""


# The vllm install removes PyPI's torchvision (it links CUDA and breaks transformers on the CPU
# torch), and two transformers pieces that vLLM's Qwen2-VL needs are torchvision-only: the module
# vLLM imports ``smart_resize`` from, and the video processor ``Qwen2VLProcessor`` always loads.
# This sitecustomize (on the vision engine's PYTHONPATH only, so also in vLLM's model-inspection
# subprocess) resolves that module's name to the PIL twin (same function) and gives the processor
# an image-only signature (the engine serves no video: --limit-mm-per-prompt video 0). Nothing
# is imported until vLLM asks for it.
SHIM = """\
\"\"\"Written by servecheck for vllm-vision: run Qwen2-VL's processor without torchvision.\"\"\"
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

_ALIAS = {
    "transformers.models.qwen2_vl.image_processing_qwen2_vl":
        "transformers.models.qwen2_vl.image_processing_pil_qwen2_vl",
}
_PATCH = "transformers.models.qwen2_vl.processing_qwen2_vl"


def _image_only(module):
    from transformers.processing_utils import VideosKwargs

    cls = module.Qwen2VLProcessor
    mixin = cls.__mro__[1]

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        self.image_token = getattr(tokenizer, "image_token", "<|image_pad|>")
        self.video_token = getattr(tokenizer, "video_token", "<|video_pad|>")
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        mixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)
        # vLLM reads the video kwargs' names off it; nothing else (no video is served)
        self.video_processor = types.SimpleNamespace(valid_kwargs=VideosKwargs)

    cls.__init__ = __init__


class _Hook(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name in _ALIAS:
            return importlib.util.spec_from_loader(name, self)
        if name == _PATCH:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                real = spec.loader.exec_module

                def exec_module(module, real=real):
                    real(module)
                    _image_only(module)

                spec.loader.exec_module = exec_module
            return spec
        return None

    def create_module(self, spec):
        return importlib.import_module(_ALIAS[spec.name])

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Hook())
"""


def vision_model_dir(spec: VisionSpec | None = None) -> Path:
    spec = spec or VisionSpec()
    return default_models_dir() / f"{spec.name}-{spec.key()}" / "hf"


def ensure_vision_model(python: Path, spec: VisionSpec | None = None) -> Path:
    """The tiny Qwen2-VL's HF directory, generated first if missing; ``python`` is the vLLM
    venv's interpreter (it builds the weights)."""
    spec = spec or VisionSpec()
    hf = vision_model_dir(spec)
    root = hf.parent
    if (root / "DONE").is_file():
        return hf
    if not python.is_file():
        raise EngineError(f"vllm-vision: {python} is missing; run `servecheck engine install vllm`")
    require_tokenizers()
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=root.parent))
    os.chmod(tmp, 0o755)
    try:
        out = tmp / "hf"
        out.mkdir()
        ids = _write_tokenizer(spec, out)
        run_logged(
            [str(python), "-c", _BUILD_SCRIPT, json.dumps(asdict(spec)), json.dumps(ids), str(out)],
            logs_dir() / f"model-{spec.name}.log",
            timeout_s=300,
            env=clean_env({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}),
            what="vllm-vision: build the tiny Qwen2-VL",
        )
        _write_preprocessor(spec, out)
        for f in out.iterdir():
            os.chmod(f, 0o644)  # safetensors come out private; engines may run as another user
        (tmp / "DONE").write_text(json.dumps(asdict(spec), sort_keys=True) + "\n")
        try:
            os.rename(tmp, root)
        except OSError:
            if not (root / "DONE").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return hf


def _write_tokenizer(spec: VisionSpec, out: Path) -> dict[str, int]:
    """The shared byte-level BPE plus the vision tokens (special: never in decoded text)."""
    from tokenizers import AddedToken

    tok = train_tokenizer(TinyModelSpec(name=spec.name, seed=spec.seed, vocab_size=spec.vocab_size))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in VISION_TOKENS])
    tok.save(str(out / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in (*CONTROL_TOKENS, *VISION_TOKENS)}
    specials = set(CONTROL_TOKENS) | set(VISION_TOKENS)
    added = {
        str(tok.token_to_id(t)): {
            "content": t,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "single_word": False,
            "special": t in specials,
        }
        for t in ids
    }
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": added,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": VISION_CONTEXT,
        "chat_template": VISION_CHAT_TEMPLATE,
    }
    _dump(out / "tokenizer_config.json", config)
    _dump(out / "chat_template.json", {"chat_template": VISION_CHAT_TEMPLATE})
    return {
        **ids,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "bos": ids["<|endoftext|>"],
        "eos": ids["<|im_end|>"],
        "pad": ids["<|endoftext|>"],
    }


def _write_preprocessor(spec: VisionSpec, out: Path) -> None:
    """Qwen2-VL's image processor settings (CLIP mean/std, 14-pixel patches merged 2x2)."""
    _dump(
        out / "preprocessor_config.json",
        {
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen2VLProcessor",
            "do_resize": True,
            "do_rescale": True,
            "rescale_factor": 1 / 255,
            "do_normalize": True,
            "do_convert_rgb": True,
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711],
            "min_pixels": spec.min_pixels,
            "max_pixels": spec.max_pixels,
            "size": {"shortest_edge": spec.min_pixels, "longest_edge": spec.max_pixels},
            "patch_size": 14,
            "temporal_patch_size": 2,
            "merge_size": 2,
        },
    )


def _dump(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


class VllmVision(Vllm):
    """vLLM CPU serving the tiny Qwen2-VL on /v1/chat/completions with image content parts."""

    def __init__(self) -> None:
        super().__init__()
        self.name = "vllm-vision"
        self.default_port = 8017

    def plan(self, port: int) -> LaunchPlan:
        model = ensure_vision_model(self.python)
        argv = self.serve_argv(model, port, VISION_SERVED_NAME, VISION_CONTEXT, blocks=64)
        argv += [
            "--no-enable-chunked-prefill",
            "--limit-mm-per-prompt",
            json.dumps({"image": 4, "video": 0}),
            "--chat-template-content-format",
            "openai",
        ]
        return LaunchPlan(
            argv=argv,
            env=self.serve_env(),
            served_model=VISION_SERVED_NAME,
            context_length=VISION_CONTEXT,
        )

    @property
    def shim_dir(self) -> Path:
        return self.venv / "servecheck_vision_shim"

    def serve_env(self) -> dict[str, str]:
        """Vllm's environment plus the sitecustomize that stands in for torchvision."""
        self.shim_dir.mkdir(parents=True, exist_ok=True)
        shim = self.shim_dir / "sitecustomize.py"
        if not shim.is_file() or shim.read_text() != SHIM:
            shim.write_text(SHIM)
        env = super().serve_env()
        env["PYTHONPATH"] = str(self.shim_dir)
        return env

    # probe: Vllm's (it looks for SERVED_NAME, a prefix of VISION_SERVED_NAME)


VLLM_VISION = EngineSpec("vllm-vision", vllm.PROFILE, 8017, VllmVision)  # vLLM's profile

__all__ = [
    "VISION_SERVED_NAME",
    "VLLM_VISION",
    "VisionSpec",
    "VllmVision",
    "ensure_vision_model",
]
