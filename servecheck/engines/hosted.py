"""Engines servecheck checks but does not start: their profiles only (no port, no launcher).

``reference`` is servecheck's own server, ``generic`` any OpenAI-compatible endpoint with the
conservative defaults, the rest are measured or documented behaviours of other servers.
"""

from __future__ import annotations

from servecheck.engines.spec import EngineProfile, EngineSpec, caps

REFERENCE = EngineSpec(
    "reference",
    EngineProfile(
        "reference",
        caps(responses_store=True, messages=True, min_tokens=True),
        verified_live=True,
        retry_after=True,
    ),
)

GENERIC = EngineSpec(
    "generic",
    EngineProfile(
        "generic",
        caps(logprobs=False, tokenize=False, metrics=False, completions=False, responses=False),
    ),
)

OPENAI = EngineSpec(
    "openai",
    EngineProfile(
        "openai",
        caps(tokenize=False, metrics=False, responses_store=True),
        health_path="/v1/models",  # the API has no /health: a listed model is readiness
        deviations={
            "health-path-differs": "OpenAI's API has no /health; /v1/models answering is readiness"
        },
    ),
)

SGLANG = EngineSpec(
    "sglang",
    EngineProfile(
        "sglang",
        caps(),
        deviations={
            "error-shape-detail": "SGLang's FastAPI routes answer unknown paths as {'detail': ...} (not verified live)"
        },
    ),
)

TGI = EngineSpec(
    "tgi",
    EngineProfile(
        "tgi",
        caps(tokenize=False, n=False, completions=True, responses=False),
        deviations={
            # TGI validates with axum/serde and answers 422 Unprocessable Entity (router/src/server.rs).
            "error-status-422": "TGI answers invalid parameters with 422 (router/src/server.rs; not verified live)",
            "models-no-context-field": "TGI reports max_total_tokens in /info, not in /v1/models",
        },
    ),
)

OLLAMA = EngineSpec(
    "ollama",
    EngineProfile(
        "ollama",
        caps(tokenize=False, metrics=False, logprobs=False, n=False),
        health_path="/",
        deviations={
            "health-path-differs": "Ollama answers GET / with 'Ollama is running'; there is no /health",
            "models-no-context-field": "Ollama reports num_ctx through /api/show, not /v1/models",
        },
    ),
)
