"""The targets.yaml data model (pydantic).

One source of truth for every key a user may write. ``docs/targets.md`` documents it and
``docs/targets.schema.json`` (for editors) is generated from it by ``servecheck targets --schema``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from servecheck.errors import UsageError
from servecheck.redact import Secret, redact, register_headers, register_url

if TYPE_CHECKING:
    from servecheck.analysis.slo import SLO

Engine = Literal[
    "vllm",
    "sglang",
    "xinference",
    "tgi",
    "llamacpp",
    "ollama",
    "litellm",
    "openai",
    "reference",
    "generic",
]
ENGINES: tuple[str, ...] = Engine.__args__  # type: ignore[attr-defined]

# Capabilities a check can require. A target declares each as true/false or "auto"
# ("auto": take the engine profile's default, see servecheck/engines/spec.py).
CAPABILITIES: dict[str, str] = {
    "streaming": "server-sent-event streaming of chat completions",
    "usage_in_stream": "stream_options.include_usage adds a final usage chunk",
    "json_object": "response_format {type: json_object}",
    "json_schema": "response_format {type: json_schema} with a schema",
    "tools": "tool calls with tool_choice required / named",
    "tool_choice_named": "tool_choice naming one function",
    "completions": "legacy /v1/completions",
    "logprobs": "logprobs / top_logprobs on chat completions",
    "seed": "the seed parameter makes sampling repeatable",
    "n": "n > 1 choices per request",
    "stop": "stop sequences",
    "metrics": "Prometheus /metrics endpoint",
    "tokenize": "a /tokenize endpoint (vLLM, llama.cpp, reference)",
    "prefix_cache": "repeated prompt prefixes are served from a prefix cache and reported as "
    "usage.prompt_tokens_details.cached_tokens (vLLM: --enable-prompt-tokens-details; off unless declared)",
    "responses": "the Responses API, POST /v1/responses (vLLM, SGLang, LiteLLM, Ollama, reference)",
    "responses_store": "a Responses store: store true keeps a response for GET /v1/responses/{id} "
    "and previous_response_id (vLLM: VLLM_ENABLE_RESPONSES_API_STORE=1; off unless declared)",
    "vision": "a vision-language model: image_url parts with data URLs are read (IMAGE-*; off "
    "unless declared: a text-only target must refuse images instead)",
    "messages": "the Anthropic Messages API, POST /v1/messages (reference; an engine profile turns "
    "it on once measured live serving it)",
    "min_tokens": "vLLM's min_tokens: no end and no stop string before that many tokens (vLLM, "
    "reference; off unless declared: other engines ignore the field)",
}
Capability = Literal[
    "streaming",
    "usage_in_stream",
    "json_object",
    "json_schema",
    "tools",
    "tool_choice_named",
    "completions",
    "logprobs",
    "seed",
    "n",
    "stop",
    "metrics",
    "tokenize",
    "prefix_cache",
    "responses",
    "responses_store",
    "vision",
    "messages",
    "min_tokens",
]
CapValue = bool | Literal["auto"]

# /v1/models entry types of pooling models (Xinference's model_type; some gateways say type):
# discovery files them under embedding_models / rerank_models, and no run sends chat to them.
POOLING_MODEL_TYPES: dict[str, str] = {
    "embedding": "embedding",
    "embeddings": "embedding",
    "rerank": "rerank",
}


def pooling_kind(entry: object) -> str | None:
    """``embedding`` or ``rerank`` for a /v1/models entry typed as one, else None."""
    if not isinstance(entry, dict):
        return None
    kind = entry.get("model_type", entry.get("type"))
    return POOLING_MODEL_TYPES.get(kind.lower()) if isinstance(kind, str) else None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)


class Capabilities(_Strict):
    streaming: CapValue = "auto"
    usage_in_stream: CapValue = "auto"
    json_object: CapValue = "auto"
    json_schema: CapValue = "auto"
    tools: CapValue = "auto"
    tool_choice_named: CapValue = "auto"
    completions: CapValue = "auto"
    logprobs: CapValue = "auto"
    seed: CapValue = "auto"
    n: CapValue = "auto"
    stop: CapValue = "auto"
    metrics: CapValue = "auto"
    tokenize: CapValue = "auto"
    prefix_cache: CapValue = "auto"
    responses: CapValue = "auto"
    responses_store: CapValue = "auto"
    vision: CapValue = "auto"
    messages: CapValue = "auto"
    lora: CapValue = "auto"
    min_tokens: CapValue = "auto"


class LoraAdapter(_Strict):
    """The ``lora_adapter`` of a target that serves runtime LoRA adapters (the LORA checks, the
    cutover's ``lora-load`` swap): one adapter the checks may load and unload."""

    name: Annotated[str, Field(min_length=1, max_length=128)] = Field(
        description="the served name to load it under (not one the target already serves)"
    )
    path: Annotated[str, Field(min_length=1)] = Field(
        description="its folder (adapter_config.json + weights) as the server sees it"
    )


def _check_url(value: str | None, key: str) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{key} must be an http:// or https:// URL with a host, got {value!r}")
    try:
        parts.port  # noqa: B018 - raises on a non-numeric port
    except ValueError as exc:
        raise ValueError(f"{key} has an invalid port: {value!r}") from exc
    return value.rstrip("/")


class TelemetrySettings(_Strict):
    """The ``telemetry`` block: what the soak command and the abandoned-stream probe sample
    (``servecheck.telemetry.TelemetryRecorder.for_target`` takes it as a dict)."""

    metrics: dict[str, str] = Field(
        default_factory=dict,
        description="canonical metric -> Prometheus sample name (kv_usage, requests_running, ...); replaces the engine's",
    )
    metrics_url: str | None = None
    pid: Annotated[int, Field(ge=1)] | None = None
    port: Annotated[int, Field(ge=1, le=65535)] | None = None
    interval_s: Annotated[float, Field(gt=0, le=60)] | None = None
    dcgm_url: str | None = None
    nvml: bool = True
    device: Literal["auto", "nvidia", "amd", "unified", "none"] = Field(
        default="auto",
        description="the target's device memory: auto judges what NVML / DCGM / amdgpu sysfs show; "
        "nvidia or amd declares a GPU (unreadable memory is then inconclusive); unified: the "
        "engine's process-tree RSS stands in; none: not judged",
    )

    @field_validator("metrics_url", "dcgm_url")
    @classmethod
    def _urls(cls, value: str | None) -> str | None:
        return _check_url(value, "url")

    def as_settings(self) -> dict[str, object]:
        """The keys that were set, as the plain dict ``TelemetryRecorder.for_target`` takes."""
        return self.model_dump(exclude_none=True, exclude_defaults=True)


DEFAULT_THINKING_OFF: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": False}}


class ReasoningSettings(_Strict):
    """The ``reasoning`` block of a target that serves a reasoning model (REASON-* checks,
    reasoning latency phases in load). ``reasoning: auto`` is this block with every default."""

    field: Literal["auto", "reasoning_content", "reasoning"] = Field(
        "auto",
        description="the message/delta field the reasoning arrives in; auto accepts either",
    )
    markers: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=lambda: ["<think>", "</think>"],
        description="strings that must never appear in content (the model's reasoning markers)",
    )
    parser: str | None = Field(
        None,
        description="the engine's reasoning parser (deepseek_r1, qwen3, ...), recorded in reports",
    )
    thinking_off: dict[str, Any] | Literal[False] = Field(
        default_factory=lambda: dict(DEFAULT_THINKING_OFF),
        description="extra request body that turns thinking off; false: the target has no switch",
    )
    thinking_on: dict[str, Any] = Field(
        default_factory=dict,
        description="extra request body every reasoning request carries, for engines whose "
        "default is thinking off (e.g. Xinference hybrid models: "
        "{chat_template_kwargs: {enable_thinking: true}})",
    )


