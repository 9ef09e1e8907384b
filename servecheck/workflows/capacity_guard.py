"""What a capacity sweep sends between its levels: the readiness probe before each level and,
when asked, the engine's prefix-cache reset (so that no level is served from the cache the one
before it filled).

* **Ready before every level.** One TCP connect (:func:`servecheck.probes.reach.target_down`),
  then the health endpoint polled for at most ``timeout_s`` (``checks/health.py``). A target
  that stops being ready ends the sweep with that reason: a level run against it would measure
  the outage.
* **Prefix-cache reset.** vLLM: ``POST /reset_prefix_cache`` (served only in its dev mode,
  ``VLLM_SERVER_DEV_MODE=1``); SGLang: ``POST /flush_cache``. The first one the server answers
  with a 2xx is used for the rest of the sweep; when both answer 404 / 405 (or anything not
  2xx) the reset is impossible, and the report says so once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RESET_PATHS = ("/reset_prefix_cache", "/flush_cache")  # vLLM (dev mode), SGLang
RESET_TIMEOUT_S = 10.0


def ready_before_level(target: Any, timeout_s: float) -> str | None:
    """Why the target is not ready now (None: it is)."""
    from servecheck.checks.health import wait_ready
    from servecheck.client.http import ServeClient
    from servecheck.probes.reach import target_down

    down = target_down(target.base_url, min(5.0, timeout_s))
    if down:
        return down
    with ServeClient.for_target(target) as client:
        state = wait_ready(client, target, timeout_s=timeout_s)
    return None if state.state == "ready" else f"{state.state}: {state.detail}"


@dataclass(slots=True)
class PrefixReset:
    """The sweep's prefix-cache resets: which path works, how many succeeded, why it cannot."""

    path: str | None = None
    resets: int = 0
    unavailable: str | None = None  # said once in the report
    tried: list[str] = field(default_factory=list)

    def reset(self, target: Any) -> None:
        """Reset before a level; the first failure of every path marks it unavailable."""
        if self.unavailable is not None:
            return
        from servecheck.client.http import ServeClient

        paths = [self.path] if self.path else list(RESET_PATHS)
        answers = []
        with ServeClient.for_target(target) as client:
            for path in paths:
                ex = client.post(target.server_root + path, None, timeout_s=RESET_TIMEOUT_S)
                if ex.status is not None and 200 <= ex.status < 300:
                    self.path = path
                    self.resets += 1
                    return
                answers.append(
                    f"POST {path}: {ex.status if ex.status is not None else ex.error or 'no answer'}"
                )
        self.tried = answers
        self.unavailable = (
            "the prefix cache could not be reset between levels ("
            + "; ".join(answers)
            + "): vLLM serves /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1, SGLang "
            "/flush_cache; levels may share cached prefixes"
        )

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "resets": self.resets, "unavailable": self.unavailable}


__all__ = ["RESET_PATHS", "PrefixReset", "ready_before_level"]
