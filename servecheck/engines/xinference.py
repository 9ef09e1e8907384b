"""Xinference (``xinference-local``) in its own venv, serving the tiny HF Llama on CPU.

Xinference serves only models it knows, so ``up`` starts the supervisor+worker, registers the
tiny model as a custom LLM (``model_family`` of a built-in tool-capable family so that tool
calls are parsed, our own ChatML template, ``model_uri file://``) and launches it with the
Transformers engine on CPU. The served name is the launch uid (``servecheck-tiny``); the
registered name (``servecheck-tiny-custom``) would give 404 on the OpenAI routes.

Auth is off (``XINFERENCE_AUTH_ADVANCED=0``): with it on (the 4.x default) every route needs a
login, and ten wrong keys ban the client IP for an hour.
"""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path

from servecheck.engines.base import (
    Engine,
    EngineError,
    InstallResult,
    LaunchPlan,
    PipStep,
    Readiness,
    RunState,
    clean_env,
    http,
    install_venv,
    tail,
)
from servecheck.engines.models import (
    CHAT_TEMPLATE,
    REASONING_CHAT_TEMPLATE,
    SERVED_NAME,
    THINK_END,
    THINK_START,
    TinyModel,
    ensure_tiny_model,
    reasoning_spec,
)
from servecheck.engines.paths import cache_root, venvs_dir
from servecheck.engines.spec import EngineProfile, EngineSpec, caps

VERSION = "4.1.0"
TORCH = "2.13.0"
REGISTERED_NAME = "servecheck-tiny-custom"
# A built-in family whose tool calls use Hermes <tool_call> tags, like our template.
MODEL_FAMILY = "qwen2.5-instruct"
CONTEXT_LENGTH = 512
REMOVE_AFTER = ("torchvision", "torchaudio", "torchcodec")