class DrainSettings(_Strict):
    """The ``drain`` block: how ``servecheck drain`` / ``cutover --drain`` tells a server it did
    not launch to shut down (a hook command), judged as a drain on SIGTERM is."""

    command: Annotated[str, Field(min_length=1)] = Field(
        description="a shell command that starts the shutdown (kill -TERM, kubectl delete pod, a "
        "gateway's drain call); it runs while in-flight streams are read and new requests sent; "
        "SERVECHECK_DRAIN_TARGET and SERVECHECK_DRAIN_URL name the target"
    )
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = Field(
        60.0, description="the command is killed after this long (the drain is then inconclusive)"
    )


class TargetSettings(_Strict):
    """Keys that may appear both under ``defaults`` and in a target."""

    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 60.0
    connect_timeout_s: Annotated[float, Field(gt=0, le=600)] = 10.0
    api_key: Secret | None = None
    api_key_header: Literal["authorization", "x-api-key", "api-key"] = "authorization"
    headers: dict[str, str] = Field(default_factory=dict)
    capabilities: Capabilities = Field(default_factory=Capabilities)
    context_policy: Literal["reject", "truncate", "auto"] = "auto"
    concurrency: Annotated[int, Field(ge=1, le=1024)] = 16
    capacity: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        default=None,
        description="requests the deployment serves at once (vLLM --max-num-seqs, llama.cpp -np, a "
        "gateway's limit); OVERLOAD checks burst above it, and skip without it",
    )
    fuzz_examples: Annotated[int, Field(ge=0, le=10_000)] = 40
    exclude: list[str] = Field(default_factory=list)
    allow: dict[str, str] = Field(
        default_factory=dict,
        description="check id (or glob) -> reason: a failure of that check is reported non-strict",
    )
    known_failures: dict[str, str] = Field(
        default_factory=dict,
        description="check id (or glob) -> reason: the check is expected to fail here (xfail strict: a fix is noticed)",
    )
    slo: list[str] = Field(default_factory=list)
    strict: bool = Field(
        default=False,
        description="strict schema profile for this target: a check whose answers break the "
        "openai SDK's types fails (false: it is reported non-strict); the check and accept "
        "commands' strict option turns it on for every target",
    )
    verify_tls: bool = True
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)

    @field_validator("api_key", mode="before")
    @classmethod
    def _wrap_secret(cls, value: object) -> object:
        if value is None or value == "":
            return None
        if isinstance(value, str):
            return Secret(value)
        return value


