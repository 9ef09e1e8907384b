"""Which version of its engine a target runs, asked the way each engine says it: one function
for every run kind (check's discovery, and a load run, which soak, accept and capacity run),
so history can record the engine version of each run, not only of conformance runs.
"""

from __future__ import annotations

from servecheck.client.http import ServeClient
from servecheck.config.model import Target

# Where each engine says its version: (path under the server root, JSON key); every engine is
# also asked /version (vLLM, SGLang, the reference server).
VERSION_SOURCES: dict[str, tuple[tuple[str, str], ...]] = {
    "llamacpp": (("/props", "build_info"),),
    "xinference": (("/v1/cluster/version", "version"),),
    "litellm": (("/health/readiness", "litellm_version"),),
}
VERSION_TIMEOUT_S = 3.0  # each probe's whole answer (the client's deadline, not per read)


def engine_version(
    client: ServeClient, target: Target, timeout_s: float = VERSION_TIMEOUT_S
) -> str | None:
    """The version ``target``'s engine reports through ``client``, None when none says it."""
    for path, key in (*VERSION_SOURCES.get(target.engine, ()), ("/version", "version")):
        ex = client.get(target.server_root + path, timeout_s=timeout_s)
        data = ex.json() if ex.ok else None
        if isinstance(data, dict) and isinstance(data.get(key), str):
            return str(data[key])
    return None


def probe_engine_version(target: Target, timeout_s: float = VERSION_TIMEOUT_S) -> str | None:
    """:func:`engine_version` over a client of its own (a run that holds none). Never raises
    for what the server does: a target that does not say is None."""
    bound = min(timeout_s, VERSION_TIMEOUT_S)
    with ServeClient.for_target(target, timeout_s=bound) as client:
        return engine_version(client, target, bound)