class Xinference(Engine):
    """``xinference-local`` + a registered custom LLM launched with the Transformers engine."""

    name = "xinference"
    default_port = 8031
    version = VERSION
    ready_timeout_s = 420.0
    stop_timeout_s = 20.0
    reasoning = False
    registered_name = REGISTERED_NAME

    def __init__(self, *, reasoning: bool = False) -> None:
        # xinference-reasoning: the tiny reasoning model registered with Xinference's own
        # reasoning switch (model_ability reasoning + hybrid, reasoning tags, launched with
        # reasoning_content: true), in its own supervisor and home.
        if reasoning:
            self.name, self.default_port, self.reasoning = "xinference-reasoning", 8036, True
            self.registered_name = REGISTERED_NAME.replace("tiny", "tiny-reasoner")

    def _model(self) -> TinyModel:
        return ensure_tiny_model(reasoning_spec() if self.reasoning else None)

    @property
    def venv(self) -> Path:
        return venvs_dir() / f"xinference-{VERSION}"

    def install(self) -> InstallResult:
        """Create the venv; torch is pinned in the same command (else pip takes a CUDA torch)."""
        steps = [
            PipStep(("install", f"torch=={TORCH}"), 1200, "xinference: install torch"),
            # torch pinned again here: a newer torchvision would otherwise pull torch 2.14 (CUDA).
            PipStep(
                ("install", f"xinference[transformers]=={VERSION}", f"torch=={TORCH}"),
                1800,
                "xinference: install",
            ),
            PipStep(
                ("uninstall", "-y", *REMOVE_AFTER), 300, "xinference: remove CUDA-linked extras"
            ),
        ]
        want = f"xinference[transformers]=={VERSION} torch=={TORCH}\n"
        return install_venv("xinference", self.venv, want, steps)

    def plan(self, port: int) -> LaunchPlan:
        self._model()
        home = cache_root() / ("xinference-home-reasoning" if self.reasoning else "xinference-home")
        home.mkdir(parents=True, exist_ok=True)
        argv = [
            str(self.venv / "bin" / "xinference-local"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        env = clean_env(
            {
                "XINFERENCE_HOME": str(home),
                "XINFERENCE_AUTH_ADVANCED": "0",
                "XINFERENCE_ENABLE_VIRTUAL_ENV": "0",
                "XINFERENCE_MODEL_SRC": "huggingface",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "CUDA_VISIBLE_DEVICES": "",
            }
        )
        return LaunchPlan(
            argv=argv, env=env, served_model=SERVED_NAME, context_length=CONTEXT_LENGTH
        )

    def registration(self) -> dict[str, object]:
        """The custom-LLM registration (Xinference's v2 family format)."""
        model = self._model()
        tok = json.loads((model.hf_dir / "tokenizer.json").read_text())
        ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
        if self.reasoning:
            return {
                **self._spec(model, ids, REASONING_CHAT_TEMPLATE),
                "model_ability": ["chat", "tools", "reasoning", "hybrid"],
                "reasoning_start_tag": THINK_START,
                "reasoning_end_tag": THINK_END,
            }
        return self._spec(model, ids, CHAT_TEMPLATE)

    def _spec(self, model: TinyModel, ids: dict[str, int], template: str) -> dict[str, object]:
        hf_dir = model.hf_dir
        return {
            "version": 2,
            "context_length": CONTEXT_LENGTH,
            "model_name": self.registered_name,
            "model_lang": ["en"],
            "model_ability": ["chat", "tools"],
            "model_description": "servecheck tiny random-weight Llama (generated locally)",
            "model_family": MODEL_FAMILY,
            "architectures": ["LlamaForCausalLM"],
            "model_specs": [
                {
                    "model_format": "pytorch",
                    "model_size_in_billions": "0_001",
                    "quantization": "none",
                    "model_uri": hf_dir.as_uri(),
                }
            ],
            "chat_template": template,
            "stop_token_ids": [ids["<|im_end|>"], ids["<|endoftext|>"]],
            "stop": ["<|im_end|>", "<|endoftext|>"],
        }

    def probe(self, port: int) -> tuple[Readiness, str]:
        status = http("GET", f"http://127.0.0.1:{port}/status", timeout=3.0)
        if status.status == -1:
            return Readiness.STARTING, status.error
        if status.status != 200:
            return Readiness.LOADING, f"/status HTTP {status.status}"
        models = http("GET", f"http://127.0.0.1:{port}/v1/models", timeout=5.0)
        if models.status == 200 and f'"{SERVED_NAME}"' in models.body:
            return Readiness.READY, "ok"
        return Readiness.LOADING, "supervisor up, model not launched"

    def wait_startup(self, port: int) -> tuple[Readiness, str]:
        """Readiness for the first phase: the supervisor answers (the model comes after)."""
        ready, detail = self.probe(port)
        if ready is Readiness.LOADING and detail == "supervisor up, model not launched":
            return Readiness.READY, detail
        return ready, detail

    def after_ready(self, state: RunState, deadline: float) -> None:
        """Register the tiny model and launch it; bounded by ``deadline`` (monotonic)."""
        base = f"http://127.0.0.1:{state.port}"
        if self.probe(state.port)[0] is Readiness.READY:
            return
        reg = http(
            "POST",
            f"{base}/v1/model_registrations/LLM",
            {"model": json.dumps(self.registration()), "persist": False},
            timeout=60,
        )
        if reg.status != 200 and "already" not in reg.body:
            raise EngineError(
                f"xinference: registering the tiny model failed: HTTP {reg.status} {reg.body[:500]}; "
                f"log {state.log}\n{tail(Path(state.log))}"
            )
        launch_body = {
            "model_uid": SERVED_NAME,
            "model_name": self.registered_name,
            "model_type": "LLM",
            "model_engine": "Transformers",
            "model_format": "pytorch",
            "model_size_in_billions": "0_001",
            "quantization": "none",
            "n_gpu": None,
            "replica": 1,
        }
        if self.reasoning:
            launch_body["reasoning_content"] = True  # Xinference's own reasoning parser on
        remaining = max(10.0, deadline - time.monotonic())
        launch = http("POST", f"{base}/v1/models", launch_body, timeout=remaining)
        if launch.status != 200:
            raise EngineError(
                f"xinference: launching the tiny model failed: HTTP {launch.status} "
                f"{launch.body[:800] or launch.error}; log {state.log}\n{tail(Path(state.log))}"
            )
        while self.probe(state.port)[0] is not Readiness.READY:
            if time.monotonic() > deadline:
                raise EngineError(
                    f"xinference: model {SERVED_NAME} not listed after launch; log {state.log}"
                )
            time.sleep(0.5)


# The profile: what this engine legitimately does differently (engines/spec.py).
PROFILE = EngineProfile(
    "xinference",
    # /v1/responses is served (measured on 4.1.0, 2026-12-01; targets.yaml lists what fails).
    # /v1/messages too (measured on 4.1.0, 2026-12-02).
    caps(tokenize=False, logprobs=False, n=False, completions=False, messages=True),
    health_path="/status",
    deviations={
        "health-path-differs": "Xinference has no /health; GET /status answers when the supervisor is up",
        "error-shape-detail": "Xinference's REST layer (FastAPI) answers errors as {'detail': ...}",
        # Measured on Xinference 4.1.0 (2026-11-29), stream with include_usage, max_tokens 16: the finish
        # chunk {"delta": {"content": ""}, "finish_reason": "length", "usage": {...}} is followed by
        # {"delta": {}, "finish_reason": "stop", "usage": <same counts>}, then [DONE]; no choices: [] chunk.
        "stream-extra-finish-chunk": "Xinference sends a second finish chunk ('stop', even after 'length') with include_usage",
        "usage-chunk-has-choices": "Xinference's usage chunk repeats the last choice",
        "usage-chunk-repeated": "Xinference puts the same usage on its finish chunk and on the repeated finish chunk",
        # Measured on Xinference 4.1.0 (2026-12-02), stream without stream_options: the finish
        # chunk carries "usage": {...} (every other chunk "usage": null); no choices: [] chunk.
        "usage-unasked": "Xinference puts usage on the finish chunk of every stream, include_usage or not",
        "models-no-context-field": "Xinference's /v1/models does not report the context length",
    },
    verified_live=True,
)

XINFERENCE = EngineSpec("xinference", PROFILE, 8031, Xinference)
XINFERENCE_REASONING = EngineSpec(
    "xinference-reasoning", PROFILE, 8036, partial(Xinference, reasoning=True)
)