class Target(TargetSettings):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)]
    base_url: str
    engine: Engine = "generic"
    models: list[str] | None = None
    embedding_models: list[str] | None = Field(
        default=None,
        description="served names of embedding models (EMBED checks); unset: what /v1/models types as embedding",
    )
    rerank_models: list[str] | None = Field(
        default=None,
        description="served names of rerank models (RERANK checks); unset: what /v1/models types as rerank",
    )
    context_length: Annotated[int, Field(ge=1)] | None = None
    health_url: str | None = None
    metrics_url: str | None = None
    metrics_engine: Engine | None = Field(
        default=None,
        description="the engine whose metric names metrics_url exposes (a gateway's upstream); unset: engine",
    )
    model_dir: str | None = None
    quantization: str | None = None
    description: str = ""
    reasoning: ReasoningSettings | None = Field(
        None, description="a reasoning model: 'auto' or {field, markers, parser, thinking_off}"
    )
    drain: DrainSettings | None = Field(
        None,
        description="how to shut this server down for the drain check: {command, timeout_s}",
    )
    lora_adapter: LoraAdapter | None = Field(
        None,
        description="a runtime LoRA adapter the LORA checks load and unload (with capabilities: "
        "{lora: true}): {name, path}",
    )
    # The ``slo:`` lines parsed, once, when the target is built (None: a line does not parse;
    # the loader names it with its file and line, and :attr:`slos` raises its error).
    _slos: tuple[SLO, ...] | None = PrivateAttr(default=None)

    @field_validator("reasoning", mode="before")
    @classmethod
    def _reasoning_auto(cls, value: object) -> object:
        # `reasoning: auto` (or true) is the block with its defaults; false/absent: no reasoning
        if value == "auto" or value is True:
            return {}
        if value is False:
            return None
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        checked = _check_url(value, "base_url")
        assert checked is not None
        return checked

    @field_validator("health_url", "metrics_url")
    @classmethod
    def _other_urls(cls, value: str | None) -> str | None:
        return _check_url(value, "url")

    @property
    def server_root(self) -> str:
        """The base URL without its trailing ``/v1`` (where /health and /metrics live)."""
        root = self.base_url
        return root[: -len("/v1")] if root.endswith("/v1") else root

    @model_validator(mode="after")
    def _register_secrets(self) -> Target:
        # One redaction path: every secret a target carries is known to servecheck.redact from
        # the moment the target exists, so every byte written later can be masked.
        for url in (self.base_url, self.health_url, self.metrics_url, self.telemetry.metrics_url):
            register_url(url)
        register_headers(self.headers)
        return self

    def model_post_init(self, context: Any, /) -> None:
        # The grammar is analysis/slo.py's, which imports nothing of config/; imported here so
        # that a config import does not load the statistics until a target exists.
        from servecheck.analysis.slo import parse_slos

        try:
            self._slos = tuple(parse_slos(self.slo, "targets.yaml"))
        except UsageError:
            self._slos = None

    @property
    def slos(self) -> tuple[SLO, ...]:
        """The target's ``slo:`` lines as typed SLOs (source ``targets.yaml``), parsed once when
        the target was built; a line that does not parse raises its :class:`UsageError` here
        (a targets file never gets this far: the loader stops on it, naming the line)."""
        if self._slos is None:
            from servecheck.analysis.slo import parse_slos

            return tuple(parse_slos(self.slo, "targets.yaml"))  # raises the line's error
        return self._slos

    def __repr__(self) -> str:  # allure and pytest show parameters by their repr
        return redact(super().__repr__())

    def auth_headers(self) -> dict[str, str]:
        if self.api_key is None:
            return {}
        key = self.api_key.reveal() if isinstance(self.api_key, Secret) else str(self.api_key)
        if self.api_key_header == "authorization":
            return {"Authorization": "Bearer " + key}
        return {self.api_key_header: key}


class Defaults(TargetSettings):
    pass


class TargetsFile(_Strict):
    defaults: Defaults = Field(default_factory=Defaults)
    targets: list[Target]

    @model_validator(mode="after")
    def _unique_names(self) -> TargetsFile:
        seen: set[str] = set()
        for target in self.targets:
            if target.name in seen:
                raise ValueError(f"duplicate target name {target.name!r}")
            seen.add(target.name)
        return self
