"""What a target says about itself: served models, context length, version, reachability.

Run once per target before any check (by the pytest controller, not by each xdist worker), so
every worker parametrises the same cases and the report header can show what was found.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from servecheck.client.http import ServeClient
from servecheck.client.version import engine_version
from servecheck.config.model import Target, pooling_kind
from servecheck.engines.registry import profile_for


@dataclass(slots=True)
class TargetInfo:
    name: str
    engine: str
    models: list[str] = field(default_factory=list)
    models_source: str = "declared"  # declared | discovered | unknown
    served: list[str] = field(default_factory=list)  # what /v1/models listed
    context_length: int | None = None
    context_source: str = "unknown"  # declared | discovered (where) | unknown
    discovered_context: int | None = None
    version: str | None = None
    error: str | None = None
    unreachable: bool = (
        False  # /v1/models got no HTTP answer at all (refused, or hung past the timeout)
    )
    embedding_models: list[str] = field(default_factory=list)  # declared, else typed in /v1/models
    rerank_models: list[str] = field(default_factory=list)
    unreachable_kind: str = ""  # connect (nothing listens) | timeout (listens, did not answer)
    wait_s: float | None = None  # how long discovery waited for each answer (its own limit)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TargetInfo:
        return cls(**data)

    def header(self) -> str:
        models = ", ".join(self.models) or "(none)"
        ctx = f"{self.context_length} ({self.context_source})" if self.context_length else "unknown"
        text = f"{self.name}: engine {self.engine}, models {models} ({self.models_source}), context {ctx}"
        if self.embedding_models or self.rerank_models:
            pooling = ", ".join(self.embedding_models + self.rerank_models)
            text += f", pooling models {pooling}"
        if self.version:
            text += f", version {self.version}"
        if self.error:
            text += f" -- {self.error}"
        return text


def _context_from_model_entry(entry: dict[str, Any]) -> tuple[int | None, str]:
    if isinstance(entry.get("max_model_len"), int):
        return entry["max_model_len"], "/v1/models max_model_len"
    meta = entry.get("meta")
    if isinstance(meta, dict) and isinstance(meta.get("n_ctx"), int):
        return meta["n_ctx"], "/v1/models meta.n_ctx"
    for key in ("context_length", "context_window", "max_context_length"):
        if isinstance(entry.get(key), int):
            return entry[key], f"/v1/models {key}"
    return None, "unknown"


def discover(target: Target, timeout_s: float = 10.0) -> TargetInfo:
    """Ask the target for its models, context length and version. Never raises."""
    wait = min(timeout_s, target.timeout_s)
    info = TargetInfo(name=target.name, engine=target.engine, wait_s=wait)
    with ServeClient.for_target(target, timeout_s=wait) as client:
        ex = client.get("/models")
        data = ex.json() if ex.ok else None
        entries = data.get("data") if isinstance(data, dict) else None
        if isinstance(entries, list):
            info.served = [
                e["id"] for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str)
            ]
            typed = {
                e["id"]: pooling_kind(e)
                for e in entries
                if isinstance(e, dict) and e.get("id") in info.served
            }
            info.embedding_models = [m for m, k in typed.items() if k == "embedding"]
            info.rerank_models = [m for m, k in typed.items() if k == "rerank"]
            first = next(
                (
                    e
                    for e in entries
                    if isinstance(e, dict)
                    and (e.get("id") in target.models if target.models else not pooling_kind(e))
                ),
                None,
            )
            if first is not None:
                info.discovered_context, info.context_source = _context_from_model_entry(first)
        else:
            info.error = f"GET /v1/models failed: {ex.describe(300)}"
            info.unreachable = ex.error in ("connect", "timeout")
            info.unreachable_kind = ex.error or ""
            if info.unreachable:
                # Nothing answers: skip the other probes, each would wait out its own timeout.
                if target.models:
                    info.models, info.models_source = list(target.models), "declared"
                if target.context_length:
                    info.context_length, info.context_source = target.context_length, "declared"
                info.embedding_models = list(target.embedding_models or [])
                info.rerank_models = list(target.rerank_models or [])
                return info
        if info.discovered_context is None and target.engine == "llamacpp":
            props = client.get(target.server_root + "/props")
            pdata = props.json() if props.ok else None
            if isinstance(pdata, dict):
                n_ctx = pdata.get("default_generation_settings", {}).get("n_ctx") or pdata.get(
                    "n_ctx"
                )
                if isinstance(n_ctx, int):
                    info.discovered_context, info.context_source = n_ctx, "/props n_ctx"
        info.version = engine_version(client, target)
    if target.models:
        info.models, info.models_source = list(target.models), "declared"
    elif info.served:
        chat = [m for m in info.served if m not in info.embedding_models + info.rerank_models]
        info.models, info.models_source = (chat or info.served)[:1], "discovered"
    else:
        info.models, info.models_source = [], "unknown"
    if target.context_length:
        info.context_length, info.context_source = target.context_length, "declared"
    else:
        info.context_length = info.discovered_context
    if target.embedding_models is not None:
        info.embedding_models = list(target.embedding_models)
    if target.rerank_models is not None:
        info.rerank_models = list(target.rerank_models)
    _ = profile_for(target)
    return info
