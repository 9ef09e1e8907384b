"""LiteLLM proxy in its own venv, routing ``servecheck-tiny`` to the local llama.cpp server.

The proxy is what many deployments put in front of an engine, so the catalogue runs through it
too. The master key comes from ``SERVECHECK_LITELLM_KEY`` (default ``sk-servecheck-local``) and
reaches the proxy as an environment variable, never through a file. ``prisma`` is installed
because without it every auth failure is a 500; cooldowns are off so that one failed upstream
call does not turn the next seconds into 429s.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from servecheck.engines.base import (
    Engine,
    InstallResult,
    LaunchPlan,
    PipStep,
    Readiness,
    clean_env,
    http,
    install_venv,
)
from servecheck.engines.models import SERVED_NAME
from servecheck.engines.paths import state_dir, venvs_dir
from servecheck.engines.spec import EngineProfile, EngineSpec, caps

VERSION = "1.108.7"
ENV_KEY = "SERVECHECK_LITELLM_KEY"
DEFAULT_KEY = "sk-servecheck-local"
ENV_UPSTREAM = "SERVECHECK_LITELLM_UPSTREAM"
DEFAULT_UPSTREAM = "http://127.0.0.1:8021/v1"  # the llamacpp engine's default port
UPSTREAM_CONTEXT = 512  # llama.cpp -c 2048 -np 4: 512 tokens per slot

CONFIG = """\
# written by servecheck engine up litellm
model_list:
  - model_name: {name}
    litellm_params:
      model: openai/{name}
      api_base: {upstream}
      api_key: "none"
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
router_settings:
  disable_cooldowns: true
litellm_settings:
  num_retries: 0
"""


REASONING_UPSTREAM = "http://127.0.0.1:8016/v1"  # the vllm-reasoning engine's default port


class LiteLlm(Engine):
    """``litellm --config`` on 127.0.0.1; upstream llama.cpp (started first if needed).
    ``litellm-reasoning`` (port 8046) routes to vllm-reasoning instead: LiteLLM renames vLLM's
    reasoning field, which the REASON checks must see through."""

    name = "litellm"
    default_port = 8041
    default_upstream = DEFAULT_UPSTREAM

    def __init__(self, *, reasoning: bool = False) -> None:
        if reasoning:
            self.name, self.default_port = "litellm-reasoning", 8046
            self.default_upstream = REASONING_UPSTREAM

    version = VERSION
    ready_timeout_s = 120.0
    stop_timeout_s = 15.0
    auth_key_env = ENV_KEY

    @property
    def venv(self) -> Path:
        return venvs_dir() / f"litellm-{VERSION}"

    def install(self) -> InstallResult:
        """Create the venv and install ``litellm[proxy]`` and ``prisma``."""
        step = PipStep(
            ("install", f"litellm[proxy]=={VERSION}", "prisma"), 1200, "litellm: install"
        )
        return install_venv("litellm", self.venv, f"litellm[proxy]=={VERSION} prisma\n", [step])

    def api_key(self) -> str | None:
        return os.environ.get(ENV_KEY) or DEFAULT_KEY

    def upstream(self) -> str:
        if self.default_upstream != DEFAULT_UPSTREAM:
            return self.default_upstream
        return os.environ.get(ENV_UPSTREAM, DEFAULT_UPSTREAM).rstrip("/")

    def plan(self, port: int) -> LaunchPlan:
        config = state_dir() / f"litellm-{port}.yaml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(CONFIG.format(name=SERVED_NAME, upstream=self.upstream()))
        argv = [
            str(self.venv / "bin" / "litellm"),
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--num_workers",
            "1",
        ]
        env = clean_env(
            {
                "LITELLM_MASTER_KEY": self.api_key() or DEFAULT_KEY,
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "LITELLM_TELEMETRY": "False",
                "LITELLM_LOG": os.environ.get("LITELLM_LOG", "INFO"),
            }
        )
        return LaunchPlan(
            argv=argv, env=env, served_model=SERVED_NAME, context_length=UPSTREAM_CONTEXT
        )

    def probe(self, port: int) -> tuple[Readiness, str]:
        r = http("GET", f"http://127.0.0.1:{port}/health/readiness", timeout=3.0)
        if r.status == -1:
            return Readiness.STARTING, r.error
        if r.status == 200:
            return Readiness.READY, "ok"
        return Readiness.LOADING, f"/health/readiness HTTP {r.status}"


# The profile: what this engine legitimately does differently (engines/spec.py).
PROFILE = EngineProfile(
    "litellm",
    # /v1/messages is LiteLLM's own Anthropic adapter over chat (measured on 1.108.7, 2026-12-02).
    caps(tokenize=False, metrics=False, messages=True),
    health_path="/health/liveliness",
    deviations={
        "health-path-differs": "LiteLLM's /health calls every upstream and needs the key; /health/liveliness is the probe",
        "models-no-context-field": "LiteLLM's /v1/models does not report the upstream context length",
        # Measured on LiteLLM 1.108.7 over llama.cpp (2026-11-29), include_usage: the usage chunk is
        # {"choices": [{"index": 0, "delta": {}}], "usage": {...}} (no finish_reason, no content), then [DONE].
        "usage-chunk-has-choices": "LiteLLM's include_usage chunk carries an empty-delta choice instead of choices: []",
        # Not measured: LiteLLM forwards echo to the upstream and passes its 400 on.
        "echo-refused": "LiteLLM passes an upstream's refusal of echo on (llama.cpp behind it refuses echo)",
    },
    verified_live=True,
    reasoning="passes the upstream's reasoning on as `reasoning_content` (it renames vLLM's "
    "`reasoning`, litellm#20246); chat_template_kwargs forwarded to the upstream",
)

LITELLM = EngineSpec("litellm", PROFILE, 8041, LiteLlm)
LITELLM_REASONING = EngineSpec("litellm-reasoning", PROFILE, 8046, partial(LiteLlm, reasoning=True))
