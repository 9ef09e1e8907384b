"""Flush the engine's prefix cache before a soak's drain measurement (issue 45 item 4).

A kv_usage plateau after each cycle's drain is either a prefix cache holding what it may keep
(retention) or KV blocks never freed (a leak); telemetry/leak.py tells them apart by evidence of a
cache, which is a guess. Where the engine offers a flush, emptying the cache before each drain
measurement makes the guess unneeded: what stays after a flush is not the cache. SGLang's
maintainers check for leaks the same way (a flush, then ``token_usage`` must be exactly 0).

The endpoints: vLLM ``POST /reset_prefix_cache`` (served only with ``VLLM_SERVER_DEV_MODE=1``;
without it the route answers 404, as vLLM 0.32 on our CI engine does), SGLang ``/flush_cache``.
Where none answers 2xx, the soak verdict says retention and a leak could read alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from servecheck.redact import redact

if TYPE_CHECKING:
    from servecheck.config.model import Target

VLLM = "/reset_prefix_cache"
SGLANG = "/flush_cache"
TIMEOUT_S = 5.0
CONFUSED = (
    "retention and a leak could read alike: the prefix cache was not flushed before the drain "
    "measurements"
)


def endpoints(engine: str | None) -> tuple[str, ...]:
    """The flush routes to try, the engine's own first."""
    if engine == "sglang":
        return (SGLANG,)
    if engine == "vllm":
        return (VLLM,)
    return (VLLM, SGLANG)


@dataclass(slots=True)
class CacheFlush:
    """Tries the flush before each drain measurement; remembers what worked and what did not."""

    target: Target
    enabled: bool = True  # False: --no-cache-flush (nothing is sent; the note says so)
    endpoint: str | None = None  # the route that flushed
    refused: str = ""  # why no route flushed (once every route was tried and none did)
    flushed: int = 0
    failed: int = 0
    tried: list[dict[str, Any]] = field(default_factory=list)

    def flush(self, when: str) -> bool:
        """One flush (``when``: which drain it precedes); True when the engine flushed."""
        if self.refused or not self.enabled:
            return False
        routes = (self.endpoint,) if self.endpoint else endpoints(self.target.engine)
        whys: list[str] = []
        for route in routes:
            ok, why = self._post(route, when)
            if ok:
                self.flushed += 1
                return True
            whys.append(why)
        self.failed += 1
        if self.endpoint is None:  # never flushed: this engine offers no flush we can use
            self.refused = "; ".join(whys)
        return False

    def _post(self, route: str, when: str) -> tuple[bool, str]:
        import httpx

        from servecheck.client.factory import ClientSettings, sync_client

        url = self.target.server_root + route
        settings = ClientSettings.for_target(
            self.target, timeout_s=TIMEOUT_S, connect_timeout_s=TIMEOUT_S
        )
        try:
            with sync_client(settings, bound_body=True) as http:
                status: int | None = http.post(url).status_code
            why = f"POST {route} answered {status}"
        except httpx.HTTPError as exc:
            status, why = None, f"POST {route}: {type(exc).__name__}"
        ok = status is not None and 200 <= status < 300
        if ok:
            self.endpoint = route
        elif status == 404 and route == VLLM:
            why += " (vLLM serves it only with VLLM_SERVER_DEV_MODE=1)"
        self.tried = [*self.tried[-9:], {"when": when, "url": redact(url), "status": status}]
        return ok, why

    def note(self) -> str:
        """The soak verdict's note where the drains were measured without a flush, else ''."""
        if not self.enabled:
            return f"{CONFUSED} (the flush was turned off)"
        if self.refused:
            return f"{CONFUSED} ({self.refused})"
        if self.failed:
            return f"{CONFUSED} before {self.failed} of them (the flush failed)"
        return ""

    def to_dict(self) -> dict[str, Any]:
        """soak.json's ``cache_flush``."""
        return {
            "endpoint": self.endpoint,
            "flushed": self.flushed,
            "failed": self.failed,
            "note": self.note() or None,
            "tried": list(self.tried),
        }


__all__ = ["CONFUSED", "CacheFlush", "endpoints"]
