"""The vllm-vision engine's pieces that run without vLLM: its registration, its target, the
chat template that places the image markers, and the torchvision stand-in it puts on vLLM's path
(exercised against a stand-in transformers package, so the shim's two hooks are seen to work)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import jinja2

from servecheck.config import load_targets
from servecheck.engines import vision
from servecheck.engines.registry import ENGINE_PORTS, get_engine

ROOT = Path(__file__).resolve().parents[1]
MARKERS = "<|vision_start|><|image_pad|><|vision_end|>"


def test_vllm_vision_is_registered_on_its_port() -> None:
    engine = get_engine("vllm-vision")
    assert isinstance(engine, vision.VllmVision)
    assert engine.name == "vllm-vision"
    assert engine.default_port == ENGINE_PORTS["vllm-vision"] == 8017


def test_the_target_points_at_the_engine_and_this_spec_model() -> None:
    target = load_targets(ROOT / "targets.yaml").get("local-vllm-vision")
    assert target.capabilities.vision is True
    assert target.base_url == "http://127.0.0.1:8017/v1"
    assert target.models == [vision.VISION_SERVED_NAME]
    assert target.context_length == vision.VISION_CONTEXT
    # the directory suffix hashes the spec: a spec change must update targets.yaml too
    assert target.model_dir is not None
    assert target.model_dir.endswith(f"/{vision.vision_model_dir().parent.name}/hf")


def _render(messages: list[dict[str, object]]) -> str:
    env = jinja2.Environment(autoescape=False)  # noqa: S701 - a chat template, not HTML
    return env.from_string(vision.VISION_CHAT_TEMPLATE).render(
        messages=messages, add_generation_prompt=True
    )


def test_the_template_puts_one_marker_triple_per_image_part() -> None:
    parts = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "image"},
    ]
    text = _render([{"role": "system", "content": "be brief"}, {"role": "user", "content": parts}])
    assert text == (
        "<|im_start|>system\nbe brief<|im_end|>\n"
        f"<|im_start|>user\nwhat is this?{MARKERS}{MARKERS}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert "<|image_pad|>" not in _render([{"role": "user", "content": "text only"}])


def _fake_transformers(root: Path) -> None:
    """A stand-in with the shapes the shim touches: the PIL module, the processor, VideosKwargs."""
    pkg = root / "transformers"
    (pkg / "models" / "qwen2_vl").mkdir(parents=True)
    for init in (pkg, pkg / "models", pkg / "models" / "qwen2_vl"):
        (init / "__init__.py").write_text("")
    (pkg / "processing_utils.py").write_text("class VideosKwargs(dict):\n    pass\n")
    (pkg / "models" / "qwen2_vl" / "image_processing_pil_qwen2_vl.py").write_text(
        "def smart_resize(h, w):\n    return ('pil', h, w)\n"
    )
    (pkg / "models" / "qwen2_vl" / "processing_qwen2_vl.py").write_text(
        textwrap.dedent(
            """\
            class Mixin:
                def __init__(self, *args, chat_template=None):
                    self.args = args

            class Tok:
                def convert_tokens_to_ids(self, token):
                    return {"<|image_pad|>": 7, "<|video_pad|>": 8}[token]

            class Qwen2VLProcessor(Mixin):
                def __init__(self, image_processor=None, tokenizer=None, video_processor=None,
                             chat_template=None, **kwargs):
                    raise ImportError("needs torchvision")
            """
        )
    )


def test_the_shim_aliases_the_torchvision_module_and_drops_the_video_processor(
    tmp_path: Path,
) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(vision.SHIM)
    _fake_transformers(tmp_path / "site")
    probe = textwrap.dedent(
        """\
        import inspect
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize
        from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor, Tok
        print(smart_resize(1, 2))
        print(list(inspect.signature(Qwen2VLProcessor.__init__).parameters))
        p = Qwen2VLProcessor("img", Tok())
        print(len(p.args), p.args[0], p.image_token_id, p.video_token_id, p.video_processor.valid_kwargs.__name__)
        """
    )
    env = {"PYTHONPATH": f"{shim}:{tmp_path / 'site'}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-S", "-c", "import sitecustomize\n" + probe],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "('pil', 1, 2)"
    assert lines[1] == "['self', 'image_processor', 'tokenizer', 'chat_template', 'kwargs']"
    assert lines[2] == "2 img 7 8 VideosKwargs"  # no video processor handed to the mixin
